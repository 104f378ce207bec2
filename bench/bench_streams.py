"""N streams through one model in one process against N processes of one stream each.

    python bench/bench_streams.py                            # N = 1, 2, 4; 60 frames per stream, 100 ms delay
    python bench/bench_streams.py --streams 1,2,4,8 --frames 200

Every stream is a synthetic 1280x720 colour scene of real faces (its own seed), read to its end.
Same model (the default CenterFace bundle's, or --bundle's, with its batch dimension made free so
that one call takes the frames of several streams), ONNX Runtime on the CPU.

- one process: a MultiStreamPipeline over the N sources, max batch N (preferred N), a queue delay
  of --delay-ms, --threads ONNX Runtime threads.
- N processes: N copies of the same program with one stream each (batch 1), started together,
  --threads // N ONNX Runtime threads each (the same cores in all).

Each variant runs in fresh processes. Printed per N: aggregate frames per second (all frames over
the wall time from the first start to the last end), total RSS (the sum of each process's peak),
the one process's batch efficiency and p99 queue delay, the worst stream's p99 latency
(capture to result), and each stream's recall against the scene's ground truth (IoU 0.5) in the
one process and in its own. The machine's load average is printed with the table: other processes'
load lowers every figure, and the ratios are what to compare.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np


def scene_uri(seed: int, frames: int) -> str:
    return f"synthetic://faces?width=1280&height=720&frames={frames}&seed={seed}&count=6&min_size=40&max_size=160"


def batch_model(bundle_dir: Path, out: Path) -> Path:
    """The bundle's fp32 model with a symbolic batch dimension on its input and outputs."""
    import onnx

    from edge_sdk.manifest import Bundle

    bundle = Bundle.load(bundle_dir)
    model = onnx.load(str(bundle.model_path("fp32")))
    for value in list(model.graph.input) + list(model.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_param = "batch"
    del model.graph.value_info[:]
    onnx.save(model, str(out))
    return out


def worker(args: argparse.Namespace) -> Dict[str, Any]:
    """One process: `args.seeds` streams through one MultiStreamPipeline; its figures as JSON."""
    from edge_sdk.detections import match_detections
    from edge_sdk.manifest import Bundle
    from edge_sdk.runtime.backends.onnxruntime import OnnxRuntimeBackend
    from edge_sdk.runtime.batcher import BatchPolicy
    from edge_sdk.runtime.detectors.batched import make_batch_detector
    from edge_sdk.runtime.model import Model
    from edge_sdk.runtime.streams import MALLOC_ARENAS, MultiStreamPipeline

    bundle = Bundle.load(args.bundle)
    seeds = [int(s) for s in args.seeds.split(",")]
    n = len(seeds)
    backend = OnnxRuntimeBackend(args.model, provider="cpu", threads=args.threads)
    backend.activate()
    model = Model(backend, bundle.inputs[0], dict(bundle.decoder))
    detector = make_batch_detector(model, max_batch_size=n)
    sources = [(f"s{seed}", scene_uri(seed, args.frames)) for seed in seeds]
    latencies: Dict[str, List[float]] = {sid: [] for sid, _ in sources}
    hits: Dict[str, List[int]] = {sid: [0, 0] for sid, _ in sources}  # true positives, faces
    pipeline = MultiStreamPipeline(sources, detector, BatchPolicy(n, (n,), args.delay_ms), malloc_arenas=MALLOC_ARENAS)
    t0 = time.time()
    with pipeline:
        for result in pipeline.results(timeout=600):
            latencies[result.stream].append(result.latency_ms["total"])
            if result.ground_truth is not None:
                match = match_detections(result.detections, result.ground_truth, iou=0.5, class_aware=False)
                hits[result.stream][0] += int(match["tp"])
                hits[result.stream][1] += int(match["tp"] + match["fn"])
    t1 = time.time()
    stats = pipeline.stats()["batcher"]
    model.close()
    return {"frames": sum(len(v) for v in latencies.values()), "t0": t0, "t1": t1,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "efficiency": stats["efficiency"], "queue_p99_ms": stats["queue_delay_ms"].get("p99", 0.0),
            "stream_p99_ms": max(float(np.percentile(v, 99)) for v in latencies.values() if v),
            "recall": {sid: tp / max(1, faces) for sid, (tp, faces) in hits.items()}}


def run_workers(args: argparse.Namespace, groups: List[List[int]], threads: int) -> List[Dict[str, Any]]:
    cmd = [sys.executable, __file__, "--worker", "--bundle", str(args.bundle), "--model", str(args.model),
           "--frames", str(args.frames), "--delay-ms", str(args.delay_ms), "--threads", str(threads)]
    procs = [subprocess.Popen(cmd + ["--seeds", ",".join(map(str, g))], stdout=subprocess.PIPE, text=True) for g in groups]
    out = []
    try:
        for p in procs:
            stdout, _ = p.communicate()
            if p.returncode:
                raise SystemExit(f"a worker failed with exit status {p.returncode}")
            out.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:  # one worker failed (or this process was stopped): the others do not run on alone
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
    return out


def summary(reports: List[Dict[str, Any]]) -> Dict[str, float]:
    wall = max(r["t1"] for r in reports) - min(r["t0"] for r in reports)
    recall = {sid: value for r in reports for sid, value in r["recall"].items()}
    return {"fps": sum(r["frames"] for r in reports) / wall, "rss_mb": sum(r["rss_mb"] for r in reports),
            "p99_ms": max(r["stream_p99_ms"] for r in reports), "recall": recall}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, help="bundle folder (default: the embedded CenterFace bundle)")
    parser.add_argument("--streams", default="1,2,4", help="the stream counts N, comma-separated")
    parser.add_argument("--frames", type=int, default=60, help="frames per stream")
    parser.add_argument("--delay-ms", type=float, default=100.0, help="the batcher's max_queue_delay_ms")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="ONNX Runtime threads in all")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--seeds", default="0", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if args.bundle is None:
        from edge_sdk.default_bundle import ensure_default_bundle

        args.bundle = ensure_default_bundle("fp32")
    with tempfile.TemporaryDirectory() as tmp:
        args.model = batch_model(args.bundle, Path(tmp) / "model_batch.onnx")
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.frames} frames per stream, "
              f"1280x720, queue delay {args.delay_ms:g} ms, {args.threads} ONNX Runtime threads in all")
        print(f"{'N':>2} | {'one process fps':>15} {'N processes fps':>15} {'ratio':>6} | {'RSS one MB':>10} "
              f"{'RSS N MB':>9} {'ratio':>6} | {'batch eff':>9} {'queue p99':>9} | {'p99 one':>8} {'p99 N':>8} | "
              f"recall per stream, one process = N processes")
        for n in (int(s) for s in args.streams.split(",")):
            one = run_workers(args, [list(range(n))], args.threads)
            many = run_workers(args, [[k] for k in range(n)], max(1, args.threads // n))
            a, b = summary(one), summary(many)
            print(f"{n:>2} | {a['fps']:>15.1f} {b['fps']:>15.1f} {a['fps'] / b['fps']:>6.2f} | {a['rss_mb']:>10.0f} "
                  f"{b['rss_mb']:>9.0f} {a['rss_mb'] / b['rss_mb']:>6.2f} | {one[0]['efficiency']:>9.2f} "
                  f"{one[0]['queue_p99_ms']:>7.1f}ms | {a['p99_ms']:>6.0f}ms {b['p99_ms']:>6.0f}ms | "
                  f"{' '.join(f'{a_r:.3f}' for a_r in a['recall'].values())} = "
                  f"{' '.join(f'{b_r:.3f}' for b_r in b['recall'].values())}", flush=True)
        print(f"load average {os.getloadavg()[0]:.2f} after the run")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
