"""What one backend call of a batch costs per frame, against a call per frame: the ceiling on what
batching the streams of one process can gain on this machine.

    python bench/bench_batch_cost.py                       # batches 1, 2, 4, 8; 2 ONNX Runtime threads
    python bench/bench_batch_cost.py --threads 1 --rounds 30

The default bundle's fp32 model (or --bundle's) with its batch dimension made free, ONNX Runtime on
the CPU, at the bundle's input size (random pixels: the cost of a dense model does not depend on
them). Each round runs every batch size once, in turn, so that the load of
other processes falls on all of them alike; printed per batch size: the median over the rounds of
the call's time, its time per frame, and that against batch 1 (below 1: a batch is cheaper per
frame than single calls; at or above 1, batching cannot raise this machine's throughput, whatever
the batcher does, and what is left to gain is outside the model).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_streams import batch_model  # noqa: E402


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, help="bundle folder (default: the embedded CenterFace bundle)")
    parser.add_argument("--batches", default="1,2,4,8", help="batch sizes, comma-separated")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="ONNX Runtime threads")
    parser.add_argument("--rounds", type=int, default=15, help="rounds (each runs every batch size once)")
    args = parser.parse_args(argv)
    from edge_sdk.manifest import Bundle
    from edge_sdk.runtime.backends.onnxruntime import OnnxRuntimeBackend

    if args.bundle is None:
        from edge_sdk.default_bundle import ensure_default_bundle

        args.bundle = ensure_default_bundle("fp32")
    bundle = Bundle.load(args.bundle)
    spec = bundle.inputs[0]
    sizes = [int(b) for b in args.batches.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        backend = OnnxRuntimeBackend(batch_model(args.bundle, Path(tmp) / "model_batch.onnx"), provider="cpu",
                                     threads=args.threads)
        backend.activate()
        rng = np.random.default_rng(0)
        _, c, h, w = spec.shape
        inputs = {b: rng.random((b, c, h, w), dtype=np.float32) for b in sizes}
        for b in sizes:  # warm-up: first calls of a shape plan their memory
            backend.infer({spec.name: inputs[b]})
        times: Dict[int, List[float]] = {b: [] for b in sizes}
        for _ in range(args.rounds):
            for b in sizes:
                t = time.perf_counter()
                backend.infer({spec.name: inputs[b]})
                times[b].append((time.perf_counter() - t) * 1000.0)
        backend.deactivate()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; input {w}x{h}, {args.threads} ONNX "
          f"Runtime threads, {args.rounds} rounds")
    print(f"{'batch':>5} | {'call ms':>8} {'ms/frame':>9} {'vs batch 1':>10}")
    one = float(np.median(times[sizes[0]])) / sizes[0]
    for b in sizes:
        call = float(np.median(times[b]))
        print(f"{b:>5} | {call:8.1f} {call / b:9.1f} {call / b / one:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
