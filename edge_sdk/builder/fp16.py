"""FP16 ONNX whose inputs and outputs stay FP32 (Cast nodes at the boundaries).

TensorRT 8.5 targets build FP16 from the FP32 ONNX with the FP16 flag; this variant serves
explicit-precision targets and the accuracy table (ONNX Runtime runs it).
"""
from __future__ import annotations

from typing import Any, Set

import numpy as np

from edge_sdk import _imports
from edge_sdk.errors import ModelError

FP16_MAX = float(np.finfo(np.float16).max)

# (op_type, input index) pairs that must stay float32 whatever the model's precision.
_FLOAT32_INPUTS = {("Resize", 1), ("Resize", 2), ("Upsample", 1)}


def _float32_only(model: Any) -> Set[str]:
    names: Set[str] = set()
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if (node.op_type, i) in _FLOAT32_INPUTS and name:
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
    graph inputs and outputs in float32 with Cast nodes at the boundaries."""
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
    nodes = casts_in + list(graph.node) + casts_out
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]
    try:
        onnx.checker.check_model(out)
        out = onnx.shape_inference.infer_shapes(out, strict_mode=True)
    except Exception as exc:  # onnx raises several exception types for invalid graphs
        raise ModelError(f"the FP16 conversion produced an invalid model ({exc}); build with --precision fp32") from exc
    return out
