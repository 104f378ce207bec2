"""The GPU detector end to end, through `Pipeline`: capture ring in fake mapped (or pinned) memory ->
GpuPreprocessor (the real preprocess.cu through the host shim) -> the TensorRT backend on the fake
TensorRT runtime -> the CenterFace decoder. The oracle is the CPU path on another stack entirely:
ONNX Runtime running the tiny CenterFace ONNX model (the same arithmetic the fake engine computes)
behind the CPU preprocessor and FullFrameDetector, on the same frames.
"""
from __future__ import annotations

from typing import Any, List

import numpy as np
import pytest

from edge_sdk.cuda.compiler import KernelCache
from edge_sdk.cuda.frames import PinnedMemory
from edge_sdk.errors import ConfigError
from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime.backends.base import Backend
from edge_sdk.runtime.config import CacheConfig, PipelineConfig, SourceConfig
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.detectors.gpu import GpuFullFrameDetector, make_gpu_detector
from edge_sdk.runtime.model import load_model
from edge_sdk.runtime.pipeline import Pipeline
from fakes.fake_cuda_host import DISCRETE, XAVIER_NX
from fakes.fake_tensorrt_runtime import FakeRuntimeCuda
from runtime_factories import CENTERFACE_DECODER, ListSource, fake_tensorrt_model, tiny_centerface_model, write_bundle

SPEC = InputSpec(name="input.1", shape=[1, 3, 32, 64], resize="letterbox")


def scenes(n: int = 6, h: int = 45, w: int = 77) -> List[np.ndarray]:
    """Colour noise on a dark background with bright blocks at varying places (odd frame size)."""
    rng = np.random.default_rng(5)
    frames = []
    for i in range(n):
        f = rng.integers(0, 90, (h, w, 3), dtype=np.uint8)
        for k in range(2):
            y, x = rng.integers(0, h - 12), rng.integers(0, w - 12)
            f[y:y + 10, x:x + 10] = rng.integers(150, 256, 3, dtype=np.uint8)
        frames.append(f)
    return frames


@pytest.fixture
def gpu_model(kernel_shim, monkeypatch, tmp_path):
    """gpu_model(props) -> (Model on the fake TensorRT backend, fake CUDA, kernel cache)."""
    opened: List[Any] = []

    def make(props=XAVIER_NX):
        cuda = FakeRuntimeCuda(kernel_shim("preprocess.cu").launch, props=props)
        model = fake_tensorrt_model(tmp_path / f"trt{len(opened)}", cuda, SPEC, monkeypatch)
        opened.append(model.backend)
        return model, cuda, KernelCache(directory=tmp_path / "kernels")

    yield make
    for backend in opened:
        backend.deactivate()


@pytest.fixture
def cpu_detections(tmp_path):
    """Detections of the CPU path (ONNX Runtime, tiny CenterFace ONNX) for a list of frames."""
    onnx_bundle = write_bundle(tmp_path / "ort-bundle", tiny_centerface_model(tmp_path / "tiny.onnx"), SPEC,
                               CENTERFACE_DECODER)

    def run(frames):
        model = load_model(onnx_bundle, backend="onnxruntime-cpu", threads=1)
        try:
            cfg = PipelineConfig(source=SourceConfig("list://"), cache=CacheConfig(enabled=False), preprocess="inline")
            with Pipeline(cfg, model=model, source=ListSource(frames)) as pipeline:
                return [r.detections for r in pipeline]
        finally:
            model.close()

    return run


def same(a, b) -> None:
    assert len(a) == len(b)
    np.testing.assert_allclose(a.xyxy, b.xyxy, atol=1e-3)
    np.testing.assert_allclose(a.confidence, b.confidence, atol=1e-5)
    np.testing.assert_array_equal(a.class_id, b.class_id)


MEASURED = {"chosen": "mapped", "gpu_ms": {"mapped": 0.7, "pinned": 0.9}}  # device_report.json's field


@pytest.mark.parametrize("props,measured", [(XAVIER_NX, MEASURED), (XAVIER_NX, None), (DISCRETE, MEASURED)],
                         ids=["xavier-measured-mapped", "xavier-default", "discrete"])
def test_gpu_pipeline_equals_the_cpu_path(gpu_model, cpu_detections, props, measured) -> None:
    frames = scenes()
    expected = cpu_detections(frames)
    assert sum(len(d) for d in expected) >= 6  # the scenes light up the heatmap: something to compare
    model, cuda, cache = gpu_model(props)
    model.backend.frame_memory = measured  # what `edge-sdk engine` recorded on this device
    handles = (cuda.live_streams, cuda.live_events)  # the backend's
    detector = make_gpu_detector(model, cache=cache)
    cfg = PipelineConfig(source=SourceConfig("list://"), cache=CacheConfig(enabled=False))
    with Pipeline(cfg, model=model, source=ListSource(frames), detector=detector) as pipeline:
        got = [r.detections for r in pipeline]
        described = pipeline.describe()
        assert pipeline.placement() == "stream"
    for a, b in zip(got, expected):
        same(a, b)
    pre = detector.preprocessor
    if props is XAVIER_NX and measured:  # the capture ring is mapped memory: the kernel read every frame in place
        assert described["frame_memory"]["kind"] == "mapped"
        assert (pre.zero_copy_frames, pre.staged_frames) == (len(frames), 0)
    else:
        assert described["frame_memory"]["kind"] == "pinned"
    copies = [op for op in cuda.executed if op.startswith("htod")]
    assert len(copies) == (0 if props is XAVIER_NX and measured else len(frames))
    # the backend was fed the preprocessor's device tensor: bound, never copied
    assert model.backend._bound_input == pre.tensor.ptr
    # graphs: the preprocessor's one per frame buffer (ring slot), the backend's one per input (after one plain run)
    assert pre.graph.captures <= cfg.pool_size and pre.graph.captures + pre.graph.replays == len(frames)
    assert (model.backend.graph.captures, model.backend.graph.replays) == (1, len(frames) - 2)
    detector.close()
    detector.close()
    assert (cuda.live_streams, cuda.live_events) == handles  # the detector's events are destroyed, once


def test_device_ptr_from_a_pinned_upload_is_read_in_place(gpu_model, cpu_detections) -> None:
    frames = scenes(3)
    expected = cpu_detections(frames)
    model, cuda, cache = gpu_model(DISCRETE)
    detector = make_gpu_detector(model, cache=cache)
    memory = PinnedMemory(cuda)
    slot = memory.allocate(frames[0].shape)
    for frame, want in zip(frames, expected):
        slot.array[...] = frame
        ptr = memory.upload(slot, model.backend.stream)  # what Capture.upload queues on the stream
        frame = Frame(slot.array)
        frame.on_device(ptr, model.backend.stream)
        found = detector.detect(frame)
        same(found.detections, want)
        latency = found.latency
        assert set(latency) == {"preprocess", "infer", "decode", "merge"}
    assert detector.preprocessor.device_frames == 3 and detector.preprocessor.staged_frames == 0
    detector.close()
    memory.close()


def test_thresholds_and_a_backend_without_a_stream(gpu_model) -> None:
    model, _cuda, cache = gpu_model()
    detector = make_gpu_detector(model, thresholds={"score_threshold": 0.7}, cache=cache)
    assert detector.thresholds["score_threshold"] == 0.7
    assert detector.set_thresholds(nms_iou=0.2)["nms_iou"] == 0.2
    with pytest.raises(ConfigError, match="must be a number in"):
        detector.set_thresholds(score_threshold=2)
    detector.close()
    cpu_backend = type("Cpu", (Backend,), {"name": "onnxruntime", "cpu_bound": True})()
    cpu_backend.input_names = ["input.1"]
    with pytest.raises(ConfigError, match="needs a backend that runs on a CUDA stream"):
        GpuFullFrameDetector(cpu_backend, None, SPEC)
