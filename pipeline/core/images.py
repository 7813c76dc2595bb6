"""A folder of images as sample rows: ``model.data: {path: <folder>, mean: [...], std: [...]}``.

For a model with one rank-4 float input (an image batch): every image in the folder (and its subfolders, by
relative path) is decoded with Pillow, converted to RGB (L for a 1-channel input), resized to the input's
H x W, scaled to [0, 1], normalized with ``(x - mean) / std`` when given, and laid out NCHW or NHWC by the
axis of size 3 (or 1). H, W and the channel count come from the input's fixed dims, else ``model.sample_dims``.

Files with other suffixes (labels, a README) are no samples and are left out, of the rows and of the probe's
fingerprint alike (:func:`image_files` is the one listing both read). This module imports nothing from
pipeline.core.config, so the config checks can list a folder at composition without an import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pipeline.core.errors import ConfigError
from pipeline.core.specs import typeable

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
KEY = "model.data.path"

Feed = dict[str, np.ndarray]


class InputSpec(Protocol):
    """What is read of a model input (pipeline.core.config.TensorSpec fits)."""

    name: str
    dtype: Any
    shape: list[Any]


@dataclass(frozen=True)
class Layout:
    """How the rows of one image input are laid out."""

    name: str
    dtype: str
    channels_last: bool  # NHWC (True) or NCHW
    channels: int  # 1 (decoded as L) or 3 (RGB)
    height: int
    width: int
    batch: int | None  # the graph's fixed batch size; None when the batch axis is dynamic

    def describe(self) -> str:
        order = "NHWC" if self.channels_last else "NCHW"
        return f"{order} {self.channels}x{self.height}x{self.width} ({'RGB' if self.channels == 3 else 'L'}) {self.dtype}"


def image_files(folder: Path) -> list[Path]:
    """The images under ``folder`` (suffixes :data:`IMAGE_SUFFIXES`, any case), sorted by relative path."""
    found = [f for f in folder.rglob("*") if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES and not f.name.startswith(".")]
    return sorted(found, key=lambda f: f.relative_to(folder).as_posix())


def no_images_reason(folder: Path) -> str | None:
    """Why ``folder`` gives no rows (what it holds instead), or None when it holds at least one image."""
    if image_files(folder):
        return None
    others = sorted({f.suffix.lower() or f.name for f in folder.rglob("*") if f.is_file()})
    held = f"it holds only {', '.join(others[:8])} files" if others else "it is empty"
    return f"a folder with no images ({' '.join(IMAGE_SUFFIXES)}): {held}"


def listing(folder: Path) -> list[Path]:
    """:func:`image_files`, or a ConfigError naming the folder when it has none."""
    reason = no_images_reason(folder)
    if reason:
        raise ConfigError(
            f"{KEY}={folder} is {reason}", fix=f"put the sample images in {folder} (or point {KEY} at the folder that holds them)", details={"resolved": folder.resolve()}
        )
    return image_files(folder)


def _size(shape: Sequence[Any], axis: int, dims: Mapping[str, int]) -> int | None:
    """The size of ``axis``: fixed in the graph, else ``model.sample_dims`` by its name (or its typeable spelling)."""
    d = shape[axis]
    if isinstance(d, int) and not isinstance(d, bool):
        return d
    name = str(d)
    got = dims.get(name, dims.get(typeable(name)))
    return int(got) if got is not None else None


def _axis_key(shape: Sequence[Any], axis: int) -> str:
    return f"model.sample_dims.{typeable(str(shape[axis]))}"


def layout(specs: Sequence[InputSpec], dims: Mapping[str, int], folder: Path) -> Layout:
    """The layout of the model's single image input; a ConfigError saying why a folder cannot feed this model."""
    inputs = ", ".join(f"{s.name} {s.dtype} {list(s.shape)}" for s in specs) or "none"
    if len(specs) != 1 or len(specs[0].shape) != 4 or not np.issubdtype(np.dtype(str(specs[0].dtype)), np.floating):
        raise ConfigError(
            f"{KEY}={folder} is a folder of images, which feeds only a model with one rank-4 float input (an image batch)",
            fix="for other inputs give an .npz with one array per input name (numpy.savez(path, **{name: array})) "
            "or a sample-data hook (model.data._target_=pkg.fn returning [{input_name: array}, ...])",
            details={"model inputs": inputs},
        )
    spec = specs[0]
    shape = list(spec.shape)
    sizes = {axis: _size(shape, axis, dims) for axis in (1, 2, 3)}
    # The channel axis is the one of size 3 (RGB), else of size 1 (grayscale): axis 1 is NCHW, axis 3 NHWC.
    chosen = [a for a in (1, 3) if sizes[a] == 3] or [a for a in (1, 3) if sizes[a] == 1]
    if len(chosen) != 1:
        why = "both axis 1 and axis 3 could hold the channels" if chosen else "neither axis 1 nor axis 3 has size 3 (RGB) or 1 (grayscale)"
        raise ConfigError(
            f"cannot tell how to lay out images for input '{spec.name}' {shape}: {why}",
            fix=f"give the channel axis its size (e.g. ++{_axis_key(shape, 1)}=3 for NCHW, ++{_axis_key(shape, 3)}=3 for NHWC) "
            "if it is dynamic, or save the rows as an .npy of the input's shape",
            details={"sizes (axis 1, 2, 3)": [sizes[1], sizes[2], sizes[3]], "model.sample_dims": dict(dims)},
        )
    channel = chosen[0]
    hw = (2, 3) if channel == 1 else (1, 2)
    missing = [a for a in hw if sizes[a] is None]
    if missing:
        raise ConfigError(
            f"input '{spec.name}' {shape} has no fixed {' or '.join(('H', 'W')[hw.index(a)] for a in missing)}: images from a folder need a size to be resized to",
            fix="set " + " ".join(f"++{_axis_key(shape, a)}=224" for a in missing) + " (the size your model was trained at)",
        )
    batch = shape[0] if isinstance(shape[0], int) and not isinstance(shape[0], bool) else None
    return Layout(spec.name, np.dtype(str(spec.dtype)).name, channel == 3, int(sizes[channel] or 0), int(sizes[hw[0]] or 0), int(sizes[hw[1]] or 0), batch)


def _per_channel(values: Sequence[float] | None, default: float, channels: int, key: str) -> np.ndarray:
    """``values`` as a ``[channels]`` float32 array; one value stands for every channel."""
    if values is None:
        return np.full(channels, default, np.float32)
    v = np.asarray(list(values), np.float32)
    if v.size not in (1, channels):
        raise ConfigError(
            f"{key} has {v.size} values and the model's images have {channels} channel(s)",
            fix=f"give {key} one value per channel ({channels}), or one for all",
            details={key: list(values)},
        )
    return np.broadcast_to(v, (channels,)).astype(np.float32)


def decode(path: Path, lay: Layout) -> np.ndarray:
    """One image as a ``[C, H, W]`` float32 array in [0, 1]; a ConfigError naming the file when Pillow cannot read it."""
    from PIL import Image  # lazy: only a folder of images needs Pillow

    try:
        with Image.open(path) as im:
            im.load()  # decode now: a truncated file fails here, naming itself, not later inside numpy
            img = im.convert("RGB" if lay.channels == 3 else "L")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:  # Pillow's plugins raise all of these
        raise ConfigError(
            f"cannot decode {path} (in {KEY}) as an image",
            fix=f"replace or remove {path}: every {'/'.join(IMAGE_SUFFIXES)} file in the folder is read as a sample",
            details={"error": str(e).splitlines()[0] if str(e) else type(e).__name__},
        ) from None
    if img.size != (lay.width, lay.height):
        img = img.resize((lay.width, lay.height), Image.Resampling.BILINEAR)  # PIL size is (W, H)
    a = np.asarray(img, dtype=np.float32) / 255.0
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


def load_folder(folder: str | Path, specs: Sequence[InputSpec], dims: Mapping[str, int], mean: Sequence[float] | None = None, std: Sequence[float] | None = None) -> list[Feed]:
    """The folder's images as feeds for the model's single image input: one feed of N rows, or N / b feeds of the
    graph's fixed batch b. Raises ConfigError: no images, an undecodable file, a model that takes no image batch,
    an unknown H/W, mean/std that do not fit the channels, or a count that does not fill the fixed batch."""
    folder = Path(folder)
    files = listing(folder)
    lay = layout(specs, dims, folder)
    m = _per_channel(mean, 0.0, lay.channels, "model.data.mean")[:, None, None]
    s = _per_channel(std, 1.0, lay.channels, "model.data.std")[:, None, None]
    rows = np.stack([(decode(f, lay) - m) / s for f in files])  # [N, C, H, W]
    if lay.channels_last:
        rows = rows.transpose(0, 2, 3, 1)
    rows = np.ascontiguousarray(rows.astype(lay.dtype))
    if lay.batch is None:
        return [{lay.name: rows}]
    if len(rows) % lay.batch:
        raise ConfigError(
            f"{KEY}={folder} has {len(rows)} images and input '{lay.name}' takes fixed batches of {lay.batch}", fix=f"add or remove images to make a multiple of {lay.batch}"
        )
    return [{lay.name: rows[i : i + lay.batch]} for i in range(0, len(rows), lay.batch)]
