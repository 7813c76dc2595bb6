"""Polygraphy without its torch probe: the JSON files and comparisons of this project hold NumPy arrays only.

Polygraphy asks of every array it handles whether it is a ``torch.Tensor``, and learns that by importing torch
(``polygraphy.util.array.is_torch``); its JSON codec registers a torch encoder the same way on first use. Importing
torch costs about 1.1 s of CPU, in every process that runs Polygraphy: the calibrate, int8 and parity stages spent
more time importing torch than working on a small model. Nothing can be a ``torch.Tensor`` before torch is imported,
so :func:`numpy_first` answers from ``sys.modules`` instead (and :func:`load_json` / :func:`save_json`, the only
way this project reads and writes Polygraphy JSON, apply it first), which gives the same answer for every object. A process
that does import torch (the PyTorch parity reference) still gets torch tensors recognised. The torch JSON codec is
left unregistered only when torch is not imported at first use: the files written here never hold torch tensors.
"""

from __future__ import annotations

import sys
from typing import Any

_done = False


def _is_torch(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def numpy_first() -> None:
    """Make Polygraphy's torch checks free until torch is imported by someone else (idempotent)."""
    global _done  # noqa: PLW0603 - one patch per process
    if _done:
        return
    from polygraphy.json import serde
    from polygraphy.util import array

    array.is_torch = _is_torch  # the module's own dispatch and every runner look it up on the module at call time
    if "torch" not in sys.modules:
        serde.TORCH_REGISTRATION_SUCCESS = True  # skip the probe; numpy's codec registers as before
    _done = True


def load_json(path: str, description: str) -> Any:
    """``polygraphy.json.load_json``, without the torch probe."""
    from polygraphy.json import load_json as load

    numpy_first()
    return load(path, description=description)


def save_json(obj: Any, path: str, description: str) -> None:
    """``polygraphy.json.save_json``, without the torch probe."""
    from polygraphy.json import save_json as save

    numpy_first()
    save(obj, path, description=description)
