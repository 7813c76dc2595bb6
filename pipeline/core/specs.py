"""Tensor specs read from ONNX graphs, and dtype names across ONNX, numpy and Triton."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

# Triton's data_type enum names by numpy dtype name (model_config.proto DataType).
_TRITON_BY_NUMPY = {
    "bool": "TYPE_BOOL",
    "uint8": "TYPE_UINT8",
    "uint16": "TYPE_UINT16",
    "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64",
    "int8": "TYPE_INT8",
    "int16": "TYPE_INT16",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "float16": "TYPE_FP16",
    "float32": "TYPE_FP32",
    "float64": "TYPE_FP64",
    "object": "TYPE_STRING",
}


@dataclass(frozen=True)
class IOSpec:
    """One graph input or output: name, numpy dtype name, dims (int, or str/None when dynamic)."""

    name: str
    dtype: str
    dims: tuple[int | str | None, ...] = field(default_factory=tuple)
    # An integer input that indexes a table (a Gather on an initializer: token ids, token types): the table's size,
    # so synthetic samples stay inside it (None: not known from the graph).
    index_range: int | None = None

    @property
    def dynamic_axes(self) -> dict[int, str]:
        """Axis index -> symbolic name for every non-fixed dim."""
        return {i: (d if isinstance(d, str) else f"dim{i}") for i, d in enumerate(self.dims) if not isinstance(d, int)}

    def triton_dtype(self) -> str:
        """Triton DataType enum name, e.g. TYPE_FP32."""
        return triton_dtype(self.dtype)


def triton_dtype(numpy_name: str) -> str:
    """Map a numpy dtype name to Triton's DataType name."""
    try:
        return _TRITON_BY_NUMPY[np.dtype(numpy_name).name]
    except KeyError:
        raise ValueError(f"no Triton data type for numpy dtype {numpy_name}") from None


def _value_info_spec(vi: onnx.ValueInfoProto) -> IOSpec:
    tt = vi.type.tensor_type
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return IOSpec(vi.name, dtype, tuple(dims))


def graph_io(model: onnx.ModelProto) -> tuple[list[IOSpec], list[IOSpec]]:
    """Real inputs (initializers excluded) and outputs of a graph; an integer input's ``index_range`` when it has one."""
    inits = {i.name for i in model.graph.initializer}
    inputs = [_value_info_spec(v) for v in model.graph.input if v.name not in inits]
    outputs = [_value_info_spec(v) for v in model.graph.output]
    ranges = index_ranges(model, [i.name for i in inputs if np.issubdtype(np.dtype(i.dtype), np.integer)])
    return [IOSpec(i.name, i.dtype, i.dims, ranges.get(i.name)) for i in inputs], outputs


_PASS_THROUGH = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Expand"}  # keep the values, change the layout


def index_ranges(model: onnx.ModelProto, names: list[str]) -> dict[str, int]:
    """{input: rows of the table it indexes}, for inputs that reach a ``Gather`` on an initializer (the indices, input 1)
    through layout-only ops; the smallest table when it reaches several."""
    tables = {i.name: list(i.dims) for i in model.graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for x in n.input:
            consumers.setdefault(x, []).append(n)
    out: dict[str, int] = {}
    for name in names:
        seen, todo, sizes = {name}, [name], []
        while todo:
            value = todo.pop()
            for n in consumers.get(value, []):
                if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == value and n.input[0] in tables:
                    axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
                    dims = tables[n.input[0]]
                    if dims and -len(dims) <= axis < len(dims):
                        sizes.append(int(dims[axis]))
                elif n.op_type in _PASS_THROUGH and n.input and n.input[0] == value:
                    todo += [o for o in n.output if o not in seen]
                    seen.update(n.output)
        if sizes:
            out[name] = min(sizes)
    return out


def op_counts(model: onnx.ModelProto) -> dict[str, int]:
    """Number of nodes per op type in the main graph, most frequent first."""
    counts: dict[str, int] = {}
    for n in model.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def typeable(axis: str) -> str:
    """An axis name as a Hydra key can spell it: every character other than letters, digits and ``_`` becomes ``_``.

    ``profile.dims`` and ``model.sample_dims`` match an axis by its own name or by this spelling (``p2o.DynamicDimension.0`` ->
    ``p2o_DynamicDimension_0``), since a dotted key is a path to Hydra.
    """
    return re.sub(r"\W", "_", axis)
