"""What the tracker costs per frame: ByteTracker.update at 10, 50 and 200 boxes.

    python bench/bench_tracker.py                      # 300 frames at each count
    python bench/bench_tracker.py --frames 100 --boxes 10 50 200 500

Each scene: `boxes` objects of 20-80 px in a 1920x1080 frame, each at its own constant speed
(bouncing off the edges), their boxes jittered by 1 px and their scores drawn from 0.3-1.0 (so
both association stages run), one in ten missed in any frame. The first 10 frames are left out
(tracks being born); the figures are milliseconds per frame of `update` alone, on this CPU.
"""
from __future__ import annotations

import argparse
import time
from typing import Dict, List

import numpy as np

from edge_sdk.detections import Detections
from edge_sdk.tracking.tracker import ByteTracker


def scene(boxes: int, frames: int, seed: int = 0) -> List[Detections]:
    rng = np.random.default_rng(seed)
    size = rng.uniform(20, 80, (boxes, 1)) * np.array([[1.0, 1.2]])
    span = np.array([1920.0, 1080.0]) - size
    start = rng.uniform(0, 1, (boxes, 2)) * span
    speed = rng.uniform(-6, 6, (boxes, 2))
    out = []
    for i in range(frames):
        travel = np.mod(start + speed * i, 2 * span)
        pos = span - np.abs(travel - span)
        xyxy = np.concatenate([pos, pos + size], axis=1) + rng.normal(0, 1, (boxes, 4))
        keep = rng.random(boxes) > 0.1
        out.append(Detections(xyxy[keep], rng.uniform(0.3, 1.0, int(keep.sum())), np.zeros(int(keep.sum()))))
    return out


def measure(boxes: int, frames: int) -> Dict[str, float]:
    clip = scene(boxes, frames + 10)
    tracker = ByteTracker()
    times = []
    for k, found in enumerate(clip):
        t0 = time.perf_counter()
        tracker.update(found)
        if k >= 10:
            times.append((time.perf_counter() - t0) * 1000.0)
    ms = np.array(times)
    return {"boxes": boxes, "mean_ms": float(ms.mean()), "p50_ms": float(np.percentile(ms, 50)),
            "p95_ms": float(np.percentile(ms, 95)), "tracks": len(tracker.active_ids)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--boxes", type=int, nargs="+", default=[10, 50, 200])
    args = parser.parse_args()
    print("boxes  mean ms  p50 ms  p95 ms  confirmed tracks")
    for boxes in args.boxes:
        r = measure(boxes, args.frames)
        print(f"{r['boxes']:5d}  {r['mean_ms']:7.2f}  {r['p50_ms']:6.2f}  {r['p95_ms']:6.2f}  {r['tracks']:d}")


if __name__ == "__main__":
    main()
