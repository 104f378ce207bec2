"""The latency window: percentiles, FPS and the ring buffer."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.runtime.timing import LatencyWindow


def test_percentiles_per_stage() -> None:
    window = LatencyWindow(capacity=1000)
    for i in range(1, 101):
        window.record({"infer": float(i), "total": 2.0 * i}, t=i * 0.1)
    pct = window.percentiles((50, 99))
    assert pct["infer"]["p50"] == pytest.approx(np.percentile(np.arange(1, 101), 50))
    assert pct["total"]["p99"] == pytest.approx(np.percentile(2 * np.arange(1, 101), 99))
    assert "preprocess" not in pct
    assert window.fps() == pytest.approx(10.0)


def test_ring_buffer_keeps_the_last_frames() -> None:
    window = LatencyWindow(capacity=10)
    for i in range(25):
        window.record({"infer": float(i)}, t=float(i))
    assert len(window) == 10 and window.count == 25
    assert window.percentiles((0, 100))["infer"] == {"p0": 15.0, "p100": 24.0}


def test_stages_missing_on_some_frames_are_ignored() -> None:
    window = LatencyWindow()
    window.record({"infer": 10.0, "total": 12.0})
    window.record({"total": 1.0})  # a cached frame: no inference
    pct = window.percentiles((50,))
    assert pct["infer"]["p50"] == 10.0 and pct["total"]["p50"] == pytest.approx(6.5)
