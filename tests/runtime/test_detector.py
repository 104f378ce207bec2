"""The runtime's detectors: thresholds, stage latencies and the report, with a fake backend."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import pytest

from edge_sdk.preprocess import InputSpec
from edge_sdk.errors import ConfigError
from edge_sdk.roi.config import RoiConfig
from edge_sdk.runtime.backends.base import Backend, Capabilities
from edge_sdk.runtime.detectors import factory as factory_mod
from edge_sdk.runtime.detectors.full import FullFrameDetector
from edge_sdk.runtime.detectors.strategy import StrategyDetector
from edge_sdk.runtime.detectors.factory import detector_modes, make_detector, register_detector
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.model import Model

SPEC = InputSpec(name="input.1", shape=[1, 3, 48, 64])


class FakeCenterFaceBackend(Backend):
    """Returns CenterFace-shaped outputs with one face centre of score `peak` in every image."""

    def __init__(self, peak: float) -> None:
        super().__init__()
        self.input_names = ["input.1"]
        self.output_names = ["537", "538", "539", "540"]
        self.peak = peak
        self.feeds: List[tuple] = []

    def infer(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        x = feed["input.1"]
        self.feeds.append(x.shape)
        n, h, w = x.shape[0], x.shape[2] // 4, x.shape[3] // 4
        heat = np.zeros((n, 1, h, w), np.float32)
        heat[:, 0, 5, 5] = self.peak
        scale = np.full((n, 2, h, w), np.log(2.0), np.float32)  # 8x8 pixel boxes
        return [heat, scale, np.zeros((n, 2, h, w), np.float32), np.zeros((n, 10, h, w), np.float32)]


def model(peak: float, **decoder: float) -> Model:
    return Model(FakeCenterFaceBackend(peak), SPEC, dict({"type": "centerface", "score_threshold": 0.5}, **decoder))


ROI = RoiConfig(motion=False, sweep_tiles=1, max_fine_pixels=2 * 64 * 48)


@pytest.mark.parametrize(
    "mode, peak, expect_found",
    [
        ("full", 0.9, 1),
        ("full", 0.3, 0),
        ("tiles", 0.9, 1),
        ("tiles", 0.3, 0),
        ("roi", 0.3, 0),  # a proposal only: examined, not reported
        ("roi", 0.9, 1),
    ],
)
def test_detector_keeps_the_bundle_threshold_for_output(mode, peak, expect_found) -> None:
    m = model(peak)
    det = make_detector(mode, m, ROI)
    assert isinstance(det, FullFrameDetector if mode == "full" else StrategyDetector)
    result = det.detect(Frame(np.zeros((96, 128, 3), np.uint8)))
    found, latency, info = result.detections, result.latency, result.info
    assert len(found) >= expect_found and (expect_found or len(found) == 0)
    assert set(latency) == {"preprocess", "infer", "decode", "merge"}
    assert all(v >= 0 for v in latency.values())
    assert det.thresholds["score_threshold"] == 0.5
    if mode != "full":
        assert info["mode"] == mode
    if mode == "roi":
        # the coarse pass and the sweep tile (the whole frame, zoomed out) each propose the
        # 0.3 peak: both used the proposal threshold (0.05 < 0.3), not the output one
        assert info["candidates"] == 2
        assert len(m.backend.feeds) == info["images"]


@pytest.mark.parametrize("mode", ["full", "tiles", "roi"])
def test_score_threshold_can_be_set_in_every_mode(mode) -> None:
    """A face of score 0.3 is not reported at the bundle's 0.5; after set_thresholds(0.2) it is,
    and after 0.6 again it is not (the roi proposal threshold follows it down, never up)."""
    det = make_detector(mode, model(0.3), ROI)
    frame = Frame(np.zeros((96, 128, 3), np.uint8))
    assert len(det.detect(frame).detections) == 0
    assert det.set_thresholds(score_threshold=0.2)["score_threshold"] == 0.2
    assert len(det.detect(frame).detections) >= 1
    det.set_thresholds(score_threshold=0.6)
    assert len(det.detect(frame).detections) == 0
    if mode == "roi":
        assert det.config.proposal_threshold == ROI.proposal_threshold  # 0.05, not raised to 0.6


@pytest.mark.parametrize("mode", ["full", "tiles", "roi"])
def test_nms_iou_can_be_set_in_every_mode(mode) -> None:
    det = make_detector(mode, model(0.9, nms_iou=0.3), ROI)
    assert det.thresholds["nms_iou"] == 0.3
    assert det.set_thresholds(nms_iou=0.6)["nms_iou"] == 0.6
    assert det.decoder.nms_iou == 0.6


@pytest.mark.parametrize("mode", ["full", "roi"])
@pytest.mark.parametrize("changes", [{"score_threshold": 1.5}, {"nms_iou": -0.1}, {"score_threshold": True},
                                     {"score_threshold": "0.4"}, {"iou": 0.5}])
def test_bad_thresholds_are_refused_and_change_nothing(mode, changes) -> None:
    det = make_detector(mode, model(0.9, nms_iou=0.3), ROI)
    before = dict(det.thresholds)
    with pytest.raises(ConfigError):
        det.set_thresholds(**changes)
    assert det.thresholds == before


def test_pipeline_thresholds_override_the_bundle_decoder() -> None:
    det = make_detector("roi", model(0.3), ROI, {"score_threshold": 0.25, "nms_iou": None})
    assert det.thresholds["score_threshold"] == 0.25
    assert len(det.detect(Frame(np.zeros((96, 128, 3), np.uint8))).detections) >= 1
    with pytest.raises(ConfigError, match="mode must be one of"):
        make_detector("sahi", model(0.3), ROI)


class StreamFakeBackend(FakeCenterFaceBackend):
    """The fake, claiming a CUDA stream: what makes the factory pick a mode's GPU variant."""

    def capabilities(self) -> Capabilities:
        return Capabilities(device="gpu", cuda=object(), stream=object())


def test_a_registered_mode_is_built_with_the_decoder_set_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factory_mod, "_REGISTRY", dict(factory_mod._REGISTRY))
    built: List[tuple] = []

    def build(m: Model, decoder: object, roi: RoiConfig) -> FullFrameDetector:
        built.append(("cpu", decoder, roi))
        return FullFrameDetector(m.backend, decoder, m.input_spec)

    def build_on_stream(m: Model, decoder: object, roi: RoiConfig) -> FullFrameDetector:
        built.append(("stream", decoder, roi))
        return FullFrameDetector(m.backend, decoder, m.input_spec)

    register_detector("mine", build, on_stream=build_on_stream)
    assert "mine" in detector_modes() and {"full", "tiles", "roi"} <= set(detector_modes())
    det = make_detector("mine", model(0.9), ROI, {"score_threshold": 0.7})
    assert [b[0] for b in built] == ["cpu"] and built[0][2] is ROI
    assert built[0][1].score_threshold == 0.7 and det.thresholds["score_threshold"] == 0.7
    on_stream = Model(StreamFakeBackend(0.9), SPEC, {"type": "centerface", "score_threshold": 0.5})
    make_detector("mine", on_stream)
    assert [b[0] for b in built] == ["cpu", "stream"] and built[1][2] == RoiConfig()
    with pytest.raises(ConfigError, match="mode must be one of full, tiles, roi, mine"):
        make_detector("sahi", model(0.3))
