"""INT8 calibration: per-tensor activation ranges from representative inputs.

The model runs in ONNX Runtime (CPU) with every wanted activation added as a graph output.
Statistics are streamed batch by batch, so memory stays at one batch of activations no matter
how many images are used:

* pass 1 records the running max of ``|x|`` per tensor;
* pass 2 accumulates a histogram of ``|x|`` over ``[0, max]`` in ``num_bins`` equal bins
  (TensorRT's layout: 2048 bins). Bin ``k`` holds ``k*w <= |x| < (k+1)*w`` with
  ``w = max / num_bins``; the maximum itself falls in the last bin.

The range (``amax``; the INT8 scale is ``amax / 127``) then comes from the histogram:

``minmax``
    ``amax = max |x|``.
``percentile``
    the given percentile of ``|x|``, read from the histogram with linear interpolation inside
    the bin where the cumulative count crosses it.
``entropy``
    the threshold minimising the KL divergence between the distribution and its 128-level
    quantization, as TensorRT's EntropyCalibration2 describes it. For each candidate
    ``i`` in ``[128, num_bins]`` (number of bins kept):

    1. ``P = hist[:i]`` with the outlier mass ``hist[i:]`` added to ``P[i-1]``;
    2. ``Q``: bin ``k < i`` belongs to group ``floor(k * 128 / i)`` (128 groups of
       ``floor`` or ``ceil`` of ``i/128`` bins each); a group's mass (from ``hist[:i]``,
       outliers excluded) is spread evenly over the bins of the group where ``P`` is
       non-zero, and ``Q`` is zero where ``P`` is zero;
    3. ``P`` and ``Q`` are normalised to sum 1, then smoothed: zero entries become
       ``eps = 1e-4`` and non-zero entries are scaled by ``1 - eps * zeros`` (so both
       still sum to 1 and stay positive);
    4. ``KL(P || Q) = sum P log(P / Q)`` over the ``i`` kept bins.

    Exact zeros are taken out of bin 0 before the search: zero is exact at any scale, and the
    30-40 % zeros of a ReLU output would otherwise make the narrowest range look best (on
    CenterFace that clipped tensors to a tenth of their range and lost every face).
    The smallest ``i`` with the least divergence wins and ``amax = (i + 0.5) * w``: half a bin
    above the upper edge of the kept range, the convention of NVIDIA's description of the
    algorithm (so for ``i = num_bins`` it lies half a bin above the observed max).

A tensor that was zero on every sample gets ``amax = 1.0``: zero is exact at any scale.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from edge_sdk import _imports
from edge_sdk.errors import CalibrationError, ModelError

METHODS = ("entropy", "minmax", "percentile", "mse")
DEFAULT_BINS = 2048
QUANT_LEVELS = 128  # symmetric int8: 0..127 on each side of zero
QUANT_LEVELS_POS = 127  # the largest int8 level: scale = amax / 127
KL_START = 128
KL_EPS = 1e-4
# Number of passes over the calibration batches; a progress bar for N images needs PASSES * N.
PASSES = 2
# Below this a tensor counts as all-zero (its scale would underflow float32).
_ZERO_AMAX = 1e-30

Feed = Dict[str, np.ndarray]
Progress = Optional[Callable[[int], None]]
Histogram = Tuple[np.ndarray, np.ndarray]

# Operators whose float outputs are not activations (constants and shape plumbing).
_NOT_ACTIVATIONS = {"Constant", "ConstantOfShape", "Shape", "Size", "QuantizeLinear"}


# --- model plumbing ----------------------------------------------------------------------


def load_model(model: Any) -> Any:
    """An onnx.ModelProto from a ModelProto or a path (ModelError naming the file otherwise)."""
    onnx = _imports.onnx()
    if isinstance(model, onnx.ModelProto):
        return model
    path = Path(model)
    if not path.is_file():
        raise ModelError(f"model file {path} does not exist; pass an onnx.ModelProto or the path of an .onnx file")
    try:
        return onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError, ValueError, OSError for bad files
        raise ModelError(f"{path} is not a readable ONNX model ({type(exc).__name__}: {exc})") from exc


def make_session(model: Any) -> Any:
    """ONNX Runtime CPU session with basic optimisation (ModelError when it cannot run)."""
    from edge_sdk.builder.graph import session_from_model

    return session_from_model(model, "basic")


def _float_types(model: Any) -> Dict[str, bool]:
    """tensor name -> True when its inferred element type is float32."""
    onnx = _imports.onnx()
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # shape inference is best effort here; declared types still count
        inferred = model
    graph = inferred.graph
    types: Dict[str, bool] = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    return types


def activation_tensors(model: Any) -> List[str]:
    """Graph inputs and every float32 node output, in graph order: what calibration measures.

    This is a superset of what TensorRT quantizes (inputs and outputs of every layer), so a
    calibration cache written from it has a scale for every tensor TensorRT asks about.
    """
    model = load_model(model)
    types = _float_types(model)
    weights = {init.name for init in model.graph.initializer}
    names: List[str] = []
    seen = set()
    for inp in model.graph.input:
        if inp.name not in weights and types.get(inp.name, False):
            names.append(inp.name)
            seen.add(inp.name)
    for node in model.graph.node:
        if node.op_type in _NOT_ACTIVATIONS:
            continue
        for out in node.output:
            if out and out not in seen and types.get(out, False):
                names.append(out)
                seen.add(out)
    return names


class ActivationRunner:
    """Runs a model in ONNX Runtime and returns chosen intermediate tensors by name.

    The wanted tensors are appended to the graph outputs of a copy of the model; the original
    outputs stay first, so `run` also gives the model's own outputs.
    """

    def __init__(self, model: Any, tensors: Optional[Sequence[str]] = None) -> None:
        onnx = _imports.onnx()
        model = load_model(model)
        self.tensors = list(tensors) if tensors is not None else activation_tensors(model)
        known = set(activation_tensors(model))
        missing = [t for t in self.tensors if t not in known]
        if missing:
            raise CalibrationError(
                f"tensors not found among the model's float activations: {', '.join(missing[:5])}"
                + (" …" if len(missing) > 5 else "")
                + "; pass names of graph inputs or node outputs"
            )
        augmented = onnx.ModelProto()
        augmented.CopyFrom(model)
        graph = augmented.graph
        present = {o.name for o in graph.output}
        inputs = {i.name for i in graph.input}
        for name in self.tensors:
            if name not in present and name not in inputs:
                graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
                present.add(name)
        self.session = make_session(augmented)
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.model_outputs = [o.name for o in model.graph.output]

    def run(self, feed: Feed) -> Dict[str, np.ndarray]:
        missing = [n for n in self.input_names if n not in feed]
        if missing:
            raise CalibrationError(f"calibration batch lacks model input(s) {missing}; it has {sorted(feed)}")
        values = self.session.run(None, {n: feed[n] for n in self.input_names})
        out = dict(zip(self.output_names, values))
        for name in self.input_names:
            out[name] = np.asarray(feed[name])
        return out


def _batch_size(feed: Feed) -> int:
    first = next(iter(feed.values()))
    return int(np.shape(first)[0]) if np.ndim(first) else 1


def _reiterable(batches: Iterable[Feed]) -> Iterable[Feed]:
    """Batches that can be iterated twice: one-shot iterators are kept in memory (inputs only)."""
    if iter(batches) is batches:
        return list(batches)
    return batches


# --- histograms and thresholds ---------------------------------------------------------


def abs_histogram(values: np.ndarray, amax: float, num_bins: int = DEFAULT_BINS) -> np.ndarray:
    """Counts of ``|values|`` in `num_bins` equal bins over ``[0, amax]`` (int64).

    Bin k holds ``k*w <= |x| < (k+1)*w``; values at or above ``amax`` land in the last bin.
    """
    a = np.abs(np.asarray(values, dtype=np.float32).reshape(-1))  # a new array: scaled in place below
    if amax <= 0:
        counts = np.zeros(num_bins, dtype=np.int64)
        counts[0] = a.size
        return counts
    np.multiply(a, np.float32(num_bins / amax), out=a)
    np.minimum(a, np.float32(num_bins - 1), out=a)
    return np.bincount(a.astype(np.intp), minlength=num_bins).astype(np.int64)


def kl_divergences(counts: np.ndarray, levels: int = QUANT_LEVELS, start: int = KL_START, eps: float = KL_EPS, chunk: int = 128) -> np.ndarray:
    """KL(P || Q) for every candidate number of kept bins ``i`` in ``[start, len(counts)]``.

    Entry ``j`` is the divergence for ``i = start + j``; see the module docstring for P and Q.
    Vectorised over candidates in chunks of `chunk` rows (memory ~ chunk × bins × 8 bytes × a few).
    """
    h = np.asarray(counts, dtype=np.float64).reshape(-1)
    nbins = h.size
    if nbins < start:
        raise CalibrationError(f"histogram has {nbins} bins; entropy calibration needs at least {start}")
    csum = np.concatenate([[0.0], np.cumsum(h)])
    cnz = np.concatenate([[0], np.cumsum(h > 0)])
    total = csum[-1]
    candidates = np.arange(start, nbins + 1)
    result = np.empty(candidates.size, dtype=np.float64)
    k = np.arange(nbins)[None, :]
    g_edges = np.arange(levels + 1)[None, :]
    for lo in range(0, candidates.size, chunk):
        i = candidates[lo : lo + chunk]
        rows = np.arange(i.size)
        ic = i[:, None]
        valid = k < ic
        tail = total - csum[i]
        p = np.where(valid, h[None, :], 0.0)
        p[rows, i - 1] += tail
        # group g covers bins ceil(g*i/L) .. ceil((g+1)*i/L) - 1
        bounds = -((-g_edges * ic) // levels)
        mass = csum[bounds[:, 1:]] - csum[bounds[:, :-1]]
        nonzero = (cnz[bounds[:, 1:]] - cnz[bounds[:, :-1]]).astype(np.float64)
        nonzero[:, -1] += (h[i - 1] == 0) & (tail > 0)  # P[i-1] is non-zero through the outliers
        per_bin = np.where(nonzero > 0, mass / np.maximum(nonzero, 1.0), 0.0)
        group = np.where(valid, (k * levels) // ic, 0)
        q = np.take_along_axis(per_bin, group, axis=1)
        q = np.where(valid & (p > 0), q, 0.0)
        q_sum = q.sum(axis=1, keepdims=True)
        p = p / max(total, 1e-300)
        q = q / np.where(q_sum > 0, q_sum, 1.0)
        p = _smooth(p, valid, eps)
        q = _smooth(q, valid, eps)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(valid, p * np.log(p / q), 0.0)
        kl = terms.sum(axis=1)
        kl[q_sum[:, 0] <= 0] = np.inf
        result[lo : lo + i.size] = kl
    return result


def _smooth(d: np.ndarray, valid: np.ndarray, eps: float) -> np.ndarray:
    zero = valid & (d == 0)
    n_zero = zero.sum(axis=1, keepdims=True)
    return np.where(zero, eps, d * (1.0 - eps * n_zero))


def entropy_amax(counts: np.ndarray, edges: np.ndarray, zeros: int = 0, levels: int = QUANT_LEVELS, start: int = KL_START) -> float:
    """EntropyCalibration2 threshold for a histogram: ``(i + 0.5) * bin_width``, i = argmin KL.

    `zeros` exact zeros are taken out of bin 0 first (see the module docstring).
    """
    counts = np.asarray(counts, dtype=np.int64).copy()
    counts[0] -= min(int(zeros), int(counts[0]))
    width = float(edges[-1] - edges[0]) / counts.size
    kl = kl_divergences(counts, levels=levels, start=min(start, counts.size))
    i = int(np.argmin(kl)) + min(start, counts.size)
    return (i + 0.5) * width


def percentile_amax(counts: np.ndarray, edges: np.ndarray, percentile: float) -> float:
    """The `percentile` of ``|x|`` from its histogram, interpolated linearly inside the bin."""
    if not 0 < percentile <= 100:
        raise CalibrationError(f"percentile must be in (0, 100], got {percentile}")
    counts = np.asarray(counts, dtype=np.float64)
    total = counts.sum()
    if total <= 0:
        return 0.0
    target = total * percentile / 100.0
    cum = np.cumsum(counts)
    k = int(np.searchsorted(cum, target, side="left"))
    k = min(k, counts.size - 1)
    before = cum[k - 1] if k else 0.0
    frac = (target - before) / counts[k] if counts[k] > 0 else 1.0
    width = float(edges[1] - edges[0])
    return float(edges[k] + min(max(frac, 0.0), 1.0) * width)


def quantization_mse(counts: np.ndarray, edges: np.ndarray, candidates: np.ndarray, zeros: int = 0, chunk: int = 256) -> np.ndarray:
    """Mean squared error of symmetric INT8 (``scale = amax / 127``, round half to even, clip at
    ±127) of the histogram's values, for each ``amax`` in `candidates`.

    Each bin stands for its centre; `zeros` exact zeros are taken out of bin 0 (zero is exact at
    any scale). Values above ``amax`` clip to it.
    """
    counts = np.asarray(counts, dtype=np.float64).copy()
    counts[0] -= min(float(zeros), counts[0])
    centres = (np.asarray(edges[:-1], dtype=np.float64) + np.asarray(edges[1:], dtype=np.float64)) / 2.0
    keep = counts > 0
    counts, centres = counts[keep], centres[keep]
    total = counts.sum()
    candidates = np.asarray(candidates, dtype=np.float64).reshape(-1)
    out = np.zeros(candidates.size, dtype=np.float64)
    if total <= 0:
        return out
    for lo in range(0, candidates.size, chunk):
        amax = candidates[lo : lo + chunk, None]
        step = amax / QUANT_LEVELS_POS
        quantized = np.clip(np.round(centres[None, :] / step), 0, QUANT_LEVELS_POS) * step
        out[lo : lo + chunk] = ((quantized - centres[None, :]) ** 2 * counts[None, :]).sum(axis=1) / total
    return out


def mse_amax(counts: np.ndarray, edges: np.ndarray, zeros: int = 0, start: int = KL_START) -> float:
    """The ``amax`` among the histogram's upper bin edges from bin `start` on that minimises
    :func:`quantization_mse` (the smallest one on ties)."""
    counts = np.asarray(counts)
    first = min(start, counts.size) - 1
    candidates = np.asarray(edges[1:], dtype=np.float64)[first:]
    errors = quantization_mse(counts, edges, candidates, zeros)
    return float(candidates[int(np.argmin(errors))])


def amax_from_histogram(counts: np.ndarray, edges: np.ndarray, method: str, percentile: float = 99.99, zeros: int = 0) -> float:
    """The range `method` picks for one tensor's histogram (all-zero tensors get 1.0).

    `zeros`: how many of the values in bin 0 are exactly zero (used by ``entropy``).
    """
    _check_method(method)
    top = float(edges[-1])
    if top <= _ZERO_AMAX:
        return 1.0
    if method == "minmax":
        amax = top
    elif method == "percentile":
        amax = percentile_amax(counts, edges, percentile)
    elif method == "mse":
        amax = mse_amax(counts, edges, zeros)
    else:
        if int(np.sum(counts)) - int(zeros) <= 0:
            return top
        amax = entropy_amax(counts, edges, zeros)
    return float(amax) if amax > _ZERO_AMAX else top


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise CalibrationError(f"unknown calibration method {method!r}; choose one of {', '.join(METHODS)}")


# --- result ------------------------------------------------------------------------------


@dataclass
class CalibrationResult:
    """Per-tensor ranges and the histograms they came from.

    `ranges[t]` is amax (the INT8 scale is amax / 127); `histograms[t]` is ``(counts, edges)``
    of ``|x|`` over ``[0, max]``; `samples` is the number of images seen.
    """

    ranges: Dict[str, float]
    method: str
    samples: int
    histograms: Dict[str, Histogram] = field(default_factory=dict)
    percentile: float = 99.99
    num_bins: int = DEFAULT_BINS
    zeros: Dict[str, int] = field(default_factory=dict)

    def scales(self) -> Dict[str, float]:
        return {name: amax / 127.0 for name, amax in self.ranges.items()}

    def to_json(self) -> Dict[str, Dict[str, float]]:
        """What the builder writes as ranges.json: ``{tensor: {"amax": a, "scale": a / 127}}``."""
        return {name: {"amax": float(amax), "scale": float(amax) / 127.0} for name, amax in self.ranges.items()}

    def with_method(self, method: str, percentile: Optional[float] = None) -> "CalibrationResult":
        """The same histograms under another method, without running the model again.

        For ``minmax`` the histogram's upper edge is the exact observed max.
        """
        _check_method(method)
        pct = self.percentile if percentile is None else float(percentile)
        ranges = {name: amax_from_histogram(c, e, method, pct, self.zeros.get(name, 0)) for name, (c, e) in self.histograms.items()}
        return CalibrationResult(ranges, method, self.samples, self.histograms, pct, self.num_bins, self.zeros)


def collect_ranges(
    model: Any,
    batches: Iterable[Feed],
    method: str = "entropy",
    percentile: float = 99.99,
    num_bins: int = DEFAULT_BINS,
    tensors: Optional[Sequence[str]] = None,
    progress: Progress = None,
) -> CalibrationResult:
    """Calibrate `model` on `batches` and return per-tensor ranges.

    `model`: an FP32 onnx.ModelProto (or a path) with fixed input shapes. `batches`: feeds
    ``{input name: float32 array with batch dim}``, already preprocessed; iterated twice (a
    one-shot iterator is first turned into a list, which keeps the inputs, not activations).
    `tensors`: names to calibrate, default :func:`activation_tensors`. `progress(n)` is called
    after each batch of each pass with the batch's image count (total = PASSES × images).
    """
    _check_method(method)
    if num_bins < KL_START and method == "entropy":
        raise CalibrationError(f"entropy calibration needs num_bins >= {KL_START}, got {num_bins}")
    runner = ActivationRunner(model, tensors)
    names = runner.tensors
    batches = _reiterable(batches)

    amax = {name: 0.0 for name in names}
    samples = 0
    for feed in batches:
        values = runner.run(feed)
        for name in names:
            v = values[name]
            top = max(float(v.max()), -float(v.min())) if v.size else 0.0
            if not np.isfinite(top):
                raise CalibrationError(f"tensor {name!r} has non-finite values on calibration data; check the preprocessing and the model")
            if top > amax[name]:
                amax[name] = top
        samples += _batch_size(feed)
        if progress is not None:
            progress(_batch_size(feed))
    if samples == 0:
        raise CalibrationError("no calibration batches were given; pass at least one preprocessed image")

    counts = {name: np.zeros(num_bins, dtype=np.int64) for name in names}
    zeros = {name: 0 for name in names}
    for feed in batches:
        values = runner.run(feed)
        for name in names:
            counts[name] += abs_histogram(values[name], amax[name], num_bins)
            zeros[name] += values[name].size - int(np.count_nonzero(values[name]))
        if progress is not None:
            progress(_batch_size(feed))

    histograms = {name: (counts[name], np.linspace(0.0, amax[name], num_bins + 1)) for name in names}
    ranges = {name: amax_from_histogram(c, e, method, percentile, zeros[name]) for name, (c, e) in histograms.items()}
    return CalibrationResult(ranges, method, samples, histograms, float(percentile), int(num_bins), zeros)


# --- coverage ----------------------------------------------------------------------------


def coverage(model: Any, ranges: Dict[str, float], batches: Iterable[Feed], progress: Progress = None) -> Dict[str, float]:
    """Per tensor in `ranges`, the fraction of activations on `batches` with ``|x| > amax``.

    Run it on held-back images: a tensor clipping a large fraction was calibrated on data
    unlike what it sees later.
    """
    runner = ActivationRunner(model, list(ranges))
    clipped = {name: 0 for name in ranges}
    total = {name: 0 for name in ranges}
    seen = False
    for feed in batches:
        seen = True
        values = runner.run(feed)
        for name, amax in ranges.items():
            v = values[name]
            clipped[name] += int(np.count_nonzero(np.abs(v) > amax))
            total[name] += v.size
        if progress is not None:
            progress(_batch_size(feed))
    if not seen:
        raise CalibrationError("coverage needs at least one held-back batch")
    return {name: clipped[name] / total[name] if total[name] else 0.0 for name in ranges}


def worst_clipped(clipped: Dict[str, float], threshold: float = 0.01, top: int = 5) -> List[Tuple[str, float]]:
    """The `top` tensors clipping more than `threshold` of their values, worst first."""
    over = [(name, frac) for name, frac in clipped.items() if frac > threshold]
    over.sort(key=lambda item: (-item[1], item[0]))
    return over[:top]


def ranges_json(ranges: Union[CalibrationResult, Dict[str, float]]) -> Dict[str, Dict[str, float]]:
    """ranges.json content for a result or a plain ``{tensor: amax}`` dict."""
    if isinstance(ranges, CalibrationResult):
        return ranges.to_json()
    return CalibrationResult(dict(ranges), "unknown", 0).to_json()
