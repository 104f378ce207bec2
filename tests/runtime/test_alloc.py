"""Steady state allocates nothing per frame in our code (tracemalloc over many frames).

Measured: the capture thread and its pool (a synthetic 640x384 source rendering into the
slots), the preprocessor (letterbox into the preallocated tensor), the backend feed path
(ONNX Runtime with the input and outputs bound to preallocated buffers), the prediction cache
and the pipeline loop itself. The decoder and the FrameResult objects make a few small arrays
per frame (the detections themselves); the second test bounds that separately. ONNX Runtime's
own working memory is C++ and invisible to tracemalloc: RSS over 5,000 frames is checked by
bench/bench_pipeline.py instead.
"""
from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path
from typing import Any, List, Sequence, Tuple

import numpy as np
import pytest

from edge_sdk.detections import Detections
from edge_sdk.geometry import Placement
from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime.backends.onnxruntime import OnnxRuntimeBackend
from edge_sdk.runtime.config import CacheConfig, PipelineConfig, SourceConfig
from edge_sdk.runtime.detectors.full import FullFrameDetector
from edge_sdk.runtime.pipeline import Pipeline
from runtime_factories import CENTERFACE_DECODER, tiny_centerface_model

FRAME_BYTES = 384 * 640 * 3  # one frame: 737 kB; the input tensor is 4x that
WARMUP, MEASURED = 30, 300


class NoDecode:
    """Stands in for the decoder so that only capture + preprocess + feed are measured."""

    def __init__(self) -> None:
        self.empty = [Detections.empty()]

    def __call__(self, outputs: Sequence[np.ndarray], transforms: Sequence[Placement]) -> List[Detections]:
        return self.empty


@pytest.fixture(scope="module")
def tiny_model_384(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_centerface_model(tmp_path_factory.mktemp("alloc") / "tiny384.onnx", height=384, width=640)


def measure(model: Path, decoder: Any, cache: bool, warmup: int = WARMUP, measured: int = MEASURED) -> Tuple[int, int]:
    spec = InputSpec(name="input.1", shape=[1, 3, 384, 640])
    # every frame differs (the faces move), so with the cache on, each frame is still compared
    uri = f"synthetic://faces?width=640&height=384&count=6&min_size=24&max_size=48&frames={warmup + measured}"
    cfg = PipelineConfig(source=SourceConfig(uri), threads=1, cache=CacheConfig(enabled=cache))
    backend = OnnxRuntimeBackend(model, provider="cpu", threads=1)
    backend.activate()
    detector = FullFrameDetector(backend, decoder, spec)
    try:
        with Pipeline(cfg, detector=detector) as pipeline:
            it = iter(pipeline)
            for _ in range(warmup):
                next(it)
            gc.collect()
            tracemalloc.start(32)
            try:
                before = tracemalloc.take_snapshot()
                for _ in range(measured):
                    next(it)
                gc.collect()
                _, peak = tracemalloc.get_traced_memory()
                after = tracemalloc.take_snapshot()
            finally:
                tracemalloc.stop()
            # Memory still held, in our code: what ONNX Runtime's Python layer keeps (some
            # versions hold a few bytes per run_with_iobinding call) is not ours to fix.
            ours = [tracemalloc.Filter(False, "*onnxruntime*", all_frames=True), tracemalloc.Filter(False, tracemalloc.__file__)]
            current = sum(stat.size_diff for stat in after.filter_traces(ours).compare_to(before.filter_traces(ours), "filename"))
            assert pipeline.stats.frames_processed == warmup + measured
    finally:
        backend.deactivate()
    return current, peak


@pytest.mark.parametrize("cache", [True, False])
def test_capture_preprocess_and_feed_allocate_nothing_per_frame(tiny_model_384: Path, cache: bool) -> None:
    current, peak = measure(tiny_model_384, NoDecode(), cache)
    # Small Python objects (a FrameResult, a latency dict) come and go each frame; a frame
    # buffer or tensor allocated even once would exceed these bounds by far.
    assert peak < 64 * 1024, f"peak {peak} B over {MEASURED} frames"
    assert current < 16 * 1024, f"{current} B still held after {MEASURED} frames"


@pytest.mark.host  # fixing the model's input size needs onnx
def test_real_model_and_decoder_only_small_transients(centerface_384x640_path: Path) -> None:
    """With the real CenterFace and its decoder, per-frame allocations stay small and are freed."""
    from edge_sdk.decoders import make_decoder

    decoder = make_decoder(CENTERFACE_DECODER, InputSpec(name="input.1", shape=[1, 3, 384, 640]))
    current, peak = measure(Path(centerface_384x640_path), decoder, cache=True, warmup=5, measured=40)
    assert peak < FRAME_BYTES // 4, f"peak {peak} B"
    assert current < 32 * 1024, f"{current} B still held after 40 frames"


def capture_allocations(source: Any, memory: Any, warmup: int = WARMUP, measured: int = MEASURED) -> Tuple[int, int]:
    """(bytes still held, peak) over `measured` frames of a capture thread alone."""
    from edge_sdk.runtime.capture import Capture

    capture = Capture(source, pool_size=4, memory=memory).start()
    try:
        for _ in range(warmup):
            capture.release(capture.get(timeout=10))
        gc.collect()
        tracemalloc.start(32)
        try:
            before = tracemalloc.take_snapshot()
            for _ in range(measured):
                capture.release(capture.get(timeout=10))
            gc.collect()
            _, peak = tracemalloc.get_traced_memory()
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        ours = [tracemalloc.Filter(False, tracemalloc.__file__)]
        current = sum(stat.size_diff for stat in after.filter_traces(ours).compare_to(before.filter_traces(ours), "filename"))
    finally:
        capture.stop()
    return current, peak


@pytest.mark.parametrize("kind", ["synthetic", "video"])
def test_capture_into_mapped_frame_memory_allocates_nothing_per_frame(kind: str, tmp_path: Path) -> None:
    """The ring in (fake) mapped page-locked memory: the source decodes or renders into the
    slots; buffers are allocated once per slot, never per frame."""
    from edge_sdk.cuda.frames import MappedMemory
    from edge_sdk.runtime.sources import open_source
    from fakes.fake_cuda_host import FakeHostCuda
    from runtime_factories import write_video

    frames = WARMUP + MEASURED
    if kind == "video":
        uri = str(write_video(tmp_path / "clip.avi", frames, width=320, height=192))
    else:
        uri = f"synthetic://faces?width=640&height=384&count=6&min_size=24&max_size=48&frames={frames}"

    def no_kernels(*args: Any) -> None:
        raise AssertionError("no kernel runs here")

    api = FakeHostCuda(no_kernels)
    memory = MappedMemory(api)
    current, peak = capture_allocations(open_source(uri), memory)
    assert memory.allocations <= 4 and api.used == 0
    assert peak < 64 * 1024, f"peak {peak} B over {MEASURED} frames"
    assert current < 16 * 1024, f"{current} B still held after {MEASURED} frames"
