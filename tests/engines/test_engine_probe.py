"""Machine probe parsing and the build-or-skip decision (probe data injected as dicts)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pipeline.core.config import TargetConfig
from pipeline.core.errors import EngineError
from pipeline.engines.probe import decide, name_matches, parse_smi_csv, probe_machine, probe_tensorrt, sm_tag
from pipeline.engines.trt import available, import_tensorrt
from pipeline.parity.polygraphy import trt_runner
from pipeline.stages import probe as probe_stage
from tests.helpers.probes import TRT_MISSING, probe

A100 = TargetConfig(name="a100", kind="gpu", gpu_family="A100", compute_capability="8.0", gpu_names=["A100"], precision="fp16")


def test_parse_nvidia_smi_csv() -> None:
    text = "NVIDIA A100-SXM4-80GB, 8.0, 550.54.15, 81920 MiB\nNVIDIA L4, 8.9, 550.54.15, 23034 MiB\n"
    gpus = parse_smi_csv(text)
    assert [(g["index"], g["name"], g["compute_capability"]) for g in gpus] == [(0, "NVIDIA A100-SXM4-80GB", "8.0"), (1, "NVIDIA L4", "8.9")]
    assert parse_smi_csv("") == []


def test_sm_tag_and_name_patterns() -> None:
    assert sm_tag("8.0") == "sm80" and sm_tag("9.0") == "sm90"
    assert name_matches("NVIDIA A10G", ["A10"]) and not name_matches("NVIDIA L4", ["A10"])
    assert name_matches("anything", [])


def test_cpu_target_is_never_built() -> None:
    d = decide(TargetConfig(name="cpu"), probe([("NVIDIA A100", "8.0")]))
    assert not d.build and "cpu target" in d.reason


def test_no_gpu_skips_with_reason() -> None:
    d = decide(A100, probe([], TRT_MISSING))
    assert not d.build
    assert "no NVIDIA GPU" in d.reason and "8.0" in d.reason


def test_gpu_of_another_compute_capability_skips() -> None:
    d = decide(A100, probe([("NVIDIA L4", "8.9")]))
    assert not d.build
    assert "NVIDIA L4 (compute capability 8.9)" in d.reason and "needs compute capability 8.0" in d.reason


def test_same_capability_but_other_name_skips() -> None:
    d = decide(A100, probe([("NVIDIA A30", "8.0")]))
    assert not d.build and "gpu_names" in d.reason


def test_tensorrt_absent_skips_even_on_the_right_gpu() -> None:
    d = decide(A100, probe([("NVIDIA A100-SXM4-40GB", "8.0")], TRT_MISSING))
    assert not d.build and "TensorRT is not importable" in d.reason and "tensorrt" in d.reason


def test_matching_gpu_among_several_is_chosen() -> None:
    d = decide(A100, probe([("NVIDIA L4", "8.9"), ("NVIDIA A100-PCIE-40GB", "8.0")]))
    assert d.build and d.gpu is not None and d.gpu["index"] == 1


def test_probe_here_is_deterministic_and_honest(tmp_path: Path) -> None:
    """On this CPU machine: no GPU, no TensorRT; two runs give identical JSON (so DVC sees no change)."""
    out = tmp_path / "probe.json"
    argv = ["--out", str(out), "--model-record", str(tmp_path / "model.json"), "--data-record", str(tmp_path / "data.json")]
    assert probe_stage.main(argv) == 0
    first = [(tmp_path / n).read_text() for n in ("probe.json", "model.json", "data.json")]
    assert probe_stage.main(argv) == 0
    assert [(tmp_path / n).read_text() for n in ("probe.json", "model.json", "data.json")] == first
    # The source records name the default model's factory module by content.
    assert "pipeline/models/minilm.py" in first[1] and json.loads(first[1])["record"] == "model"
    data = json.loads(first[0])
    assert data == probe_machine()
    assert set(data) >= {"gpus", "driver_version", "cuda_driver_version", "cuda_runtime_version", "tensorrt"}
    if not data["gpus"]:
        assert not decide(A100, data).build


def test_one_tensorrt_probe_counts_a_missing_libnvinfer_as_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wheel's Python package can import while libnvinfer is missing: that is an OSError, not an ImportError.
    The machine probe, the engine build and parity's TensorRT runner all ask the same function."""
    fake = tmp_path / "site" / "tensorrt"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise OSError("libnvinfer.so.10: cannot open shared object file: No such file or directory")\n')
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "tensorrt", raising=False)

    trt, why = available()
    assert trt is None and why == "OSError: libnvinfer.so.10: cannot open shared object file: No such file or directory"
    assert probe_tensorrt() == {"available": False, "version": None, "error": why}
    assert trt_runner(tmp_path / "model.plan", "trt@a100") == (None, f"tensorrt is not importable here ({why})")
    with pytest.raises(EngineError, match="cannot import tensorrt") as e:
        import_tensorrt()
    assert "libnvinfer" in str(e.value) and "[tensorrt]" in str(e.value)
