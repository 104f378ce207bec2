"""Explicit INT8 quantization: insert QuantizeLinear/DequantizeLinear pairs into an FP32 ONNX model.

The output is what TensorRT's explicit-quantization path wants (8.5 and >= 10) and what ONNX
Runtime runs as-is:

* activations: per-tensor symmetric int8, zero point 0, ``scale = amax / 127`` (float32), one
  Q→DQ pair per tensor in front of every quantized operator reading it (shared between them);
* weights: symmetric int8 with zero point 0, per output channel for Conv (axis 0) and Gemm
  (axis 0 with ``transB=1``, else 1); per tensor for ConvTranspose (TensorRT #2380: no
  per-channel ConvTranspose weights; its output-channel axis would be 1 anyway) and MatMul.
  ``weight_format="qdq"`` keeps the FP32 weight behind a Q→DQ pair (the form TensorRT 8.x
  parses); ``"dq"`` stores an int8 initializer behind a DequantizeLinear (a quarter of the
  size; TensorRT >= 10);
* biases stay FP32 (TensorRT 8.5 cannot take int32 biases);
* ``exclude_nodes`` stay entirely FP32: the mixed-precision fallback.

Quantized operators: Conv, ConvTranspose, Gemm, MatMul. Everything else (Relu, Add,
Sigmoid...) runs on whatever its inputs are; TensorRT fuses them around the quantized layers.
Quantized weights round half to even and clip to [-127, 127], as QuantizeLinear does.
Models below opset 13 (per-channel Q/DQ needs 13) are upgraded first and checked to give the
same outputs in ONNX Runtime.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple

import numpy as np

from edge_sdk import _imports
from edge_sdk.builder.calibration import load_model
from edge_sdk.builder.graph import name_allocator
from edge_sdk.errors import CalibrationError, ModelError

QUANTIZABLE = ("Conv", "ConvTranspose", "Gemm", "MatMul")
MIN_QDQ_OPSET = 13
WEIGHT_FORMATS = ("qdq", "dq")
INT8_MAX = 127


# --- naming ------------------------------------------------------------------------------


def name_nodes(model: Any) -> Any:
    """Give every unnamed (or duplicate-named) node a stable name, in place; returns the model.

    A generated name is ``<op_type>_<first output>``: it depends only on the graph, so naming
    the same model twice gives the same names, and names survive edits that keep tensor names.
    """
    taken: Set[str] = {n.name for n in model.graph.node if n.name}
    seen: Set[str] = set()
    for node in model.graph.node:
        if node.name and node.name not in seen:
            seen.add(node.name)
            continue
        base = f"{node.op_type}_{node.output[0] if node.output else 'node'}"
        name, k = base, 1
        while name in taken or name in seen:
            name = f"{base}_{k}"
            k += 1
        node.name = name
        taken.add(name)
        seen.add(name)
    return model


def quantizable_nodes(model: Any, op_types: Iterable[str] = QUANTIZABLE) -> List[str]:
    """Names of the nodes `quantize_qdq` would quantize, in graph order (names nodes first)."""
    model = _named_copy(load_model(model))
    ops = set(op_types)
    return [n.name for n in model.graph.node if n.op_type in ops]


def layer_precisions(model: Any, exclude_nodes: Iterable[str] = (), op_types: Iterable[str] = QUANTIZABLE,
                     kept_as: str = "fp32") -> Dict[str, str]:
    """``{node name: "int8" | kept_as}`` for every quantizable node (names as `name_nodes` gives);
    `kept_as` ("fp32" or "fp16") is the precision of the excluded nodes.

    For the manifest, and for TensorRT 8.5's implicit path, where the excluded entries become
    layer precision constraints. Other nodes take the precision of the layers TensorRT fuses them into.
    """
    excluded = set(exclude_nodes)
    return {name: (kept_as if name in excluded else "int8") for name in quantizable_nodes(model, op_types)}


# --- helpers -----------------------------------------------------------------------------


def _named_copy(model: Any) -> Any:
    onnx = _imports.onnx()
    clone = onnx.ModelProto()
    clone.CopyFrom(model)
    return name_nodes(clone)


def _opset(model: Any) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 0


def upgrade_for_qdq(model: Any, verify: bool = True) -> Any:
    """The model at opset >= 13; when converted and `verify`, ModelError unless ORT gives the same outputs."""
    if _opset(model) >= MIN_QDQ_OPSET:
        return model
    from edge_sdk.builder import graph

    return graph.upgrade_opset(model, MIN_QDQ_OPSET, verify=verify)


def symmetric_scale(amax: np.ndarray) -> np.ndarray:
    """float32 ``amax / 127``; zero (or negative) ranges get the scale of ``amax = 1``."""
    amax = np.asarray(amax, dtype=np.float64)
    amax = np.where(amax > 1e-30, amax, 1.0)
    return (amax / INT8_MAX).astype(np.float32)


def quantize_weight(weight: np.ndarray, axis: Optional[int]) -> Tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 of `weight`: per channel along `axis`, or per tensor when `axis` is None.

    Returns ``(int8 values, float32 scale)``; the scale has shape ``(C,)`` or ``()``.
    """
    w = np.asarray(weight, dtype=np.float32)
    if axis is None:
        scale = symmetric_scale(np.max(np.abs(w)) if w.size else 0.0)
        shaped = scale
    else:
        axis = axis % w.ndim
        others = tuple(d for d in range(w.ndim) if d != axis)
        scale = symmetric_scale(np.max(np.abs(w), axis=others) if w.size else np.zeros(w.shape[axis]))
        shape = [1] * w.ndim
        shape[axis] = -1
        shaped = scale.reshape(shape)
    q = np.clip(np.round(w.astype(np.float64) / shaped.astype(np.float64)), -INT8_MAX, INT8_MAX).astype(np.int8)
    return q, scale


def _weight_axis(node: Any, per_channel: bool) -> Optional[int]:
    if not per_channel:
        return None
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    return None  # ConvTranspose (TensorRT #2380) and MatMul: per tensor


def _inputs_to_quantize(node: Any, weights: Mapping[str, Any]) -> Tuple[List[int], List[int]]:
    """(activation input indices, weight input indices) of a quantizable node."""
    if node.op_type in ("Conv", "ConvTranspose"):
        act, wt = [0], [1] if len(node.input) > 1 else []
    else:  # Gemm, MatMul: A and B
        act, wt = [0], []
        if len(node.input) > 1:
            (wt if node.input[1] in weights else act).append(1)
    act = [i for i in act if node.input[i] not in weights]
    wt = [i for i in wt if node.input[i] in weights]
    return act, wt


def _amax_table(ranges: Any) -> Dict[str, float]:
    table = getattr(ranges, "ranges", ranges)
    return {str(k): float(v) for k, v in dict(table).items()}


# --- the pass ----------------------------------------------------------------------------


def quantize_qdq(
    model: Any,
    ranges: Any,
    exclude_nodes: Iterable[str] = (),
    per_channel: bool = True,
    weight_format: str = "qdq",
    op_types: Iterable[str] = QUANTIZABLE,
    check: bool = True,
) -> Any:
    """An explicit-INT8 copy of `model` (see the module docstring for what is quantized how).

    `model`: FP32 onnx.ModelProto or path. `ranges`: ``{tensor: amax}`` or a CalibrationResult;
    every activation input of a quantized node needs an entry (CalibrationError otherwise).
    `exclude_nodes`: node names (as :func:`name_nodes` gives them) kept in FP32. `check`: run
    ``onnx.checker.check_model(full_check=True)`` on the result. The input model is not changed.
    """
    onnx = _imports.onnx()
    numpy_helper = onnx.numpy_helper
    if weight_format not in WEIGHT_FORMATS:
        raise ModelError(f"weight_format must be one of {WEIGHT_FORMATS}, got {weight_format!r}")
    source = load_model(model)
    model = _named_copy(upgrade_for_qdq(source))
    amax = _amax_table(ranges)
    excluded = set(exclude_nodes)
    unknown = sorted(excluded - {n.name for n in model.graph.node})
    if unknown:
        raise ModelError(f"exclude_nodes names unknown nodes: {', '.join(unknown[:5])}; use names from quantizable_nodes(model)")
    ops = set(op_types)
    graph = model.graph
    graph_inputs = {i.name for i in graph.input}
    weights = {init.name: init for init in graph.initializer if init.name not in graph_inputs}

    new_inits: List[Any] = []
    act_out: Dict[str, str] = {}  # activation tensor -> its DequantizeLinear output
    wt_out: Dict[Tuple[str, Optional[int]], str] = {}  # (weight, axis) -> its DequantizeLinear output
    used_names = {n.name for n in graph.node} | {i.name for i in graph.initializer}
    nodes: List[Any] = []

    fresh = name_allocator(used_names)

    def zero_point(name: str, shape: Tuple[int, ...]) -> str:
        new_inits.append(numpy_helper.from_array(np.zeros(shape, dtype=np.int8), name))
        return name

    def quantize_activation(tensor: str, consumer: str) -> str:
        if tensor in act_out:
            return act_out[tensor]
        if tensor not in amax:
            raise CalibrationError(
                f"no calibration range for tensor {tensor!r} (input of {consumer}); "
                "calibrate with collect_ranges(model, ...) on the same model, or exclude the node"
            )
        scale = fresh(f"{tensor}_scale")
        new_inits.append(numpy_helper.from_array(symmetric_scale(amax[tensor]), scale))
        zp = zero_point(fresh(f"{tensor}_zero_point"), ())
        q_out, dq_out = fresh(f"{tensor}_quantized"), fresh(f"{tensor}_dequantized")
        nodes.append(onnx.helper.make_node("QuantizeLinear", [tensor, scale, zp], [q_out], name=fresh(f"{tensor}_QuantizeLinear")))
        nodes.append(onnx.helper.make_node("DequantizeLinear", [q_out, scale, zp], [dq_out], name=fresh(f"{tensor}_DequantizeLinear")))
        act_out[tensor] = dq_out
        return dq_out

    def quantize_weight_input(name: str, axis: Optional[int]) -> str:
        key = (name, axis)
        if key in wt_out:
            return wt_out[key]
        w = numpy_helper.to_array(weights[name])
        if w.dtype != np.float32:
            raise ModelError(f"weight {name!r} is {w.dtype}, expected float32; quantize the FP32 model")
        q, scale = quantize_weight(w, axis)
        attrs = {} if axis is None else {"axis": axis}
        scale_name = fresh(f"{name}_scale")
        new_inits.append(numpy_helper.from_array(scale, scale_name))
        zp = zero_point(fresh(f"{name}_zero_point"), scale.shape)
        dq_out = fresh(f"{name}_dequantized")
        if weight_format == "dq":
            q_name = fresh(f"{name}_int8")
            new_inits.append(numpy_helper.from_array(q, q_name))
        else:
            q_name = fresh(f"{name}_quantized")
            nodes.append(onnx.helper.make_node("QuantizeLinear", [name, scale_name, zp], [q_name], name=fresh(f"{name}_QuantizeLinear"), **attrs))
        nodes.append(onnx.helper.make_node("DequantizeLinear", [q_name, scale_name, zp], [dq_out], name=fresh(f"{name}_DequantizeLinear"), **attrs))
        wt_out[key] = dq_out
        return dq_out

    for node in graph.node:
        if node.op_type in ops and node.name not in excluded:
            act_idx, wt_idx = _inputs_to_quantize(node, weights)
            for i in act_idx:
                node.input[i] = quantize_activation(node.input[i], node.name)
            axis = _weight_axis(node, per_channel)
            for i in wt_idx:
                node.input[i] = quantize_weight_input(node.input[i], axis)
        nodes.append(node)

    still_used = {name for n in nodes for name in n.input}
    kept = [init for init in graph.initializer if init.name in still_used or init.name in graph_inputs]
    del graph.initializer[:]
    graph.initializer.extend(kept + new_inits)
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]
    if check:
        try:
            onnx.checker.check_model(model, full_check=True)
        except Exception as exc:  # checker raises ValidationError / InferenceError
            raise ModelError(f"the Q/DQ model fails ONNX validation ({exc}); report this with the model") from exc
    return model


def qdq_summary(model: Any) -> Dict[str, int]:
    """Counts of QuantizeLinear / DequantizeLinear nodes and quantized operators in a Q/DQ model."""
    counts = {"QuantizeLinear": 0, "DequantizeLinear": 0}
    dq_outputs = set()
    for node in model.graph.node:
        if node.op_type in counts:
            counts[node.op_type] += 1
        if node.op_type == "DequantizeLinear":
            dq_outputs.add(node.output[0])
    counts["quantized_ops"] = sum(1 for n in model.graph.node if n.op_type in QUANTIZABLE and any(i in dq_outputs for i in n.input))
    return counts
