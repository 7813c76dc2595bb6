"""Structured-config schema of ``model.data`` in its file form (no ``_target_``).

``model.data`` stays a free mapping in :class:`~pipeline.core.config.schema.ModelConfig`, since a sample-data
hook (``{_target_: pkg.fn, **kwargs}``) takes whatever arguments its function does. The file form has a fixed
set of keys, typed and defaulted here and checked (unknown keys included) by rules.check_data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class DataPathConfig:
    """Real samples read from a file or a folder: ``model.data: {path: ..., mean: ..., std: ...}``."""

    # A Polygraphy JSON inputs file, an .npz (keys = input names), an .npy (a one-input model's rows), or a folder
    # of images (.png .jpg .jpeg .bmp .webp) for a one-input image model.
    path: str = "???"
    # A folder of images only: per-channel values (RGB order, or one for all channels) applied after scaling pixels
    # to [0, 1], as x = (x - mean) / std; null leaves the [0, 1] values as they are (mean 0, std 1).
    mean: Optional[list[float]] = None
    std: Optional[list[float]] = None


FILE_SUFFIXES = (".json", ".npz", ".npy")  # the file forms; any other path is read as a folder of images
