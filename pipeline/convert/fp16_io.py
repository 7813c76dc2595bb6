"""The FP16 graph's inputs and outputs keep exactly the types the precision promises.

``precision.keep_io_types: true`` promises the FP32 graph's I/O types; ``false`` promises FLOAT16 in place of every
FLOAT input and output (other types never change). onnxconverter-common breaks the first promise where the node next
to a graph output stays FP32 (a block-listed or fallback node, an ``If``): it appends ``Cast(to=FLOAT16)`` in front of
the output, so a client gets FP16 and the values the FP32 node protected (FP16-subnormal probabilities, a recurrent
state) are rounded away by that last Cast anyway. :func:`settle_io_types` moves the boundary instead: a graph output
is fed from the FP32 value itself (an ``Identity`` of the Cast's input) and internal consumers keep the FP16 copy;
where no such value exists a Cast to the promised type is appended. Inputs are settled the same way.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto

from pipeline.core.errors import PrecisionError

SUFFIX = "_fp16_io"


def promised_types(fp32: onnx.ModelProto, keep_io_types: bool) -> dict[str, int]:
    """{graph input or output name: the element type the FP16 graph must give it}."""
    inits = {i.name for i in fp32.graph.initializer}
    values = [v for v in fp32.graph.input if v.name not in inits] + list(fp32.graph.output)
    out: dict[str, int] = {}
    for v in values:
        t = v.type.tensor_type.elem_type
        out[v.name] = t if keep_io_types or t != TensorProto.FLOAT else TensorProto.FLOAT16
    return out


def _rename_uses(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Point every node input named ``old`` at ``new``, in ``graph`` and in its subgraphs (outer-scope reads)."""
    for n in graph.node:
        for i, name in enumerate(n.input):
            if name == old:
                n.input[i] = new
        for a in n.attribute:
            for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                _rename_uses(g, old, new)


def _consumed(graph: onnx.GraphProto, name: str) -> bool:
    """Whether any node of ``graph`` or of its subgraphs reads ``name``."""
    for n in graph.node:
        if name in n.input:
            return True
        for a in n.attribute:
            if any(_consumed(g, name) for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))):
                return True
    return False


def _value_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element types of the main graph's values, from shape inference (empty when inference rejects the graph)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except (onnx.shape_inference.InferenceError, ValueError):
        return {}
    infos = list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output)
    return {vi.name: vi.type.tensor_type.elem_type for vi in infos if vi.type.tensor_type.elem_type}


def _declared(values: list[onnx.ValueInfoProto], name: str) -> onnx.ValueInfoProto:
    return next(v for v in values if v.name == name)


def settle_io_types(model: onnx.ModelProto, promised: dict[str, int]) -> list[str]:
    """Make the converted ``model``'s inputs and outputs carry the ``promised`` types, in place; returns what changed.

    Raises PrecisionError when a graph output has no producer to retype (an output that is directly an input).
    """
    g = model.graph
    types = _value_types(model)
    producer = {o: n for n in g.node for o in n.output}
    changed: list[str] = []
    for out in g.output:
        want, got = promised.get(out.name), out.type.tensor_type.elem_type
        cast = producer.get(out.name)
        made = _cast_to(cast) if cast is not None and cast.op_type == "Cast" else got  # a Cast's `to` is what it makes
        if want is None or (got == want and made == want):
            continue
        if cast is None:
            raise PrecisionError(
                f"FP16 graph output '{out.name}' has no producing node, so its type cannot be restored",
                fix="set precision.keep_io_types to match the graph, or report the graph to us",
                details={"promised": TensorProto.DataType.Name(want), "declared": TensorProto.DataType.Name(got)},
            )
        inner = out.name + SUFFIX
        cast.output[list(cast.output).index(out.name)] = inner
        _rename_uses(g, out.name, inner)  # internal consumers keep the converter's value
        src = cast.input[0] if cast.op_type == "Cast" else None
        if src is not None and types.get(src) == want:
            # The value before the converter's Cast already has the promised type: serve it, not a rounded copy.
            g.node.append(onnx.helper.make_node("Identity", [src], [out.name], name=f"{out.name}{SUFFIX}_identity"))
            if not _consumed(g, inner):  # the converter's Cast fed only the output: nothing reads it now
                g.node.remove(cast)
        else:
            g.node.append(onnx.helper.make_node("Cast", [inner], [out.name], name=f"{out.name}{SUFFIX}_cast", to=want))
        out.type.tensor_type.elem_type = want
        changed.append(f"output {out.name}: {TensorProto.DataType.Name(got)} -> {TensorProto.DataType.Name(want)}")
    inits = {i.name for i in g.initializer}
    for inp in [v for v in g.input if v.name not in inits]:
        want, got = promised.get(inp.name), inp.type.tensor_type.elem_type
        if want is None or got == want:
            continue
        inner = inp.name + SUFFIX
        _rename_uses(g, inp.name, inner)
        # The converter's consumers read the type it declared; feed them that from the promised input type.
        g.node.insert(0, onnx.helper.make_node("Cast", [inp.name], [inner], name=f"{inp.name}{SUFFIX}_cast", to=got))
        _declared(list(g.input), inp.name).type.tensor_type.elem_type = want
        changed.append(f"input {inp.name}: {TensorProto.DataType.Name(got)} -> {TensorProto.DataType.Name(want)}")
    return changed


def settled(model: onnx.ModelProto) -> dict[str, str]:
    """{graph input or output: how settle_io_types fed it} ('identity': the FP32 value itself; 'cast': a Cast to the promised type)."""
    out = {}
    for n in model.graph.node:
        for how in ("identity", "cast"):
            if n.name.endswith(f"{SUFFIX}_{how}"):
                out[n.output[0] if n.output[0] in {o.name for o in model.graph.output} else n.input[0]] = how
    return out


def _cast_to(node: onnx.NodeProto) -> int | None:
    return next((a.i for a in node.attribute if a.name == "to"), None)
