"""What a PyTorch model returned, as a list of tensors: one tensor, a tuple or list, or a mapping of fields.

A Hugging Face model returns a ``ModelOutput`` (an ordered mapping holding only the fields it set, e.g.
``logits``); torch.onnx.export flattens it to those fields' values in order, so the pipeline does the same,
and a count mismatch names the fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def flatten(out: Any) -> tuple[list[Any], list[str] | None]:
    """(the returned tensors in order, their field names when the model returned a mapping, else None)."""
    if isinstance(out, Mapping):
        items = [(str(k), v) for k, v in out.items() if v is not None]
        return [v for _, v in items], [k for k, _ in items]
    if isinstance(out, (tuple, list)):
        return list(out), None
    return [out], None


def count_problem(fields: list[str] | None, got: int, names: list[str]) -> tuple[str, str]:
    """(what, fix) for a model that returns ``got`` outputs while model.outputs lists ``names``."""
    what = f"the model returns {got} outputs but model.outputs names {len(names)}"
    if fields is not None:
        listed = ", ".join(fields)
        return f"{what}: it returns a mapping with the fields [{listed}]", f"set model.outputs=[{listed}] (the fields in the order the model sets them)"
    return what, "make model.outputs list one name per returned tensor"
