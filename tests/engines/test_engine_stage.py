"""The engine stage: skip semantics (no TensorRT, a GPU of another compute capability), the built
path through a stand-in tensorrt module, manifest round-trip and the stage's command line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.core.config import TargetConfig, load_config
from pipeline.engines.manifest import check_matches_target, sha256_file
from pipeline.records.engine_manifest import EngineFile, EngineManifest, read_manifest
from pipeline.core.errors import EngineError
from pipeline.stages import engine as engine_stage
from pipeline.engines.build import build_target
from tests.fakes.fake_tensorrt import STAND_IN_PLAN, fake_tensorrt
from tests.tiny_triton import tiny_onnx
from tests.helpers.probes import TRT_MISSING, TRT_OK, probe


def a100() -> TargetConfig:
    return TargetConfig(name="a100", kind="gpu", gpu_family="A100", compute_capability="8.0", gpu_names=["A100"], precision="fp16")


@pytest.fixture
def onnx_file(tmp_path: Path) -> Path:
    return tiny_onnx(tmp_path / "onnx" / "model.fp16.onnx")


def test_skipped_without_tensorrt_writes_manifest_only(tmp_path: Path, onnx_file: Path) -> None:
    out, cache = tmp_path / "engines" / "a100", tmp_path / "tc" / "a100.cache"
    m = build_target(a100(), onnx_file, probe([], TRT_MISSING), out, cache)
    assert m.status == "skipped" and "no NVIDIA GPU" in m.reason
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]  # no plan, ever
    assert cache.is_file() and cache.read_bytes() == b""  # DVC's output exists; empty = no cache yet
    assert m.profiles == {"x": {"min": [1, 16], "opt": [8, 16], "max": [32, 16]}}  # profile errors surface on CPU too


def test_skipped_on_a_gpu_of_another_compute_capability(tmp_path: Path, onnx_file: Path) -> None:
    with fake_tensorrt("11.0.0") as trt:
        m = build_target(a100(), onnx_file, probe([("NVIDIA H100 80GB HBM3", "9.0")]), tmp_path / "e", tmp_path / "c")
    assert m.status == "skipped" and "compute capability 9.0" in m.reason and "needs compute capability 8.0" in m.reason
    assert trt.calls == []  # TensorRT was never asked to build
    assert m.machine["gpus_present"] == ["NVIDIA H100 80GB HBM3 (9.0)"]


def test_skip_is_deterministic(tmp_path: Path, onnx_file: Path) -> None:
    """An unchanged skip rewrites identical bytes, so downstream stages see no change."""
    out = tmp_path / "e"
    build_target(a100(), onnx_file, probe([]), out, tmp_path / "c")
    first = (out / "manifest.json").read_bytes()
    build_target(a100(), onnx_file, probe([]), out, tmp_path / "c")
    assert (out / "manifest.json").read_bytes() == first


def test_cpu_target_is_skipped_without_reading_onnx(tmp_path: Path) -> None:
    m = build_target(TargetConfig(name="cpu"), tmp_path / "absent.onnx", probe([]), tmp_path / "e", tmp_path / "c")
    assert m.status == "skipped" and "cpu target" in m.reason


def test_built_with_stand_in_and_manifest_round_trip(tmp_path: Path, onnx_file: Path) -> None:
    out, cache = tmp_path / "engines" / "a100", tmp_path / "a100.cache"
    cache.write_bytes(b"previous")
    with fake_tensorrt("10.7.0"):
        m = build_target(a100(), onnx_file, probe([("NVIDIA A100-SXM4-80GB", "8.0")]), out, cache)
    assert m.built and (out / "model.plan").read_bytes() == STAND_IN_PLAN
    assert m.engine == EngineFile("model.plan", len(STAND_IN_PLAN), sha256_file(out / "model.plan"))
    assert m.machine["gpu_name"] == "NVIDIA A100-SXM4-80GB" and m.machine["compute_capability"] == "8.0"
    assert m.machine["tensorrt_version"] == "10.7.0" and m.machine["driver_version"] == "550.54"
    assert m.settings and m.settings["fp16_flag"] is True and m.build_time_s is not None
    assert m.timing_cache["loaded"] is True and cache.read_bytes() != b"previous"
    back = read_manifest(out / "manifest.json")
    assert back == m and back.to_json() == json.loads((out / "manifest.json").read_text())
    check_matches_target(back, a100(), out)  # matches its own target
    # How to repeat it: through DVC, or the same build with TensorRT's own tools.
    assert m.reproduce["dvc"] == "dvc repro engine@a100"
    assert m.reproduce["polygraphy"].startswith(f"polygraphy convert {onnx_file} --convert-to trt -o {out / 'model.plan'} ")
    assert "--fp16" in m.reproduce["polygraphy"] and f"--load-timing-cache {cache}" in m.reproduce["polygraphy"]
    assert m.reproduce["trtexec"].startswith(f"trtexec --onnx={onnx_file} --saveEngine={out / 'model.plan'} ")


def test_a_stale_plan_is_removed_when_the_target_is_later_skipped(tmp_path: Path, onnx_file: Path) -> None:
    out = tmp_path / "e"
    with fake_tensorrt():
        build_target(a100(), onnx_file, probe([("NVIDIA A100", "8.0")]), out, tmp_path / "c")
    build_target(a100(), onnx_file, probe([]), out, tmp_path / "c")
    assert not (out / "model.plan").exists()


def test_mismatched_manifest_is_refused(tmp_path: Path, onnx_file: Path) -> None:
    out = tmp_path / "e"
    with fake_tensorrt():
        build_target(a100(), onnx_file, probe([("NVIDIA A100", "8.0")]), out, tmp_path / "c")
    m = read_manifest(out / "manifest.json")
    h100 = TargetConfig(name="h100", kind="gpu", gpu_family="H100", compute_capability="9.0", gpu_names=["H100"])
    with pytest.raises(EngineError, match="does not match the target") as e:
        check_matches_target(m, h100, out)
    text = str(e.value)
    assert "built on 8.0, target needs 9.0" in text and "engine@h100" in text
    (out / "model.plan").write_bytes(b"tampered")
    with pytest.raises(EngineError, match="sha256"):
        check_matches_target(m, a100(), out)


def test_malformed_manifest_is_an_engine_error(tmp_path: Path) -> None:
    p = tmp_path / "manifest.json"
    p.write_text(json.dumps({"target": "a100", "status": "weird", "reason": "", "expected": {}}))
    with pytest.raises(EngineError, match="status 'weird'"):
        read_manifest(p)
    with pytest.raises(EngineError, match="not an engine manifest"):
        EngineManifest.from_json({"target": "a100"})


def test_stage_cli_skips_both_gpu_targets_here(tmp_path: Path, onnx_file: Path, make_params: Callable[..., Path]) -> None:
    """targets=[cpu,a100,h100] on a machine without TensorRT: both engines are skipped with a reason, exit 0."""
    params = make_params("targets=[cpu,a100,h100]")
    probe_json = tmp_path / "probe.json"
    probe_json.write_text(json.dumps(probe([], TRT_MISSING)))
    for t in ("cpu", "a100", "h100"):
        rc = engine_stage.main(
            [
                "--params",
                str(params),
                "--target",
                t,
                "--onnx",
                str(onnx_file),
                "--probe",
                str(probe_json),
                "--out",
                str(tmp_path / "engines" / t),
                "--timing-cache",
                str(tmp_path / "tc" / f"{t}.cache"),
            ]
        )
        assert rc == 0
        m = read_manifest(tmp_path / "engines" / t / "manifest.json")
        assert m.status == "skipped" and m.reason
        assert m.reproduce == {"dvc": f"dvc repro engine@{t}"}  # no engine: no TensorRT command to repeat
    cfg = load_config(params)
    assert read_manifest(tmp_path / "engines" / "h100" / "manifest.json").expected.compute_capability == cfg.target_specs["h100"].compute_capability


def test_stage_cli_fails_clearly_for_a_target_outside_the_fleet(tmp_path: Path, onnx_file: Path, make_params: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    params = make_params("targets=[cpu]")
    probe_json = tmp_path / "probe.json"
    probe_json.write_text(json.dumps(probe([], TRT_OK)))
    rc = engine_stage.main(
        [
            "--params",
            str(params),
            "--target",
            "a100",
            "--onnx",
            str(onnx_file),
            "--probe",
            str(probe_json),
            "--out",
            str(tmp_path / "e"),
            "--timing-cache",
            str(tmp_path / "c"),
        ]
    )
    assert rc != 0
    assert "not in the fleet" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()


def test_parity_reads_engine_manifests_with_read_manifest(tmp_path: Path, onnx_file: Path) -> None:
    """parity's trt@<target> entries: absent and not-built engines are skipped with the reason, a malformed
    manifest is an error naming it (the engine manifest reader's own check)."""
    from pipeline.core.config import ToleranceConfig
    from pipeline.parity.run import engine_entries

    build_target(a100(), onnx_file, probe([], TRT_MISSING), tmp_path / "a100", tmp_path / "a100.cache")
    (tmp_path / "h100").mkdir()
    (tmp_path / "h100" / "manifest.json").write_text(json.dumps({"target": "h100", "status": "built", "reason": "", "expected": {}}))
    entries = engine_entries(tmp_path, ["a100", "h100", "l4"], ToleranceConfig(), None)  # no engine runs: config and baseline are never read
    out = {k: a.to_json() for k, a in entries.items()}
    why = read_manifest(tmp_path / "a100" / "manifest.json").reason
    assert out["trt@a100"] == {"status": "skipped", "file": str(tmp_path / "a100" / "model.plan"), "reason": f"engine not built: {why}"}
    h100 = out["trt@h100"]
    assert h100["status"] == "error" and h100["passed"] is False and "no engine file/sha256" in h100["reason"]
    assert h100["reason"].startswith(f"unreadable manifest {tmp_path / 'h100' / 'manifest.json'}: ")
    assert out["trt@l4"] == {"status": "skipped", "reason": f"no engine manifest at {tmp_path / 'l4' / 'manifest.json'} (run `dvc repro engine@l4`)"}
