"""Rendering the TensorRT Triton model: cc_model_filenames per built target, parity and manifest gates,
and the real tritonserver's strict config validation up to the missing tensorrt backend.

Engines here come from the stand-in tensorrt module (tests/fakes/fake_tensorrt.py): their plan
files are marker bytes, never engines; Triton never reads them because this server has no
tensorrt backend, which is exactly where validation is expected to stop.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from google.protobuf import text_format

from pipeline.core.config import TargetConfig, VariantConfig
from pipeline.core.errors import EngineError, RepositoryError
from pipeline.engines.manifest import engine_dirs_for, targets_table
from pipeline.records.parity import ParityReport
from pipeline.repository.trt_model import engine_parity, load_parity, render_trt_model
from pipeline.engines.manifest import sha256_file
from pipeline.engines.build import build_target
from pipeline.serving import tritonserver
from pipeline.serving.install import locate_tritonserver
from tests.fakes.fake_tensorrt import fake_tensorrt
from tests.helpers.probes import TRT_MISSING, probe
from tests.tiny_triton import tiny_onnx

MISSING_TRT_BACKEND = "unable to find backend library for backend 'tensorrt'"


def gpu(name: str, cc: str, family: str, **builder: object) -> TargetConfig:
    t = TargetConfig(name=name, kind="gpu", gpu_family=family, compute_capability=cc, gpu_names=[family], precision="fp16")
    for k, v in builder.items():
        setattr(t.builder, k, v)
    return t


TARGETS = {"cpu": TargetConfig(name="cpu"), "a100": gpu("a100", "8.0", "A100"), "h100": gpu("h100", "9.0", "H100"), "t4": gpu("t4", "7.5", "T4")}
GPU_OF = {"a100": ("NVIDIA A100-SXM4-80GB", "8.0"), "h100": ("NVIDIA H100 80GB HBM3", "9.0"), "t4": ("Tesla T4", "7.5")}
PASSED = {"status": "passed", "passed": True}
PASS_ALL = {"schema": 1, "artifacts": {"trt@a100": PASSED, "trt@h100": PASSED, "trt@t4": PASSED}}


def passing(onnx_file: Path, report: dict = PASS_ALL) -> ParityReport:  # type: ignore[assignment]
    """``report`` plus the fp16 entry the parity stage writes for the FP16 file the engines were built from."""
    return ParityReport.from_json({**report, "artifacts": {**report["artifacts"], "fp16": {**PASSED, "sha256": sha256_file(onnx_file)}}})


VARIANT = VariantConfig(name="latency", max_batch_size=8, instance_count=1)


@pytest.fixture
def onnx_file(tmp_path: Path) -> Path:
    return tiny_onnx(tmp_path / "onnx" / "model.fp16.onnx")


def engines(tmp_path: Path, onnx_file: Path, built: list[str], skipped: list[str] = (), targets: dict[str, TargetConfig] = TARGETS) -> dict[str, Path]:  # type: ignore[assignment]
    """Run the engine stage per target: built ones on their own (probe-injected) GPU with the stand-in."""
    dirs = {}
    for t in [*built, *skipped]:
        p = probe([GPU_OF[t]]) if t in built else probe([], TRT_MISSING)
        with fake_tensorrt("11.0.0"):
            build_target(targets[t], onnx_file, p, tmp_path / "engines" / t, tmp_path / "tc" / f"{t}.cache")
        dirs[t] = tmp_path / "engines" / t
    return dirs


def test_two_built_targets_render_cc_model_filenames(tmp_path: Path, onnx_file: Path) -> None:
    dirs = engines(tmp_path, onnx_file, built=["a100", "h100"])
    m = render_trt_model("tiny_trt", dirs, VARIANT, passing(onnx_file))
    cfg = m.config
    assert cfg is not None
    assert cfg.platform == "tensorrt_plan" and cfg.max_batch_size == 8
    assert dict(cfg.cc_model_filenames) == {"8.0": "model.sm80.plan", "9.0": "model.sm90.plan"}
    # Neither plan loads on another GPU (none is hardware-compatible): no default plan, so such a GPU finds no
    # model.plan and the TensorRT model fails to load cleanly; the notes name the ONNX Runtime model as the fallback.
    assert cfg.default_model_filename == "" and any("fallback" in n for n in m.notes)
    assert [(i.name, list(i.dims)) for i in cfg.input] == [("x", [16])] and [(o.name, list(o.dims)) for o in cfg.output] == [("y", [8])]
    assert cfg.instance_group[0].kind == cfg.instance_group[0].KIND_GPU
    assert sorted(dest for _, dest in m.files) == ["1/model.sm80.plan", "1/model.sm90.plan"]
    assert all(src.name == "model.plan" and src.is_file() for src, _ in m.files)
    text = text_format.MessageToString(cfg)
    assert 'cc_model_filenames {\n  key: "8.0"\n  value: "model.sm80.plan"\n}' in text


def write_model(repo: Path, name: str, m: object) -> Path:
    """Write the rendered TRT model into a repository dir the way the repository stage would."""
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True)
    for src, dest in m.files:  # type: ignore[attr-defined]
        shutil.copyfile(src, model_dir / dest)
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(m.config), encoding="utf-8")  # type: ignore[attr-defined]
    return model_dir


@pytest.mark.triton
def test_rendered_config_passes_real_triton_strict_validation(tmp_path: Path, onnx_file: Path) -> None:
    """The real tritonserver (strict, exit on error) accepts the config and stops only at the missing tensorrt backend."""
    from pipeline.core.errors import ToolError

    try:
        locate_tritonserver()
    except ToolError as e:
        pytest.skip(f"tritonserver not installed: {e.what}")
    dirs = engines(tmp_path, onnx_file, built=["a100", "h100"])
    m = render_trt_model("tiny_trt", dirs, VARIANT, passing(onnx_file))
    write_model(tmp_path / "repo", "tiny_trt", m)
    r = tritonserver.validate_repository(tmp_path / "repo")
    assert r.returncode != 0
    real = [e for e in r.errors if MISSING_TRT_BACKEND not in e and "failed to load all models" not in e]
    assert any(MISSING_TRT_BACKEND in e for e in r.errors), r.log[-2000:]
    assert real == [], real

    # The same check rejects a broken TensorRT config with Triton's own message.
    bad = m.config
    assert bad is not None
    bad.max_batch_size = -1
    shutil.rmtree(tmp_path / "repo")
    write_model(tmp_path / "repo", "tiny_trt", m)
    r = tritonserver.validate_repository(tmp_path / "repo")
    assert not any(MISSING_TRT_BACKEND in e for e in r.errors)
    assert any("max_batch_size" in e for e in r.errors), r.log[-2000:]


def test_skipped_and_failed_parity_are_left_out(tmp_path: Path, onnx_file: Path) -> None:
    dirs = engines(tmp_path, onnx_file, built=["a100", "h100"], skipped=["t4"])
    parity = {"schema": 1, "artifacts": {"trt@a100": PASSED, "trt@h100": {"status": "failed", "passed": False, "outputs": {"y": {"passed": False}}}}}
    m = render_trt_model("tiny_trt", dirs, VARIANT, passing(onnx_file, parity))
    assert m.config is not None and dict(m.config.cc_model_filenames) == {"8.0": "model.sm80.plan"}
    assert m.included == {"a100": "model.sm80.plan"}
    assert "parity failed for outputs ['y']" in m.excluded["h100"] and m.excluded["t4"].startswith("skipped: no NVIDIA GPU")
    table = targets_table(dirs, m.included, m.excluded)
    assert "| a100 | built | NVIDIA A100-SXM4-80GB | 11.0.0 | yes |" in table and "| t4 | skipped |" in table


def test_nothing_shippable_gives_no_trt_model(tmp_path: Path, onnx_file: Path) -> None:
    dirs = engines(tmp_path, onnx_file, built=[], skipped=["a100", "h100"])
    m = render_trt_model("tiny_trt", dirs, VARIANT, passing(onnx_file))
    assert m.config is None and m.files == [] and set(m.excluded) == {"a100", "h100"}
    # No parity report at all: built engines are not shipped either.
    dirs = engines(tmp_path, onnx_file, built=["a100"])
    assert render_trt_model("tiny_trt", dirs, VARIANT, None).config is None


def test_absent_engine_dir_is_excluded_not_fatal(tmp_path: Path, onnx_file: Path) -> None:
    dirs = engines(tmp_path, onnx_file, built=["a100"])
    dirs["h100"] = tmp_path / "engines" / "h100"  # the h100 runner never reported
    m = render_trt_model("tiny_trt", dirs, VARIANT, passing(onnx_file))
    assert m.included == {"a100": "model.sm80.plan"} and "absent" in m.excluded["h100"]


def test_manifest_of_another_target_is_refused(tmp_path: Path, onnx_file: Path) -> None:
    dirs = engines(tmp_path, onnx_file, built=["a100", "h100"])
    swapped = {"a100": dirs["h100"], "h100": dirs["a100"]}  # e.g. a mis-copied download
    with pytest.raises(EngineError, match="does not match the target"):
        render_trt_model("tiny_trt", swapped, VARIANT, passing(onnx_file))


def test_engine_built_from_another_onnx_is_refused(tmp_path: Path, onnx_file: Path) -> None:
    dirs = engines(tmp_path, onnx_file, built=["a100"])
    other = tiny_onnx(tmp_path / "other" / "model.fp16.onnx", seed=1)
    with pytest.raises(EngineError, match="built from ONNX sha256"):
        render_trt_model("tiny_trt", dirs, VARIANT, passing(other))


def test_max_batch_beyond_the_profile_is_refused(tmp_path: Path, onnx_file: Path) -> None:
    dirs = engines(tmp_path, onnx_file, built=["a100"])
    with pytest.raises(RepositoryError, match="exceeds the engines' profile max batch"):
        render_trt_model("tiny_trt", dirs, VariantConfig(max_batch_size=64), passing(onnx_file))


def test_hardware_compatible_engine_is_the_default(tmp_path: Path, onnx_file: Path) -> None:
    targets = {**TARGETS, "h100": gpu("h100", "9.0", "H100", hardware_compatibility="ampere_plus")}
    dirs = engines(tmp_path, onnx_file, built=["a100", "h100"], targets=targets)
    m = render_trt_model("tiny_trt", dirs, VARIANT, passing(onnx_file))
    assert m.config is not None and m.config.default_model_filename == "model.sm90.plan"


def test_parity_lookup() -> None:
    assert engine_parity(ParityReport.from_json(PASS_ALL), "a100") == (True, "passed")
    skipped = {"schema": 1, "artifacts": {"trt@a100": {"status": "skipped", "reason": "tensorrt not importable"}}}
    ok, why = engine_parity(ParityReport.from_json(skipped), "a100")
    assert not ok and "skipped" in why
    ok, why = engine_parity(ParityReport.from_json({"schema": 1, "artifacts": {}}), "a100")
    assert not ok and "not in the parity report" in why
    assert engine_parity(None, "a100") == (False, "no parity report")


def test_load_parity(tmp_path: Path) -> None:
    assert load_parity(tmp_path / "absent.json") is None
    (tmp_path / "p.json").write_text(json.dumps(PASS_ALL))
    assert load_parity(tmp_path / "p.json") == ParityReport.from_json(PASS_ALL)
    (tmp_path / "bad.json").write_text(json.dumps({"schema": 99}))
    with pytest.raises(RepositoryError, match="unknown format"):
        load_parity(tmp_path / "bad.json")


def test_engine_dirs_for_the_fleet(tmp_path: Path) -> None:
    assert engine_dirs_for(["cpu", "h100", "a100"], TARGETS, tmp_path) == {"h100": tmp_path / "h100", "a100": tmp_path / "a100"}


def test_int8_engine_must_come_from_the_int8_onnx_parity_compared(tmp_path: Path, onnx_file: Path) -> None:
    """An int8 target builds from the QDQ file; the repository takes its sha256 from parity's int8 entry, not fp16's."""
    from tests.helpers.tiny_models import qdq_onnx

    qdq = qdq_onnx(onnx_file, tmp_path / "onnx" / "model.int8.onnx")
    targets = {**TARGETS, "a100": gpu("a100", "8.0", "A100")}
    targets["a100"].precision = "int8"
    dirs = engines(tmp_path, qdq, built=["a100"], targets=targets)
    report = {"schema": 1, "artifacts": {"trt@a100": PASSED, "int8": {**PASSED, "sha256": sha256_file(qdq)}}}
    m = render_trt_model("tiny_trt", dirs, VARIANT, ParityReport.from_json(report))
    assert m.included == {"a100": "model.sm80.plan"} and m.precision == {"a100": "int8"}
    with pytest.raises(EngineError, match="built from ONNX sha256"):  # parity compared another INT8 file
        render_trt_model("tiny_trt", dirs, VARIANT, ParityReport.from_json({**report, "artifacts": {**report["artifacts"], "int8": {**PASSED, "sha256": "0" * 64}}}))
    only_fp16 = passing(onnx_file, {"schema": 1, "artifacts": {"trt@a100": PASSED}})
    assert "no int8 entry" in render_trt_model("tiny_trt", dirs, VARIANT, only_fp16).excluded["a100"]


def test_repository_layout_when_an_engine_is_missing_or_fails_to_load(tmp_path: Path, onnx_file: Path) -> None:
    """The decided fallback, as files: the ONNX Runtime model is always there beside <name>_trt; the TensorRT model
    maps only the capabilities that built a plan, and names no default plan unless one is hardware-compatible."""
    from pipeline.repository import config as triton_config
    from pipeline.repository.writer import write_repository
    from tests.conftest import TINY_MLP
    from pipeline.params import compose
    from pipeline.core.config import load_config

    params = tmp_path / "params.yaml"
    params.write_text(compose([*TINY_MLP, "targets=[cpu,a100,h100]", "model.inputs=[{name: x, dtype: float32, shape: [batch, 16]}]", "model.outputs=[y]"]))
    cfg = load_config(params)
    engines(tmp_path, onnx_file, built=["a100"], skipped=["h100"])
    parity = tmp_path / "parity.json"
    report = passing(onnx_file).to_json()
    parity.write_text(json.dumps({**report, "artifacts": {**report["artifacts"], "fp32": {**PASSED, "sha256": sha256_file(onnx_file)}}}))
    out = tmp_path / "repo"
    out.mkdir()
    summary = write_repository(cfg, onnx_file, out, parity, tmp_path / "engines")
    assert (out / "tiny" / "1" / "model.onnx").is_file() and (out / "tiny" / "config.pbtxt").is_file()  # the fallback model
    trt = (out / "tiny_trt" / "config.pbtxt").read_text()
    parsed = triton_config.parse(out / "tiny_trt" / "config.pbtxt")
    assert dict(parsed.cc_model_filenames) == {"8.0": "model.sm80.plan"} and parsed.default_model_filename == ""
    assert sorted(p.name for p in (out / "tiny_trt" / "1").iterdir()) == ["model.sm80.plan"]  # no model.plan: h100 fails cleanly
    assert "--exit-on-error=false" in trt and "h100" in summary["engines"]["excluded"]
