"""Mixed precision: find the layers INT8 hurts most and keep the fewest of them in FP32.

Two steps, each a plain function the builder calls:

1. :func:`rank_layers` measures, for every quantizable node, how far the model's outputs move
   from FP32 when that node alone is quantized (``mode="only"``), or how much closer they get
   when that node alone is left in FP32 with everything else quantized (``mode="all-but"``).
   The model runs in ONNX Runtime on a few representative batches; the error is a callable
   ``metric(fp32_outputs, quant_outputs) -> float`` (default: :func:`nmse`, averaged over outputs).
2. :func:`search_fallback` excludes layers in ranking order, growing the set geometrically
   until the caller's task score (e.g. F1 against FP32 on the build's search images) reaches
   the threshold, then bisects back to the smallest prefix of the ranking that still reaches it.
   The score is noisy in the number of layers (not monotone), so the caller judges the result
   on other images than the ones the search scored on, and the threshold carries a margin.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.builder.calibration import Feed, Progress, load_model, make_session
from edge_sdk.builder.qdq import QUANTIZABLE, quantizable_nodes, quantize_qdq
from edge_sdk.errors import CalibrationError

Metric = Callable[[Sequence[np.ndarray], Sequence[np.ndarray]], float]
MODES = ("only", "all-but")


def nmse(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
    """Mean over outputs of ``||a - b||² / ||a||²`` (0 when equal)."""
    errors = []
    for a, b in zip(reference, candidate):
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        denom = float(np.sum(a * a))
        errors.append(float(np.sum((a - b) ** 2)) / denom if denom > 0 else float(np.sum(b * b)))
    return float(np.mean(errors)) if errors else 0.0


def cosine_distance(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
    """Mean over outputs of ``1 - cos(a, b)`` (0 when parallel)."""
    dists = []
    for a, b in zip(reference, candidate):
        a = np.asarray(a, dtype=np.float64).ravel()
        b = np.asarray(b, dtype=np.float64).ravel()
        na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
        dists.append(0.0 if na == nb == 0 else 1.0 - float(a @ b) / max(na * nb, 1e-300))
    return float(np.mean(dists)) if dists else 0.0


def output_metric(index: int, metric: Metric = nmse) -> Metric:
    """`metric` restricted to one model output (e.g. a detector's heatmap)."""

    def restricted(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
        return metric([reference[index]], [candidate[index]])

    return restricted


def _mean_error(model: Any, batches: Sequence[Feed], reference: List[List[np.ndarray]], metric: Metric) -> float:
    session = make_session(model)
    errors = [metric(ref, session.run(None, feed)) for feed, ref in zip(batches, reference)]
    return float(np.mean(errors))


def rank_layers(
    model: Any,
    ranges: Any,
    batches: Iterable[Feed],
    metric: Metric = nmse,
    mode: str = "only",
    per_channel: bool = True,
    op_types: Iterable[str] = QUANTIZABLE,
    progress: Progress = None,
) -> List[Tuple[str, float]]:
    """``[(node name, sensitivity), ...]``, most sensitive first.

    ``mode="only"``: sensitivity = error of the model with only that node quantized.
    ``mode="all-but"``: sensitivity = error of the fully quantized model minus the error with
    that node left in FP32 (the gain from keeping it). Each node costs one Q/DQ model and one
    pass over `batches` (keep them few: ~8 images). `progress(1)` is called per node.
    """
    if mode not in MODES:
        raise CalibrationError(f"unknown sensitivity mode {mode!r}; choose one of {', '.join(MODES)}")
    model = load_model(model)
    batches = list(batches)
    if not batches:
        raise CalibrationError("rank_layers needs at least one batch of representative inputs")
    fp32 = make_session(model)
    reference = [fp32.run(None, feed) for feed in batches]
    nodes = quantizable_nodes(model, op_types)

    def error(exclude: Iterable[str]) -> float:
        qdq = quantize_qdq(model, ranges, exclude_nodes=exclude, per_channel=per_channel, op_types=op_types, check=False)
        return _mean_error(qdq, batches, reference, metric)

    scores: List[Tuple[str, float]] = []
    full = error(()) if mode == "all-but" else 0.0
    for name in nodes:
        if mode == "only":
            value = error([n for n in nodes if n != name])
        else:
            value = full - error([name])
        scores.append((name, value))
        if progress is not None:
            progress(1)
    scores.sort(key=lambda item: -item[1])
    return scores


def search_fallback(
    model: Any,
    ranges: Any,
    ranking: Sequence[Any],
    score: Callable[[Any], float],
    threshold: float,
    max_fp32_layers: Optional[int] = None,
    step: int = 1,
    per_channel: bool = True,
    progress: Progress = None,
    simulate: Optional[Callable[[Any, List[str]], Any]] = None,
) -> Tuple[List[str], float, List[Dict[str, Any]]]:
    """Fewest layers, taken in `ranking` order, to keep in FP32 so that ``score >= threshold``.

    `ranking`: node names or ``(name, sensitivity)`` pairs, most sensitive first.
    `score(qdq_model) -> float` is the caller's task metric (higher is better). The search
    tries 0 layers, then `step`, 2·`step`, 4·`step`… (capped by `max_fp32_layers` and the
    ranking length) until one passes, then bisects between the last failing and the first
    passing count. Returns ``(exclude_nodes, score, history)``; history lists every try as
    ``{"fp32_layers": k, "score": s}``. When nothing up to the cap passes, the best-scoring try
    is returned (the caller's accuracy gate decides what to do with it). `simulate(qdq_model,
    kept_out)`, when given, makes the model that is scored from the Q/DQ model and the layers kept
    out of INT8 (e.g. :func:`~edge_sdk.builder.fp16.layers_in_fp16`: they run in FP16 on the device).
    """
    names = [item[0] if isinstance(item, (tuple, list)) else str(item) for item in ranking]
    cap = len(names) if max_fp32_layers is None else max(0, min(int(max_fp32_layers), len(names)))
    step = max(1, int(step))
    model = load_model(model)
    tried: Dict[int, float] = {}
    history: List[Dict[str, Any]] = []

    def attempt(k: int) -> float:
        if k not in tried:
            qdq = quantize_qdq(model, ranges, exclude_nodes=names[:k], per_channel=per_channel)
            if simulate is not None and k:
                qdq = simulate(qdq, names[:k])
            tried[k] = float(score(qdq))
            history.append({"fp32_layers": k, "score": tried[k]})
            if progress is not None:
                progress(1)
        return tried[k]

    low, high = -1, None  # largest failing count, smallest passing count
    k = 0
    while True:
        if attempt(k) >= threshold:
            high = k
            break
        low = k
        if k >= cap:
            break
        k = min(cap, step if k == 0 else 2 * k)
    if high is None:
        best = max(tried, key=lambda n: (tried[n], -n))
        return names[:best], tried[best], history
    while high - low > 1:
        mid = (low + high) // 2
        if attempt(mid) >= threshold:
            high = mid
        else:
            low = mid
    return names[:high], tried[high], history


def rank_by_cost(ranking: Sequence[Tuple[str, float]], flops: Dict[str, int]) -> List[Tuple[str, float]]:
    """`ranking` (``(name, sensitivity)``, e.g. from :func:`rank_layers`) re-ordered by accuracy
    bought per FLOP kept out of INT8: ``sensitivity / flops`` (highest first), so the cheapest
    layers that restore accuracy leave INT8 first. Layers that nothing hurts (sensitivity <= 0)
    go last, by sensitivity; a layer with no FLOP count costs as much as the dearest one.
    Returns ``(name, sensitivity)`` pairs, as :func:`search_fallback` takes them."""
    dearest = max([int(v) for v in flops.values()] + [1])

    def key(item: Tuple[str, float]) -> Tuple[int, float]:
        name, value = item[0], float(item[1])
        if value <= 0:
            return (1, -value)
        cost = int(flops.get(name) or dearest)
        return (0, -value / max(cost, 1))

    return sorted(((str(n), float(v)) for n, v in ranking), key=key)
