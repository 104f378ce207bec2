from __future__ import annotations

from typing import Dict, List

import numpy as np
import pytest

from edge_sdk.detections import Detections
from edge_sdk.runtime.types import FrameResult, PipelineStats
from edge_sdk.telemetry.metrics import IntervalCounters, RollingMetrics


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def result(i: int, latency: Dict[str, float], n_det: int = 0, **kw) -> FrameResult:
    boxes = np.tile(np.array([[0, 0, 10, 10]], np.float32), (n_det, 1))
    return FrameResult(i, 0.0, Detections(boxes, np.ones(n_det), np.zeros(n_det)), dict(latency), **kw)


def test_percentiles_and_fps_over_the_window() -> None:
    clock = Clock()
    m = RollingMetrics(window_s=10.0, clock=clock)
    totals = list(range(1, 101))  # 100 frames, total latency 1..100 ms
    for i, v in enumerate(totals):
        clock.t += 0.05  # 20 FPS
        m.observe(result(i, {"infer": v / 2, "total": float(v)}, n_det=1))
    snap = m.snapshot()
    assert snap["fps"] == pytest.approx(100 / 5.0, rel=1e-3)  # 100 frames in the 5 s since start
    total = snap["latency_ms"]["total"]
    assert total["p50"] == pytest.approx(np.percentile(totals, 50))
    assert total["p99"] == pytest.approx(np.percentile(totals, 99))
    assert total["max"] == 100.0 and total["count"] == 100
    assert snap["latency_ms"]["infer"]["p50"] == pytest.approx(np.percentile(totals, 50) / 2)
    assert "decode" not in snap["latency_ms"]  # never reported: omitted, not zero
    assert snap["totals"]["detections"] == 100


def test_old_frames_leave_the_window() -> None:
    clock = Clock()
    m = RollingMetrics(window_s=10.0, clock=clock)
    for i in range(50):
        clock.t += 0.1
        m.observe(result(i, {"total": 500.0}))
    clock.t += 20.0  # a long stall: everything is older than the window
    for i in range(10):
        clock.t += 0.1
        m.observe(result(50 + i, {"total": 10.0}))
    snap = m.snapshot()
    assert snap["frames_in_window"] == 10
    assert snap["latency_ms"]["total"]["max"] == 10.0
    assert snap["fps"] == pytest.approx(1.0)  # 10 frames over the 10 s window


def test_full_ring_measures_fps_over_the_span_it_covers() -> None:
    clock = Clock()
    m = RollingMetrics(window_s=10.0, capacity=64, clock=clock)
    for i in range(1000):
        clock.t += 0.001  # 1000 FPS, far more than the ring holds in 10 s
        m.observe(result(i, {"total": 1.0}))
    snap = m.snapshot()
    assert snap["frames_in_window"] == 64
    assert snap["fps"] == pytest.approx(64 / 0.064, rel=0.02)


def test_batch_efficiency_counts_from_info() -> None:
    m = RollingMetrics(clock=Clock())
    for filled in (4, 2, 3):
        m.observe(result(0, {"total": 1.0}, info={"batch": {"size": 4, "filled": filled}}))
    totals = m.snapshot()["totals"]
    assert (totals["batch_filled"], totals["batch_slots"]) == (9, 12)


@pytest.mark.parametrize(
    "before,after,expected",
    [
        ((0, 0, 0), (100, 95, 5), {"captured": 100, "processed": 95, "dropped": 5, "drop_ratio": 0.05}),
        ((100, 95, 5), (100, 95, 5), {"captured": 0, "processed": 0, "dropped": 0, "drop_ratio": 0.0}),
        ((10, 10, 0), (30, 20, 10), {"captured": 20, "processed": 10, "dropped": 10, "drop_ratio": 0.5}),
    ],
)
def test_interval_counters(before: tuple, after: tuple, expected: Dict[str, float]) -> None:
    clock = Clock()
    ic = IntervalCounters(clock=clock)
    ic.step(PipelineStats(*before), 0)
    clock.t += 2.0
    out = ic.step(PipelineStats(*after), 7)
    assert {k: out[k] for k in expected} == expected
    assert out["seconds"] == 2.0 and out["detections"] == 7


def test_observe_allocates_no_arrays() -> None:
    import tracemalloc

    m = RollingMetrics(clock=Clock())
    r = result(0, {"capture_wait": 1.0, "preprocess": 1.0, "infer": 1.0, "decode": 1.0, "merge": 0.0, "total": 4.0})
    for _ in range(100):
        m.observe(r, now=1.0)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(2000):
        m.observe(r, now=1.0)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename") if "metrics.py" in str(s.traceback))
    assert grown < 1024, f"observe() grew memory by {grown} bytes over 2000 frames"
