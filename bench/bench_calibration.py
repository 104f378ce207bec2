"""INT8 calibration on the real CenterFace: speed of each method, and what each does to accuracy.

    python bench/bench_calibration.py                 # throughput only (~1 min)
    python bench/bench_calibration.py --accuracy      # plus the fallback search per method and margin (~6 min)

Throughput runs on scenes made from scikit-image's sample photos with the colour face crops of
synthetic://faces (edge_sdk/assets/faces.npz) pasted at 30-90 px onto them. The accuracy part runs
on the repository's default calibration images (calibrate/images), split exactly as
`edge-sdk build` splits them (calibration / search / gate), plus an independent test set of
such scenes from another seed that only reports. Per method: ranges from the calibration part,
layers ranked on 8 of its images, the FP32-fallback search scored on the search part for each
margin (target = 0.97 + margin), and the chosen layer set judged on the gate and test parts.

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
METHODS = [("minmax", None), ("entropy", None), ("percentile", 99.99), ("percentile", 99.999)]


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


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=32, help="calibration images")
    ap.add_argument("--accuracy", action="store_true", help="also measure F1 vs FP32, with and without FP32 fallback")
    ap.add_argument("--test-images", type=int, default=32, help="independent scenes that only report F1")
    ap.add_argument("--margins", type=float, nargs="+", default=[0.0, 0.01, 0.02], help="search target = threshold + margin")
    ap.add_argument("--rank-images", type=int, default=8, help="images for the layer sensitivity ranking")
    ap.add_argument("--threshold", type=float, default=0.97, help="F1 the fallback search must reach")
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
        from edge_sdk.builder.images import default_calib_dir, list_images, split_images
        from edge_sdk.preprocess import load_image

        split = split_images(list_images(default_calib_dir()), 0.25, 4, 8)
        calib_feeds, _ = preprocess([load_image(str(p)) for p in split.calibration])
        search = Judge(model, *preprocess([load_image(str(p)) for p in split.search]))
        gate = Judge(model, *preprocess([load_image(str(p)) for p in split.gate]))
        test = Judge(model, *preprocess(scenes(args.test_images, seed=400)))
        rank_feeds = [calib_feeds[i] for i in np.linspace(0, len(calib_feeds) - 1, args.rank_images).round().astype(int)]
        print(f"\ndefault images: {len(split.calibration)} calibration, {len(split.search)} search ({search.faces} FP32 faces), "
              f"{len(split.gate)} gate ({gate.faces} FP32 faces); test set {len(test.feeds)} scenes ({test.faces} faces)")
        print(f"{'method':<18}{'margin':>7}{'fp32 layers':>12}{'search':>8}{'gate':>8}{'test':>8}{'tries':>6}{'seconds':>9}")
        results["split"] = {"calibration": len(split.calibration), "search": [len(split.search), search.faces],
                            "gate": [len(split.gate), gate.faces], "test": [len(test.feeds), test.faces]}
        for label, (method, pct) in zip(list(results["methods"]), METHODS):
            start = time.perf_counter()
            ranges = calibration.collect_ranges(model, calib_feeds, method=method, percentile=pct or 99.99).ranges
            ranking = sensitivity.rank_layers(model, ranges, rank_feeds)
            prepared = time.perf_counter() - start
            scores: Dict[str, float] = {}
            rows = []
            for margin in args.margins:
                t0 = time.perf_counter()
                exclude, searched, history = sensitivity.search_fallback(
                    model, ranges, ranking, _memo(search, scores), min(1.0, args.threshold + margin))
                seconds = prepared + time.perf_counter() - t0
                k = len(exclude)
                mixed = qdq.quantize_qdq(model, ranges, exclude_nodes=exclude)
                row = {"margin": margin, "fp32_layers": k, "f1_search": searched, "f1_gate": gate.f1(mixed),
                       "f1_test": test.f1(mixed), "tries": len(history), "seconds": seconds}
                rows.append(row)
                print(f"{label:<18}{margin:>7.3f}{k:>12d}{searched:>8.3f}{row['f1_gate']:>8.3f}{row['f1_test']:>8.3f}"
                      f"{len(history):>6d}{seconds:>9.0f}")
            results["methods"][label]["fallback"] = rows
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
