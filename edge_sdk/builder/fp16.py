"""FP16 ONNX whose inputs and outputs stay FP32 (Cast nodes at the boundaries).

TensorRT 8.5 targets build FP16 from the FP32 ONNX with the FP16 flag; this variant serves
explicit-precision targets and the accuracy table (ONNX Runtime runs it).
"""
from __future__ import annotations

from typing import Any, Set

import numpy as np

from edge_sdk import _imports
from edge_sdk.builder.graph import name_allocator
from edge_sdk.errors import ModelError

FP16_MAX = float(np.finfo(np.float16).max)

# (op_type, input index) pairs that must stay float32 whatever the model's precision: the scales
# of Upsample and Resize (input 1 before opset 11; from 11 on input 2, input 1 being the roi) and
# NonMaxSuppression's boxes, scores and thresholds (float32 only at every opset).
_FLOAT32_INPUTS = {("Resize", 1), ("Resize", 2), ("Upsample", 1),
                   ("NonMaxSuppression", 0), ("NonMaxSuppression", 1), ("NonMaxSuppression", 3), ("NonMaxSuppression", 4)}


def _float32_only(model: Any) -> Set[str]:
    """The initializers and Constant outputs read where float32 is required: they stay float32."""
    constant = {init.name for init in model.graph.initializer}
    constant |= {node.output[0] for node in model.graph.node if node.op_type == "Constant" and node.output}
    names: Set[str] = set()
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if (node.op_type, i) in _FLOAT32_INPUTS and name in constant:
                names.add(name)
    return names


def _tensor_to_fp16(tensor: Any) -> Any:
    onnx = _imports.onnx()
    from onnx import numpy_helper

    arr = numpy_helper.to_array(tensor).astype(np.float32)
    half = np.clip(arr, -FP16_MAX, FP16_MAX).astype(np.float16)
    return numpy_helper.from_array(half, tensor.name) if tensor.name else onnx.numpy_helper.from_array(half)


def to_fp16(model: Any) -> Any:
    """Return an FP16 copy of `model`: float weights, constants and activations in float16,
    graph inputs and outputs in float32 with Cast nodes at the boundaries. Where an operator
    takes float32 only (a Resize's scales, NonMaxSuppression's boxes and scores), a constant
    stays float32 and an activation is cast back to float32 in front of it."""
    onnx = _imports.onnx()
    from onnx import TensorProto, helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    keep = _float32_only(out)
    fp32, fp16 = TensorProto.FLOAT, TensorProto.FLOAT16

    inits = []
    for init in graph.initializer:
        inits.append(_tensor_to_fp16(init) if init.data_type == fp32 and init.name not in keep else init)
    del graph.initializer[:]
    graph.initializer.extend(inits)

    for node in graph.node:
        if node.op_type == "Constant" and node.output[0] not in keep:
            for attr in node.attribute:
                if attr.name == "value" and attr.t.data_type == fp32:
                    attr.t.CopyFrom(_tensor_to_fp16(attr.t))
        if node.op_type == "Cast":
            for attr in node.attribute:
                if attr.name == "to" and attr.i == fp32:
                    attr.i = fp16
        if node.op_type in ("RandomNormal", "RandomUniform", "EyeLike", "ConstantOfShape"):
            raise ModelError(f"FP16 conversion does not handle {node.op_type} node {node.name!r}; build with --precision fp32")

    boundary_in = {}
    for inp in graph.input:
        if inp.type.tensor_type.elem_type == fp32:
            boundary_in[inp.name] = f"{inp.name}__fp16"
    boundary_out = {}
    for o in graph.output:
        if o.type.tensor_type.elem_type == fp32:
            boundary_out[o.name] = f"{o.name}__fp16"

    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in boundary_in:
                node.input[i] = boundary_in[name]
            elif name in boundary_out:  # an output also consumed inside the graph
                node.input[i] = boundary_out[name]
        for i, name in enumerate(node.output):
            if name in boundary_out:
                node.output[i] = boundary_out[name]

    casts_in = [helper.make_node("Cast", [name], [half], to=fp16, name=f"{name}__to_fp16") for name, half in boundary_in.items()]
    casts_out = [helper.make_node("Cast", [half], [name], to=fp32, name=f"{name}__to_fp32") for name, half in boundary_out.items()]
    taken = ({n.name for n in graph.node} | {o for n in graph.node for o in n.output} | {i.name for i in graph.initializer}
             | {i.name for i in graph.input} | {o.name for o in graph.output} | set(boundary_in.values())
             | set(boundary_out.values()) | {c.name for c in casts_in + casts_out})
    fresh = name_allocator(taken)
    body = []
    for node in graph.node:
        for i, name in enumerate(node.input):
            if (node.op_type, i) in _FLOAT32_INPUTS and name and name not in keep:  # an activation, float16 now
                wide = fresh(f"{name}__fp32")
                body.append(helper.make_node("Cast", [name], [wide], to=fp32, name=fresh(f"{node.name or node.op_type}_in{i}__to_fp32")))
                node.input[i] = wide
        body.append(node)
    nodes = casts_in + body + casts_out
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]
    try:
        onnx.checker.check_model(out)
        out = onnx.shape_inference.infer_shapes(out, strict_mode=True)
    except Exception as exc:  # onnx raises several exception types for invalid graphs
        raise ModelError(f"the FP16 conversion produced an invalid model ({exc}); build with --precision fp32") from exc
    return out


def layers_in_fp16(model: Any, nodes: Any) -> Any:
    """A copy of `model` in which the named nodes compute as a TensorRT FP16 layer does: their
    float inputs (activations and weights) and their outputs pass through float16.

    Each float activation input and each output of such a node gets a ``Cast(float16) →
    Cast(float)`` pair; its float weights (initializers) are rounded to float16 in place (a node's
    own copy when another node shares them). The arithmetic between stays float32, as TensorRT's
    FP16 convolutions accumulate. This is the model the INT8 accuracy gate runs when the layers
    kept out of INT8 run in FP16 on the device.
    """
    onnx = _imports.onnx()
    from onnx import TensorProto, helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    wanted = set(nodes)
    known = {n.name for n in graph.node}
    unknown = sorted(wanted - known)
    if unknown:
        raise ModelError(f"no node named {', '.join(unknown[:5])} in the model; use the names of its layers")
    inits = {i.name: i for i in graph.initializer}
    readers: dict = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    float_weights = {k for k, v in inits.items() if v.data_type == TensorProto.FLOAT}
    produced_by_dq = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear"}
    taken = {n.name for n in graph.node} | set(inits) | {o for n in graph.node for o in n.output} | {i.name for i in graph.input}

    fresh = name_allocator(taken)

    def round_trip(src: str, dst: str, tag: str) -> Any:
        half = fresh(f"{src}__fp16")
        return [helper.make_node("Cast", [src], [half], to=TensorProto.FLOAT16, name=fresh(f"{tag}__to_fp16")),
                helper.make_node("Cast", [half], [dst], to=TensorProto.FLOAT, name=fresh(f"{tag}__to_fp32"))]

    new_nodes = []
    for node in graph.node:
        if node.name not in wanted:
            new_nodes.append(node)
            continue
        for i, name in enumerate(node.input):
            if not name or name in produced_by_dq:
                continue
            if name in float_weights:
                arr = numpy_helper.to_array(inits[name]).astype(np.float32)
                half = np.clip(arr, -FP16_MAX, FP16_MAX).astype(np.float16).astype(np.float32)
                if readers.get(name, 0) > 1:
                    copy = fresh(f"{name}__{node.name}_fp16")
                    graph.initializer.append(numpy_helper.from_array(half, copy))
                    node.input[i] = copy
                else:
                    inits[name].CopyFrom(numpy_helper.from_array(half, name))
            elif name not in inits:
                rounded = fresh(f"{name}__{node.name}_in{i}")
                new_nodes.extend(round_trip(name, rounded, f"{node.name}_in{i}"))
                node.input[i] = rounded
        outputs = []
        for i, name in enumerate(node.output):
            if not name:
                continue
            raw = fresh(f"{name}__{node.name}_fp32")
            node.output[i] = raw
            outputs.extend(round_trip(raw, name, f"{node.name}_out{i}"))
        new_nodes.append(node)
        new_nodes.extend(outputs)
    del graph.node[:]
    graph.node.extend(new_nodes)
    del graph.value_info[:]
    try:
        onnx.checker.check_model(out)
    except Exception as exc:  # onnx raises several exception types for invalid graphs
        raise ModelError(f"simulating FP16 layers produced an invalid model ({exc}); report this with the model") from exc
    return out
