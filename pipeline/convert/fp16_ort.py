"""FP16 graphs ONNX Runtime refuses to load: the nodes it names are kept FP32, and control flow is made consistent.

The converter (onnxconverter-common) handles a flat graph. Two things it gets wrong on real models:

- a node inside an ``If``/``Loop`` body reads an outer-scope initializer, which the converter turned FLOAT16,
  while the body still computes FLOAT (a voice detector's branch: ``MatMul(x, W)`` with ``x`` FLOAT). ONNX
  Runtime then refuses the graph ("Graph attribute inferencing failed ... bound to different types").
  :func:`cast_outer_inputs` puts a ``Cast(to=FLOAT)`` at the top of the body of every node kept FP32;
- ops whose types mix after conversion (a JAX export's ``Add`` of a FLOAT16 and a FLOAT value). ONNX
  Runtime's load error names the node; :func:`rejected_nodes` reads the names, the whole top-level node
  that holds them is kept FP32 (with its bodies), and the conversion is redone, a bounded number of times.
"""

from __future__ import annotations

import re

import onnx
from onnx import TensorProto, helper

_NAMED = (re.compile(r"[Nn]ode \(([^)]+)\)"), re.compile(r'In Node, \("([^"]+)"'))


def bodies(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The subgraphs a node carries (``If`` branches, a ``Loop``/``Scan`` body)."""
    out = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def owners(model: onnx.ModelProto) -> dict[str, str]:
    """{name of any node, nested ones included: the top-level node that holds it}."""
    out: dict[str, str] = {}

    def walk(graph: onnx.GraphProto, top: str) -> None:
        for n in graph.node:
            if n.name:
                out[n.name] = top
            for g in bodies(n):
                walk(g, top)

    for n in model.graph.node:
        out[n.name] = n.name
        for g in bodies(n):
            walk(g, n.name)
    return out


def rejected_nodes(error: str, model: onnx.ModelProto) -> list[str]:
    """The top-level nodes of ``model`` that ONNX Runtime's load ``error`` names (empty: it names none we know)."""
    top = owners(model)
    named = [m for rx in _NAMED for m in rx.findall(error)]
    return sorted({top[n] for n in named if n in top})


def nested_names(model: onnx.ModelProto, blocked: list[str]) -> list[str]:
    """Names of the nodes inside the bodies of ``blocked`` top-level nodes (they stay FP32 with their owner)."""
    keep = set(blocked)
    return sorted(n for n, owner in owners(model).items() if owner in keep and n not in keep)


def cast_outer_inputs(model: onnx.ModelProto, blocked: list[str]) -> list[str]:
    """Inside the bodies of every blocked node, read each outer FLOAT16 initializer through a ``Cast(to=FLOAT)``.

    Returns the initializers so cast. The body's own nodes stay FLOAT (they are blocked with their owner), so
    the value they read from outside must be FLOAT too.
    """
    fp16_inits = {i.name for i in model.graph.initializer if i.data_type == TensorProto.FLOAT16}
    done: set[str] = set()
    keep = set(blocked)
    for node in model.graph.node:
        if node.name not in keep:
            continue
        for g in bodies(node):
            local = {i.name for i in g.initializer} | {v.name for v in g.input} | {o for n in g.node for o in n.output}
            used = sorted({i for n in g.node for i in n.input if i in fp16_inits and i not in local})
            casts = []
            for name in used:
                new = f"{name}__fp32_in_{g.name or node.name}"
                casts.append(helper.make_node("Cast", [name], [new], to=TensorProto.FLOAT, name=f"{new}_cast"))
                for n in g.node:
                    n.input[:] = [new if i == name else i for i in n.input]
                done.add(name)
            if casts:  # the Casts first: a body's nodes run in order
                rest = list(g.node)
                del g.node[:]
                g.node.extend([*casts, *rest])
    return sorted(done)
