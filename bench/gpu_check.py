"""The CUDA layer on a real NVIDIA GPU: correctness against the CPU and speed, as one table.

    python bench/gpu_check.py [--impl auto|cuda-python|pycuda|all] [--frames 200] [--json out.json]

For each implementation that opens a device (cuda-python; pycuda where it imports):

1. buffers: device memory, a pinned and a mapped page-locked buffer (with its device pointer),
   a round trip through each;
2. kernels against the CPU Preprocessor: full frames (1080p and 4K, letterbox float16 RGB and
   stretch float32; an odd-sized upscale; pitched rows read in place from mapped memory) and a
   ROI batch; the max abs error, the share of differing elements, within tolerance or not;
3. a CUDA graph: the per-frame work captured once and replayed (cuda-python), against eager
   launches, median host time per frame;
4. kernel throughput at 1080p and 4K -> 640x384 (GPU time from events), frames/s;
5. mapped read (the kernel reads the frame in host memory, no copy) against pinned + one async
   copy per frame, GPU time per frame.

Without a usable GPU it prints one line naming the cause and exits with status 2.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from edge_sdk.cuda import MAPPED, PINNED, CudaApi, KernelArgs, open_cuda
from edge_sdk.cuda.compiler import KernelCache
from edge_sdk.cuda.preprocess import BLOCK, KERNEL_FILE, GpuPreprocessor, plan_slot
from edge_sdk.errors import EdgeSdkError
from edge_sdk.preprocess import InputSpec, Preprocessor

NET = (384, 640)
SIZES = (("1080p", (1080, 1920)), ("4K", (2160, 3840)))
Row = Dict[str, Any]


def noise(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def compare(gpu: np.ndarray, cpu: np.ndarray, spec: InputSpec) -> Dict[str, Any]:
    """Max abs error, share of differing elements, and whether both are within the stated
    tolerance (edge_sdk/cuda/preprocess.py: one grey level times |scale|, 0.1 % of elements)."""
    diff = np.abs(gpu.astype(np.float64) - cpu.astype(np.float64))
    step = max(abs(s) for s in spec.scale)
    if spec.dtype == "float16":
        step += float(np.abs(cpu.astype(np.float64)).max()) * 2.0 ** -10
    differing = float(np.mean(diff > 0))
    ok = float(diff.max()) <= step * (1 + 1e-6) and differing <= 1e-3
    return {"max_abs_error": float(diff.max()), "differing": differing, "result": "ok" if ok else "OUT OF TOLERANCE"}


def gpu_ms(api: CudaApi, stream: Any, fn: Callable[[], None], repeat: int) -> float:
    """Median GPU time of `fn`'s work on `stream`, from events around each repetition."""
    start, end = api.create_event(), api.create_event()
    fn()
    api.synchronize(stream)
    times = []
    for _ in range(repeat):
        api.record(start, stream)
        fn()
        api.record(end, stream)
        api.event_synchronize(end)
        times.append(api.elapsed_ms(start, end))
    return float(np.median(times))


def host_ms(api: CudaApi, stream: Any, fn: Callable[[], None], repeat: int) -> float:
    """Median wall time of `fn` plus waiting for its work."""
    fn()
    api.synchronize(stream)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        api.synchronize(stream)
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def fps(ms: float) -> float:
    return 1000.0 / ms if ms > 0 else float("inf")


def check_buffers(api: CudaApi) -> List[Row]:
    rows = []
    stream = api.create_stream()
    data = noise(64, 64)
    dev = api.alloc_device(data.nbytes)
    for kind in (PINNED, MAPPED):
        if kind == MAPPED and not api.properties.can_map_host_memory:
            rows.append({"check": "buffer mapped", "result": "device cannot map host memory"})
            continue
        src = api.alloc_host(data.shape, np.uint8, mapped=kind == MAPPED)
        back = api.alloc_host(data.shape, np.uint8)
        src.array[...] = data
        api.copy_htod(dev, src, data.nbytes, stream)
        api.copy_dtoh(back, dev.ptr, data.nbytes, stream)
        api.synchronize(stream)
        ok = bool(np.array_equal(back.array, data))
        detail = f"device pointer 0x{src.device_ptr:x}" if src.device_ptr is not None else "no device pointer"
        rows.append({"check": f"buffer {kind}", "result": "round trip ok" if ok else "ROUND TRIP MISMATCH", "detail": detail})
        api.free_host(src)
        api.free_host(back)
    api.free_device(dev)
    return rows


def check_kernels(api: CudaApi, cache: KernelCache, sizes=SIZES) -> List[Row]:
    rows = []
    mean, scale = [104.0, 117.0, 123.0], [1 / 58.0, 1 / 57.0, 1 / 59.0]
    cases = []
    for i, (label, (h, w)) in enumerate(sizes):
        cases.append((f"{label} letterbox fp16 RGB", noise(h, w, 2 * i), dict(dtype="float16", color="RGB", mean=mean, scale=scale)))
        cases.append((f"{label} stretch fp32", noise(h, w, 2 * i + 1), dict(resize="stretch")))
        cases.append((f"{label} stretch fp32 area", noise(h, w, 2 * i + 1), dict(resize="stretch", interpolation="area")))
    cases.append(("641x383 upscale fp32", noise(383, 641, 3), dict(mean=mean, scale=scale, pad_value=114)))
    for name, frame, options in cases:
        spec = InputSpec(shape=[1, 3, NET[0], NET[1]], **options)
        pre = GpuPreprocessor(spec, api, cache=cache)
        pre.fill(frame)
        rows.append({"check": f"kernel {name}", **compare(pre.download(), Preprocessor(spec)(frame)[0], spec)})
        pre.close()
    # Pitched rows read in place from a mapped buffer (the capture ring's layout).
    if api.properties.can_map_host_memory:
        h, w, pitch = 383, 641, 641 * 3 + 64
        buf = api.alloc_host((h, pitch), np.uint8, mapped=True)
        buf.array[...] = np.random.default_rng(4).integers(0, 256, buf.array.shape, dtype=np.uint8)
        frame = np.lib.stride_tricks.as_strided(buf.array, shape=(h, w, 3), strides=(pitch, 3, 1))
        spec = InputSpec(shape=[1, 3, NET[0], NET[1]], mean=mean, scale=scale)
        pre = GpuPreprocessor(spec, api, cache=cache, frame_memory=MAPPED)
        pre.fill(frame)
        row = compare(pre.download(), Preprocessor(spec)(np.ascontiguousarray(frame))[0], spec)
        rows.append({"check": "kernel pitched mapped frame", **row, "zero_copy": pre.zero_copy_frames == 1})
        pre.close()
        api.free_host(buf)
    h, w = sizes[0][1]
    frame = noise(h, w, 5)
    regions = [(0, 0, w // 3, h // 3), (w // 10, h // 5, w // 2, h * 2 // 3), (w - 120, h - 80, w, h), (5, 7, 6, 8)]
    spec = InputSpec(shape=[len(regions), 3, 192, 320], dtype="float16")
    pre = GpuPreprocessor(spec, api, cache=cache)
    pre.fill_rois(frame, regions)
    cpu = Preprocessor(spec)
    for i, (x0, y0, x1, y1) in enumerate(regions):
        cpu.fill(frame[y0:y1, x0:x1], i)
    rows.append({"check": f"kernel ROI batch x{len(regions)}", **compare(pre.download(), cpu.tensor, spec)})
    pre.close()
    return rows


def check_graph(api: CudaApi, cache: KernelCache, repeat: int, sizes=SIZES) -> List[Row]:
    spec = InputSpec(shape=[1, 3, NET[0], NET[1]], dtype="float16")
    h, w = sizes[0][1]
    frame = noise(h, w, 6)
    rows = []
    for graphs in (True, False):
        pre = GpuPreprocessor(spec, api, cache=cache, use_graphs=graphs)
        ms = host_ms(api, pre.stream, lambda: pre.fill(frame), repeat)
        cpu = compare(pre.download(), Preprocessor(spec)(frame)[0], spec)
        rows.append({"check": f"per-frame work, {pre.graph.mode}", "host_ms": ms, "fps": fps(ms),
                     "captures": pre.graph.captures, "replays": pre.graph.replays, **cpu})
        pre.close()
    return rows


def check_throughput(api: CudaApi, cache: KernelCache, repeat: int, sizes=SIZES) -> List[Row]:
    """The frame kernel alone (frame already in device memory), GPU time per launch."""
    rows = []
    kernel = cache.kernels(api, KERNEL_FILE, ["preprocess_frame"])["preprocess_frame"]
    stream = api.create_stream()
    for name, (h, w) in sizes:
        frame = api.alloc_device(h * w * 3)
        for dtype in ("float32", "float16"):
            spec = InputSpec(shape=[1, 3, NET[0], NET[1]], dtype=dtype)
            out = api.alloc_device(3 * NET[0] * NET[1] * (2 if dtype == "float16" else 4))
            _, slot = plan_slot((0, 0, w, h), spec)
            args = KernelArgs([ctypes.c_void_p(frame.ptr), ctypes.c_int(w), ctypes.c_int(h), ctypes.c_int(w * 3),
                               ctypes.c_void_p(out.ptr), ctypes.c_int(NET[1]), ctypes.c_int(NET[0])]
                              + [ctypes.c_int(v) for v in slot[4:]]
                              + [ctypes.c_int(0), ctypes.c_int(dtype == "float16"), ctypes.c_int(0)]
                              + [ctypes.c_float(v) for v in spec.mean + spec.scale])
            grid = (-(-NET[1] // BLOCK[0]), -(-NET[0] // BLOCK[1]), 1)
            ms = gpu_ms(api, stream, lambda: api.launch(kernel, grid, BLOCK, args, stream), repeat)
            rows.append({"check": f"kernel {name} -> {NET[1]}x{NET[0]} {dtype}", "gpu_ms": ms, "fps": fps(ms)})
            api.free_device(out)
        api.free_device(frame)
    return rows


def check_mapped_vs_pinned(api: CudaApi, cache: KernelCache, repeat: int, sizes=SIZES) -> List[Row]:
    rows = []
    spec = InputSpec(shape=[1, 3, NET[0], NET[1]], dtype="float16")
    for name, (h, w) in sizes:
        if api.properties.can_map_host_memory:
            buf = api.alloc_host((h, w, 3), np.uint8, mapped=True)
            buf.array[...] = noise(h, w)
            pre = GpuPreprocessor(spec, api, cache=cache, frame_memory=MAPPED)
            ms = gpu_ms(api, pre.stream, lambda: pre.fill(buf.array), repeat)
            rows.append({"check": f"{name} mapped read (no copy)", "gpu_ms": ms, "fps": fps(ms)})
            pre.close()
            api.free_host(buf)
        frame = noise(h, w)
        pre = GpuPreprocessor(spec, api, cache=cache, frame_memory=PINNED)
        ms = gpu_ms(api, pre.stream, lambda: pre.fill(frame), repeat)
        rows.append({"check": f"{name} pinned + async copy", "gpu_ms": ms, "fps": fps(ms)})
        pre.close()
    return rows


def run_checks(api: CudaApi, repeat: int = 200, cache: Optional[KernelCache] = None, sizes=SIZES) -> List[Row]:
    cache = cache or KernelCache()
    t0 = time.perf_counter()
    rows = check_buffers(api)
    rows += check_kernels(api, cache, sizes)
    rows.append({"check": "kernel compile (or cache)", "host_ms": (time.perf_counter() - t0) * 1e3})
    rows += check_graph(api, cache, repeat, sizes)
    rows += check_throughput(api, cache, repeat, sizes)
    rows += check_mapped_vs_pinned(api, cache, repeat, sizes)
    for row in rows:
        row["impl"] = api.name
    return rows


COLUMNS = ("impl", "check", "result", "max_abs_error", "differing", "gpu_ms", "host_ms", "fps", "detail")


def table(rows: List[Row]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else str(v)

    cols = [c for c in COLUMNS if any(c in r for r in rows)]
    cells = [[cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", default="all", choices=["auto", "cuda-python", "pycuda", "all"])
    parser.add_argument("--frames", type=int, default=200, help="repetitions per timing (medians are printed)")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    names = ["cuda-python", "pycuda"] if args.impl == "all" else [args.impl]
    rows: List[Row] = []
    failures = []
    for name in names:
        try:
            api = open_cuda(name)
            if api is None:
                raise EdgeSdkError("no implementation found a GPU")
        except EdgeSdkError as exc:
            failures.append(f"{name}: {exc}")
            continue
        print(f"{api.name}: {json.dumps(api.describe())}", flush=True)
        rows += run_checks(api, args.frames)
    if not rows:
        print("gpu_check: no usable NVIDIA GPU here (" + "; ".join(failures) + ")", file=sys.stderr)
        return 2
    print(table(rows))
    for line in failures:
        print(f"skipped {line}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    bad = [r for r in rows if r.get("result") in ("OUT OF TOLERANCE", "ROUND TRIP MISMATCH")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
