"""The CUDA layer on a real NVIDIA GPU, as one table: the prepared check for the day a GPU is lent.

    python bench/gpu_check.py [--impl auto|cuda-python|pycuda|all] [--frames 100] [--json out.json]
    python bench/gpu_check.py --self-test      # no GPU: what can run without one (CI, any machine)

For each implementation that opens a device (cuda-python; pycuda where it imports), in well under
five minutes on one GPU:

1. buffers: device memory, a pinned and a mapped page-locked buffer, a round trip through each;
   which NVRTC compiled the kernels and why (describe()["nvrtc"]);
2. kernels against the CPU Preprocessor, bit for bit: the real frames of edge_sdk/assets (as
   they are, and resampled to 1080p and 4K), noise at 1080p/4K in every resize mode, an odd-sized
   upscale, pitched rows read in place from mapped memory, a ROI batch; "bit-exact" or the max
   abs error and the share of differing elements (within tolerance or not);
3. frame memory: mapped read against pinned + one copy against the kernel alone on device memory,
   GPU time per frame at 1080p and 4K (edge_sdk.cuda.measure, what `edge-sdk engine` records), and
   the winner;
4. CUDA graphs: the per-frame work captured once and replayed against eager launches; ROI
   batches of varying size (1, 1, 2, 2, 1, 3, 4, ...) replaying one graph per size, each checked
   against the CPU;
5. kernel throughput at 1080p and 4K -> 640x384 (GPU time from events);
6. lifetimes: streams and events created and destroyed over 100 preprocessor open/close cycles
   (and 100 TensorRT backend activate/deactivate cycles when a bundle is given with --bundle);
   a frame buffer freed on another thread while a graph is being captured (the capture must
   succeed and the memory be freed after it); CPU time of a blocking-sync event wait;
7. TensorRT's one logger: two builders alive at once, a listener for each scope receives
   messages (skipped when tensorrt is not importable);
8. first contact: a worker thread that uses CUDA and ends, in a child process, with pycuda and
   with cuda-python (pycuda aborts a process whose ending thread still holds a context: the
   child must exit 0, never SIGABRT); a kernel compile that fails (as pycuda without nvcc)
   falling back to the CPU preprocessor; a frame ring of a second CUDA object (the model before a
   reload) freed on the capturing thread while a graph is captured; with --bundle, the TensorRT
   engine's GPU time at batch 1, 2, 4 and 8 (built for 1..8).

Without a usable GPU it prints one line naming the cause and exits with status 2; --self-test
then runs what needs no GPU (real frames through the CPU preprocessor, NVRTC compiling the
kernels for sm_72 and sm_87 where cuda-python is installed, the thread-exit children, which say
they found no GPU, the table) and exits 0 when it passes.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from edge_sdk.cuda import MAPPED, PINNED, CudaApi, KernelArgs, open_cuda
from edge_sdk.cuda.compiler import KernelCache
from edge_sdk.cuda.graph import FrameGraph
from edge_sdk.cuda.preprocess import BLOCK, KERNEL_FILE, GpuPreprocessor, plan_slot
from edge_sdk.errors import EdgeSdkError, KernelUnavailableError
from edge_sdk.preprocess import InputSpec, Preprocessor

NET = (384, 640)
SIZES = (("1080p", (1080, 1920)), ("4K", (2160, 3840)))
ASSETS = Path(__file__).resolve().parents[1] / "edge_sdk" / "assets"
ROI_COUNTS = (1, 1, 2, 2, 1, 3, 4, 2, 1, 4)
CYCLES = 100
Row = Dict[str, Any]


def noise(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def real_frames(sizes=SIZES) -> List[Any]:
    """(name, frame) for each image of edge_sdk/assets, as it is and resampled to each size."""
    from edge_sdk import _imports
    from edge_sdk.images import read_image

    cv2 = _imports.cv2()
    out = []
    for path in sorted(ASSETS.glob("*.jpg")):
        image = read_image(str(path))
        out.append((f"{path.name} {image.shape[1]}x{image.shape[0]}", image))
        for label, (h, w) in sizes:
            out.append((f"{path.name} at {label}", cv2.resize(image, (w, h), interpolation=cv2.INTER_LINEAR)))
    return out


def compare(gpu: np.ndarray, cpu: np.ndarray, spec: InputSpec) -> Dict[str, Any]:
    """"bit-exact", else the max abs error, the share of differing elements, and whether both are
    within the stated tolerance (edge_sdk/cuda/preprocess.py: one grey level times |scale|,
    0.1 % of elements)."""
    diff = np.abs(gpu.astype(np.float64) - cpu.astype(np.float64))
    if gpu.shape == cpu.shape and np.array_equal(gpu.view(np.uint8), cpu.view(np.uint8)):
        return {"max_abs_error": 0.0, "differing": 0.0, "result": "bit-exact"}
    step = max(abs(s) for s in spec.scale)
    if spec.dtype == "float16":
        step += float(np.abs(cpu.astype(np.float64)).max()) * 2.0 ** -10
    differing = float(np.mean(diff > 0))
    ok = float(diff.max()) <= step * (1 + 1e-6) and differing <= 1e-3
    return {"max_abs_error": float(diff.max()), "differing": differing,
            "result": "within tolerance" if ok else "OUT OF TOLERANCE"}


def gpu_ms(api: CudaApi, stream: Any, fn: Callable[[], None], repeat: int) -> float:
    from edge_sdk.cuda.measure import median_gpu_ms

    return median_gpu_ms(api, stream, fn, repeat)


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
    api.destroy_stream(stream)
    nvrtc = api.describe().get("nvrtc")
    if nvrtc is not None:
        rows.append({"check": "nvrtc", "result": f"{nvrtc.get('source')} {nvrtc.get('version')}",
                     "detail": f"{nvrtc.get('library')}: {nvrtc.get('reason')}"})
    return rows


def _kernel_row(api: CudaApi, cache: KernelCache, name: str, frame: np.ndarray, spec: InputSpec, **kw: Any) -> Row:
    pre = GpuPreprocessor(spec, api, cache=cache, **kw)
    try:
        pre.fill(frame)
        return {"check": f"kernel {name}", **compare(pre.download(), Preprocessor(spec)(np.ascontiguousarray(frame))[0], spec)}
    finally:
        pre.close()


def check_kernels(api: CudaApi, cache: KernelCache, sizes=SIZES, frames: Optional[Sequence[Any]] = None) -> List[Row]:
    rows = []
    mean, scale = [104.0, 117.0, 123.0], [1 / 58.0, 1 / 57.0, 1 / 59.0]
    letterbox = InputSpec(shape=[1, 3, NET[0], NET[1]], dtype="float16", color="RGB", mean=mean, scale=scale)
    area = InputSpec(shape=[1, 3, NET[0], NET[1]], resize="stretch", interpolation="area")
    for name, frame in (frames if frames is not None else real_frames(sizes)):
        rows.append(_kernel_row(api, cache, f"{name} letterbox fp16 RGB", frame, letterbox))
        rows.append(_kernel_row(api, cache, f"{name} stretch fp32 area", frame, area))
    cases = []
    for i, (label, (h, w)) in enumerate(sizes):
        cases.append((f"{label} noise letterbox fp16 RGB", noise(h, w, 2 * i), dict(dtype="float16", color="RGB", mean=mean, scale=scale)))
        cases.append((f"{label} noise stretch fp32", noise(h, w, 2 * i + 1), dict(resize="stretch")))
        cases.append((f"{label} noise stretch fp32 area", noise(h, w, 2 * i + 1), dict(resize="stretch", interpolation="area")))
    cases.append(("641x383 upscale fp32", noise(383, 641, 3), dict(mean=mean, scale=scale, pad_value=114)))
    for name, frame, options in cases:
        rows.append(_kernel_row(api, cache, name, frame, InputSpec(shape=[1, 3, NET[0], NET[1]], **options)))
    # Pitched rows, 5 bytes past a 16-byte boundary, read in place from a mapped buffer.
    if api.properties.can_map_host_memory:
        h, w, pitch, offset = 383, 641, 641 * 3 + 7, 5
        buf = api.alloc_host((offset + h * pitch,), np.uint8, mapped=True)
        buf.array[...] = np.random.default_rng(4).integers(0, 256, buf.array.shape, dtype=np.uint8)
        frame = np.lib.stride_tricks.as_strided(buf.array[offset:], shape=(h, w, 3), strides=(pitch, 3, 1))
        spec = InputSpec(shape=[1, 3, NET[0], NET[1]], mean=mean, scale=scale)
        pre = GpuPreprocessor(spec, api, cache=cache, frame_memory=MAPPED)
        pre.fill(frame)
        row = compare(pre.download(), Preprocessor(spec)(np.ascontiguousarray(frame))[0], spec)
        rows.append({"check": "kernel pitched unaligned mapped frame", **row, "zero_copy": pre.zero_copy_frames == 1})
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
    return rows + check_graph_varying_batch(api, cache, sizes)


def check_graph_varying_batch(api: CudaApi, cache: KernelCache, sizes=SIZES, counts: Sequence[int] = ROI_COUNTS) -> List[Row]:
    """ROI batches whose size changes from frame to frame: one graph per size, replayed, each
    result checked against the CPU."""
    h, w = sizes[0][1]
    batch = max(counts)
    spec = InputSpec(shape=[batch, 3, 192, 320], dtype="float16")
    pre = GpuPreprocessor(spec, api, cache=cache)
    worst: Dict[str, Any] = {"max_abs_error": 0.0, "differing": 0.0, "result": "bit-exact"}
    t0 = time.perf_counter()
    for i, n in enumerate(counts):
        frame = noise(h, w, 20 + i)
        regions = [(37 * k, 11 * k, w // 2 + 29 * k, h // 2 + 13 * k) for k in range(n)]
        pre.fill_rois(frame, regions)
        got = pre.download()[:n]
        cpu = Preprocessor(InputSpec(**dict(spec.to_dict(), shape=[n, 3, 192, 320])))
        for k, (x0, y0, x1, y1) in enumerate(regions):
            cpu.fill(frame[y0:y1, x0:x1], k)
        result = compare(got, cpu.tensor, spec)
        if result["result"] != "bit-exact" and worst["result"] != "OUT OF TOLERANCE":
            worst = result
    ms = (time.perf_counter() - t0) * 1e3 / len(counts)
    sizes_seen = len(set(counts))
    graphs = pre.graph.describe()
    ok = graphs["mode"] == "eager" or (graphs["captures"] == sizes_seen and graphs["replays"] == len(counts) - sizes_seen)
    pre.close()
    return [{"check": f"ROI graphs, batch sizes {','.join(map(str, counts))}", **worst, "host_ms": ms,
             "detail": f"{graphs['mode']}: {graphs['captures']} captured, {graphs['replays']} replayed"
                       + ("" if ok else " (EXPECTED ONE CAPTURE PER SIZE)")}] + ([] if ok else [
                {"check": "ROI graphs per size", "result": "GRAPHS RE-CAPTURED"}])


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
    api.destroy_stream(stream)
    return rows


def check_frame_memory(api: CudaApi, cache: KernelCache, repeat: int, sizes=SIZES) -> List[Row]:
    """Mapped against pinned + copy against device memory, as `edge-sdk engine` measures them."""
    from edge_sdk.cuda.measure import measure_frame_memory

    spec = InputSpec(shape=[1, 3, NET[0], NET[1]], dtype="float16")
    rows = []
    for name, (h, w) in sizes:
        result = measure_frame_memory(api, spec, noise(h, w), repeat=repeat, cache=cache)
        for path, ms in result["gpu_ms"].items():
            rows.append({"check": f"frame memory {name} {path}", "gpu_ms": ms, "fps": fps(ms),
                         "result": "chosen" if path == result["chosen"] else ""})
    return rows


class CountingCuda:
    """`api` counting the streams and events created and destroyed through it."""

    def __init__(self, api: CudaApi) -> None:
        self._api = api
        self.counts = {"stream+": 0, "stream-": 0, "event+": 0, "event-": 0}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def create_stream(self) -> Any:
        self.counts["stream+"] += 1
        return self._api.create_stream()

    def destroy_stream(self, stream: Any) -> None:
        self.counts["stream-"] += 1
        self._api.destroy_stream(stream)

    def create_event(self, blocking_sync: bool = True) -> Any:
        self.counts["event+"] += 1
        return self._api.create_event(blocking_sync)

    def destroy_event(self, event: Any) -> None:
        self.counts["event-"] += 1
        self._api.destroy_event(event)

    def row(self, what: str) -> Row:
        c = self.counts
        ok = c["stream+"] == c["stream-"] and c["event+"] == c["event-"] and c["stream+"] > 0
        return {"check": what, "result": "all destroyed" if ok else "LEAKED",
                "detail": f"streams {c['stream+']} created / {c['stream-']} destroyed, "
                          f"events {c['event+']} created / {c['event-']} destroyed"}


def check_lifetimes(api: CudaApi, cache: KernelCache, cycles: int = CYCLES, bundle: Optional[str] = None,
                    sizes=SIZES) -> List[Row]:
    rows = []
    counting = CountingCuda(api)
    spec = InputSpec(shape=[1, 3, 96, 160])
    frame = noise(120, 200, 9)
    for _ in range(cycles):
        pre = GpuPreprocessor(spec, counting, cache=cache)  # type: ignore[arg-type]
        pre.fill(frame)
        pre.download()
        pre.close()
    rows.append(counting.row(f"streams/events, {cycles} preprocessor cycles"))
    if bundle:
        rows.append(_backend_cycles(api, bundle, cycles))
    rows.append(_free_during_capture(api))
    rows.append(_blocking_wait(api, cache, sizes[-1][1]))
    return rows


def _backend_cycles(api: CudaApi, bundle: str, cycles: int) -> Row:
    from edge_sdk.manifest import Bundle
    from edge_sdk.runtime.backends.tensorrt import TensorRTBackend

    counting = CountingCuda(api)
    backend = TensorRTBackend.from_bundle(Bundle.load(bundle), "auto", cuda=counting)
    for _ in range(cycles):
        backend.activate()
        backend.deactivate()
    return counting.row(f"streams/events, {cycles} TensorRT activate/deactivate")


def _free_during_capture(api: CudaApi) -> Row:
    """A buffer freed on another thread while this one captures a graph: the free waits for the
    end of the capture (cudaFreeHost during a capture would invalidate it)."""
    if not api.supports_graphs:
        return {"check": "free during a graph capture", "result": "skipped: no CUDA graphs in " + api.name}
    stream = api.create_stream()
    graph = FrameGraph(api, stream)
    host = api.alloc_host((1 << 20,), np.uint8)
    victim = api.alloc_host((1 << 20,), np.uint8)  # a buffer the graph does not use, freed meanwhile
    dev = api.alloc_device(1 << 20)
    entered, freed = threading.Event(), threading.Event()
    errors: List[str] = []
    deferred = api.deferred_frees

    def work() -> None:
        api.copy_htod(dev, host, 1 << 20, stream)
        entered.set()
        freed.wait(10)

    def free_elsewhere() -> None:
        entered.wait(10)
        try:
            api.free_host(victim)
        except EdgeSdkError as exc:
            errors.append(str(exc))
        freed.set()

    t = threading.Thread(target=free_elsewhere)
    t.start()
    try:
        graph.run("copy", work)
        api.synchronize(stream)
    except EdgeSdkError as exc:
        errors.append(f"capture: {exc}")
    t.join(10)
    graph.invalidate()
    api.free_host(host)
    api.free_device(dev)
    api.destroy_stream(stream)
    ok = not errors and api.pending_frees == 0 and api.deferred_frees > deferred
    return {"check": "free during a graph capture", "result": "capture kept, freed after" if ok else "FAILED",
            "detail": "; ".join(errors) or f"{api.deferred_frees - deferred} free(s) deferred to the end of the capture"}


def _blocking_wait(api: CudaApi, cache: KernelCache, size=SIZES[-1][1], launches: int = 50) -> Row:
    """CPU time of waiting on a blocking-sync event for `launches` queued kernels on `size`
    frames (spinning would cost about the wall time)."""
    spec = InputSpec(shape=[1, 3, NET[0], NET[1]])
    pre = GpuPreprocessor(spec, api, cache=cache, use_graphs=False)
    h, w = size
    frame = api.alloc_device(h * w * 3)
    done = api.create_event()
    try:
        pre.fill(noise(h, w), 0)
        api.synchronize(pre.stream)
        shape = np.empty((h, w, 3), np.uint8)
        for _ in range(launches):
            pre.fill(shape, 0, device_ptr=frame.ptr)
        api.record(done, pre.stream)
        wall, cpu = time.perf_counter(), time.process_time()
        api.event_synchronize(done)
        wall, cpu = (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3
    finally:
        api.destroy_event(done)
        api.free_device(frame)
        pre.close()
    return {"check": "blocking-sync event wait", "host_ms": wall,
            "result": "sleeps" if cpu < 0.5 * wall or wall < 1.0 else "SPINS",
            "detail": f"CPU {cpu:.2f} ms during a {wall:.2f} ms wait"}


# -- first contact ----------------------------------------------------------------------------------
NO_GPU_EXIT = 3  # the thread-exit child found no GPU


def thread_exit_child(impl: str) -> int:
    """In a child process: a thread uses the CUDA implementation `impl` the main thread opened (a
    preprocessor's compile, launch and download) and ends, then a thread that opens its own does
    the same; then the process exits 0. pycuda aborts (SIGABRT) a process whose thread ends with
    a context still on its stack."""
    try:
        api = open_cuda(impl)
    except EdgeSdkError as exc:
        print(f"no GPU: {exc}")
        return NO_GPU_EXIT
    if api is None:
        print("no GPU")
        return NO_GPU_EXIT
    out: Dict[str, Any] = {}

    def work(key: str, own: bool) -> None:
        try:
            use = open_cuda(impl) if own else api
            spec = InputSpec(shape=[1, 3, 96, 160])
            with tempfile.TemporaryDirectory() as folder:
                pre = GpuPreprocessor(spec, use, cache=KernelCache(Path(folder)))
                frame = noise(120, 200, 3)
                pre.fill(frame)
                out[key] = bool(np.array_equal(pre.download(), Preprocessor(spec)(frame)[0]))
                pre.close()
        except Exception as exc:  # said below; the thread must end either way
            out[key] = f"{type(exc).__name__}: {exc}"

    for key, own in (("shared", False), ("own", True)):
        worker = threading.Thread(target=work, args=(key, own), name=f"cuda-worker-{key}")
        worker.start()
        worker.join()
    print("survived", json.dumps(out))
    return 0 if out.get("shared") is True and out.get("own") is True else 1


def check_thread_exit(impls: Sequence[str] = ("cuda-python", "pycuda"), timeout_s: float = 180.0) -> List[Row]:
    """A child process per implementation runs thread_exit_child: exit 0 (or no GPU) passes."""
    rows = []
    for impl in impls:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--thread-exit-child", impl],
                              capture_output=True, text=True, timeout=timeout_s)
        said = (proc.stdout.strip().splitlines() or [""])[-1][:200]
        if proc.returncode == 0:
            result = "process survived"
        elif proc.returncode == NO_GPU_EXIT:
            result = "skipped: no GPU for " + impl
        elif proc.returncode in (-6, 134):
            result = "ABORTED"
        else:
            result = "FAILED"
        tail = (proc.stderr.strip().splitlines() or [""])[-1][:200]
        rows.append({"check": f"thread that used {impl} ends", "result": result,
                     "detail": f"exit {proc.returncode}: {said} {tail}".strip()})
    return rows


class CompileFails:
    """`api` whose kernel compiler is missing, as pycuda's compile is without nvcc."""

    def __init__(self, api: CudaApi) -> None:
        self._api = api

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    compiler_id = "missing-nvcc"  # its own kernel cache key: no image compiled before is found

    def compile(self, source: str, filename: str, arch: str, include_dirs: Sequence[str]) -> bytes:
        raise OSError("nvcc was not found (is it on the PATH?)")


def check_compile_fallback(api: CudaApi) -> List[Row]:
    """A kernel that cannot compile: the GPU preprocessor raises KernelUnavailableError naming
    the fix (what the detector factory turns into one warning and the CPU preprocessor)."""
    spec = InputSpec(shape=[1, 3, 96, 160])
    counting = CountingCuda(CompileFails(api))  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as folder:
        try:
            GpuPreprocessor(spec, counting, cache=KernelCache(Path(folder)))  # type: ignore[arg-type]
        except KernelUnavailableError as exc:
            c = counting.counts
            ok = c["stream+"] == c["stream-"] and c["event+"] == c["event-"]
            return [{"check": "kernel compile failure", "result": "falls back" if ok else "LEAKED",
                     "detail": str(exc).splitlines()[0][:160]}]
        except Exception as exc:
            return [{"check": "kernel compile failure", "result": "FAILED", "detail": f"{type(exc).__name__}: {exc}"[:160]}]
    return [{"check": "kernel compile failure", "result": "FAILED", "detail": "no error raised"}]


def _free_from_another_object(api: CudaApi, other: Optional[CudaApi]) -> Row:
    """The model before a reload frees its pinned frame ring through the CUDA object it opened,
    on the thread that captures a graph now: the free waits for the end of the capture."""
    from edge_sdk.cuda.frames import PinnedMemory

    what = "free through another CUDA object during a capture"
    if not api.supports_graphs:
        return {"check": what, "result": "skipped: no CUDA graphs in " + api.name}
    if other is None:
        return {"check": what, "result": "skipped: no second CUDA object of " + api.name}
    ring = PinnedMemory(other)
    buffer = ring.allocate((1080, 1920, 3))
    stream = api.create_stream()
    graph = FrameGraph(api, stream)
    host = api.alloc_host((1 << 16,), np.uint8)
    dev = api.alloc_device(1 << 16)
    deferred, errors = other.deferred_frees, []

    def work() -> None:
        api.copy_htod(dev, host, 1 << 16, stream)
        ring.release(buffer)  # on the capturing thread, mid-capture

    try:
        graph.run("copy", work)
        api.synchronize(stream)
    except EdgeSdkError as exc:
        errors.append(f"capture: {exc}")
    graph.invalidate()
    api.free_host(host)
    api.free_device(dev)
    api.destroy_stream(stream)
    ok = not errors and api.pending_frees == 0 and other.deferred_frees > deferred
    return {"check": what, "result": "capture kept, freed after" if ok else "FAILED",
            "detail": "; ".join(errors) or f"{other.deferred_frees - deferred} free(s) of the other object deferred"}


def check_engine_batches(api: CudaApi, bundle: Optional[str], repeat: int, batches: Sequence[int] = (1, 2, 4, 8)) -> List[Row]:
    """The bundle's TensorRT engine built for 1..8 rows: GPU time per call and per row at each batch."""
    if not bundle:
        return [{"check": "engine batches", "result": "skipped: give --bundle"}]
    try:
        from edge_sdk.manifest import Bundle
        from edge_sdk.runtime.backends.tensorrt import TensorRTBackend

        backend = TensorRTBackend.from_bundle(Bundle.load(bundle), "auto", cuda=api, max_batch=max(batches))
        backend.activate()
    except (EdgeSdkError, ImportError) as exc:
        return [{"check": "engine batches", "result": f"skipped: {str(exc).splitlines()[0][:120]}"}]
    rows = []
    try:
        spec = Bundle.load(bundle).inputs[0]
        for n in batches:
            x = np.random.default_rng(n).uniform(0, 255, [n] + list(spec.shape[1:])).astype(np.dtype(spec.dtype))
            times = []
            for _ in range(max(3, repeat)):
                backend.infer({spec.name: x})
                times.append(backend.gpu_ms())
            ms = float(np.median(times))
            rows.append({"check": f"engine batch {n}", "gpu_ms": ms, "fps": fps(ms / n),
                         "detail": f"{ms / n:.3f} ms per row; {backend.describe().get('batch')}"})
    except EdgeSdkError as exc:
        rows.append({"check": "engine batches", "result": "FAILED", "detail": str(exc).splitlines()[0][:160]})
    finally:
        backend.deactivate()
    return rows


def check_logger() -> List[Row]:
    """Two TensorRT builders alive at once, each asked to build an empty network (which TensorRT
    refuses with a logged error) while a listener of the process's one logger listens: both
    listeners hear their builder (a logger per builder left the second deaf while the first
    lived: TensorRT keeps the first logger it is given)."""
    try:
        import tensorrt as trt  # type: ignore[import-not-found]
    except ImportError:
        return [{"check": "TensorRT logger, two builders", "result": "skipped: tensorrt is not installed"}]
    try:
        from edge_sdk.trt import log as trt_log  # type: ignore[attr-defined]
    except ImportError:
        return [{"check": "TensorRT logger, two builders", "result": "skipped: edge_sdk.trt.log is absent"}]
    builders, heard = [], []
    for _ in range(2):
        with trt_log.listen(min_severity=4) as listener:
            builder = trt.Builder(trt_log.process_logger(trt))
            builders.append(builder)  # both stay alive: the second is made while the first lives
            flag = getattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)
            network = builder.create_network(0 if flag is None else 1 << int(flag))
            builder.build_serialized_network(network, builder.create_builder_config())
        heard.append(len(listener.messages))
    del builders
    ok = all(n > 0 for n in heard)
    return [{"check": "TensorRT logger, two builders", "result": "both heard" if ok else "A LISTENER HEARD NOTHING",
             "detail": f"messages: first {heard[0]}, second {heard[1]} (TensorRT {getattr(trt, '__version__', '?')})"}]


def run_checks(api: CudaApi, repeat: int = 100, cache: Optional[KernelCache] = None, sizes=SIZES,
               frames: Optional[Sequence[Any]] = None, cycles: int = CYCLES, bundle: Optional[str] = None,
               second: Optional[CudaApi] = None) -> List[Row]:
    """Every check on `api`; `second`: another CUDA object of the same device (default: a second
    open_cuda of `api`'s implementation), whose frame ring is freed during a capture."""
    cache = cache or KernelCache()
    t0 = time.perf_counter()
    rows = check_buffers(api)
    rows += check_kernels(api, cache, sizes, frames)
    rows.append({"check": "kernels (compile or cache, all cases)", "host_ms": (time.perf_counter() - t0) * 1e3})
    rows += check_frame_memory(api, cache, repeat, sizes)
    rows += check_graph(api, cache, repeat, sizes)
    rows += check_throughput(api, cache, repeat, sizes)
    rows += check_lifetimes(api, cache, cycles, bundle, sizes)
    rows += check_compile_fallback(api)
    if second is None and api.name in ("cuda-python", "pycuda"):
        second = open_cuda(api.name)
    rows.append(_free_from_another_object(api, second))
    rows += check_engine_batches(api, bundle, repeat)
    for row in rows:
        row["impl"] = api.name
    return rows


def self_test() -> List[Row]:
    """What runs without a GPU: real frames through the CPU preprocessor, NVRTC compiling the
    kernels for Xavier and Orin where cuda-python is installed, TensorRT's logger where TensorRT is."""
    rows: List[Row] = []
    frames = real_frames(SIZES[:1])
    spec = InputSpec(shape=[1, 3, NET[0], NET[1]], dtype="float16", color="RGB")
    for name, frame in frames:
        tensor = Preprocessor(spec)(frame)[0]
        ok = tensor.shape == (1, 3, NET[0], NET[1]) and bool(np.isfinite(tensor).all())
        rows.append({"check": f"CPU preprocessor {name}", "result": "ok" if ok else "FAILED"})
    try:
        from edge_sdk.cuda import _cudapython
        from edge_sdk.cuda import KERNEL_DIR

        source = (KERNEL_DIR / KERNEL_FILE).read_text()
        for arch in ("sm_72", "sm_87"):
            t0 = time.perf_counter()
            image = _cudapython.nvrtc_compile(source, KERNEL_FILE, arch, [str(KERNEL_DIR)])
            rows.append({"check": f"NVRTC {'.'.join(map(str, _cudapython.nvrtc_version()))} {KERNEL_FILE} for {arch}",
                         "result": "ok" if image[:4] == b"\x7fELF" else "NOT A CUBIN", "host_ms": (time.perf_counter() - t0) * 1e3})
    except EdgeSdkError as exc:
        rows.append({"check": "NVRTC compile", "result": f"skipped: {str(exc).splitlines()[0]}"})
    rows += check_logger()
    rows += check_thread_exit()
    for row in rows:
        row["impl"] = "self-test"
    return rows


COLUMNS = ("impl", "check", "result", "max_abs_error", "differing", "gpu_ms", "host_ms", "fps", "detail")
FAILED = ("OUT OF TOLERANCE", "ROUND TRIP MISMATCH", "LEAKED", "FAILED", "SPINS", "A LISTENER HEARD NOTHING",
          "GRAPHS RE-CAPTURED", "NOT A CUBIN", "ABORTED")


def table(rows: List[Row]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else str(v)

    cols = [c for c in COLUMNS if any(c in r for r in rows)]
    cells = [[cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def failed(rows: List[Row]) -> List[Row]:
    return [r for r in rows if r.get("result") in FAILED]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", default="all", choices=["auto", "cuda-python", "pycuda", "all"])
    parser.add_argument("--frames", type=int, default=100, help="repetitions per timing (medians are printed)")
    parser.add_argument("--cycles", type=int, default=CYCLES, help="open/close cycles counted for stream and event leaks")
    parser.add_argument("--bundle", default=None, help="a bundle folder: also cycle its TensorRT backend")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument("--self-test", action="store_true", help="run what needs no GPU, and exit 0 when it passes")
    parser.add_argument("--thread-exit-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.thread_exit_child:
        return thread_exit_child(args.thread_exit_child)
    if args.self_test:
        rows = self_test()
        print(table(rows))
        return 1 if failed(rows) else 0
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
        rows += run_checks(api, args.frames, cycles=args.cycles, bundle=args.bundle)
    if not rows:
        print("gpu_check: no usable NVIDIA GPU here (" + "; ".join(failures) + ")", file=sys.stderr)
        return 2
    rows += check_logger()
    rows += check_thread_exit(names)
    print(table(rows))
    for line in failures:
        print(f"skipped {line}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 1 if failed(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
