"""Benchmark the host builder's outputs: ONNX Runtime CPU latency of the FP32, FP16 and INT8
variants side by side on the same inputs, bundle file sizes, and calibration throughput
(images/s and its ratio to plain FP32 inference on the same images).

    python bench/bench_build.py BUNDLE [--runs 30] [--calib-images 16]

BUNDLE is a folder written by `edge-sdk build` (with --precision int8 or best for all three
variants). CPU latency of the INT8 Q/DQ model says nothing about TensorRT speed on the device:
without VNNI, ONNX Runtime runs Q/DQ slower than FP32.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Dict



def median_ms(fn, runs: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--calib-images", type=int, default=16)
    parser.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0: its default)")
    args = parser.parse_args()

    import onnxruntime as ort

    from edge_sdk.builder.bundle import file_sizes
    from edge_sdk.builder.calibration import collect_ranges
    from edge_sdk.builder.images import default_calib_dir, list_images, preprocess_images
    from edge_sdk.manifest import Bundle

    bundle = Bundle.load(args.bundle)
    spec = bundle.inputs[0]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.log_severity_level = 3
    folder = Path((bundle.get("calibration") or {}).get("folder") or default_calib_dir())
    images = list_images(folder)[: args.calib_images]
    tensors, _ = preprocess_images(images, spec, lambda n=1: None)

    print(f"bundle {bundle.root}  input {spec.shape}  ORT {ort.__version__} CPU, {args.runs} runs, same input for all")
    sessions = {v: ort.InferenceSession(str(bundle.model_path(v)), opts, providers=["CPUExecutionProvider"]) for v in bundle.variants()}
    feed = {spec.name: tensors[0]}
    lat: Dict[str, float] = {}
    for _round in range(2):  # interleave variants so drift hits them alike; keep the second round
        for v, sess in sessions.items():
            lat[v] = median_ms(lambda s=sess: s.run(None, feed), args.runs)
    sizes = file_sizes(bundle)
    from edge_sdk.manifest import VARIANT_FILES

    print(f"{'variant':8} {'median ms':>10} {'vs fp32':>8} {'size MB':>8}")
    for v in sessions:
        print(f"{v:8} {lat[v]:10.2f} {lat[v] / lat['fp32']:8.2f} {sizes[VARIANT_FILES[v]] / 1e6:8.2f}")
    total = sum(sizes.values())
    print(f"bundle total {total / 1e6:.2f} MB in {len(sizes)} files")

    fp32 = sessions["fp32"]
    t0 = time.perf_counter()
    for t in tensors:
        fp32.run(None, {spec.name: t})
    infer_s = time.perf_counter() - t0
    import onnx

    model = onnx.load(str(bundle.model_path("fp32")))
    t0 = time.perf_counter()
    collect_ranges(model, [{spec.name: t} for t in tensors], method="entropy")
    calib_s = time.perf_counter() - t0
    print(f"calibration (entropy, 2 passes, 2048 bins): {len(tensors) / calib_s:.1f} images/s; "
          f"plain FP32 inference {len(tensors) / infer_s:.1f} images/s; ratio calibration/inference time {calib_s / infer_s:.1f}x")


if __name__ == "__main__":
    main()
