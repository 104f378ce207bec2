"""The CUDA layer on a real Xavier NX (or Orin): the checks tests/cuda makes against fakes and the
host shim, now on the device, plus a timed camera run through the zero-copy path.

    pytest -m jetson tests/device -s
    EDGE_SDK_CAMERA=/dev/video0 pytest -m jetson tests/device -s -k camera   # 60 s of frames
"""
from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.cuda import MAPPED, frame_memory_for, open_cuda
from edge_sdk.cuda.compiler import KernelCache
from edge_sdk.cuda.preprocess import GpuPreprocessor
from edge_sdk.errors import EdgeSdkError
from edge_sdk.preprocess import InputSpec, Preprocessor

pytestmark = pytest.mark.jetson

IMPLEMENTATIONS = ["cuda-python", "pycuda"]
SPEC = InputSpec(shape=[1, 3, 384, 640], dtype="float16", color="RGB", mean=[104, 117, 123], scale=[1 / 58, 1 / 57, 1 / 59])


def _api(name):
    try:
        api = open_cuda(name)
    except EdgeSdkError as exc:
        pytest.skip(f"{name} is not usable on this device: {exc}")
    if api is None:
        pytest.skip("no CUDA implementation found the GPU")
    return api


@pytest.fixture(params=IMPLEMENTATIONS)
def api(request):
    return _api(request.param)


def test_device_is_integrated_and_outputs_are_mapped(api) -> None:
    props = api.properties
    assert props.integrated and props.can_map_host_memory
    assert props.sm in ((7, 2), (8, 7))
    assert frame_memory_for(props) == MAPPED  # what the GPU writes once and the CPU reads: no copy back


def test_kernels_match_the_cpu_on_the_device(api, tmp_path) -> None:
    rng = np.random.default_rng(0)
    pre = GpuPreprocessor(SPEC, api, cache=KernelCache(tmp_path))
    for h, w in ((1080, 1920), (2160, 3840), (383, 641), (1, 1)):
        frame = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        pre.fill(frame)
        gpu = pre.download().astype(np.float64)
        cpu = Preprocessor(SPEC)(frame)[0].astype(np.float64)
        diff = np.abs(gpu - cpu)
        assert diff.max() <= 1 / 57 + np.abs(cpu).max() * 2.0 ** -10 and np.mean(diff > 0) <= 1e-3, (h, w, diff.max())


def test_zero_copy_frame_and_graph_replay(api, tmp_path) -> None:
    buf = api.alloc_host((1080, 1920, 3), np.uint8, mapped=True)
    pre = GpuPreprocessor(SPEC, api, cache=KernelCache(tmp_path), frame_memory=MAPPED)
    rng = np.random.default_rng(1)
    for _ in range(5):
        buf.array[...] = rng.integers(0, 256, buf.array.shape, dtype=np.uint8)
        pre.fill(buf.array)
        np.testing.assert_allclose(pre.download(), Preprocessor(SPEC)(buf.array)[0], atol=1 / 57 + 0.02)
    assert pre.zero_copy_frames == 5 and pre.staged_frames == 0
    if api.supports_graphs:
        assert (pre.graph.captures, pre.graph.replays) == (1, 4)


def test_gpu_check_bench_passes(api) -> None:
    path = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.run_checks(api, repeat=50)
    print("\n" + bench.table(rows))
    assert bench.failed(rows) == []


@pytest.mark.skipif(not os.environ.get("EDGE_SDK_CAMERA"), reason="set EDGE_SDK_CAMERA to a camera URI (csi://0, v4l2:///dev/video0)")
def test_camera_60s_through_the_zero_copy_path(tmp_path) -> None:
    """The runtime's capture ring in mapped memory (frame_memory "mapped"; "auto" takes it where
    `edge-sdk engine` measured it faster): the source decodes into the slot, the kernel reads it
    in place; FPS and per-stage latency as a table."""
    from edge_sdk.cuda.frames import frame_memory
    from edge_sdk.runtime.capture import Capture
    from edge_sdk.runtime.sources import open_source

    api = _api("auto")
    memory = frame_memory("mapped", cuda=api)
    assert memory.kind == MAPPED, memory.describe()
    pre = GpuPreprocessor(SPEC, api, cache=KernelCache(tmp_path), frame_memory=MAPPED)
    capture = Capture(open_source(os.environ["EDGE_SDK_CAMERA"]), pool_size=4, memory=memory).start()
    start, end = api.create_event(), api.create_event()
    seconds = float(os.environ.get("EDGE_SDK_CAMERA_SECONDS", "60"))
    wait_ms, pre_ms, n = [], [], 0
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < seconds:
            t_wait = time.perf_counter()
            slot = capture.get(timeout=5.0)
            assert slot is not None, "the camera stopped"
            wait_ms.append((time.perf_counter() - t_wait) * 1e3)
            api.record(start, pre.stream)
            pre.fill(slot.frame, 0, device_ptr=capture.upload(slot, pre.stream))
            api.record(end, pre.stream)
            api.event_synchronize(end)  # the kernel has read the slot: it may go back to the ring
            pre_ms.append(api.elapsed_ms(start, end))
            capture.release(slot)
            n += 1
        elapsed = time.monotonic() - t0
        dropped = capture.stats.frames_dropped
    finally:
        capture.stop()
        pre.close()
    print(f"\n| frames | FPS | dropped | capture wait ms (median) | preprocess GPU ms (median, p95) | frame memory |")
    print("|---|---|---|---|---|---|")
    print(f"| {n} | {n / elapsed:.1f} | {dropped} | {np.median(wait_ms):.2f} | {np.median(pre_ms):.3f}, "
          f"{np.percentile(pre_ms, 95):.3f} | {memory.describe()['path']} |")
    assert pre.staged_frames == 0 and pre.device_frames + pre.zero_copy_frames == n
