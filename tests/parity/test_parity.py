"""The parity gate end to end on tiny models: pass, a damaged artifact, goldens without torch, FP16 fallback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from pipeline.core.config import load_config
from pipeline.core.errors import PrecisionError
from pipeline.convert import fp16
from pipeline.records.parity import ParityReport
from pipeline.stages import parity, repository
from tests.conftest import ROOT, TINY_MLP
from tests.helpers import stages
from tests.helpers.parity_models import UNSAFE_INPUTS
from tests.helpers.stages import build_precisions

UNSAFE = [*TINY_MLP[:2], "model.factory._target_=tests.helpers.parity_models.build_unsafe", *TINY_MLP[3:6], UNSAFE_INPUTS, "model.outputs=[y]"]


def parity_args(params: Path, p: dict[str, Path], d: Path, *extra: str) -> list[str]:
    """The parity stage's arguments for what :func:`build_precisions` wrote: the simplified file as fp32, and fp16."""
    return stages.parity_args(params, d, p["raw"], *extra, fp32=p["sim"], fp16=p["fp16"])


def repo_args(params: Path, p: dict[str, Path], d: Path) -> list[str]:
    return ["--params", str(params), "--onnx", str(p["sim"]), "--parity", str(d / "parity.json"), "--out", str(d / "repo"), "--report", str(d / "repository.json")]


def perturb(path: Path, scale: float = 0.05) -> None:
    """Damage an FP32 ONNX: add noise (std ``scale``) to its largest float initializer."""
    m = onnx.load(str(path))
    init = max((i for i in m.graph.initializer if i.data_type == onnx.TensorProto.FLOAT), key=lambda i: numpy_helper.to_array(i).size)
    w = numpy_helper.to_array(init)
    # Noise, not a constant shift: a LayerNorm right after would cancel a shift of every weight.
    init.CopyFrom(numpy_helper.from_array((w + np.random.default_rng(0).normal(0, scale, w.shape)).astype(np.float32), init.name))
    onnx.save(m, str(path))


def test_tiny_passes_and_report_is_complete(make_params, tmp_path: Path) -> None:
    params = make_params(*TINY_MLP)
    cfg = load_config(params)
    p = build_precisions(cfg, tmp_path)
    assert parity.main(parity_args(params, p, tmp_path)) == 0
    rep = json.loads((tmp_path / "parity.json").read_text())
    assert rep["passed"] is True and rep["reference"]["source"] == "torch"
    assert rep["reference"]["batch_sizes"] == [1, 2, 4, 8]  # synthetic: one sample per parity.synthetic_batch_sizes
    for kind in ("fp32", "fp16"):
        y = rep["artifacts"][kind]["outputs"]["y"]
        assert y["passed"] is True and y["stat"] == "max" and y["nonfinite"] == 0
        assert 0 <= y["max_abs"] <= y["atol"] and y["min_passing_atol"] <= y["max_abs"]
        assert {"max_rel", "mean_abs", "stat_abs", "stat_rel", "samples"} <= set(y)
    assert ParityReport.from_json(rep).to_json() == rep  # the record reads back exactly what the stage wrote
    assert ParityReport.from_json(rep).verdict("fp32") == (True, "passed")
    assert ParityReport.from_json(rep).verdict("trt:a100")[0] is False
    # The gate opens: the repository ships the FP32 model and records the verdict.
    assert repository.main(repo_args(params, p, tmp_path)) == 0
    assert json.loads((tmp_path / "repository.json").read_text())["parity"]["kind"] == "fp32"


def test_damaged_artifact_fails_gate_and_repository_refuses(make_params, tmp_path: Path, capsys) -> None:
    params = make_params(*TINY_MLP)
    p = build_precisions(load_config(params), tmp_path)
    perturb(p["sim"])
    assert parity.main(parity_args(params, p, tmp_path)) != 0
    err = capsys.readouterr().err
    assert "parity failed for 1 output(s)" in err
    assert "fp32/y: max error abs=" in err and "passes with parity.fp32.per_output.y.atol=" in err
    rep = json.loads((tmp_path / "parity.json").read_text())  # written even on failure, for the numbers
    y = rep["artifacts"]["fp32"]["outputs"]["y"]
    assert rep["passed"] is False and y["passed"] is False and y["max_abs"] > y["atol"]
    assert rep["artifacts"]["fp16"]["passed"] is True  # the FP16 file was not damaged
    # The suggested tolerance really is the smallest that passes: at it, the gate opens.
    loose = make_params(*TINY_MLP, f"+parity.fp32.per_output.y.atol={y['min_passing_atol'] * 1.0001}", name="loose.yaml")
    assert parity.main(parity_args(loose, p, tmp_path)) == 0
    # Back to the failing report: the repository stage refuses and leaves the old repository alone.
    assert parity.main(parity_args(params, p, tmp_path)) != 0
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "previous.txt").write_text("old release")
    capsys.readouterr()
    assert repository.main(repo_args(params, p, tmp_path)) != 0
    err = capsys.readouterr().err
    assert "refusing to ship the fp32 model" in err and "['y']" in err
    assert [f.name for f in (tmp_path / "repo").iterdir()] == ["previous.txt"]
    assert not (tmp_path / "repository.json").exists()


def test_goldens_accepted_later_without_torch(make_params, tmp_path: Path) -> None:
    params = make_params(*TINY_MLP)
    p = build_precisions(load_config(params), tmp_path)
    assert parity.main(parity_args(params, p, tmp_path)) == 0
    first = json.loads((tmp_path / "parity.json").read_text())
    block_torch = "import sys; sys.modules['torch'] = None; from pipeline.stages.parity import main; raise SystemExit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def later(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", block_torch, *parity_args(params, p, tmp_path, *extra)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    for extra in (["--goldens-only"], []):  # explicit, and automatic when torch cannot be imported
        res = later(*extra)
        assert res.returncode == 0, res.stderr
        rep = json.loads((tmp_path / "parity.json").read_text())
        assert rep["reference"]["source"] == "goldens" and rep["passed"] is True
        assert rep["artifacts"]["fp32"]["outputs"]["y"]["max_abs"] == first["artifacts"]["fp32"]["outputs"]["y"]["max_abs"]
    # The goldens really are the judge: a damaged artifact fails against them, still without torch.
    perturb(p["sim"])
    res = later("--goldens-only")
    assert res.returncode != 0 and "fp32/y" in res.stderr


def test_fp16_unsafe_model_passes_only_thanks_to_fallback(make_params, tmp_path: Path) -> None:
    params = make_params(*UNSAFE)
    p = build_precisions(load_config(params), tmp_path)
    rep16 = json.loads((tmp_path / "fp16.json").read_text())
    fb = rep16["fallback"]
    blocked = {b["node"]: b for b in fb["blocked_nodes"]}
    ops = sorted(b["op"] for b in blocked.values())
    assert ops == ["Gemm", "LayerNormalization"], blocked  # the overflowing Gemm and the LayerNorm that reads it
    assert any("max |x| = " in b["reason"] and "> precision.fallback.max_abs = 65504" in b["reason"] for b in blocked.values())
    assert fb["max_abs_seen"]["max_abs"] > 65504
    # Independent evidence (true FP16 in onnx.reference): without the fallback the model overflows; with it, it does not.
    assert fb["cross_check_without_fallback"]["status"] == "nonfinite" and fb["cross_check_without_fallback"]["outputs"] == ["y"]
    assert fb["attempts"][-1]["cross_check"]["status"] == "ok"
    kept = {k["node"]: k["reason"] for k in rep16["kept_fp32"]}
    assert all(n in kept and kept[n].startswith("fallback (fp32 ranges)") for n in blocked)
    assert parity.main(parity_args(params, p, tmp_path)) == 0
    assert json.loads((tmp_path / "parity.json").read_text())["artifacts"]["fp16"]["passed"] is True
    # With the fallback off, the fp16 stage refuses the model and names the nodes.
    off = load_config(make_params(*UNSAFE, "precision.fallback.enabled=false", name="off.yaml"))
    with pytest.raises(PrecisionError) as e:
        fp16.run_fp16(p["sim"], tmp_path / "off.fp16.onnx", off.precision, off.model)
    assert "precision.fallback.enabled=false" in e.value.what and set(blocked) <= set(e.value.details)


def test_engines_recorded_as_skipped_without_tensorrt(make_params, tmp_path: Path) -> None:
    params = make_params(*TINY_MLP, "targets=[cpu,a100,h100]")
    p = build_precisions(load_config(params), tmp_path)
    eng = tmp_path / "engines"
    from pipeline.engines.manifest import sha256_file
    from pipeline.records.engine_manifest import EngineFile, EngineManifest, ExpectedTarget, write_manifest

    (eng / "a100").mkdir(parents=True)
    write_manifest(eng / "a100" / "manifest.json", EngineManifest(target="a100", status="skipped", reason="no A100 here", expected=ExpectedTarget()))
    (eng / "h100").mkdir()
    (eng / "h100" / "model.plan").write_bytes(b"not an engine")
    plan = EngineFile("model.plan", 13, sha256_file(eng / "h100" / "model.plan"))
    write_manifest(eng / "h100" / "manifest.json", EngineManifest(target="h100", status="built", reason="", expected=ExpectedTarget(), engine=plan))
    assert parity.main(parity_args(params, p, tmp_path, "--engines", str(eng))) == 0
    arts = json.loads((tmp_path / "parity.json").read_text())["artifacts"]
    assert sorted(arts) == ["fp16", "fp32", "trt@a100", "trt@h100"]  # no entry for the cpu target
    assert arts["trt@a100"] == {"status": "skipped", "file": str(eng / "a100" / "model.plan"), "reason": "engine not built: no A100 here"}
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        assert arts["trt@h100"]["status"] == "skipped" and "tensorrt is not importable" in arts["trt@h100"]["reason"]
    assert ParityReport.from_json({"schema": 1, "artifacts": arts}).verdict("trt@a100") == (False, "parity skipped: engine not built: no A100 here")


def test_onnx_source_reference_is_the_given_file(make_params, tiny_onnx: Path, tmp_path: Path) -> None:
    params = make_params("model=onnx", f"model.path={tiny_onnx}")
    cfg = load_config(params)
    d = tmp_path / "out"
    d.mkdir()
    p = build_precisions(cfg, d)
    assert parity.main(parity_args(params, p, d)) == 0
    rep = json.loads((d / "parity.json").read_text())
    assert rep["reference"]["source"] == "onnx" and rep["artifacts"]["fp32"]["outputs"]["y"]["max_abs"] < 1e-5


@pytest.mark.slow
def test_minilm_parity_from_stage_functions(make_params, tmp_path: Path, minilm_onnx: dict[str, Path]) -> None:
    """MiniLM built by the stage functions (its export shared with the README client's test) passes with the default tolerances."""
    params = make_params()
    t0 = time.perf_counter()
    p = build_precisions(load_config(params), tmp_path, minilm_onnx)
    t1 = time.perf_counter()
    assert parity.main(parity_args(params, p, tmp_path)) == 0
    rep = json.loads((tmp_path / "parity.json").read_text())
    emb = {k: rep["artifacts"][k]["outputs"]["embedding"] for k in ("fp32", "fp16")}
    assert emb["fp32"]["max_abs"] < 1e-5 and emb["fp16"]["max_abs"] < 5e-3
    # The 100 sentences' rows held out of calibration (every other one), cut from the hook's batches of 1 to 8.
    assert (rep["reference"]["samples"], rep["reference"]["rows"]) == (25, 50) and sorted(set(rep["reference"]["batch_sizes"])) == [1, 2, 4]
    # onnx.reference cannot run MiniLM: the cross-check is recorded as unavailable, with the reason, not skipped silently.
    fb = json.loads((tmp_path / "fp16.json").read_text())["fallback"]
    assert fb["attempts"][0]["cross_check"]["status"] == "unavailable" and fb["attempts"][0]["cross_check"]["error"]
    assert fb["sentinel_values"] and all(b["op"] in ("Constant", "Clip") for b in fb["blocked_nodes"])
    print(f"build {t1 - t0:.1f} s, parity {time.perf_counter() - t1:.1f} s, fp32 {emb['fp32']['max_abs']:.3g}, fp16 {emb['fp16']['max_abs']:.3g}")
