"""Decoder and NMS speed, and synthetic 4K frame rendering, on this machine's CPU.

    python bench/bench_decoders.py [--repeat 200]

Prints medians in milliseconds. The CenterFace rows decode outputs shaped like the real
model's at 384x640 (faces as 3x3 score blobs), once with the vectorized decoder and once with
a per-candidate Python loop doing the same maths, side by side, and print their ratio.
"""
from __future__ import annotations

import argparse
import time
from typing import Callable, List

import numpy as np

from edge_sdk.decoders import CENTERFACE_DEFAULT, make_decoder, nms
from edge_sdk.geometry import Placement
from edge_sdk.preprocess import InputSpec

H, W = 384, 640


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e3)


def centerface_outputs(faces: int, seed: int = 0) -> List[np.ndarray]:
    rng = np.random.default_rng(seed)
    h, w = H // 4, W // 4
    heat = rng.uniform(0, 0.05, (1, 1, h, w)).astype(np.float32)
    scale = rng.normal(1.5, 0.3, (1, 2, h, w)).astype(np.float32)
    offset = rng.uniform(0, 1, (1, 2, h, w)).astype(np.float32)
    lms = rng.uniform(0, 1, (1, 10, h, w)).astype(np.float32)
    for y, x in zip(rng.integers(1, h - 1, faces), rng.integers(1, w - 1, faces)):
        heat[0, 0, y - 1 : y + 2, x - 1 : x + 2] = 0.6
        heat[0, 0, y, x] = 0.9
    return [heat, scale, offset, lms]


def loop_decode(outputs: List[np.ndarray], threshold: float, iou: float) -> np.ndarray:
    """The same decode, one candidate at a time, with pairwise NMS: the baseline."""
    heat, scale, offset, _ = outputs
    boxes, scores = [], []
    for y, x in zip(*np.nonzero(heat[0, 0] > threshold)):
        bh, bw = np.exp(scale[0, 0, y, x]) * 4, np.exp(scale[0, 1, y, x]) * 4
        x1 = (x + offset[0, 1, y, x] + 0.5) * 4 - bw / 2
        y1 = (y + offset[0, 0, y, x] + 0.5) * 4 - bh / 2
        boxes.append((x1, y1, x1 + bw, y1 + bh))
        scores.append(heat[0, 0, y, x])
    order = sorted(range(len(boxes)), key=lambda k: -scores[k])
    keep: List[int] = []
    for i in order:
        ok = True
        for j in keep:
            a, b = boxes[i], boxes[j]
            iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
            ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
            inter = iw * ih
            union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
            if inter / union > iou:
                ok = False
                break
        if ok:
            keep.append(i)
    return np.asarray([boxes[k] for k in keep], np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    repeat = parser.parse_args().repeat
    spec = InputSpec(name="input.1", shape=[1, 3, H, W])
    identity = [Placement.affine(1.0, 1.0, 0.0, 0.0, W, H)]

    print(f"{'case':<48} {'median ms':>10}")
    for faces in (1, 10, 50):
        outs = centerface_outputs(faces)
        for local_max in (True, False):
            dec = make_decoder(dict(CENTERFACE_DEFAULT, local_max=local_max), spec)
            ms = median_ms(lambda: dec(outs, identity), repeat)
            print(f"{f'centerface 384x640, {faces} faces, local_max={local_max}':<48} {ms:>10.3f}")
        dec = make_decoder(dict(CENTERFACE_DEFAULT, local_max=False), spec)
        ours = median_ms(lambda: dec(outs, identity), repeat)
        loop = median_ms(lambda: loop_decode(outs, 0.5, 0.3), repeat)
        assert len(loop_decode(outs, 0.5, 0.3)) == len(dec(outs, identity)[0])
        print(f"{f'  per-candidate loop baseline, {faces} faces':<48} {loop:>10.3f}   (loop / vectorized: {loop / ours:.1f}x)")

    rng = np.random.default_rng(1)
    v8 = rng.uniform(0, 0.2, (1, 84, 8400)).astype(np.float32)
    v8[0, :4] = rng.uniform(10, 600, (4, 8400))
    v8[0, 4 + rng.integers(0, 80, 300), rng.integers(0, 8400, 300)] = 0.8
    dec = make_decoder({"type": "yolov8", "score_threshold": 0.25}, InputSpec(shape=[1, 3, 640, 640]))
    print(f"{'yolov8 640x640, 80 classes, 8400 boxes, ~300 hits':<48} {median_ms(lambda: dec([v8], identity), repeat):>10.3f}")

    for n in (100, 1000):
        c = rng.uniform(0, 600, (n, 2))
        boxes = np.concatenate([c, c + rng.uniform(10, 80, (n, 2))], axis=1).astype(np.float32)
        scores = rng.uniform(0, 1, n).astype(np.float32)
        classes = rng.integers(0, 80, n)
        print(f"{f'nms {n} boxes, class-agnostic':<48} {median_ms(lambda: nms(boxes, scores, 0.45), repeat):>10.3f}")
        print(f"{f'nms {n} boxes, 80 classes':<48} {median_ms(lambda: nms(boxes, scores, 0.45, classes), repeat):>10.3f}")

    from edge_sdk.runtime.synthetic import SyntheticFaces

    src = SyntheticFaces()
    print(f"{'synthetic://faces 3840x2160, 20 faces: read()':<48} {median_ms(src.read, max(20, repeat // 5)):>10.3f}")


if __name__ == "__main__":
    main()
