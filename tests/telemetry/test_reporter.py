"""The telemetry reporter's own clock: what its figures cover."""
from __future__ import annotations

import io

import pytest

from edge_sdk.detections import Detections
from edge_sdk.runtime.types import FrameResult, PipelineStats
from edge_sdk.telemetry.health import HealthMonitor
from edge_sdk.telemetry.publisher import LinePublisher
from edge_sdk.telemetry.reporter import Reporter


def test_figures_start_with_reporting_not_with_construction() -> None:
    """The daemon builds its reporter before it loads the model (seconds, for a TensorRT engine):
    FPS, uptime and the first interval count from start(), not from construction."""
    now = [0.0]
    stats = PipelineStats()
    pub = LinePublisher("dev-1", io.StringIO())
    rep = Reporter(pub, HealthMonitor([]), lambda: stats, interval_s=3600, window_s=10, clock=lambda: now[0])
    now[0] = 8.0  # the model loads
    rep.start()
    try:
        for i in range(20):  # 20 frames in the next 2 s
            now[0] = 8.0 + 0.1 * (i + 1)
            stats.frames_captured = stats.frames_processed = i + 1
            rep.observe(FrameResult(i, now[0], Detections.empty(), {"total": 1.0}))
        message = rep.build()
    finally:
        rep.stop(final_report=False)
    assert message["uptime_s"] == pytest.approx(2.0)
    assert message["fps"] == pytest.approx(10.0, rel=0.06)  # 20 frames / 2 s, not / 10 s
    assert message["interval"]["seconds"] == pytest.approx(2.0)
