"""What the ONNX Runtime model serves, per variant: a precision, its file, and why (configured, or chosen by ``auto``).

Both variants normally serve one file, ``<version>/model.onnx``. When the choose stage found that the latency and the
throughput variant are each fastest with another precision, the default variant's file is ``model.onnx`` and the other
one's is ``model.<precision>.onnx``, named by that variant's ``default_model_filename``: Triton loads one file per
config, so each variant loads its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.core import atomic
from pipeline.core.atomic import file_digest
from pipeline.records.choice import read_choice
from pipeline.records.tune import TuneKnobs, read_tune
from pipeline.core.config import PipelineConfig
from pipeline.core.errors import RepositoryError

DEFAULT_FILE = "model.onnx"


@dataclass(frozen=True)
class Served:
    """One variant's ONNX: its precision, the artifact file, and why it is this one."""

    precision: str
    path: Path
    reason: str


def configured(cfg: PipelineConfig, onnx: Path) -> dict[str, Served]:
    """Both variants serve ``onnx`` at the serving target's configured precision (no choose record)."""
    why = f"configured: target_specs.{cfg.serving.target}.precision={cfg.serving.precision}"
    return {v: Served(str(cfg.serving.precision), onnx, why) for v in ("latency", "throughput")}


def from_choice(cfg: PipelineConfig, choice_path: Path, files: Mapping[str, Path | None]) -> dict[str, Served]:
    """Each variant's file as the choose stage decided (``files``: precision -> artifact path).

    Raises RepositoryError: the record is for another target or precision setting (stale), names a precision without
    a file, or was made on a different file than the one that would ship.
    """
    choice = read_choice(choice_path, RepositoryError)
    fix = "rerun the choice on these files: dvc repro choose repository"
    if (choice.target, choice.configured) != (cfg.serving.target, str(cfg.serving.precision)):
        raise RepositoryError(
            f"{choice_path} was made for target '{choice.target}' with precision {choice.configured}, the config "
            f"serves '{cfg.serving.target}' with precision {cfg.serving.precision}",
            fix=fix,
        )
    out: dict[str, Served] = {}
    for variant, c in choice.variants.items():
        path = files.get(c.precision)
        if path is None:
            raise RepositoryError(
                f"{choice_path} has variant '{variant}' serve {c.precision}, but no {c.precision} ONNX was given",
                fix=f"pass --{c.precision} artifacts/onnx/model.{c.precision}.onnx (dvc.yaml does)",
            )
        recorded = f.sha256 if (f := choice.files.get(c.precision)) else None
        if recorded != atomic.file_digest(path)[0]:
            raise RepositoryError(
                f"the choice for variant '{variant}' ({c.precision}) was made on another {path.name}", fix=fix, details={"choice": choice_path, "recorded sha256": recorded}
            )
        out[variant] = Served(c.precision, path, c.reason)
    return out


def file_names(served: Mapping[str, Served], default_variant: str) -> dict[str, str]:
    """The file name in the version directory per served precision: the default variant's is ``model.onnx``."""
    first = served[default_variant].precision
    return {s.precision: DEFAULT_FILE if s.precision == first else f"model.{s.precision}.onnx" for s in served.values()}


def tuned(cfg: PipelineConfig, tune_path: Path, onnx: Path | dict[str, Served]) -> tuple[PipelineConfig, str]:
    """``cfg`` with the throughput variant the tune stage chose, and a line that says which and why.

    Raises:
        RepositoryError: the record is not one, or it was found on another file than the throughput variant serves now
        (a stale tune must never ship: rerun it).
    """
    record = read_tune(tune_path, RepositoryError)
    path = Path(onnx["throughput"].path) if isinstance(onnx, dict) else Path(onnx)
    sha = file_digest(path)[0]
    if record.onnx_sha256 != sha:
        raise RepositoryError(
            f"{tune_path} was searched on another file than the throughput variant serves ({path})",
            fix="rerun the tune stage on this one: dvc repro tune",
            details={"tune searched sha256": record.onnx_sha256, "served sha256": sha},
        )
    now = TuneKnobs.of_variant(cfg.variants.throughput)
    if record.start != now:
        raise RepositoryError(
            f"{tune_path} started from another throughput variant than params.yaml configures",
            fix="rerun the tune stage with this config: dvc repro tune",
            details={"tune started from": record.start.label(), "configured": now.label()},
        )
    variant = record.winner.onto_variant(cfg.variants.throughput)
    note = f"throughput variant: {record.winner.label()} ({record.source}: {record.reason})"
    return dataclasses.replace(cfg, variants=dataclasses.replace(cfg.variants, throughput=variant)), note
