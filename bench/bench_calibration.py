"""INT8 calibration on the real CenterFace: speed of each method, and what each does to accuracy.

    python bench/bench_calibration.py                 # throughput only (~1 min)
    python bench/bench_calibration.py --accuracy      # plus one row per INT8 technique (~12 min)

Throughput runs on scenes made from scikit-image's sample photos with the colour face crops of
synthetic://faces (edge_sdk/assets/faces.npz) pasted at 30-90 px onto them. The accuracy part runs
on the repository's default calibration images (calibrate/images), split exactly as
`edge-sdk build` splits them (calibration / search / gate), plus an independent test set of
such scenes from another seed (400; the default set uses its own seed) that only reports. One row
per technique, side by side: each range rule (minmax, entropy, percentile, per-tensor MSE) on the
FP32 graph and on the cross-layer-equalized graph, then ONNX Runtime's own quantize_static
(QDQ, per-channel, MinMax and Entropy) as the peer baseline. Where a row's search F1 misses the
gate + 0.01, the fallback search also runs (FP32 by sensitivity, and FP16 by sensitivity per
FLOP as the build does), ranked on 8 calibration images and scored on the search part; each row
reports the INT8 share of the conv FLOPs and F1 vs FP32 on the search, gate and test parts.

Throughput: plain FP32 inference over the calibration images is timed in the same run, before
and after the calibrations, and every method is reported as images/s and as the ratio of its
time to that inference time. Accuracy: detections of the INT8 (Q/DQ, ONNX Runtime) model are
matched to FP32's at IoU 0.5 (score threshold 0.5) and F1 is summed over all faces of a set;
both models run in ONNX Runtime sessions made as the build's search and gate make them (all
graph optimisations), so the default row reproduces the build's figures.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.builder import calibration, qdq, sensitivity
from edge_sdk.builder.default_model import DEFAULT_MODEL
from edge_sdk.detections import Detections, match_detections
from edge_sdk.preprocess import InputSpec, Preprocessor

SPEC: InputSpec = DEFAULT_MODEL.input_spec
BACKGROUNDS = ["coffee", "astronaut", "camera", "rocket", "chelsea", "motorcycle_left", "hubble_deep_field",
               "brick", "coins", "page", "text", "grass", "gravel", "retina", "cat", "horse", "moon"]
METHODS = [("minmax", None), ("entropy", None), ("percentile", 99.99), ("percentile", 99.999), ("mse", None)]


def _bgr(img: np.ndarray) -> np.ndarray:
    img = np.asarray(img)
    if img.dtype != np.uint8:
        img = (255 * (img.astype(np.float64) / max(float(img.max()), 1.0))).astype(np.uint8)
    if img.ndim == 2:
        img = np.stack([img] * 3, -1)
    return np.ascontiguousarray(img[..., :3][..., ::-1])


def scenes(count: int, seed: int) -> List[np.ndarray]:
    """`count` BGR scenes, 2-6 real colour faces each, sizes and places drawn from `seed`."""
    import cv2
    from skimage import data

    from edge_sdk.runtime.synthetic import face_crops

    rng = np.random.default_rng(seed)
    faces = face_crops().images
    backgrounds = [_bgr(getattr(data, name)()) for name in BACKGROUNDS if hasattr(data, name)]
    out = []
    for _ in range(count):
        bg = backgrounds[rng.integers(len(backgrounds))]
        w = int(rng.integers(480, 900))
        h = int(w * rng.uniform(0.55, 0.8))
        img = cv2.resize(bg, (w, h), interpolation=cv2.INTER_AREA)
        if rng.random() < 0.5:
            img = np.ascontiguousarray(img[:, ::-1])
        for _ in range(int(rng.integers(2, 7))):
            size = int(rng.integers(30, 91))
            face = cv2.resize(faces[rng.integers(len(faces))], (size, size), interpolation=cv2.INTER_CUBIC)
            face = np.clip(face * rng.uniform(0.8, 1.1, 3), 0, 255).astype(np.uint8)
            x, y = int(rng.integers(0, w - size)), int(rng.integers(0, h - size))
            img[y : y + size, x : x + size] = face
        out.append(img)
    return out


def preprocess(images: Sequence[np.ndarray]) -> Tuple[List[Dict[str, np.ndarray]], List[Any]]:
    pre = Preprocessor(SPEC)
    feeds, transforms = [], []
    for img in images:
        tensor, transform = pre(img)
        feeds.append({SPEC.name: tensor.copy()})
        transforms.append(transform)
    return feeds, transforms


def default_model() -> Any:
    from edge_sdk.builder.default_model import ensure_model
    from edge_sdk.builder.graph import fix_input, model_from_path, optimize, upgrade_opset

    model = fix_input(model_from_path(ensure_model()), SPEC.name, SPEC.shape)
    model, _ = optimize(upgrade_opset(model))
    return qdq.name_nodes(model)


class Judge:
    """F1 of a model's detections against FP32's on one image set."""

    def __init__(self, fp32: Any, feeds: List[Dict[str, np.ndarray]], transforms: List[Any]) -> None:
        from edge_sdk.decoders import make_decoder

        self.decoder = make_decoder(dict(DEFAULT_MODEL.decoder), SPEC)
        self.feeds, self.transforms = feeds, transforms
        self.reference = self.detect(fp32)

    def detect(self, model: Any) -> List[Detections]:
        from edge_sdk.builder.graph import session_from_model

        session = session_from_model(model)  # as the build's search and gate run it: all ORT optimisations
        return [self.decoder(session.run(None, f), [t])[0] for f, t in zip(self.feeds, self.transforms)]

    def f1(self, model: Any) -> float:
        tp = fp = fn = 0
        for pred, ref in zip(self.detect(model), self.reference):
            m = match_detections(pred, ref, 0.5, class_aware=False)
            tp, fp, fn = tp + m["tp"], fp + m["fp"], fn + m["fn"]
        return 2 * tp / max(2 * tp + fp + fn, 1)

    @property
    def faces(self) -> int:
        return sum(len(d) for d in self.reference)


def _memo(judge: Judge, cache: Dict[str, float]):
    """judge.f1 memoized by the candidate model's bytes, so that searches for several margins
    share their evaluations (their seconds then overlap: the first margin pays for most)."""
    import hashlib

    def score(qdq_model: Any) -> float:
        key = hashlib.sha1(qdq_model.SerializeToString()).hexdigest()
        if key not in cache:
            cache[key] = judge.f1(qdq_model)
        return cache[key]

    return score


def time_inference(model: Any, feeds: Sequence[Dict[str, np.ndarray]]) -> float:
    session = calibration.make_session(model)
    session.run(None, feeds[0])
    start = time.perf_counter()
    for feed in feeds:
        session.run(None, feed)
    return time.perf_counter() - start


def _fallback(model: Any, ranges: Dict[str, float], rank_feeds: List[Dict[str, np.ndarray]], search: Judge,
              target: float, kept_as: str, by_cost: bool) -> List[str]:
    """The build's fallback search: layers ranked on calibration images (by sensitivity per FLOP
    when `by_cost`), scored on the search images with the kept layers in `kept_as`."""
    from edge_sdk.builder.fp16 import layers_in_fp16
    from edge_sdk.builder.graph import layer_flops

    ranking = sensitivity.rank_layers(model, ranges, rank_feeds)
    if by_cost:
        ranking = sensitivity.rank_by_cost(ranking, layer_flops(model))
    simulate = layers_in_fp16 if kept_as == "fp16" else None
    exclude, _, _ = sensitivity.search_fallback(model, ranges, ranking, search.f1, target, simulate=simulate)
    return exclude


def _ort_quantize_static(model: Any, feeds: List[Dict[str, np.ndarray]], method: str) -> Any:
    """ONNX Runtime's own quantize_static: QDQ, per-channel symmetric INT8 weights, symmetric INT8
    activations, FP32 biases (TensorRT 8.5 takes no INT32 bias), `method` MinMax or Entropy."""
    import tempfile

    import onnx
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(feeds)

        def get_next(self) -> Optional[Dict[str, np.ndarray]]:
            return next(self.items, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        onnx.save(model, str(src))
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=getattr(CalibrationMethod, method), op_types_to_quantize=list(qdq.QUANTIZABLE),
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False})
        return onnx.load(str(dst))


def accuracy_table(model: Any, args: argparse.Namespace) -> List[Dict[str, Any]]:
    """One row per technique on the default images: INT8 share of the conv FLOPs, F1 vs FP32 on the
    search, gate and test images, seconds. Printed as it goes."""
    from edge_sdk.builder.equalize import equalize
    from edge_sdk.builder.fp16 import layers_in_fp16
    from edge_sdk.builder.graph import layer_flops
    from edge_sdk.builder.images import default_calib_dir, list_images, split_images
    from edge_sdk.preprocess import load_image

    split = split_images(list_images(default_calib_dir()), 0.25, 4, 8)
    calib_feeds, _ = preprocess([load_image(str(p)) for p in split.calibration])
    search = Judge(model, *preprocess([load_image(str(p)) for p in split.search]))
    gate = Judge(model, *preprocess([load_image(str(p)) for p in split.gate]))
    test = Judge(model, *preprocess(scenes(args.test_images, seed=400)))
    rank_feeds = [calib_feeds[i] for i in np.linspace(0, len(calib_feeds) - 1, args.rank_images).round().astype(int)]
    target = min(1.0, args.threshold + 0.01)
    flops = layer_flops(model)
    total = sum(flops.values())
    print(f"\ndefault images: {len(split.calibration)} calibration, {len(split.search)} search ({search.faces} FP32 faces), "
          f"{len(split.gate)} gate ({gate.faces} FP32 faces); test set {len(test.feeds)} scenes, seed 400 ({test.faces} faces)")
    print(f"fallback search (where search F1 < {target}): layers kept out of INT8 until the search images reach it")
    print(f"{'technique':<34}{'int8 FLOPs':>11}{'kept out':>9}{'search':>8}{'gate':>8}{'test':>8}{'seconds':>9}")
    rows: List[Dict[str, Any]] = []

    def report(label: str, qmodel: Any, kept: Sequence[str], seconds: float) -> None:
        share = 1.0 - sum(flops.get(n, 0) for n in kept) / total
        row = {"technique": label, "int8_flop_share": share, "kept_out": len(kept), "f1_search": search.f1(qmodel),
               "f1_gate": gate.f1(qmodel), "f1_test": test.f1(qmodel), "seconds": seconds}
        rows.append(row)
        print(f"{label:<34}{share:>11.1%}{len(kept):>9d}{row['f1_search']:>8.4f}{row['f1_gate']:>8.4f}{row['f1_test']:>8.4f}"
              f"{seconds:>9.0f}", flush=True)

    for equalized in (False, True):
        start = time.perf_counter()
        network = equalize(model)[0] if equalized else model
        histograms = calibration.collect_ranges(network, calib_feeds, method="minmax")
        shared = time.perf_counter() - start
        for method, pct in (("minmax", None), ("entropy", None), ("percentile", 99.99), ("mse", None)):
            t0 = time.perf_counter()
            ranges = histograms.with_method(method, pct).ranges
            label = ("CLE + " if equalized else "") + (method if pct is None else f"{method} {pct}")
            quantized = qdq.quantize_qdq(network, ranges)
            report(label + ", all INT8", quantized, [], shared + time.perf_counter() - t0)
            if search.f1(quantized) < target:
                for kept_as, by_cost in (("fp32", False), ("fp16", True)):
                    t1 = time.perf_counter()
                    kept = _fallback(network, ranges, rank_feeds, search, target, kept_as, by_cost)
                    mixed = qdq.quantize_qdq(network, ranges, exclude_nodes=kept)
                    if kept_as == "fp16" and kept:
                        mixed = layers_in_fp16(mixed, kept)
                    how = "FP16, by sensitivity/FLOP" if by_cost else "FP32, by sensitivity"
                    report(f"{label}, fallback {how}", mixed, kept, shared + time.perf_counter() - t0 + time.perf_counter() - t1)
    for method in ("MinMax", "Entropy"):
        t0 = time.perf_counter()
        try:
            quantized = _ort_quantize_static(model, calib_feeds, method)
        except Exception as exc:  # a peer tool's failure is a figure too
            print(f"{'ORT quantize_static ' + method:<34} failed: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        report(f"ORT quantize_static {method}", quantized, [], time.perf_counter() - t0)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=32, help="calibration images")
    ap.add_argument("--accuracy", action="store_true", help="also measure F1 vs FP32, with and without FP32 fallback")
    ap.add_argument("--test-images", type=int, default=64, help="independent scenes that only report F1")
    ap.add_argument("--rank-images", type=int, default=8, help="images for the layer sensitivity ranking")
    ap.add_argument("--threshold", type=float, default=0.97, help="the gate; the fallback search aims at it + 0.01")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)

    model = default_model()
    feeds, _ = preprocess(scenes(args.images, seed=100))
    fp32_times = [time_inference(model, feeds)]
    results: Dict[str, Any] = {"images": args.images, "methods": {}}
    calibrated: Dict[str, Any] = {}
    for method, pct in METHODS:
        label = method if pct is None else f"{method} {pct}"
        start = time.perf_counter()
        calibrated[label] = calibration.collect_ranges(model, feeds, method=method, percentile=pct or 99.99)
        results["methods"][label] = {"seconds": time.perf_counter() - start}
    fp32_times.append(time_inference(model, feeds))
    fp32 = statistics.median(fp32_times)
    results["fp32_inference_seconds"] = fp32
    print(f"{args.images} calibration images; plain FP32 inference {args.images / fp32:.1f} images/s")
    print(f"{'method':<18}{'images/s':>10}{'x FP32 time':>13}")
    for label, row in results["methods"].items():
        row["images_per_s"] = args.images / row["seconds"]
        row["ratio_to_fp32"] = row["seconds"] / fp32
        print(f"{label:<18}{row['images_per_s']:>10.2f}{row['ratio_to_fp32']:>13.1f}")

    if args.accuracy:
        results["accuracy"] = accuracy_table(model, args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
