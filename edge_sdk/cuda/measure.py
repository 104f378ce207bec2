"""Frame memory measured on the device: GPU time per frame of each way a decoded frame can reach
the preprocess kernel, for :func:`edge_sdk.cuda.frames.frame_memory` to pick the faster.

| path | what one frame costs on the GPU |
|---|---|
| ``mapped`` | the kernel reading the frame in page-locked host memory (no copy) |
| ``pinned`` | one async copy of the frame to device memory, then the kernel reading it there |
| ``device`` | the kernel alone, reading a frame already in device memory (the floor: no ring can give it, since the CPU decodes into host memory) |

Each path runs the capture ring's own buffers (:class:`MappedMemory`, :class:`PinnedMemory`)
and the :class:`GpuPreprocessor` as the pipeline does, timed with CUDA events on its stream
around each frame; the median counts. ``chosen`` is the faster of mapped and pinned (on a
device that cannot map host memory, pinned). `edge-sdk engine` runs it and records the result
in ``device_report.json``; ``bench/gpu_check.py`` prints it.
"""
from __future__ import annotations

import statistics
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from edge_sdk.cuda.api import MAPPED, PINNED, CudaApi
from edge_sdk.cuda.compiler import KernelCache
from edge_sdk.cuda.frames import MappedMemory, PinnedMemory
from edge_sdk.cuda.preprocess import GpuPreprocessor
from edge_sdk.preprocess import InputSpec

DEVICE = "device"
FRAME = (1080, 1920)  # (H, W): the camera frame measured when the caller names none
REPEAT = 50


def median_gpu_ms(api: CudaApi, stream: Any, work: Callable[[], None], repeat: int) -> float:
    """Median GPU time of `work`'s queued work on `stream`, from events around each run (one
    unmeasured run first: kernel load, graph capture)."""
    start, end = api.create_event(), api.create_event()
    try:
        work()
        api.synchronize(stream)
        times: List[float] = []
        for _ in range(max(1, repeat)):
            api.record(start, stream)
            work()
            api.record(end, stream)
            api.event_synchronize(end)
            times.append(float(api.elapsed_ms(start, end)))
        return float(statistics.median(times))
    finally:
        api.destroy_event(start)
        api.destroy_event(end)


def measure_frame_memory(api: CudaApi, spec: InputSpec, frame: Optional[np.ndarray] = None,
                         repeat: int = REPEAT, cache: Optional[KernelCache] = None,
                         paths: Sequence[str] = (MAPPED, PINNED, DEVICE)) -> Dict[str, Any]:
    """{"chosen": "mapped" | "pinned", "gpu_ms": {path: median ms}, "frame": "WxH", "input":
    "WxH", "repeat": n} for `frame` (BGR uint8; default a 1080p noise frame) into a batch-1
    `spec` tensor."""
    if frame is None:
        frame = np.random.default_rng(0).integers(0, 256, FRAME + (3,), dtype=np.uint8)
    cache = cache or KernelCache()
    times: Dict[str, float] = {}
    for path in paths:
        if path == MAPPED and not api.properties.can_map_host_memory:
            continue
        memory = MappedMemory(api) if path == MAPPED else PinnedMemory(api)
        pre = GpuPreprocessor(spec, api, batch=1, cache=cache, frame_memory=MAPPED if path == MAPPED else PINNED)
        try:
            slot = memory.allocate(frame.shape)
            slot.array[...] = frame
            if path == DEVICE:  # the frame copied once, outside the timing
                ptr = memory.upload(slot, pre.stream)

                def work() -> None:
                    pre.fill(slot.array, 0, device_ptr=ptr)
            else:
                def work() -> None:
                    pre.fill(slot.array, 0, device_ptr=memory.upload(slot, pre.stream))

            times[path] = median_gpu_ms(api, pre.stream, work, repeat)
        finally:
            pre.close()
            memory.close()
    ring = {k: v for k, v in times.items() if k in (MAPPED, PINNED)}
    chosen = min(ring, key=lambda k: (ring[k], k != PINNED))  # a tie: pinned, the documented default
    h, w = frame.shape[:2]
    return {"chosen": chosen, "gpu_ms": {k: round(v, 4) for k, v in times.items()}, "frame": f"{w}x{h}",
            "input": f"{spec.width}x{spec.height}", "repeat": int(repeat)}
