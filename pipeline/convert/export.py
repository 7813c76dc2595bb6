"""export stage: PyTorch model (or an existing ONNX file) -> checked ONNX with named I/O and a dynamic batch axis."""

from __future__ import annotations

import re
import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core import model_outputs, onnx_tools
from pipeline.core import atomic
from pipeline.core.config import ExportConfig, ModelConfig
from pipeline.core.errors import ExportError, ModelSourceError, OnnxModelError, PipelineError
from pipeline.core.samples import DEFAULT_LEN, Feed, input_specs, load_samples, synthetic_feed
from pipeline.core.specs import graph_io, op_counts, typeable


def build_module(model: ModelConfig) -> Any:
    """Instantiate ``model.factory`` and load ``model.checkpoint`` safely; returns an eval-mode nn.Module."""
    import torch
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    if not model.factory or "_target_" not in model.factory:
        raise ModelSourceError(
            "model.source=factory needs model.factory._target_ (an importable function returning an nn.Module)",
            fix="set model.factory._target_=my_pkg.models.build, or use model=onnx model.path=<file>",
        )
    target = model.factory["_target_"]
    try:
        module = instantiate(model.factory)
    except InstantiationException as e:
        last = str(e).splitlines()[-1]
        bad_kw = re.search(r"unexpected keyword argument '([^']+)'", last)
        if bad_kw:  # the import worked: the config passes an argument the function does not take
            fix = f"remove it (`~model.factory.{bad_kw.group(1)}`) or add it to {target}'s signature"
        elif "required positional argument" in last or "missing" in last and "argument" in last:
            fix = f"set the missing argument under model.factory (model.factory.<name>=<value>) as {target} takes it"
        else:
            fix = "make sure the package is installed (pip install -e <your project>) and the name is importable"
        raise ModelSourceError(f"cannot build the model from model.factory._target_={target}", fix=fix, details={"error": last}) from None
    if not isinstance(module, torch.nn.Module):
        raise ModelSourceError(
            f"model.factory._target_={target} returned {type(module).__name__}, not a torch.nn.Module",
            fix="return the nn.Module from your factory",
        )
    if model.checkpoint:
        load_state(module, load_checkpoint(Path(model.checkpoint)), Path(model.checkpoint))
    return module.eval()


def load_state(module: Any, state: dict[str, Any], path: Path) -> None:
    """``module.load_state_dict(state)``, strictly; keys or shapes that do not fit are one message, a common prefix named.

    Raises:
        ModelSourceError: missing or unexpected keys (with the prefix that would make them match, and how to drop
        or add it), or a tensor whose shape differs from the module's.
    """
    want, got = set(module.state_dict()), set(state)
    if want != got:
        missing, unexpected = sorted(want - got), sorted(got - want)
        details: dict[str, object] = {"checkpoint": path, "missing": _few(missing), "unexpected": _few(unexpected)}
        prefix = _prefix(got, want)
        if prefix is not None:
            extra, where = prefix
            fix = (
                f"every checkpoint key starts with '{extra}', which the module's keys do not: save it without the prefix, "
                f"torch.save({{k.removeprefix('{extra}'): v for k, v in sd.items()}}, '{path.name}'), or return the wrapped module from the factory"
                if where == "checkpoint"
                else f"every module key starts with '{extra}', which the checkpoint's keys do not: save it with the prefix, "
                f"torch.save({{'{extra}' + k: v for k, v in sd.items()}}, '{path.name}'), or return the inner module from the factory"
            )
        else:
            fix = "point model.checkpoint at the state_dict of this model, or model.factory at the model it was saved from"
        raise ModelSourceError(f"checkpoint {path.name} does not fit the model: {len(missing)} missing and {len(unexpected)} unexpected keys", fix=fix, details=details)
    try:
        module.load_state_dict(state)
    except RuntimeError as e:  # shapes: "size mismatch for fc.weight: copying a param with shape ..."
        lines = [ln.strip() for ln in str(e).splitlines() if "size mismatch" in ln]
        raise ModelSourceError(
            f"checkpoint {path.name} does not fit the model: {len(lines) or 'some'} tensor shape(s) differ",
            fix="point model.checkpoint at a checkpoint of this architecture, or set model.factory's arguments to the ones it was trained with",
            details={"checkpoint": path, "shapes": _few(lines) if lines else str(e).splitlines()[0]},
        ) from None


def _few(items: list[str], n: int = 5) -> str:
    return (", ".join(items[:n]) + (f", ... ({len(items) - n} more)" if len(items) > n else "")) if items else "(none)"


def _prefix(got: set[str], want: set[str]) -> tuple[str, str] | None:
    """A dotted prefix on every key of one side that, dropped, makes both sides equal: (prefix, "checkpoint" | "module")."""
    for keys, other, side in ((got, want, "checkpoint"), (want, got, "module")):
        first = {k.split(".", 1)[0] for k in keys}
        if len(first) == 1 and all("." in k for k in keys):
            p = next(iter(first)) + "."
            if {k.removeprefix(p) for k in keys} == other:
                return p, side
    return None


def load_checkpoint(path: Path) -> dict[str, Any]:
    """A state_dict from .safetensors, or from .pt/.pth with ``torch.load(weights_only=True)`` (no arbitrary unpickling)."""
    import torch

    if not path.is_file():
        raise ModelSourceError(f"checkpoint not found: {path}", fix="fix model.checkpoint", details={"path": path.resolve()})
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except Exception as e:  # noqa: BLE001 - safetensors raises SafetensorError / OSError
            raise ModelSourceError(f"cannot read safetensors checkpoint {path}", details={"error": e}) from None
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickle.UnpicklingError for unsafe globals, RuntimeError for corrupt zips
        unsafe = "weights_only" in str(e) or "Unsupported global" in str(e)
        raise ModelSourceError(
            f"refused to load checkpoint {path}: " + ("it needs unpickling of arbitrary Python objects" if unsafe else "it is not a readable torch file"),
            fix="save only the weights: torch.save(model.state_dict(), path) or safetensors.torch.save_file(...)"
            if unsafe
            else "check the file; model.checkpoint must be a state_dict (.pt/.pth) or a .safetensors file",
            details={"error": str(e).strip().splitlines()[0]},
        ) from None
    if not isinstance(state, dict):
        raise ModelSourceError(f"checkpoint {path} holds a {type(state).__name__}, not a state_dict", fix="save model.state_dict()")
    return state


def check_input_names(configured: list[str], graph: list[str], origin: str) -> None:
    """Refuse a config whose input names differ from the graph's."""
    if configured and sorted(configured) != sorted(graph):
        raise ModelSourceError(
            f"input names in the config do not match the {origin}",
            fix="set model.inputs[*].name to the graph's input names (or remove model.inputs to read them from the graph)",
            details={"config": configured, "graph": graph},
        )


def export_torch(model: ModelConfig, export: ExportConfig, out: Path) -> dict[str, Any]:
    """torch.onnx.export to ``out`` (a temporary path), then check it and compare one sample with torch (and one of
    another batch size, to prove the batch axis dynamic). Raises ModelSourceError, ExportError or OnnxModelError."""
    module = build_module(model)
    if not model.inputs or not model.outputs:
        raise ModelSourceError("a factory model needs model.inputs and model.outputs in its config", fix="list them in conf/model/<name>.yaml")
    samples = load_samples(model, batch=export.sample_batch)
    # Trace with the configured batch; check a second batch size to prove the batch axis is dynamic.
    feed = next((f for f in samples if next(iter(f.values())).shape[0] == export.sample_batch), samples[0])
    checks = [feed] + [f for f in samples if next(iter(f.values())).shape[0] != next(iter(feed.values())).shape[0]][:1]
    check_input_names([s.name for s in model.inputs], list(feed), "sample-data hook output (model.data)")
    traced = _run_torch(module, model, feed)  # before the exporter, whose own count error names neither the outputs nor the fix
    _torch_export(module, model, export, feed, out)
    diffs = _compare_with_torch(out, model, export, checks, lambda sample: traced if sample is feed else _run_torch(module, model, sample))
    return {
        "source": "factory",
        "factory": model.factory.get("_target_") if model.factory else None,
        "sanity_max_abs_diff": diffs,
        "sanity_batches": [int(next(iter(f.values())).shape[0]) for f in checks],
    }


def _run_torch(module: Any, model: ModelConfig, sample: Feed) -> list[Any]:
    """The module's outputs on ``sample``, one per model.outputs name (else one ModelSourceError naming its fields)."""
    import torch

    with torch.no_grad():
        returned, fields = model_outputs.flatten(module(*(torch.from_numpy(sample[s.name]) for s in model.inputs)))
    if len(returned) != len(model.outputs):
        what, fix = model_outputs.count_problem(fields, len(returned), list(model.outputs))
        raise ModelSourceError(what, fix=fix, details={"model.outputs": model.outputs})
    return returned


def _torch_export(module: Any, model: ModelConfig, export: ExportConfig, feed: Feed, out: Path) -> None:
    """torch.onnx.export traced on ``feed``, every named axis dynamic (and the outputs' batch axis); raises ExportError."""
    import torch

    names = [s.name for s in model.inputs]
    dynamic = {s.name: {i: (d if i else export.batch_axis) for i, d in enumerate(s.shape) if isinstance(d, str)} for s in model.inputs}
    for o in model.outputs:
        dynamic[o] = {0: export.batch_axis}
    with torch.no_grad(), warnings.catch_warnings():
        # The TorchScript exporter warns about its own deprecation and about traced Python branches.
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
        try:
            torch.onnx.export(
                module,
                tuple(torch.from_numpy(feed[n]) for n in names),
                str(out),
                input_names=names,
                output_names=list(model.outputs),
                dynamic_axes=dynamic,
                opset_version=export.opset,
                do_constant_folding=export.do_constant_folding,
                dynamo=export.dynamo,
            )
        except Exception as e:  # noqa: BLE001 - the exporter raises many types (TorchExportError, RuntimeError, OnnxExporterError)
            raise ExportError(
                f"torch.onnx.export failed for {model.factory.get('_target_') if model.factory else model.name}",
                fix="try another export.opset, or export.dynamo=true (needs onnxscript)",
                details={"opset": export.opset, "error": str(e).strip().splitlines()[0]},
            ) from None


def _compare_with_torch(out: Path, model: ModelConfig, export: ExportConfig, checks: list[Feed], expected: Callable[[Feed], list[Any]]) -> dict[str, float]:
    """Check the exported file and run it on each of ``checks`` against torch's outputs (``expected``); returns the
    largest absolute difference per output. Raises ExportError beyond export.check_atol/check_rtol."""
    onnx_tools.check_model(out, "exported model")
    sess = onnx_tools.session(out, "exported model")
    diffs: dict[str, float] = {}
    for sample in checks:
        got = onnx_tools.run(sess, sample, "exported model")
        for name, ref in zip(model.outputs, expected(sample)):
            r = ref.detach().numpy()
            diff = float(np.max(np.abs(got[name] - r))) if r.size else 0.0
            diffs[name] = max(diffs.get(name, 0.0), diff)
            if not np.allclose(got[name], r, atol=export.check_atol, rtol=export.check_rtol):
                raise ExportError(
                    f"exported ONNX output '{name}' differs from torch on a sanity sample (batch {r.shape[0] if r.ndim else '-'})",
                    fix="raise export.check_atol/check_rtol only if the difference is expected; else check the export (export.opset)",
                    details={"max_abs_diff": diff, "atol": export.check_atol, "rtol": export.check_rtol},
                )
    return diffs


def copy_onnx(model: ModelConfig, out: Path) -> dict[str, Any]:
    """model=onnx: check the given file thoroughly, then copy it to ``out`` (a temporary path)."""
    if not model.path:
        raise ModelSourceError("model.source=onnx needs model.path", fix="pass model.path=<file.onnx>")
    src = Path(model.path)
    try:  # sizes first: a model over the limit must not be loaded whole; an unreadable file gets load_model's message
        external = onnx_tools.external_data_files(src) if src.is_file() else []
    except Exception:  # noqa: BLE001 - protobuf DecodeError and kin, reported by load_model below
        external = []
    total = src.stat().st_size + sum((src.parent / f).stat().st_size for f in external if (src.parent / f).is_file()) if external else 0
    if total >= onnx_tools.PROTOBUF_LIMIT:
        raise ModelSourceError(
            f"model.path={src} is {total / 2**30:.2f} GiB with its external data ({', '.join(external)}), over protobuf's 2 GiB "
            "limit for one ONNX file; the pipeline carries a model with external data by inlining it, which only fits below that",
            fix="export a smaller model (an FP16 export halves the weights) or build this repository by hand; models over 2 GiB are not carried through the stages yet",
            details={"external data": ", ".join(str(src.parent / f) for f in external), "bytes": total},
        )
    # Below the limit the weights are inlined: every later artifact is one file, checksummed and copied as one.
    proto = onnx_tools.load_model(src, "model.path", fix="set model.path to an existing, complete .onnx file")
    inputs, _ = graph_io(proto)
    check_input_names([s.name for s in model.inputs], [i.name for i in inputs], f"graph in {src}")
    onnx_tools.check_model(src, f"model.path={src}")
    sess = onnx_tools.session(src, f"model.path={src}")
    specs = input_specs(model, inputs)
    try:
        outputs = onnx_tools.run(sess, load_samples(model, specs, count=1)[0], f"model.path={src}")
    except OnnxModelError as e:
        raise sample_dims_hint(e, model, specs, sess) from None
    if bad := onnx_tools.nonfinite(outputs):
        raise OnnxModelError(f"model.path={src} produces NaN/Inf on a sample", details={"outputs": bad})
    if external:
        onnx_tools.save_model(proto, out)  # load_model read the data in: one self-contained file
        return {"source": "onnx", "path": str(src), "external_data": {"files": external, "bytes": total, "inlined": True}}
    shutil.copyfile(src, out)
    return {"source": "onnx", "path": str(src)}


SIZE_LADDER = (32, 64, 128, 224, 256, 320, 512, 640)  # sizes models commonly need (strides of 32, ImageNet, detectors)


def sample_dims_hint(error: OnnxModelError, model: ModelConfig, specs: list[Any], sess: Any) -> PipelineError:
    """Why synthetic samples failed, and the ``model.sample_dims`` that fixes it, found by trying :data:`SIZE_LADDER`.

    Returns ``error`` itself when the samples are real (model.data) or no dynamic axis was guessed.
    """
    if model.data is not None:
        return error
    guessed = sorted({str(d) for s in specs for i, d in enumerate(s.shape) if i > 0 and isinstance(d, str)} - set(model.sample_dims) - {typeable(k) for k in model.sample_dims})
    if not guessed:
        return error

    def keys(size: object) -> str:
        return " ".join(f"++model.sample_dims.{typeable(a)}={size}" for a in guessed)

    for size in SIZE_LADDER:
        dims = {**model.sample_dims, **dict.fromkeys(guessed, size)}
        try:
            onnx_tools.run(sess, synthetic_feed(specs, 2, model.seed, dims=dims), "model")
        except OnnxModelError:
            continue
        return ModelSourceError(
            f"ONNX Runtime cannot run model.path on synthetic inputs whose dynamic axes {guessed} are {DEFAULT_LEN}; it runs with {size}",
            fix=f"set {keys(size)} (the size synthetic samples give those axes), or model.data to real samples",
            details={"error at the default size": error.details.get("error", error.what)},
        )
    return ModelSourceError(
        f"ONNX Runtime cannot run model.path on synthetic inputs: its dynamic axes {guessed} fit none of {[DEFAULT_LEN, *SIZE_LADDER]}",
        fix=f"set {keys('<size>')} to sizes the model takes, or model.data to real samples",
        details={"error at the default size": error.details.get("error", error.what)},
    )


def run_export(model: ModelConfig, export: ExportConfig, out: Path) -> dict[str, Any]:
    """Produce ``out`` atomically and return the export report."""
    t0 = time.perf_counter()
    with atomic.atomic_path(out) as tmp:
        info = copy_onnx(model, tmp) if model.source == "onnx" else export_torch(model, export, tmp)
        proto = onnx_tools.load_model(tmp, "exported model")
    inputs, outputs = graph_io(proto)
    return {
        **info,
        "opset": max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=None),
        "nodes": len(proto.graph.node),
        "ops": op_counts(proto),
        "inputs": [{"name": i.name, "dtype": i.dtype, "dims": list(i.dims)} for i in inputs],
        "outputs": [{"name": o.name, "dtype": o.dtype, "dims": list(o.dims)} for o in outputs],
        "size_bytes": out.stat().st_size,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The export numbers worth comparing across runs (dvc metrics)."""
    keep = ("nodes", "opset", "size_bytes", "sanity_max_abs_diff")
    return {k: report[k] for k in keep if k in report}
