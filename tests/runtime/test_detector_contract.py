"""The contract every registered detector keeps on every backend available here, so that a mode
or a backend added to a registry is checked with no new test:

- the same boxes from the same real frame as the reference: ONNX Runtime run directly on the
  model and the bundle's decoder. The frame is the network input's size with its objects on the
  model's 4x4 cells, where the documented behaviours agree: a full-frame pass sees it at scale 1,
  the tiles mode's one tile and whole-frame pass are that frame, and the roi mode's coarse pass
  and fine regions see it at full resolution;
- set_thresholds is honoured: no box under the score threshold, and lowering it brings back the
  reference's boxes down to it (roi: the proposal threshold follows it down);
- every stage latency and the describe() keys are there.

Backends: every name `available_backends()` lists, plus the TensorRT backend on the strict fake
TensorRT runtime and fake CUDA (tests/fakes; the kernels through the host shim), where mode
full runs the GPU detector.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from edge_sdk.decoders import make_decoder
from edge_sdk.detections import Detections
from edge_sdk.preprocess import InputSpec, Preprocessor
from edge_sdk.roi.config import RoiConfig
from edge_sdk.runtime.backends import available_backends
from edge_sdk.runtime.detectors import Detector, GpuFullFrameDetector, detector_modes, make_detector
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.model import load_model
from edge_sdk.runtime.types import STAGES
from runtime_factories import CENTERFACE_DECODER, fake_tensorrt_model, tiny_centerface_model, write_bundle

SPEC = InputSpec(name="input.1", shape=[1, 3, 32, 64], resize="letterbox")
FAKE_TENSORRT = "tensorrt-on-fakes"
BACKENDS = available_backends() + ([] if "tensorrt" in available_backends() else [FAKE_TENSORRT])
ROI = RoiConfig(motion=False)
DESCRIBED = {"mode", "preprocess", "thresholds"}


def contract_frame() -> np.ndarray:
    """Dark, with four objects on 4x4 cells of the tiny model, of scores 1.0, 0.95, 0.68 and 0.38."""
    frame = np.full((32, 64, 3), 20, np.uint8)
    frame[8:12, 8:12] = 250
    frame[20:24, 40:44] = 140
    frame[4:8, 52:56] = 131
    frame[24:28, 16:20] = 126
    return frame


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("contract")
    onnx = tiny_centerface_model(tmp / "tiny.onnx")
    return onnx, write_bundle(tmp / "bundle", onnx, SPEC, CENTERFACE_DECODER)


def reference(onnx: Path, frame: np.ndarray, score_threshold: float) -> Detections:
    """ONNX Runtime on the model file, the bundle's decoder at `score_threshold`: no detector."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    pre = Preprocessor(SPEC, batch=1)
    transform = pre.fill(frame, 0)
    outputs = session.run(None, {SPEC.name: pre.tensor})
    decoder = make_decoder(dict(CENTERFACE_DECODER, score_threshold=score_threshold), SPEC)
    return decoder(outputs, [transform])[0]


@pytest.fixture(params=BACKENDS)
def model(request: pytest.FixtureRequest, tiny_files: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    if request.param == FAKE_TENSORRT:
        from fakes.fake_tensorrt_runtime import FakeRuntimeCuda

        shim = request.getfixturevalue("kernel_shim")("preprocess.cu")
        monkeypatch.setenv("EDGE_SDK_KERNEL_CACHE", str(tmp_path / "kernels"))
        loaded = fake_tensorrt_model(tmp_path, FakeRuntimeCuda(shim.launch), SPEC, monkeypatch)
    else:
        loaded = load_model(tiny_files[1], backend=request.param, threads=1)
    yield loaded
    loaded.close()


def by_score(found: Detections) -> Detections:
    return found[np.argsort(-found.confidence, kind="stable")]


def same_boxes(got: Detections, want: Detections) -> None:
    got, want = by_score(got), by_score(want)
    assert len(got) == len(want), (got.xyxy.tolist(), want.xyxy.tolist())
    np.testing.assert_allclose(got.xyxy, want.xyxy, atol=1e-3)
    np.testing.assert_allclose(got.confidence, want.confidence, atol=1e-4)
    np.testing.assert_array_equal(got.class_id, want.class_id)


@pytest.mark.parametrize("mode", detector_modes())
def test_every_detector_keeps_the_contract(mode: str, model: Any, tiny_files: Any) -> None:
    onnx = tiny_files[0]
    image = contract_frame()
    detector = make_detector(mode, model, ROI)
    try:
        assert isinstance(detector, Detector) and detector.mode == mode
        if mode == "full" and model.backend.capabilities().on_stream:
            assert isinstance(detector, GpuFullFrameDetector)  # the registry's GPU variant
        frame = Frame(image)
        found = detector.detect(frame)
        want = reference(onnx, image, 0.5)
        assert len(want) == 3  # the frame holds what the contract compares
        same_boxes(found.detections, want)
        assert set(STAGES) - {"capture_wait"} <= set(found.latency) and all(v >= 0 for v in found.latency.values())
        assert isinstance(found.info, dict)

        assert detector.set_thresholds(score_threshold=0.9)["score_threshold"] == 0.9
        high = detector.detect(frame).detections
        assert len(high) and (high.confidence >= 0.9).all()
        same_boxes(high, reference(onnx, image, 0.9))
        detector.set_thresholds(score_threshold=0.3)
        same_boxes(detector.detect(frame).detections, reference(onnx, image, 0.3))  # 4 boxes: 0.38 is back

        described = detector.describe()
        assert DESCRIBED <= set(described) and described["mode"] == mode
        assert described["thresholds"]["score_threshold"] == 0.3
    finally:
        detector.close()


def test_the_contract_covers_the_registered_modes_and_the_backends_here() -> None:
    """The parametrization above comes from the registries: the three modes and ONNX Runtime at least."""
    assert {"full", "tiles", "roi"} <= set(detector_modes())
    assert "onnxruntime-cpu" in BACKENDS and (FAKE_TENSORRT in BACKENDS or "tensorrt" in BACKENDS)


def test_a_newly_registered_mode_is_collected(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a contributor's new mode goes through: register it and it is one of detector_modes()."""
    from edge_sdk.runtime.detectors import factory

    monkeypatch.setattr(factory, "_REGISTRY", dict(factory._REGISTRY))
    factory.register_detector("again", factory.build_full)
    assert detector_modes()[-1] == "again"
    assert not [name for name in detector_modes() if name not in factory._REGISTRY]
