"""export -> simplify -> fp16 -> repository on tiny models, and every bad input the spine must refuse."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from pipeline.core import onnx_tools
from pipeline.repository import config as triton_config
from pipeline.core.errors import ConfigError, ModelSourceError
from pipeline.convert import export, fp16, simplify
from pipeline.repository import writer as repository
from tests.conftest import TINY_MLP, run_module


def build_all(cfg, tmp_path: Path) -> dict[str, Path]:
    """Run the four spine stages' functions into tmp_path."""
    p = {k: tmp_path / f"model.{k}.onnx" for k in ("raw", "sim", "fp16")}
    export.run_export(cfg.model, cfg.export, p["raw"])
    simplify.simplify(p["raw"], p["sim"], cfg.simplify, cfg.model)
    fp16.run_fp16(p["sim"], p["fp16"], cfg.precision, cfg.model)
    (tmp_path / "repo").mkdir()
    repository.write_repository(cfg, p["sim"] if cfg.serving.precision == "fp32" else p["fp16"], tmp_path / "repo")
    return p


def test_tiny_factory_end_to_end(tiny_cfg, tmp_path: Path) -> None:
    cfg = tiny_cfg()
    p = build_all(cfg, tmp_path)
    model = onnx.load(str(p["raw"]))
    assert [i.name for i in model.graph.input] == ["x"] and [o.name for o in model.graph.output] == ["y"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert {o.version for o in model.opset_import if o.domain == ""} == {17}
    # FP16 model keeps FP32 I/O (keep_io_types) and stores FP16 weights.
    half = onnx.load(str(p["fp16"]))
    assert half.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in half.graph.initializer)
    x = np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32)
    ref = build_mlp_ref(x)
    for k in ("raw", "sim"):
        np.testing.assert_allclose(onnx_tools.run(onnx_tools.session(p[k]), {"x": x})["y"], ref, atol=1e-5)
    np.testing.assert_allclose(onnx_tools.run(onnx_tools.session(p["fp16"]), {"x": x})["y"], ref, atol=2e-2)
    mdir = tmp_path / "repo" / "tiny"
    assert (mdir / "1" / "model.onnx").read_bytes() == p["sim"].read_bytes()  # cpu target ships FP32
    lat, thr = (triton_config.parse(mdir / "configs" / f"{v}.pbtxt") for v in ("latency", "throughput"))
    assert triton_config.parse(mdir / "config.pbtxt") == lat
    assert not lat.HasField("dynamic_batching") and thr.HasField("dynamic_batching")
    assert list(lat.input[0].dims) == [8] and list(lat.output[0].dims) == [4]


def build_mlp_ref(x: np.ndarray) -> np.ndarray:
    from tests.helpers.tiny_models import build_mlp

    with torch.no_grad():
        return build_mlp()(torch.from_numpy(x)).numpy()


def test_gpu_target_ships_fp16_on_kind_gpu(tiny_cfg, tmp_path: Path) -> None:
    cfg = tiny_cfg("targets=[a100,cpu]")
    p = build_all(cfg, tmp_path)
    mdir = tmp_path / "repo" / "tiny"
    assert (mdir / "1" / "model.onnx").read_bytes() == p["fp16"].read_bytes()
    assert "KIND_GPU" in (mdir / "configs" / "latency.pbtxt").read_text()


def test_cnn_produces_a_repository(make_params, tmp_path: Path) -> None:
    from pipeline.core.config import load_config

    cfg = load_config(make_params("model=cnn"))
    p = build_all(cfg, tmp_path)
    assert "BatchNormalization" not in {n.op_type for n in onnx.load(str(p["sim"])).graph.node}
    lat = triton_config.parse(tmp_path / "repo" / "cnn" / "configs" / "latency.pbtxt")
    assert [list(i.dims) for i in lat.input] == [[3, 32, 32]] and [list(o.dims) for o in lat.output] == [[10]]
    assert (tmp_path / "repo" / "cnn" / "1" / "model.onnx").is_file()


def test_checkpoints_safetensors_and_pt(tiny_cfg, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from tests.helpers.tiny_models import build_mlp

    trained = build_mlp(seed=7)
    save_file(trained.state_dict(), str(tmp_path / "w.safetensors"))
    torch.save(trained.state_dict(), tmp_path / "w.pt")
    x = torch.randn(3, 8)
    for ckpt in ("w.safetensors", "w.pt"):
        cfg = tiny_cfg(f"model.checkpoint={tmp_path / ckpt}")
        module = export.build_module(cfg.model)  # factory seed 0, weights from the seed-7 checkpoint
        torch.testing.assert_close(module(x), trained(x))


def test_unsafe_checkpoint_refused(tiny_cfg, tmp_path: Path) -> None:
    from tests.helpers.tiny_models import Payload

    torch.save({"fc1.weight": Payload()}, tmp_path / "evil.pt")
    cfg = tiny_cfg(f"model.checkpoint={tmp_path / 'evil.pt'}")
    with pytest.raises(ModelSourceError, match="unpickling of arbitrary Python objects") as e:
        export.build_module(cfg.model)
    assert "state_dict" in e.value.render()


def test_factory_not_a_module(tiny_cfg) -> None:
    cfg = tiny_cfg("model.factory._target_=tests.helpers.tiny_models.not_a_module")
    with pytest.raises(ModelSourceError, match="not a torch.nn.Module"):
        export.build_module(cfg.model)


def test_model_data_hook_feeds_export(tiny_cfg, tmp_path: Path) -> None:
    cfg = tiny_cfg("model.data={_target_: tests.helpers.tiny_models.mlp_samples}")
    rep = export.run_export(cfg.model, cfg.export, tmp_path / "m.onnx")
    assert rep["sanity_batches"] == [2, 3]


def test_onnx_source_copies_and_checks(make_params, tiny_onnx: Path, tmp_path: Path) -> None:
    from pipeline.core.config import load_config

    cfg = load_config(make_params("model=onnx", f"model.path={tiny_onnx}"))
    out = tmp_path / "out.onnx"
    rep = export.run_export(cfg.model, cfg.export, out)
    assert rep["source"] == "onnx" and out.read_bytes() == tiny_onnx.read_bytes()


# ------------------------------------------------------------ bad input through the real entry points
def _stage(tmp_path: Path, params: Path) -> tuple[object, Path]:
    out_dir = tmp_path / "artifacts"
    res = run_module("pipeline.stages.export", "--params", str(params), "--out", str(out_dir / "model.onnx"), "--report", str(out_dir / "export.json"))
    return res, out_dir


def _assert_clean_failure(res, out_dir: Path, *needles: str) -> None:
    assert res.returncode != 0
    assert "Traceback" not in res.stderr, res.stderr
    err = res.stderr[res.stderr.index("ERROR [export]") :]
    for n in needles:
        assert n in err, err
    assert "fix:" in err
    leftovers = [p for p in out_dir.rglob("*") if p.is_file()] if out_dir.exists() else []
    assert leftovers == [], leftovers


def _refused_at_composition(make_params, overrides: list[str], *needles: str) -> None:
    """Composition (python -m pipeline.params, dvc exp run) refuses the config before any stage runs."""
    with pytest.raises(ConfigError) as e:
        make_params(*overrides)
    for n in needles:
        assert n in str(e.value), str(e.value)


def _hand_edited(params: Path, old: str, new: str) -> Path:
    """A params.yaml edited by hand after composition: the stage's own load must refuse it as cleanly."""
    text = params.read_text(encoding="utf-8")
    assert old in text
    params.write_text(text.replace(old, new), encoding="utf-8")
    return params


def test_nonexistent_model_path(make_params, tiny_onnx: Path, tmp_path: Path) -> None:
    _refused_at_composition(make_params, ["model=onnx", f"model.path={tmp_path / 'nope.onnx'}"], "model.path", "nope.onnx")
    params = _hand_edited(make_params("model=onnx", f"model.path={tiny_onnx}"), str(tiny_onnx), str(tmp_path / "nope.onnx"))
    res, out = _stage(tmp_path, params)
    _assert_clean_failure(res, out, "not found", "nope.onnx")


def test_truncated_onnx(make_params, tiny_onnx: Path, tmp_path: Path) -> None:
    bad = tmp_path / "truncated.onnx"
    bad.write_bytes(tiny_onnx.read_bytes()[: tiny_onnx.stat().st_size // 2])
    res, out = _stage(tmp_path, make_params("model=onnx", f"model.path={bad}"))
    _assert_clean_failure(res, out, "truncated or corrupt", "truncated.onnx")


def test_garbage_onnx(make_params, tmp_path: Path) -> None:
    bad = tmp_path / "garbage.onnx"
    bad.write_bytes(b"this is not a protobuf at all \x00\xff" * 10)
    res, out = _stage(tmp_path, make_params("model=onnx", f"model.path={bad}"))
    _assert_clean_failure(res, out, "garbage.onnx")


def test_input_names_mismatch(make_params, tiny_onnx: Path, tmp_path: Path) -> None:
    pinned = "model.inputs=[{name: %s, dtype: float32, shape: [batch, 8]}]"
    _refused_at_composition(make_params, ["model=onnx", f"model.path={tiny_onnx}", pinned % "pixels"], "pixels", "x")
    params = _hand_edited(make_params("model=onnx", f"model.path={tiny_onnx}", pinned % "x"), "name: x", "name: pixels")
    res, out = _stage(tmp_path, params)
    _assert_clean_failure(res, out, "input names", "pixels", "'x'")


def test_unknown_key(make_params, tmp_path: Path) -> None:
    _refused_at_composition(make_params, [*TINY_MLP, "+export.opsett=18"], "export.opsett", "export.opset")
    params = _hand_edited(make_params(*TINY_MLP), "  opset: 17", "  opset: 17\n  opsett: 18")
    res, out = _stage(tmp_path, params)
    _assert_clean_failure(res, out, "export.opsett", "export.opset")


def test_unsafe_checkpoint_entry_point(make_params, tmp_path: Path) -> None:
    from tests.helpers.tiny_models import Payload

    torch.save({"w": Payload()}, tmp_path / "evil.pt")
    res, out = _stage(tmp_path, make_params(*TINY_MLP, f"model.checkpoint={tmp_path / 'evil.pt'}"))
    _assert_clean_failure(res, out, "refused to load checkpoint", "evil.pt")


def test_report_is_json_metrics(tiny_cfg, tmp_path: Path) -> None:
    rep = export.run_export(tiny_cfg().model, tiny_cfg().export, tmp_path / "m.onnx")
    json.dumps(rep)
    assert rep["nodes"] > 0 and rep["size_bytes"] > 0


def test_readme_custom_model_example(make_params, tmp_path: Path) -> None:
    """The README's worked example: factory + safetensors checkpoint + input specs in YAML."""
    from pipeline.core.config import load_config

    ckpt = tmp_path / "custom.safetensors"
    res = run_module("examples.custom_model", str(ckpt))
    assert res.returncode == 0, res.stderr
    cfg = load_config(make_params("model=example_custom", f"model.checkpoint={ckpt}"))
    p = build_all(cfg, tmp_path)
    model = onnx.load(str(p["raw"]))
    assert [o.name for o in model.graph.output] == ["logits", "probs"]
    text = (tmp_path / "repo" / "tabular" / "configs" / "throughput.pbtxt").read_text()
    assert 'name: "probs"' in text and "dims: 3" in text


def test_fixed_batch_graph_is_served_without_batching(make_params, tmp_path: Path) -> None:
    """A graph with no dynamic batch axis needs no overrides: both variants render max_batch_size 0, and say why."""
    from pipeline.core.config import load_config
    from tests.helpers.tiny_models import two_io_onnx

    model = two_io_onnx(str(tmp_path / "fixed.onnx"), batch=1)
    cfg = load_config(make_params("model=onnx", "model.name=fixed", f"model.path={model}"))
    (tmp_path / "repo").mkdir()
    summary = repository.write_repository(cfg, Path(model), tmp_path / "repo")
    for v in ("latency", "throughput"):
        pb = triton_config.parse(tmp_path / "repo" / "fixed" / "configs" / f"{v}.pbtxt")
        assert pb.max_batch_size == 0 and not pb.HasField("dynamic_batching")
        assert [list(i.dims) for i in pb.input] == [[1, 4], [1, 4]]
    assert "no dynamic batch axis" in summary["derived"]["throughput"] and "dynamic batching" in summary["derived"]["throughput"]
    assert "Derived: max_batch_size 0" in (tmp_path / "repo" / "fixed" / "configs" / "throughput.pbtxt").read_text()


def test_repository_ships_only_the_file_parity_compared(tiny_cfg, tmp_path: Path) -> None:
    """A parity report from another run (another file's sha256) cannot vouch for the file being shipped."""
    from pipeline.core.errors import RepositoryError

    cfg = tiny_cfg()
    p = build_all(cfg, tmp_path)
    other = tmp_path / "other.onnx"
    export.run_export(tiny_cfg("+model.factory.seed=1").model, cfg.export, other)
    report = {"schema": 1, "passed": True, "artifacts": {"fp32": {"status": "passed", "passed": True, "sha256": onnx_tools_sha(other)}}}
    (tmp_path / "parity.json").write_text(json.dumps(report))
    (tmp_path / "repo2").mkdir()
    with pytest.raises(RepositoryError, match="vouches for another fp32 file") as e:
        repository.write_repository(cfg, p["sim"], tmp_path / "repo2", tmp_path / "parity.json")
    assert e.value.details["parity compared sha256"] == onnx_tools_sha(other)
    report["artifacts"]["fp32"]["sha256"] = onnx_tools_sha(p["sim"])
    (tmp_path / "parity.json").write_text(json.dumps(report))
    (tmp_path / "repo3").mkdir()
    assert repository.write_repository(cfg, p["sim"], tmp_path / "repo3", tmp_path / "parity.json")["parity"]["sha256"] == onnx_tools_sha(p["sim"])


def onnx_tools_sha(path: Path) -> str:
    from pipeline.core.atomic import file_digest

    return file_digest(path)[0]
