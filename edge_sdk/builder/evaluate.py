"""The accuracy gate: run each precision variant with ONNX Runtime on held-back images and
compare it with FP32, per output tensor (max/mean absolute error, cosine) and per task
(decoded detections matched against FP32's at IoU 0.5 → precision, recall, f1_vs_fp32).

In the spirit of Polygraphy's comparator: a runner per variant, the same inputs for all, one
report of the differences.

Agreement with FP32 means something only when FP32 itself finds objects. The reference also runs
FP32 on pixel-shuffled copies of the first gate images (the probe's controls: the same values, no
objects); when FP32 fires on them as the probe's spurious rule says (:func:`is_spurious`, which the probe applies too),
its detections are noise and the gate refuses to call a variant's agreement with them a pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from edge_sdk.detections import Detections, match_detections
from edge_sdk.errors import AccuracyGateError
from edge_sdk.geometry import Placement

SPURIOUS_SHARE = 0.25  # of its rate on the real images, per control image ...
SPURIOUS_MIN = 2.0  # ... and at least this many


def is_spurious(control_per_image: float, per_image: float, filled: bool = False) -> bool:
    """The probe's spurious rule (edge_sdk.builder.probe.RULE): >= max(SPURIOUS_MIN, SPURIOUS_SHARE x
    the rate on the real images) detections per pixel-shuffled control image, or an image filled
    to max_detections."""
    return filled or control_per_image >= max(SPURIOUS_MIN, SPURIOUS_SHARE * per_image)


# decoder(outputs with batch dim, transforms) -> one Detections per batch item
Decoder = Callable[[Sequence[np.ndarray], Sequence[Placement]], List[Detections]]
Progress = Callable[[int], None]
MATCH_IOU = 0.5


class OnnxRuntimeRunner:
    """activate / infer / deactivate around an ONNX Runtime CPU session built from a ModelProto."""

    def __init__(self, model: Any, name: str = "model") -> None:
        self.model = model
        self.name = name
        self.session: Any = None
        self.input_names: List[str] = []
        self.output_names: List[str] = []

    def activate(self) -> None:
        from edge_sdk.builder.graph import session_from_model

        self.session = session_from_model(self.model)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def infer(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        return self.session.run(self.output_names, feed)

    def deactivate(self) -> None:
        self.session = None

    def __enter__(self) -> "OnnxRuntimeRunner":
        self.activate()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.deactivate()


def run_model(model: Any, input_name: str, tensors: Sequence[np.ndarray], progress: Optional[Progress] = None) -> List[List[np.ndarray]]:
    """Outputs of `model` for each input tensor (N=1 each), in model output order."""
    results = []
    with OnnxRuntimeRunner(model) as runner:
        for tensor in tensors:
            results.append(runner.infer({input_name: tensor}))
            if progress is not None:
                progress(1)
    return results


@dataclass
class OutputError:
    name: str
    max_abs_err: float
    mean_abs_err: float
    cosine: float

    def to_dict(self) -> Dict[str, float]:
        return {"max_abs_err": self.max_abs_err, "mean_abs_err": self.mean_abs_err, "cosine": self.cosine}


@dataclass
class VariantReport:
    variant: str
    outputs: List[OutputError]
    match: Optional[Dict[str, float]] = None  # tp/fp/fn/precision/recall/f1 vs FP32
    detections: int = 0
    reference_detections: int = 0
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def f1(self) -> Optional[float]:
        return None if self.match is None else float(self.match["f1"])

    @property
    def cosine(self) -> float:
        return min((o.cosine for o in self.outputs), default=1.0)

    @property
    def max_abs_err(self) -> float:
        return max((o.max_abs_err for o in self.outputs), default=0.0)

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {
            "f1_vs_fp32": None if self.f1 is None else round(self.f1, 4),
            "precision": None if self.match is None else round(float(self.match["precision"]), 4),
            "recall": None if self.match is None else round(float(self.match["recall"]), 4),
            "max_abs_err": _r(self.max_abs_err),
            "mean_abs_err": _r(max((o.mean_abs_err for o in self.outputs), default=0.0)),
            "cosine": round(self.cosine, 6),
            "detections": self.detections,
            "reference_detections": self.reference_detections,
            "outputs": {o.name: {k: _r(v) for k, v in o.to_dict().items()} for o in self.outputs},
        }
        d.update(self.extra)
        return d


def _r(v: float) -> float:
    return float(f"{v:.6g}")


def output_errors(names: Sequence[str], ref: Sequence[Sequence[np.ndarray]], test: Sequence[Sequence[np.ndarray]]) -> List[OutputError]:
    """Per output, over all images: max and mean |ref - test| and the cosine similarity."""
    report = []
    for k, name in enumerate(names):
        max_err, abs_sum, count, dot, na, nb = 0.0, 0.0, 0, 0.0, 0.0, 0.0
        for r_out, t_out in zip(ref, test):
            a = np.asarray(r_out[k], np.float64).ravel()
            b = np.asarray(t_out[k], np.float64).ravel()
            diff = np.abs(a - b)
            max_err = max(max_err, float(diff.max(initial=0.0)))
            abs_sum += float(diff.sum())
            count += diff.size
            dot += float(a @ b)
            na += float(a @ a)
            nb += float(b @ b)
        if na == 0.0 and nb == 0.0:
            cosine = 1.0
        elif na == 0.0 or nb == 0.0:
            cosine = 0.0
        else:
            cosine = dot / np.sqrt(na * nb)
        report.append(OutputError(name, max_err, abs_sum / max(count, 1), float(cosine)))
    return report


def decode_all(decoder: Decoder, outputs: Sequence[Sequence[np.ndarray]], transforms: Sequence[Placement]) -> List[Detections]:
    return [decoder(out, [tr])[0] for out, tr in zip(outputs, transforms)]


def agreement(pred: Sequence[Detections], ref: Sequence[Detections], iou: float = MATCH_IOU) -> Dict[str, float]:
    """Detections of a variant matched against FP32's, image by image, pooled (micro average)."""
    tp = fp = fn = 0
    for p, r in zip(pred, ref):
        m = match_detections(p, r, iou)
        tp, fp, fn = tp + m["tp"], fp + m["fp"], fn + m["fn"]
    precision = tp / (tp + fp) if tp + fp else (1.0 if fn == 0 else 0.0)
    recall = tp / (tp + fn) if tp + fn else (1.0 if fp == 0 else 0.0)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"tp": tp, "fp": fp, "fn": fn, "precision": precision, "recall": recall, "f1": f1}


class Reference:
    """FP32's outputs and detections on the held-back images: what every variant is compared to."""

    def __init__(self, model: Any, input_name: str, tensors: Sequence[np.ndarray], transforms: Sequence[Placement],
                 decoder: Optional[Decoder], progress: Optional[Progress] = None) -> None:
        self.input_name = input_name
        self.tensors = tensors
        self.transforms = transforms
        self.decoder = decoder
        self.output_names = [o.name for o in model.graph.output]
        self._model = model
        self.outputs = run_model(model, input_name, tensors, progress)
        self.detections = decode_all(decoder, self.outputs, transforms) if decoder is not None else None

    def noise(self) -> Optional[str]:
        """Why FP32's detections on these images are noise (it fires on their pixel-shuffled copies,
        :func:`control_tensors`), in words; None when they are not, or there is no decoder. Run once."""
        if self.decoder is None or self.detections is None or not self.tensors:
            return None
        if not hasattr(self, "_noise"):
            controls = control_tensors(self.tensors)
            outputs = run_model(self._model, self.input_name, controls)
            found = decode_all(self.decoder, outputs, self.transforms[:len(controls)])
            per_control = sum(len(d) for d in found) / len(found)
            per_image = sum(len(d) for d in self.detections) / len(self.detections)
            cap = int(getattr(self.decoder, "max_detections", 0) or 0)
            filled = cap > 0 and max(len(d) for d in list(found) + list(self.detections)) >= cap
            self._noise: Optional[str] = None
            if is_spurious(per_control, per_image, filled):
                self._noise = (f"FP32 itself fires on images without objects ({per_control:.0f} detections per "
                               f"pixel-shuffled gate image, {per_image:.0f} per gate image)")
        return self._noise

    def compare(self, variant: str, model: Any, progress: Optional[Progress] = None) -> VariantReport:
        outputs = run_model(model, self.input_name, self.tensors, progress)
        return self.compare_outputs(variant, outputs)

    def compare_outputs(self, variant: str, outputs: Sequence[Sequence[np.ndarray]]) -> VariantReport:
        errors = output_errors(self.output_names, self.outputs, outputs)
        if self.decoder is None or self.detections is None:
            return VariantReport(variant, errors)
        dets = decode_all(self.decoder, outputs, self.transforms)
        return VariantReport(
            variant, errors, agreement(dets, self.detections),
            detections=sum(len(d) for d in dets), reference_detections=sum(len(d) for d in self.detections),
        )

    def score(self, model: Any) -> float:
        """f1_vs_fp32 of `model` (or its worst output cosine when there is no decoder)."""
        report = self.compare("candidate", model)
        return report.f1 if report.f1 is not None else report.cosine


def control_tensors(tensors: Sequence[np.ndarray], count: int = 2, seed: int = 0) -> List[np.ndarray]:
    """Copies of the first `count` network inputs with their pixels shuffled (one permutation of the
    positions for all channels of an input): the same values, no objects."""
    out = []
    for k, tensor in enumerate(tensors[:count]):
        n, c, h, w = tensor.shape
        order = np.random.default_rng(seed + k).permutation(h * w)
        out.append(np.ascontiguousarray(tensor.reshape(n, c, h * w)[:, :, order].reshape(tensor.shape)))
    return out


@dataclass
class GateResult:
    passed: bool
    metric: str
    value: float
    threshold: float
    refused: Optional[str] = None  # why the value is no evidence (FP32's detections are noise)

    def to_dict(self) -> Dict[str, Any]:
        d = {"passed": self.passed, "metric": self.metric, "value": round(self.value, 4), "threshold": self.threshold}
        if self.refused:
            d["refused"] = self.refused
        return d


def gate(report: VariantReport, min_f1: float, min_cosine: float = 0.99, noise: Optional[str] = None) -> GateResult:
    """Did `report` keep enough accuracy? f1_vs_fp32 when detections are decoded, else cosine.
    With `noise` (:meth:`Reference.noise`) FP32's detections are noise: never a pass."""
    if report.f1 is not None:
        return GateResult(report.f1 >= min_f1 and noise is None, "f1_vs_fp32", report.f1, min_f1, noise)
    return GateResult(report.cosine >= min_cosine, "cosine", report.cosine, min_cosine)


def enforce(result: GateResult, variant: str, allow_loss: bool, fallback_tried: bool,
            held_back: Sequence[str] = (), share: Optional[float] = None) -> None:
    """AccuracyGateError (exit 6) unless the gate passed or the loss is allowed. The message gives
    the best variant's numbers: its score, the INT8 share of the FLOPs (`share`) and the layers
    that hold accuracy back (`held_back`: those kept out of INT8, or the most sensitive ones)."""
    if result.passed or allow_loss:
        return
    if result.refused:
        raise AccuracyGateError(
            f"{variant.upper()} {result.metric} = {result.value:.4f} is no pass: {result.refused}, so the comparison is "
            "between two noise outputs. Fix the input preprocessing (color, mean, scale; the preprocessing probe, on "
            "unless --no-probe, names one that works), or accept the loss with --allow-accuracy-loss"
        )
    tried = " even after keeping the most sensitive layers out of INT8" if fallback_tried else ""
    hint = "" if fallback_tried else " or --int8-fallback auto to keep the most sensitive layers out of INT8"
    numbers = "" if share is None else f" with {share:.1%} of the FLOPs in INT8"
    layers = f"; layers holding it back: {', '.join(held_back)}" if held_back else ""
    raise AccuracyGateError(
        f"{variant.upper()} {result.metric} = {result.value:.4f}{numbers} is below the gate {result.threshold}{tried}{layers}. "
        f"Improve the calibration images (--calib, --calib-method){hint}, lower --min-f1, "
        "or accept the loss with --allow-accuracy-loss"
    )
