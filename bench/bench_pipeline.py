"""Pipeline throughput against the model alone and against a naive loop, side by side.

    python bench/bench_pipeline.py                 # 3 rounds x 300 frames, RSS over 5,000 frames
    python bench/bench_pipeline.py --frames 100 --rss-frames 1000 --rounds 2

Same video (a synthetic scene of real faces written to an MJPG file), same model (the
default CenterFace bundle, or --bundle), same 640x384 input, same ONNX Runtime thread count,
steady state only (each variant's first --warmup frames are not timed). Variants:

- (a) model alone: `session.run` in a tight loop on one ready tensor: the ceiling on a CPU.
- (b) naive loop: what a user writes first: cv2 read → resize → float tensor → session.run →
  decode.
- pipeline: edge_sdk.runtime.Pipeline (capture thread + preallocated buffers + bound I/O).

(a) and (b) run with the pipeline backend's session options (same thread count, idle threads
not spinning); (a0) and (b0) repeat them with ONNX Runtime's defaults (spinning threads), which
is what a user's own loop gets.

The variants run in rounds (a, b, pipeline, a, b, pipeline, ...) so that load from other
processes hits all of them alike; the table shows the median FPS of the rounds and the ratios.
Then one long pipeline run samples the process RSS every 250 frames.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import numpy as np


def rss_mb() -> float:
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except ImportError:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def make_video(path: Path, frames: int, width: int, height: int) -> Path:
    import cv2

    from edge_sdk.runtime.synthetic import SyntheticFaces

    scene = SyntheticFaces(width=width, height=height, fps=30, count=12, seed=0, min_size=40, max_size=120, frames=frames)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 30, (width, height))
    if not writer.isOpened():
        raise SystemExit("this OpenCV cannot write MJPG video")
    for frame, _truth in scene:
        writer.write(frame)
    writer.release()
    return path


def session(model: Path, threads: int, like_pipeline: bool) -> Any:
    """ONNX Runtime's defaults (what a user gets), or exactly the pipeline backend's options."""
    import onnxruntime as ort

    if like_pipeline:
        from edge_sdk.runtime.backends.onnxruntime import SessionFromOnnx

        return SessionFromOnnx(model, ["CPUExecutionProvider"], threads)()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    return ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])


def timed(step: Callable[[], None], warmup: int, frames: int) -> float:
    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(frames):
        step()
    return frames / (time.perf_counter() - t0)


def model_alone(model: Path, spec: Any, threads: int, warmup: int, frames: int, like_pipeline: bool) -> float:
    sess = session(model, threads, like_pipeline)
    x = np.random.default_rng(0).uniform(0, 255, spec.shape).astype(np.float32)
    feed = {spec.name: x}
    return timed(lambda: sess.run(None, feed), warmup, frames)


def naive_loop(model: Path, spec: Any, decoder_spec: Dict[str, Any], video: Path, threads: int, warmup: int, frames: int,
               like_pipeline: bool) -> float:
    import cv2

    from edge_sdk.decoders import make_decoder
    from edge_sdk.preprocess import plan_transform

    sess = session(model, threads, like_pipeline)
    decoder = make_decoder(decoder_spec, spec)
    cap = cv2.VideoCapture(str(video))

    def step() -> None:
        ok, frame = cap.read()
        if not ok:
            cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            ok, frame = cap.read()
        h, w = frame.shape[:2]
        resized = cv2.resize(frame, (spec.width, spec.height))
        tensor = resized.transpose(2, 0, 1)[None].astype(np.float32)
        outputs = sess.run(None, {spec.name: tensor})
        transform, _ = plan_transform(w, h, spec.width, spec.height, "stretch")
        decoder(outputs, [transform])

    try:
        return timed(step, warmup, frames)
    finally:
        cap.release()


def pipeline_run(bundle: Path, video: Path, threads: int, warmup: int, frames: int, rss_every: int = 0) -> Tuple[float, List[Tuple[int, float]]]:
    from edge_sdk.runtime.config import CacheConfig, PipelineConfig, SourceConfig
    from edge_sdk.runtime.pipeline import Pipeline

    cfg = PipelineConfig(
        source=SourceConfig(str(video), loop=True),
        bundle=str(bundle),
        backend="onnxruntime-cpu",
        threads=threads,
        max_frames=warmup + frames,
        cache=CacheConfig(enabled=False),  # every frame of the clip differs; measure the full path
    )
    rss: List[Tuple[int, float]] = []
    with Pipeline(cfg) as pipeline:
        t0 = 0.0
        for n, _result in enumerate(pipeline):
            if n == warmup:
                t0 = time.perf_counter()
            done = n + 1 - warmup
            if rss_every and done > 0 and (done % rss_every == 0 or done == 1 or done == frames):
                rss.append((done, rss_mb()))
        elapsed = time.perf_counter() - t0
    return (frames - 1) / elapsed if frames > 1 else 0.0, rss


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, help="bundle folder (default: the embedded CenterFace bundle)")
    parser.add_argument("--frames", type=int, default=300, help="timed frames per variant per round")
    parser.add_argument("--warmup", type=int, default=20, help="untimed frames at the start of each run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="ONNX Runtime intra-op threads, all variants")
    parser.add_argument("--rss-frames", type=int, default=5000, help="frames of the long pipeline run that samples RSS (0: skip)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=768)
    args = parser.parse_args(argv)

    from edge_sdk.cli.detect import ensure_default_bundle
    from edge_sdk.manifest import Bundle

    bundle_dir = args.bundle or ensure_default_bundle("fp32")
    bundle = Bundle.load(bundle_dir)
    spec = bundle.inputs[0]
    model = bundle.model_path("fp32")
    with tempfile.TemporaryDirectory(prefix="edge-sdk-bench-") as tmp:
        video = make_video(Path(tmp) / "clip.avi", 150, args.width, args.height)
        print(f"video {args.width}x{args.height} MJPG, model {model.name} input {spec.width}x{spec.height}, "
              f"threads {args.threads}, {args.rounds} rounds x {args.frames} frames (+{args.warmup} warm-up)")
        runs: Dict[str, Callable[[], float]] = {
            "model alone (a)": lambda: model_alone(model, spec, args.threads, args.warmup, args.frames, True),
            "naive loop (b)": lambda: naive_loop(model, spec, bundle.decoder, video, args.threads, args.warmup, args.frames, True),
            "model alone, ORT defaults (a0)": lambda: model_alone(model, spec, args.threads, args.warmup, args.frames, False),
            "naive loop, ORT defaults (b0)": lambda: naive_loop(model, spec, bundle.decoder, video, args.threads, args.warmup, args.frames, False),
            "pipeline": lambda: pipeline_run(bundle_dir, video, args.threads, args.warmup, args.frames)[0],
        }
        fps: Dict[str, List[float]] = {k: [] for k in runs}
        for r in range(args.rounds):
            for name, run in runs.items():
                fps[name].append(run())
            print(f"  round {r + 1}: " + ", ".join(f"{k.split(' (')[-1].rstrip(')')} {v[-1]:.1f}" for k, v in fps.items()), flush=True)
        med = {k: statistics.median(v) for k, v in fps.items()}
        print()
        print(f"| variant | FPS (median of {args.rounds}) | ms/frame | pipeline / variant (median of rounds) |")
        print("|---|---:|---:|---:|")
        for k, v in med.items():
            ratio = statistics.median(p / x for p, x in zip(fps["pipeline"], fps[k]))
            print(f"| {k} | {v:.1f} | {1000 / v:.1f} | {ratio:.3f} |")
        print()
        print("targets: pipeline >= 0.90 x (a) and >= 1.05 x (b); (a) and (b) use the pipeline's own session options "
              "(same threads, no spinning), (a0) and (b0) ONNX Runtime's defaults")
        if args.rss_frames:
            rate, rss = pipeline_run(bundle_dir, video, args.threads, args.warmup, args.rss_frames, rss_every=250)
            start, end = rss[0][1], rss[-1][1]
            peak = max(v for _, v in rss)
            print()
            print(f"RSS over {args.rss_frames} pipeline frames ({rate:.1f} FPS): start {start:.1f} MB, end {end:.1f} MB, "
                  f"max {peak:.1f} MB, end - start {end - start:+.1f} MB")
            print("  samples (frame: MB): " + ", ".join(f"{n}: {v:.1f}" for n, v in rss[:: max(1, len(rss) // 10)]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
