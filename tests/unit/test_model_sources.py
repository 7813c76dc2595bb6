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
