"""Layer precision pins: which TensorRT layers come from which ONNX node, and the precision
constraints (FP32 / FP16) put on the layers of the nodes a bundle keeps out of INT8."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set


def layer_nodes(layer_names: Iterable[str], node_names: Set[str]) -> Dict[str, str]:
    """TensorRT layer name -> ONNX node name, for layers that come from a known node.

    TensorRT's ONNX parser names a layer after its node and makes further layers of the same
    node unique with `_<counter>` (`conv1`, `conv1_7`). An exact node name wins, so a node
    `conv_1` is never mistaken for a second layer of node `conv`.
    """
    out: Dict[str, str] = {}
    for name in layer_names:
        if name in node_names:
            out[name] = name
            continue
        m = re.match(r"^(.+)_\d+$", name)
        if m and m.group(1) in node_names:
            out[name] = m.group(1)
    return out


PIN_PRECISIONS = ("fp32", "fp16")


@dataclass
class Pinning:
    """What `constrain_layers` did. `pinned`: TensorRT layer -> "fp32" | "fp16"; `skipped`:
    layer -> why it took no constraint; `missing`: pinned nodes with no layer of that name."""

    pinned: Dict[str, str] = field(default_factory=dict)
    skipped: Dict[str, str] = field(default_factory=dict)
    missing: List[str] = field(default_factory=list)


def unpinnable(trt: Any, layer: Any) -> Optional[str]:
    """Why `layer` must not get a precision constraint, or None.

    The same layers Polygraphy's precision debugging leaves alone (NVIDIA/TensorRT
    `tools/Polygraphy/polygraphy/tools/debug/subtool/precision.py`): CONSTANT and SHAPE layers,
    and layers with an output that is a shape tensor (not an execution tensor) or not a float
    or INT8 activation. Constraining them fails the build or changes nothing.
    """
    kinds = getattr(trt, "LayerType", None)
    ltype = getattr(layer, "type", None)
    for kind in ("CONSTANT", "SHAPE"):
        if kinds is not None and hasattr(kinds, kind) and ltype == getattr(kinds, kind):
            return f"a {kind.lower()} layer"
    activations = {trt.float32, trt.float16, getattr(trt, "int8", trt.float32)}
    for i in range(layer.num_outputs):
        out = layer.get_output(i)
        if out is None:
            continue
        if getattr(out, "is_shape_tensor", False) or not getattr(out, "is_execution_tensor", True):
            return f"output {out.name} is a shape tensor"
        if out.dtype not in activations:
            return f"output {out.name} is {getattr(out.dtype, 'name', out.dtype)}, not a float activation"
    return None


def constrain_layers(trt: Any, network: Any, pins: Mapping[str, str], known_nodes: Set[str]) -> Pinning:
    """Pin the layers of each node in `pins` ({ONNX node: "fp32" | "fp16"}) to that precision
    (layer precision and float output types), skipping layers that cannot take a constraint
    (`unpinnable`)."""
    layers = [network.get_layer(i) for i in range(network.num_layers)]
    mapping = layer_nodes([layer.name for layer in layers], set(known_nodes) | set(pins))
    dtypes = {"fp32": trt.float32, "fp16": trt.float16}
    float_types = {trt.float32, trt.float16}
    result = Pinning()
    seen: Set[str] = set()
    for layer in layers:
        node = mapping.get(layer.name)
        if node is None or node not in pins:
            continue
        seen.add(node)
        why = unpinnable(trt, layer)
        if why:
            result.skipped[layer.name] = why
            continue
        dtype = dtypes[pins[node]]
        layer.precision = dtype
        for i in range(layer.num_outputs):
            if layer.get_output(i).dtype in float_types:
                layer.set_output_type(i, dtype)
        result.pinned[layer.name] = pins[node]
    result.missing = sorted(set(pins) - seen)
    return result
