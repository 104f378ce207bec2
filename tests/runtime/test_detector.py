"""The pipeline adapter: thresholds, stage latencies and the report, with a fake backend."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import pytest

from edge_sdk.preprocess import InputSpec
from edge_sdk.roi.runtime import StrategyDetector, strategy_detector
from edge_sdk.roi.strategies import RoiConfig

SPEC = InputSpec(name="input.1", shape=[1, 3, 48, 64])


class FakeCenterFaceBackend:
    """Returns CenterFace-shaped outputs with one face centre of score `peak` in every image."""

    input_names = ["input.1"]
    output_names = ["537", "538", "539", "540"]

    def __init__(self, peak: float) -> None:
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


@pytest.mark.parametrize(
    "mode, peak, expect_found",
    [
        ("full", 0.9, 1),
        ("full", 0.3, 0),
        ("roi", 0.3, 0),  # a proposal only: examined, not reported
        ("roi", 0.9, 1),
    ],
)
def test_strategy_detector_keeps_the_bundle_threshold_for_output(mode, peak, expect_found) -> None:
    backend = FakeCenterFaceBackend(peak)
    det = strategy_detector(mode, backend, {"type": "centerface", "score_threshold": 0.5}, SPEC, RoiConfig(motion=False, sweep_tiles=1, max_fine_pixels=2 * 64 * 48))
    assert isinstance(det, StrategyDetector)
    latency: Dict[str, float] = {}
    info: Dict[str, object] = {}
    found = det.detect(np.zeros((96, 128, 3), np.uint8), latency, info)
    assert len(found) >= expect_found and (expect_found or len(found) == 0)
    assert set(latency) == {"preprocess", "infer", "decode", "merge"}
    assert all(v >= 0 for v in latency.values())
    assert info["mode"] == mode
    if mode == "roi":
        # the coarse pass and the sweep tile (the whole frame, zoomed out) each propose the
        # 0.3 peak: both used the proposal threshold (0.05 < 0.3), not the output one
        assert info["candidates"] == 2
        assert len(backend.feeds) == info["images"]
