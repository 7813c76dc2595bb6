"""Thin wrappers around onnx and ONNX Runtime that turn their failures into clear errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx

from pipeline.core.errors import OnnxModelError


def load_model(path: str | Path, what: str = "ONNX model", fix: str | None = None) -> onnx.ModelProto:
    """Load an ONNX file; raise :class:`OnnxModelError` if it is missing, truncated or not ONNX."""
    p = Path(path)
    if not p.is_file():
        raise OnnxModelError(
            f"{what} not found: {p}",
            fix=fix or "check the path (model.path for model=onnx) or run the stage that produces it",
            details={"path": p.resolve()},
        )
    try:
        model = onnx.load(str(p))
    except Exception as e:  # noqa: BLE001 - protobuf DecodeError, google.protobuf.message errors, OSError
        if "should be stored in" in str(e):  # onnx's message for an external-data file that is not there
            missing = str(e).split("should be stored in", 1)[1].split(",")[0].strip()
            raise OnnxModelError(
                f"{what} keeps its weights in an external data file that is not there: {missing}",
                fix=f"put the data file beside {p.name} under the name the graph records (ONNX files over 2 GB are shipped as "
                "model.onnx plus its data file; copy both, or save it again with onnx.save(..., save_as_external_data=True))",
                details={"path": p, "error": str(e).splitlines()[0]},
            ) from None
        raise OnnxModelError(
            f"{what} is not a readable ONNX file (truncated or corrupt): {p}",
            fix=fix or "re-export or re-download the file; `python -c \"import onnx; onnx.load('<file>')\"` reproduces it",
            details={"path": p, "size_bytes": p.stat().st_size, "error": f"{type(e).__name__}: {e}"},
        ) from None
    if len(model.graph.node) == 0 and len(model.graph.output) == 0:
        raise OnnxModelError(
            f"{what} has an empty graph (truncated or not an ONNX model): {p}",
            fix=fix or "check that the file is a complete ONNX model",
            details={"path": p, "size_bytes": p.stat().st_size},
        )
    return model


def external_data_files(path: str | Path) -> list[str]:
    """The external-data file names the tensors of the ONNX file at ``path`` point to (empty: all in the file)."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    model = onnx.load(str(path), load_external_data=False)
    names = {e.value for t in _get_all_tensors(model) if uses_external_data(t) for e in t.external_data if e.key == "location"}
    return sorted(names)


def check_model(path: str | Path, what: str = "ONNX model") -> None:
    """Run onnx.checker (full check, with shape inference) on a file path (works above 2 GB)."""
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as e:  # noqa: BLE001 - onnx.checker.ValidationError, InferenceError
        raise OnnxModelError(
            f"{what} fails onnx.checker: {path}",
            fix="fix the model or the export settings (export.opset); run onnx.checker.check_model to see the node",
            details={"error": str(e).splitlines()[0] if str(e) else type(e).__name__},
        ) from None


def session(path: str | Path, what: str = "ONNX model", intra_op_threads: int = 0, inter_op_threads: int = 0) -> Any:
    """Open an ONNX Runtime CPU session; raise :class:`OnnxModelError` with ORT's message if it cannot."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = intra_op_threads
    opts.inter_op_num_threads = inter_op_threads
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - ORT raises its own Fail/InvalidGraph/RuntimeException types
        raise OnnxModelError(
            f"ONNX Runtime cannot open the {what}: {path}",
            fix="the graph is invalid for ONNX Runtime: check the op types and the opset (a PyTorch model: export.opset; "
            "a converted artifact: the stage's own keys, e.g. precision.op_block_list for fp16)",
            details={"error": str(e).splitlines()[0]},
        ) from None


def run(sess: Any, feed: dict[str, np.ndarray], what: str = "ONNX model") -> dict[str, np.ndarray]:
    """Run one feed through a session; outputs by name."""
    names = [o.name for o in sess.get_outputs()]
    try:
        values = sess.run(names, feed)
    except Exception as e:  # noqa: BLE001 - ORT runtime errors (shape mismatch, index out of range)
        shapes = {k: (v.shape, str(v.dtype)) for k, v in feed.items()}
        raise OnnxModelError(
            f"ONNX Runtime failed to run the {what}",
            fix="check the sample inputs (model.inputs shapes/dtypes, model.data) against the graph inputs",
            details={"inputs": shapes, "error": str(e).splitlines()[0]},
        ) from None
    return dict(zip(names, values))


def nonfinite(outputs: dict[str, np.ndarray]) -> dict[str, dict[str, int]]:
    """Outputs that contain NaN or Inf, with counts."""
    bad: dict[str, dict[str, int]] = {}
    for name, v in outputs.items():
        if np.issubdtype(v.dtype, np.floating):
            n_nan, n_inf = int(np.isnan(v).sum()), int(np.isinf(v).sum())
            if n_nan or n_inf:
                bad[name] = {"nan": n_nan, "inf": n_inf}
    return bad


PROTOBUF_LIMIT = 2**31 - 1  # protobuf's hard limit on one serialized message: one ONNX file without external data


def save_model(model: onnx.ModelProto, path: Path) -> None:
    """Save a model to ``path`` as one file (a temporary path: callers rename it into place)."""
    # An artifact is one file: a DVC out, a checksum, a copy. A data file beside a temporary name would point at that
    # name after the rename, so a graph over the limit is refused here rather than written half-usable.
    size = model.ByteSize()
    if size >= PROTOBUF_LIMIT:
        raise OnnxModelError(
            f"the converted model is {size / 2**30:.2f} GiB, over protobuf's 2 GiB limit for one ONNX file: {path.name}",
            fix="models over 2 GiB are not carried through the stages yet; export a smaller model (FP16 weights halve it)",
            details={"bytes": size},
        )
    onnx.save_model(model, str(path))
