"""The rules of ``model.data``: a hook or the file form (:class:`DataPathConfig`), its keys and normalization values.

Called from checks.check_model with the same :class:`Problems`; none raises. Whether the path exists, and
whether a folder holds images, is checked at composition with the other files (files.check_source).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from pipeline.core.config.problems import Problems, did_you_mean
from pipeline.core.config.schema_data import FILE_SUFFIXES, DataPathConfig

FORMS = "must be {_target_: pkg.fn, ...} (a sample-data hook) or {path: file.json|.npz|.npy|folder of images}, or null"


def check_data(data: dict[str, Any] | None, p: Problems, key: str = "model.data") -> None:  # noqa: C901
    """``data`` is null, a hook (its arguments are its own), or the file form with known keys and usable mean/std."""
    if data is None or "_target_" in data:
        return
    if "path" not in data:
        p.add(key, data, FORMS)
        return
    known = [f.name for f in dataclasses.fields(DataPathConfig)]
    for k in data:
        if k not in known:
            p.add(f"{key}.{k}", data[k], f"unknown key{did_you_mean(k, known)} (the file form takes {', '.join(known)}; a hook, {key}._target_=pkg.fn, takes any arguments)")
    path = data["path"]
    if not isinstance(path, str) or not path:
        p.add(f"{key}.path", path, "must be the path of a .json, .npz or .npy file, or of a folder of images")
        return
    is_file_form = Path(path).suffix.lower() in FILE_SUFFIXES
    for name in ("mean", "std"):
        values, k = data.get(name), f"{key}.{name}"
        if values is None:
            continue
        if is_file_form:
            p.add(k, values, f"applies to a folder of images only, and {key}.path={path} is a file: normalize the arrays in it, or set {k}=null")
        elif not isinstance(values, list) or len(values) not in (1, 3):
            p.add(k, values, "must be a list of per-channel values, 3 (RGB order) or 1 (for every channel), e.g. [0.485, 0.456, 0.406], or null")
        elif not p.each(k, values):
            continue  # not numbers: reported, nothing more to judge
        elif not all(math.isfinite(v) for v in values):
            p.add(k, values, "every value must be finite")
        elif name == "std" and any(v <= 0 for v in values):
            p.add(k, values, "every value must be > 0: each pixel is divided by its channel's std")
