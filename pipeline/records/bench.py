"""bench.json as other stages read it: the schema version, the files the bench measured (with their sha256), the summary.

The bench writes the whole report (pipeline.bench.results.BenchResult: every measurement, typed there) and puts this
record's keys in it through :meth:`BenchRecord.to_json`; a release reads them back through :meth:`BenchRecord.from_json`
and embeds the summary only when the files measured are the files it ships. The rest of bench.json is the bench's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.core.errors import BenchError

SCHEMA = 3  # 2: headline estimates with intervals; rounds without a drift filter; 3: production readiness
Json = dict[str, Any]
_FIX = "rerun `dvc repro bench` to write a bench.json this pipeline reads"


@dataclass(frozen=True)
class MeasuredModel:
    """What was measured; a release embeds the summary only if its files have these sha256 digests."""

    name: str
    onnx: str
    version: str
    configs: dict[str, str]  # variant -> config file measured
    sha256: str | None = None  # of ``onnx``
    configs_sha256: dict[str, str] | None = None  # variant -> sha256 of its config file
    files_sha256: dict[str, str] | None = None  # variant -> sha256 of the ONNX file it served

    def to_json(self) -> Json:
        d: Json = {"name": self.name, "onnx": self.onnx, "version": self.version}
        d |= {"sha256": self.sha256} if self.sha256 is not None else {}
        d |= {"configs": self.configs}
        d |= {"configs_sha256": self.configs_sha256} if self.configs_sha256 is not None else {}
        return d | ({"files_sha256": self.files_sha256} if self.files_sha256 is not None else {})

    @classmethod
    def from_json(cls, d: Json) -> MeasuredModel:
        """Raises: BenchError naming the first key that is missing or of the wrong type."""
        for key in ("name", "onnx", "version"):
            _check(d, key, str, required=True, where="model.")
        _check(d, "sha256", str, where="model.")
        for key in ("configs", "configs_sha256", "files_sha256"):
            _check(d, key, dict, required=key == "configs", where="model.")
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in (d.get(key) or {}).items()):
                raise BenchError(f"bench.json's model.{key} must map variant names to strings", fix=_FIX)
        return cls(d["name"], d["onnx"], d["version"], d["configs"], d.get("sha256"), d.get("configs_sha256"), d.get("files_sha256"))


@dataclass(frozen=True)
class BenchRecord:
    """bench.json's header and headline: what other stages read of it."""

    model: MeasuredModel
    summary: Json | None = None  # the headline numbers (dvc metrics); absent when the run gave no ratios
    schema: int = SCHEMA

    def to_json(self) -> Json:
        return {"schema": self.schema, "model": self.model.to_json()} | ({"summary": self.summary} if self.summary is not None else {})

    @classmethod
    def from_json(cls, d: Any) -> BenchRecord:
        """The record of a bench.json's parsed JSON; the rest of it is left to the bench.

        Raises:
            BenchError: not a bench report (no model section, a key of the wrong type), or one written by a newer
                pipeline (its schema is above :data:`SCHEMA`).
        """
        if not isinstance(d, dict) or not isinstance(d.get("model"), dict):
            raise BenchError("bench.json does not say which model it measured (no model section)", fix=_FIX)
        _check(d, "schema", int, required=True)
        if d["schema"] > SCHEMA:
            raise BenchError(f"bench.json has schema {d['schema']}; this pipeline reads up to {SCHEMA}", fix="update the pipeline, or " + _FIX)
        _check(d, "summary", dict)
        return cls(MeasuredModel.from_json(d["model"]), d.get("summary"), d["schema"])


def _check(d: Json, key: str, kind: type, required: bool = False, where: str = "") -> None:
    """Raises: BenchError when ``d[key]`` is missing (and ``required``) or not a ``kind``; ``where``: its section."""
    if key not in d:
        if required:
            raise BenchError(f"bench.json has no {where}{key}", fix=_FIX)
        return
    if not isinstance(d[key], kind) or (kind is int and isinstance(d[key], bool)):
        raise BenchError(f"bench.json's {where}{key} is a {type(d[key]).__name__}, not a {kind.__name__}", fix=_FIX)
