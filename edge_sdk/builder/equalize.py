"""Cross-layer equalization (Nagel et al., "Data-Free Quantization Through Weight Equalization and
Bias Correction", ICCV 2019): an exact re-parametrization of the FP32 graph that makes per-channel
weight ranges of consecutive convolutions alike, so INT8 loses less on both.

For a pair ``Conv A → f → Conv B`` where ``f`` is positively homogeneous (``f(x / s) = f(x) / s``
for ``s > 0``: Relu, LeakyRelu, PRelu with one slope, or nothing), output channel ``c`` of A
(its weights and bias) is divided by ``s_c`` and the weights B applies to input channel ``c``
are multiplied by ``s_c``; B's output is unchanged. With ``r1_c`` the largest ``|w|`` of A's
channel and ``r2_c`` that of B's input channel, ``s_c = sqrt(r1_c / r2_c)`` gives both the range
``sqrt(r1_c · r2_c)``. A depthwise B (one input channel per group) is scaled on its output-channel
axis; in a chain ``expand → depthwise → project`` both pairs are equalized, and the sweep over
all pairs is repeated until the scales settle.

Not equalized (skipped, and counted in the report):

* clipped activations (Clip with a finite max, e.g. ReLU6): ``min(x / s, 6) != min(x, 6) / s``,
  so scaling through the clip is not exact. The paper replaces ReLU6 by ReLU before equalizing,
  which changes the network; here such pairs are left as they are;
* tensors with another consumer (a residual Add, a second branch) or that are graph outputs:
  the other reader would see the scaled tensor;
* weights shared between nodes, ConvTranspose, grouped convolutions other than depthwise.

BatchNormalization directly after a Conv (and its only reader) is folded into the Conv first.
A model with no such pair is returned unchanged, with a report that says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from edge_sdk import _imports

# Activations f with f(x / s) = f(x) / s for every s > 0.
HOMOGENEOUS = ("Relu", "LeakyRelu", "PRelu")
MAX_SWEEPS = 20
SETTLED = 1e-3  # a sweep whose scales all lie within 1 ± this ends the iteration


@dataclass
class EqualizeReport:
    """What :func:`equalize` did: pairs equalized, pairs it had to leave, BN layers folded."""

    pairs: List[Tuple[str, str]] = field(default_factory=list)
    skipped: Dict[str, str] = field(default_factory=dict)  # "A → B" → why it was left
    folded_bn: int = 0
    sweeps: int = 0

    @property
    def applied(self) -> bool:
        return bool(self.pairs)

    def describe(self) -> str:
        if not self.pairs:
            return "cross-layer equalization: no Conv → (Relu) → Conv pair to equalize; skipped"
        clipped = sum(1 for why in self.skipped.values() if why.startswith("clipped"))
        extra = f", {clipped} pair(s) behind a clipped activation left as they are" if clipped else ""
        return (f"cross-layer equalization: {len(self.pairs)} conv pairs in {self.sweeps} sweeps"
                f"{extra}" + (f", {self.folded_bn} BatchNormalization folded" if self.folded_bn else ""))

    def to_dict(self) -> Dict[str, Any]:
        return {"applied": self.applied, "pairs": len(self.pairs), "sweeps": self.sweeps, "folded_bn": self.folded_bn,
                "skipped": dict(self.skipped)}


def equalize(model: Any, max_sweeps: int = MAX_SWEEPS) -> Tuple[Any, EqualizeReport]:
    """An equalized copy of `model` and the report. The copy computes the same function (up to
    float32 rounding); `model` itself is not changed."""
    onnx = _imports.onnx()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    report = EqualizeReport()
    graph = out.graph
    weights = {init.name: init for init in graph.initializer}
    report.folded_bn = _fold_batchnorm(graph, weights)
    pairs = _find_pairs(graph, weights, report)
    if not pairs:
        return out, report
    arrays = {name: onnx.numpy_helper.to_array(weights[name]).astype(np.float32) for pair in pairs for name in _names(pair)}
    for sweep in range(max_sweeps):
        worst = 0.0
        for pair in pairs:
            worst = max(worst, _equalize_pair(pair, arrays))
        report.sweeps = sweep + 1
        if worst < SETTLED:
            break
    for name, arr in arrays.items():
        weights[name].CopyFrom(onnx.numpy_helper.from_array(arr.astype(np.float32), name))
    report.pairs = [(p.first, p.second) for p in pairs]
    return out, report


@dataclass
class _Pair:
    first: str
    second: str
    w1: str
    b1: Optional[str]
    w2: str
    depthwise: bool  # B is depthwise: its input channel c is its output channel c (axis 0)


def _names(pair: _Pair) -> List[str]:
    return [n for n in (pair.w1, pair.b1, pair.w2) if n]


def _equalize_pair(pair: _Pair, arrays: Dict[str, np.ndarray]) -> float:
    """Scale one pair in place; returns max |s - 1| (how far it still moved)."""
    w1, w2 = arrays[pair.w1], arrays[pair.w2]
    r1 = np.max(np.abs(w1.reshape(w1.shape[0], -1)), axis=1)
    if pair.depthwise:
        r2 = np.max(np.abs(w2.reshape(w2.shape[0], -1)), axis=1)
    else:
        r2 = np.max(np.abs(np.moveaxis(w2, 1, 0).reshape(w2.shape[1], -1)), axis=1)
    ok = (r1 > 0) & (r2 > 0)
    s = np.ones_like(r1, dtype=np.float64)
    s[ok] = np.sqrt(r1[ok].astype(np.float64) / r2[ok].astype(np.float64))
    shape1 = (-1,) + (1,) * (w1.ndim - 1)
    arrays[pair.w1] = (w1 / s.reshape(shape1)).astype(np.float32)
    if pair.b1:
        arrays[pair.b1] = (arrays[pair.b1] / s).astype(np.float32)
    if pair.depthwise:
        arrays[pair.w2] = (w2 * s.reshape((-1,) + (1,) * (w2.ndim - 1))).astype(np.float32)
    else:
        arrays[pair.w2] = (w2 * s.reshape((1, -1) + (1,) * (w2.ndim - 2))).astype(np.float32)
    return float(np.max(np.abs(s - 1.0))) if s.size else 0.0


def _attr(node: Any, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            if a.type == a.FLOAT:
                return a.f
            if a.type == a.INTS:
                return list(a.ints)
            return a.i
    return default


def _consumers(graph: Any) -> Dict[str, List[Any]]:
    readers: Dict[str, List[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return readers


def _fold_batchnorm(graph: Any, weights: Dict[str, Any]) -> int:
    """Fold ``Conv → BatchNormalization`` (BN the Conv's only reader) into the Conv, in place."""
    onnx = _imports.onnx()
    to_array, from_array = onnx.numpy_helper.to_array, onnx.numpy_helper.from_array
    readers = _consumers(graph)
    outputs = {o.name for o in graph.output}
    uses = {name: len(nodes) for name, nodes in readers.items()}
    drop = []
    for node in graph.node:
        if node.op_type != "Conv" or node.output[0] in outputs:
            continue
        after = readers.get(node.output[0], [])
        if len(after) != 1 or after[0].op_type != "BatchNormalization" or len(after[0].output) != 1:
            continue
        bn = after[0]
        params = list(bn.input[1:5])
        if node.input[1] not in weights or uses.get(node.input[1]) != 1 or any(p not in weights for p in params):
            continue
        if len(node.input) > 2 and node.input[2] and (node.input[2] not in weights or uses.get(node.input[2]) != 1):
            continue
        gamma, beta, mean, var = (to_array(weights[p]).astype(np.float64) for p in params)
        factor = gamma / np.sqrt(var + float(_attr(bn, "epsilon", 1e-5)))
        w = to_array(weights[node.input[1]]).astype(np.float64)
        b = to_array(weights[node.input[2]]).astype(np.float64) if len(node.input) > 2 and node.input[2] else np.zeros(w.shape[0])
        w = w * factor.reshape((-1,) + (1,) * (w.ndim - 1))
        b = (b - mean) * factor + beta
        weights[node.input[1]].CopyFrom(from_array(w.astype(np.float32), node.input[1]))
        bias_name = node.input[2] if len(node.input) > 2 and node.input[2] else f"{node.input[1]}_bias"
        if bias_name in weights:
            weights[bias_name].CopyFrom(from_array(b.astype(np.float32), bias_name))
        else:
            init = from_array(b.astype(np.float32), bias_name)
            graph.initializer.append(init)
            weights[bias_name] = graph.initializer[-1]
            if len(node.input) > 2:
                node.input[2] = bias_name
            else:
                node.input.append(bias_name)
        node.output[0] = bn.output[0]
        drop.append(bn)
    for bn in drop:
        graph.node.remove(bn)
    return len(drop)


def _find_pairs(graph: Any, weights: Dict[str, Any], report: EqualizeReport) -> List[_Pair]:
    readers = _consumers(graph)
    outputs = {o.name for o in graph.output}
    uses = {name: len(nodes) for name, nodes in readers.items()}
    pairs: List[_Pair] = []
    for a in graph.node:
        if a.op_type != "Conv" or len(a.input) < 2 or a.input[1] not in weights:
            continue
        tensor = a.output[0]
        step = readers.get(tensor, [])
        if tensor in outputs or len(step) != 1:
            continue
        middle = step[0]
        if middle.op_type == "Conv":
            b, via = middle, tensor
        else:
            after = readers.get(middle.output[0], []) if middle.output else []
            if len(after) != 1 or after[0].op_type != "Conv" or middle.output[0] in outputs:
                continue
            b, via = after[0], middle.output[0]
            if not _homogeneous(middle, weights):
                if middle.op_type == "Clip" or middle.op_type == "Relu6":
                    report.skipped[f"{a.name} → {b.name}"] = f"clipped activation {middle.op_type}: scaling through it is not exact"
                continue
        key = f"{a.name} → {b.name}"
        if b.input[0] != via or len(b.input) < 2 or b.input[1] not in weights:
            continue
        bias = a.input[2] if len(a.input) > 2 and a.input[2] else None
        shared = [n for n in (a.input[1], bias, b.input[1]) if n and uses.get(n, 0) != 1]
        if shared or (bias is not None and bias not in weights):
            report.skipped[key] = "weights shared with another node"
            continue
        group = int(_attr(b, "group", 1))
        w2_shape = list(weights[b.input[1]].dims)
        out_channels = int(weights[a.input[1]].dims[0])
        if group == 1 and w2_shape[1] == out_channels:
            depthwise = False
        elif group == out_channels and w2_shape[1] == 1 and w2_shape[0] == out_channels:
            depthwise = True
        else:
            report.skipped[key] = f"grouped convolution (group {group}) that is not depthwise"
            continue
        pairs.append(_Pair(a.name, b.name, a.input[1], bias, b.input[1], depthwise))
    return pairs


def _homogeneous(node: Any, weights: Dict[str, Any]) -> bool:
    """Is `node` an activation with f(x / s) = f(x) / s for s > 0 (and one data input)?"""
    if node.op_type in ("Relu", "LeakyRelu"):
        return True
    if node.op_type == "PRelu":
        onnx = _imports.onnx()
        slope = node.input[1] if len(node.input) > 1 else ""
        return slope in weights and onnx.numpy_helper.to_array(weights[slope]).size == 1
    if node.op_type == "Clip":  # Clip(min=0, max=None) is a Relu; any finite max is a clip
        onnx = _imports.onnx()
        lo = node.input[1] if len(node.input) > 1 else ""
        hi = node.input[2] if len(node.input) > 2 else ""
        if hi or any(a.name == "max" for a in node.attribute):
            return False
        if lo:
            return lo in weights and float(onnx.numpy_helper.to_array(weights[lo])) == 0.0
        return any(a.name == "min" and a.f == 0.0 for a in node.attribute)
    return False
