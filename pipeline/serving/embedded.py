"""Build the "embedded" serving repository: the shipped configs on a stand-in ORT backend.

The nvidia-pytriton server has no onnxruntime backend, so on CPU the bench serves the
shipped ONNX file through one of two stand-ins:

- ``native`` (default): ``pipeline_ort``, our C++ Triton backend running ONNX Runtime inside
  tritonserver (``native/pipeline_ort``, built by :mod:`pipeline.serving.native_backend`);
- ``python``: a python-backend model running ONNX Runtime in the stub process
  (:mod:`pipeline.serving.python_standin`), which also times itself.

Each shipped config (``configs/<variant>.pbtxt``) is parsed with the real schema and only
what the backend swap needs is changed; max_batch_size, dynamic_batching, instance_group,
inputs, outputs, parameters (ORT thread counts) and optimization (graph level) stay identical.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.atomic import write_text
from pipeline.core.config import EmbeddedBackend
from pipeline.core.errors import BenchError
from pipeline.repository import config as triton_config
from pipeline.repository.warmup import WARMUP_DIR
from pipeline.serving import native_backend
from pipeline.serving.install import site_packages

MODEL_PY = Path(__file__).with_name("python_standin.py")


# The stand-in reads its ONNX file from parameters.onnx_path. In a release store each version keeps
# its own model.onnx, which Triton localizes (from S3 too) before the stub starts, so this model.py
# subclasses the stand-in and points it at the model.onnx of the version being loaded.
VERSION_LOCAL_STANDIN = """\
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_standin import TritonPythonModel as _Ort


class TritonPythonModel(_Ort):
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        here = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        cfg.setdefault("parameters", {})["onnx_path"] = {"string_value": here}
        super().initialize(dict(args, model_config=json.dumps(cfg)))
"""
# What we change per stand-in, so reports can list it next to "identical scheduling config".
_COMMON_CHANGES = ("platform", "backend", "default_model_filename", "cc_model_filenames", "parameters.onnx_path")
CHANGED_FIELDS = {
    "native": (*_COMMON_CHANGES, "parameters.ort_library"),
    "python": (*_COMMON_CHANGES, "parameters.standin_flush_s"),
}
# The stand-in sums its timers and publishes them on /metrics at most this often (a metric update is IPC).
STANDIN_FLUSH_S = 0.5


@dataclass(frozen=True)
class ShippedModel:
    """One model directory of the shipped repository."""

    name: str
    model_dir: Path
    version: str
    onnx: Path  # the first variant's file (latency's when it exists)
    configs: dict[str, Path]  # variant name -> configs/<variant>.pbtxt
    files: dict[str, Path] = field(default_factory=dict)  # variant name -> the ONNX file its config loads

    def onnx_for(self, variant: str) -> Path:
        """The ONNX file ``variant`` serves: variants may serve different precisions (pipeline.repository.served)."""
        return self.files.get(variant, self.onnx)


def read_config(path: Path) -> mc.ModelConfig:
    """Parse a config.pbtxt with Triton's schema; a syntax error names the file."""
    return triton_config.parse(path, BenchError, "re-run the repository stage (dvc repro repository) so the config is rendered from the schema")


def write_config(path: Path, cfg: mc.ModelConfig, header: str = "") -> None:
    """Render ``cfg`` with protobuf text_format and write it atomically."""
    write_text(path, header + text_format.MessageToString(cfg))


def find_shipped(model_dir: str | os.PathLike[str]) -> ShippedModel:
    """Locate the variants and the newest version's ONNX file in a shipped model directory.

    Raises:
        BenchError: no configs/*.pbtxt, no numbered version, or no ONNX file in it.
    """
    d = Path(model_dir)
    configs = {p.stem: p for p in sorted((d / "configs").glob("*.pbtxt"))}
    if not configs:
        raise BenchError(
            f"no config variants in {d / 'configs'}",
            fix="run the repository stage first: it writes configs/latency.pbtxt and configs/throughput.pbtxt",
        )
    versions = sorted((p for p in d.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    if not versions:
        raise BenchError(f"no numbered version directory in {d}", fix="run the repository stage first")
    ver = versions[-1]
    # Each variant's config names its own file when the variants serve different precisions (default_model_filename).
    order = [v for v in ("latency", "throughput") if v in configs] + [v for v in configs if v not in ("latency", "throughput")]
    files: dict[str, Path] = {}
    name = ""
    for variant in order:
        cfg = read_config(configs[variant])
        name = name or cfg.name
        candidates = [ver / cfg.default_model_filename] if cfg.default_model_filename else []
        candidates += [ver / "model.onnx", *sorted(ver.glob("*.onnx"))]
        onnx = next((p for p in candidates if p.is_file()), None)
        if onnx is None:
            raise BenchError(
                f"no ONNX file for variant '{variant}' in {ver}",
                fix="the embedded server serves the ONNX Runtime model; point bench at an ONNX model directory",
                details={"looked for": ", ".join(map(str, candidates))},
            )
        files[variant] = onnx.resolve()
    return ShippedModel(name or d.name, d, ver.name, files[order[0]], configs, files)


def _standin_config(cfg: mc.ModelConfig, backend: str, note: str, onnx_path: Path) -> tuple[mc.ModelConfig, list[str]]:
    """Copy ``cfg`` onto ``backend``: the serving fields swapped, scheduling and ORT settings kept."""
    out = mc.ModelConfig()
    out.CopyFrom(cfg)
    notes = [f"backend '{cfg.backend or cfg.platform}' -> '{backend}' ({note})"]
    out.ClearField("platform")
    out.backend = backend
    out.ClearField("default_model_filename")
    out.ClearField("cc_model_filenames")
    for group in out.instance_group:
        if group.kind == mc.ModelInstanceGroup.KIND_GPU:
            # Only the CPU exists here; the count and thread settings are kept.
            group.kind = mc.ModelInstanceGroup.KIND_CPU
            group.ClearField("gpus")
            notes.append(f"instance_group '{group.name}': KIND_GPU -> KIND_CPU (no GPU on this machine)")
    out.parameters["onnx_path"].string_value = str(onnx_path)
    return out, notes


def to_python_backend(cfg: mc.ModelConfig, onnx_path: Path) -> tuple[mc.ModelConfig, list[str]]:
    """Copy ``cfg`` for the python backend; return it and notes on every change made."""
    out, notes = _standin_config(cfg, "python", "ONNX Runtime inside the python-backend stub", onnx_path)
    out.parameters["standin_flush_s"].string_value = str(STANDIN_FLUSH_S)
    return out, notes


def to_native_backend(cfg: mc.ModelConfig, onnx_path: Path, ort_library: Path) -> tuple[mc.ModelConfig, list[str]]:
    """Copy ``cfg`` for the native ``pipeline_ort`` backend; return it and notes on every change made."""
    out, notes = _standin_config(cfg, native_backend.BACKEND_NAME, "ONNX Runtime inside tritonserver, native/pipeline_ort", onnx_path)
    out.parameters["ort_library"].string_value = str(ort_library)
    return out, notes


def variant_model(name: str, variant: str) -> str:
    """The model name under which ``variant`` is served when all variants are loaded together."""
    return f"{name}__{variant}"


def build_embedded_repository(
    model_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], backend: EmbeddedBackend | str = EmbeddedBackend.native
) -> tuple[ShippedModel, dict[str, list[str]]]:
    """Write ``out_dir/<name>/`` serving the shipped ONNX file with every shipped variant.

    ``<name>/configs/<variant>.pbtxt`` serves one variant at a time (--model-config-name);
    ``<name>__<variant>/`` holds each variant as a model of its own, to load them side by side.
    ``backend`` is the stand-in: ``native`` (pipeline_ort) or ``python`` (``bench.embedded_backend``,
    whose values the config package checks when it composes the config).

    Returns the shipped model and, per variant, the list of changes made to its config.

    Raises:
        BenchError: the shipped model directory is incomplete. ToolError: the native backend cannot be built.
    """
    # Not a re-check: the config already holds a member; a plain string from a test or script converts
    # here, and a typo there is a programming error (ValueError), never a silent python stand-in.
    backend = EmbeddedBackend(backend)
    shipped = find_shipped(model_dir)
    lib = ort = None
    if backend is EmbeddedBackend.native:
        lib, ort = native_backend.build(), native_backend.ort_library()
    dest = Path(out_dir) / shipped.name
    if dest.exists():
        shutil.rmtree(dest)
    (dest / shipped.version).mkdir(parents=True)
    if (shipped.model_dir / WARMUP_DIR).is_dir():
        # model_warmup's input_data_file entries are read from <model>/warmup/: the stand-in warms up as shipped.
        shutil.copytree(shipped.model_dir / WARMUP_DIR, dest / WARMUP_DIR)
    if lib is not None:
        # Triton looks for <model>/libtriton_<backend>.so before its backend directory.
        shutil.copy2(lib, dest / lib.name)
    else:
        shutil.copy2(MODEL_PY, dest / shipped.version / "model.py")
        # The stub ignores PYTHONPATH: model.py reads our site-packages from this file.
        write_text(dest / shipped.version / "sys_path.json", json.dumps([str(p) for p in site_packages()]))
    what = "pipeline_ort (ONNX Runtime in tritonserver)" if lib else "python (ONNX Runtime in the stub)"
    header = (
        "# Embedded bench stand-in generated by pipeline.serving.embedded: the shipped config with\n"
        f"# backend {what} instead of onnxruntime; scheduling is unchanged.\n"
        "# optimization.graph.level follows Triton's ORT mapping: 1 = extended, -1 = basic, 2 = OFF.\n"
    )
    changes: dict[str, list[str]] = {}
    for variant, path in shipped.configs.items():
        base = read_config(path)
        onnx = shipped.onnx_for(variant)
        cfg, notes = to_native_backend(base, onnx, ort) if ort else to_python_backend(base, onnx)
        cfg.name = shipped.name
        write_config(dest / "configs" / f"{variant}.pbtxt", cfg, header)
        changes[variant] = notes
        # The same variant as a model of its own, so one server can hold every variant at once (paired rounds).
        twin = Path(out_dir) / variant_model(shipped.name, variant)
        if twin.exists():
            shutil.rmtree(twin)
        shutil.copytree(dest, twin, ignore=shutil.ignore_patterns("configs"))
        cfg.name = twin.name
        write_config(twin / "config.pbtxt", cfg, header)
    first = next(iter(shipped.configs))
    default = "latency" if "latency" in shipped.configs else first
    shutil.copy2(dest / "configs" / f"{default}.pbtxt", dest / "config.pbtxt")
    return shipped, changes
