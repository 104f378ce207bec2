"""Recall, precision and latency of the detection modes on 4K video, side by side.

    python bench/bench_roi.py                                   # colour synthetic://faces at 3840x2160
    python bench/bench_roi.py --seed 2 --count 10 --still 10    # held out: another seed, half the faces still
    python bench/bench_roi.py --clip clip.mp4 --truth clip.jsonl
    python bench/bench_roi.py --frames 10 --set sweep_tiles=3 --set max_fine_pixels=1966080

The default scene is 40 frames of 4K with 20 small faces (28-72 px high) moving over a photo
and 2 large ones (160-320 px); `--still N` adds N small faces that stay put (no motion reveals
them: the sweep must find them).

Every mode sees the same frames; on each frame the modes run one after the other (in an order
that rotates from frame to frame), so machine load hits them alike. Per mode: recall and
precision against the ground truth (greedy matching at --iou), median and 90th-percentile
per-frame latency, and the ratios to `tiles`. The table is printed and written as JSON, and
recall against median latency is plotted to a PNG.

Modes: full, tiles, roi (edge_sdk.roi) and, when the `sahi` package is importable, `sahi`:
SAHI's own get_sliced_prediction with the same model, slices and merge, through a
DetectionModel that wraps the same detector callback.

A ground-truth file holds one JSON object per line: {"frame": 0, "boxes": [[x0, y0, x1, y1], ...]}
in frame pixels (frames without a line have no objects).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from edge_sdk.builder.default_model import CENTERFACE
from edge_sdk.detections import Detections, match_detections
from edge_sdk.roi.strategies import RoiConfig, make_strategy
from edge_sdk.runtime.detectors.base import BatchDetector

TARGETS = {"recall_vs_tiles": 0.90, "latency_vs_tiles": 0.12, "recall_vs_full": 8.0}


def model_384x640(cache: Optional[Path] = None) -> Path:
    """The default CenterFace with its real input size set (made once, kept in the model cache)."""
    from edge_sdk.builder.default_model import default_cache_dir, ensure_model
    from edge_sdk.builder.graph import fix_input, model_from_path
    from edge_sdk import _imports

    source = ensure_model()
    target = (cache or default_cache_dir()) / f"{source.stem}-384x640.onnx"
    if not target.is_file():
        model = fix_input(model_from_path(source), CENTERFACE.input_spec.name, CENTERFACE.input_spec.shape)
        from edge_sdk.fsutil import atomic_write_bytes

        atomic_write_bytes(target, model.SerializeToString())
        _imports.onnx()  # fix_input needed it; keeps the dependency visible
    return target


def make_detector(model: Path, threads: int, threshold: float) -> BatchDetector:
    from edge_sdk.decoders import make_decoder
    from edge_sdk.runtime.backends.onnxruntime import OnnxRuntimeBackend

    spec = CENTERFACE.input_spec
    backend = OnnxRuntimeBackend(model, provider="cpu", threads=threads)
    backend.activate()
    decoder = make_decoder(dict(CENTERFACE.decoder, score_threshold=threshold), spec)
    return BatchDetector(backend.infer, spec, decoder)


def synthetic_frames(args: argparse.Namespace) -> Iterator[Tuple[np.ndarray, Detections]]:
    """synthetic://faces with `--still` near-still faces and `--large` big faces pasted over it.

    Each group of faces is its own synthetic video (its own seed, the same background); the
    pasted crops of the later groups are copied into the first group's frame, and a face more
    than half hidden by crops pasted over it leaves the ground truth, as within one synthetic
    video. Near-still faces are faces of a video played 300 times slower (they drift by under
    a pixel a frame, like people standing or sitting).
    """
    from edge_sdk.runtime.synthetic import MAX_OCCLUSION, SyntheticFaces

    common = dict(width=args.width, height=args.height, frames=args.frames)
    layers = [SyntheticFaces(count=args.count, seed=args.seed, min_size=args.min_size, max_size=args.max_size, **common)]
    if args.still:
        layers.append(SyntheticFaces(count=args.still, seed=args.seed + 20_000, min_size=args.min_size, max_size=args.max_size,
                                     fps=30.0 * 300, **common))
    if args.large:
        lo, hi = args.large_size
        layers.append(SyntheticFaces(count=args.large, seed=args.seed + 10_000, min_size=lo, max_size=hi, **common))
    for i in range(args.frames):
        frame = layers[0].render(i)
        boxes = [layers[0].ground_truth(i).xyxy]
        for layer in layers[1:]:
            pasted = layer.pasted_boxes(i)
            if len(pasted):
                drawn = layer.render(i)
                for x0, y0, x1, y1 in pasted.astype(np.int64):
                    frame[y0:y1, x0:x1] = drawn[y0:y1, x0:x1]
                boxes = [b[box_cover(b, pasted) <= MAX_OCCLUSION] for b in boxes]
            boxes.append(layer.ground_truth(i).xyxy)
        xyxy = np.concatenate(boxes).astype(np.float32).reshape(-1, 4)
        yield frame, Detections(xyxy, np.ones(len(xyxy)), np.zeros(len(xyxy)))


def scene_name(args: argparse.Namespace) -> str:
    return (f"synthetic://faces {args.width}x{args.height} seed={args.seed}: {args.count} moving + {args.still} still faces of "
            f"{args.min_size}-{args.max_size} px, {args.large} of {args.large_size[0]}-{args.large_size[1]} px")


def box_cover(boxes: np.ndarray, covers: np.ndarray) -> np.ndarray:
    """Share of each box's area under `covers` (summed over covers: an upper bound where covers overlap)."""
    if len(boxes) == 0 or len(covers) == 0:
        return np.zeros(len(boxes))
    lt = np.maximum(boxes[:, None, :2], covers[None, :, :2])
    rb = np.minimum(boxes[:, None, 2:], covers[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(axis=2).sum(axis=1)
    area = np.prod(boxes[:, 2:] - boxes[:, :2], axis=1)
    return np.minimum(1.0, inter / np.maximum(area, 1e-6))


def clip_frames(args: argparse.Namespace) -> Iterator[Tuple[np.ndarray, Detections]]:
    from edge_sdk.runtime.sources import open_source

    truth: Dict[int, np.ndarray] = {}
    for n, line in enumerate(Path(args.truth).read_text().splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            truth[int(row["frame"])] = np.asarray(row["boxes"], np.float32).reshape(-1, 4)
    with open_source(args.clip) as source:
        for i in range(args.frames):
            frame = source.read()
            if frame is None:
                return
            boxes = truth.get(i, np.zeros((0, 4), np.float32))
            yield frame, Detections(boxes, np.ones(len(boxes)), np.zeros(len(boxes)))


def sahi_mode(detect: BatchDetector, config: RoiConfig) -> Optional[Callable[[np.ndarray], Detections]]:
    """SAHI's sliced prediction over our detector, or None when sahi is not installed."""
    try:
        from sahi.models.base import DetectionModel
        from sahi.predict import get_sliced_prediction
        from sahi.prediction import ObjectPrediction
    except ImportError:
        return None

    class CallbackModel(DetectionModel):
        def load_model(self) -> None:
            self.model = detect

        def set_model(self, model: Any, **kwargs: Any) -> None:
            self.model = model

        def perform_inference(self, image: np.ndarray) -> None:
            self._original_predictions = self.model([image])

        def _create_object_prediction_list_from_original_predictions(self, shift_amount_list=[[0, 0]], full_shape_list=None) -> None:
            shift = shift_amount_list[0] if shift_amount_list and isinstance(shift_amount_list[0], list) else (shift_amount_list or [0, 0])
            full = full_shape_list[0] if full_shape_list and isinstance(full_shape_list[0], list) else full_shape_list
            det = self._original_predictions[0]
            keep = det.confidence >= self.confidence_threshold
            self._object_prediction_list_per_image = [[
                ObjectPrediction(bbox=[float(v) for v in box], category_id=0, category_name="face", score=float(s),
                                 shift_amount=list(shift), full_shape=list(full) if full is not None else None)
                for box, s in zip(det.xyxy[keep], det.confidence[keep])
            ]]

        @property
        def category_names(self) -> List[str]:
            return ["face"]

    model = CallbackModel(confidence_threshold=config.score_threshold, category_mapping={"0": "face"}, load_at_init=True)
    w, h = detect.input_size

    def run(frame: np.ndarray) -> Detections:
        result = get_sliced_prediction(
            frame, model, slice_height=h, slice_width=w,
            overlap_height_ratio=config.tile_overlap, overlap_width_ratio=config.tile_overlap,
            perform_standard_pred=config.full_frame_pass, postprocess_type="GREEDYNMM",
            postprocess_match_metric="IOS", postprocess_match_threshold=config.merge_threshold, verbose=0,
            auto_slice_resolution=False,
        )
        preds = result.object_prediction_list
        if not preds:
            return Detections.empty()
        boxes = np.array([p.bbox.to_xyxy() for p in preds], np.float32)
        return Detections(boxes, np.array([p.score.value for p in preds]), np.zeros(len(preds)))

    return run


def parse_overrides(items: List[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        out[key.strip()] = json.loads(value) if value[:1] in "[{0123456789-tf" else value
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frames", type=int, default=40, help="frames to measure (tiles costs ~57 inferences a frame)")
    p.add_argument("--width", type=int, default=3840)
    p.add_argument("--height", type=int, default=2160)
    p.add_argument("--count", type=int, default=20, help="small faces in the synthetic scene")
    p.add_argument("--min-size", type=int, default=28, help="smallest small face (pixels, pasted crop)")
    p.add_argument("--max-size", type=int, default=72, help="largest small face")
    p.add_argument("--still", type=int, default=0, help="near-still small faces added to the moving ones")
    p.add_argument("--large", type=int, default=2, help="large faces pasted over the small ones")
    p.add_argument("--large-size", type=lambda v: tuple(int(x) for x in v.split(",")), default=(160, 320), metavar="MIN,MAX",
                   help="size range of the large faces (pixels)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--clip", help="a video file or URI instead of synthetic://faces (needs --truth)")
    p.add_argument("--truth", help="ground truth for --clip, JSON lines {frame, boxes}")
    p.add_argument("--model", type=Path, help="CenterFace ONNX with input 1x3x384x640 (default: the default model, fixed)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iou", type=float, default=0.5)
    p.add_argument("--modes", default="full,tiles,roi,sahi")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a RoiConfig field")
    p.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE[,KEY=VALUE]",
                   help="an extra roi mode with other settings, e.g. roi-sweep4:sweep_tiles=4 (repeatable)")
    p.add_argument("--out", type=Path, default=Path("bench/results"), help="folder for roi_bench.json and roi_bench.png")
    p.add_argument("--plot-only", action="store_true", help="redraw roi_bench.png from the roi_bench.json in --out")
    args = p.parse_args(argv)
    if args.plot_only:
        saved = json.loads((args.out / "roi_bench.json").read_text())
        plot(saved["modes"], args.out / "roi_bench.png", f"{saved['frames']} frames, {saved['source']}")
        return 0
    if args.clip and not args.truth:
        p.error("--clip needs --truth")

    config = RoiConfig.from_dict(dict(RoiConfig().to_dict(), **parse_overrides(args.set)), origin="--set")
    model = args.model or model_384x640()
    detect = make_detector(model, args.threads, config.proposal_threshold)
    runners: Dict[str, Callable[[np.ndarray], Detections]] = {}
    reports: Dict[str, List[Dict[str, Any]]] = {}
    for mode in args.modes.split(","):
        if mode == "sahi":
            fn = sahi_mode(detect, config)
            if fn is None:
                print("sahi: not installed (pip install sahi); skipped", file=sys.stderr)
                continue
            runners["sahi"] = fn
        else:
            strategy = make_strategy(mode, detect, config=config)
            reports[mode] = []

            def run(frame: np.ndarray, s=strategy, log=reports[mode]) -> Detections:
                r = s(frame)
                log.append(r.info)
                return r.detections

            runners[mode] = run

    for variant in args.variant:
        name, _, settings = variant.partition(":")
        overrides = parse_overrides([kv for kv in settings.split(",") if kv])
        vconfig = RoiConfig.from_dict(dict(config.to_dict(), **overrides), origin=f"--variant {name}")
        strategy = make_strategy("roi", detect, config=vconfig)
        reports[name] = []

        def run_variant(frame: np.ndarray, s=strategy, log=reports[name]) -> Detections:
            r = s(frame)
            log.append(r.info)
            return r.detections

        runners[name] = run_variant

    source = clip_frames(args) if args.clip else synthetic_frames(args)
    names = list(runners)
    tally = {m: {"tp": 0, "fp": 0, "fn": 0, "ms": []} for m in names}
    detect([np.zeros((384, 640, 3), np.uint8)])  # warm-up, untimed
    for i, (frame, truth) in enumerate(source):
        for k in range(len(names)):
            mode = names[(i + k) % len(names)]
            t0 = time.perf_counter()
            det = runners[mode](frame)
            tally[mode]["ms"].append((time.perf_counter() - t0) * 1000.0)
            m = match_detections(det, truth, iou=args.iou)
            for key in ("tp", "fp", "fn"):
                tally[mode][key] += m[key]
        print(f"frame {i}: " + "  ".join(f"{m} {tally[m]['ms'][-1]:.0f} ms" for m in names), file=sys.stderr, flush=True)

    rows: Dict[str, Dict[str, float]] = {}
    for mode, t in tally.items():
        n_true, n_pred = t["tp"] + t["fn"], t["tp"] + t["fp"]
        rows[mode] = {
            "recall": t["tp"] / n_true if n_true else 1.0,
            "precision": t["tp"] / n_pred if n_pred else 1.0,
            "median_ms": float(np.median(t["ms"])) if t["ms"] else float("nan"),
            "p90_ms": float(np.percentile(t["ms"], 90)) if t["ms"] else float("nan"),
            "frames": len(t["ms"]),
        }
        if reports.get(mode):
            rows[mode]["model_inputs_per_frame"] = float(np.mean([r.get("images", 0) for r in reports[mode]]))
    tiles = rows.get("tiles")
    print(f"\n{len(tally[names[0]]['ms'])} frames, IoU {args.iou}, {args.threads} ORT threads, "
          f"{'clip ' + args.clip if args.clip else scene_name(args)}")
    width = max(14, *(len(m) for m in rows))
    print(f"{'mode':{width}s} {'recall':>7s} {'precision':>9s} {'median ms':>10s} {'p90 ms':>8s} {'inputs':>7s} {'recall/tiles':>12s} {'latency/tiles':>13s}")
    for mode, r in rows.items():
        # None without a tiles run to compare with (JSON has no NaN)
        rt = r["recall"] / tiles["recall"] if tiles and tiles["recall"] else None
        lt = r["median_ms"] / tiles["median_ms"] if tiles else None
        r["recall_vs_tiles"], r["latency_vs_tiles"] = rt, lt
        inputs = r.get("model_inputs_per_frame", float("nan"))
        print(f"{mode:{width}s} {r['recall']:7.3f} {r['precision']:9.3f} {r['median_ms']:10.1f} {r['p90_ms']:8.1f} {inputs:7.1f} "
              f"{'—' if rt is None else format(rt, '.3f'):>12s} {'—' if lt is None else format(lt, '.3f'):>13s}")
    verdict: Dict[str, Any] = {}
    if "roi" in rows and tiles:
        roi = rows["roi"]
        verdict["recall_vs_tiles"] = roi["recall_vs_tiles"]
        verdict["latency_vs_tiles"] = roi["latency_vs_tiles"]
        if "full" in rows:
            verdict["recall_vs_full"] = roi["recall"] / rows["full"]["recall"] if rows["full"]["recall"] else float("inf")
        print("\ntargets: " + "; ".join(
            f"{k} {v:.3f} ({'met' if (v <= TARGETS[k] if k == 'latency_vs_tiles' else v >= TARGETS[k]) else 'missed'}, target "
            f"{'<=' if k == 'latency_vs_tiles' else '>='} {TARGETS[k]})" for k, v in verdict.items()))

    args.out.mkdir(parents=True, exist_ok=True)
    from edge_sdk.fsutil import atomic_write_json

    atomic_write_json(args.out / "roi_bench.json", {
        "frames": len(tally[names[0]]["ms"]), "iou": args.iou, "threads": args.threads,
        "source": args.clip or scene_name(args),
        "config": config.to_dict(), "modes": rows, "targets": verdict,
    })
    plot(rows, args.out / "roi_bench.png", f"{len(tally[names[0]]['ms'])} frames, {args.clip or scene_name(args)}")
    print(f"\nwrote {args.out / 'roi_bench.json'} and {args.out / 'roi_bench.png'}")
    return 0


def plot(rows: Dict[str, Dict[str, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    markers = "osD^vP*X"
    for k, (mode, r) in enumerate(rows.items()):
        ax.scatter(r["median_ms"], r["recall"], s=60 if mode in ("full", "tiles", "roi", "sahi") else 30,
                   marker=markers[k % len(markers)], label=mode)
    if "tiles" in rows:
        t = rows["tiles"]
        ax.axhline(TARGETS["recall_vs_tiles"] * t["recall"], color="grey", lw=0.8, ls="--")
        ax.axvline(TARGETS["latency_vs_tiles"] * t["median_ms"], color="grey", lw=0.8, ls="--")
        ax.text(TARGETS["latency_vs_tiles"] * t["median_ms"], 0.05, " target: left of and above the dashed lines", fontsize=7, color="grey", ha="right")
    ax.set_xscale("log")
    ax.set_xlabel("median latency per frame (ms, log scale)")
    ax.set_ylabel("recall")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"CenterFace on 4K: recall vs latency\n{title}", fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center right")
    fig.tight_layout()
    tmp = path.with_name("." + path.name + ".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)


if __name__ == "__main__":
    raise SystemExit(main())
