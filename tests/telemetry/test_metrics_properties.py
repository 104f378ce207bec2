"""RollingMetrics and IntervalCounters against an oracle written out here: the frames a window
holds are the newest `capacity` observed whose timestamp is within the last `window_s` seconds
(one exactly `window_s` old has left it), each stage's percentiles are numpy's over the frames
that report that stage, and a stage no frame in the window reports is absent, even when older
frames, overwritten since the ring wrapped, did report it."""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.detections import Detections
from edge_sdk.runtime.types import FrameResult, PipelineStats
from edge_sdk.telemetry.metrics import DEFAULT_STAGES, IntervalCounters, RollingMetrics, frames_block

STARTED = 1000.0


def frame(latency: Dict[str, float], detections: int = 0, cached: bool = False, info: Dict = None) -> FrameResult:
    boxes = np.tile(np.array([[0, 0, 4, 4]], np.float32), (detections, 1))
    return FrameResult(0, 0.0, Detections(boxes, np.ones(detections), np.zeros(detections)), dict(latency),
                       cached=cached, info=info or {})


def expected(frames: List[Tuple[float, Dict[str, float]]], capacity: int, window: float, now: float) -> Dict:
    ring = frames[-capacity:]
    inside = [(t, lat) for t, lat in ring if now - t < window]
    if len(frames) >= capacity and len(inside) == len(ring):
        span = max(now - min(t for t, _ in ring), 1e-9)
    else:
        span = min(window, max(now - STARTED, 1e-9))
    latency = {}
    for stage in DEFAULT_STAGES:
        values = np.array([lat[stage] for _, lat in inside if stage in lat], np.float32)
        if len(values):
            latency[stage] = {"p50": np.percentile(values, 50), "p95": np.percentile(values, 95),
                              "p99": np.percentile(values, 99), "mean": values.mean(), "max": values.max(),
                              "count": len(values)}
    return {"fps": len(inside) / span, "frames_in_window": len(inside), "latency_ms": latency}


stage_latencies = st.dictionaries(st.sampled_from(DEFAULT_STAGES + ("unknown",)),
                                  st.floats(0.0, 500.0, allow_nan=False, width=32), max_size=4)


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(st.tuples(st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.5, 4.0]), stage_latencies), min_size=1, max_size=40),
    capacity=st.integers(1, 12),
    window=st.sampled_from([1.0, 2.5, 5.0, 10.0]),
    wait=st.sampled_from([0.0, 0.5, 1.0, 2.5, 5.0, 30.0]),
)
def test_snapshot_matches_the_oracle(steps, capacity: int, window: float, wait: float) -> None:
    now = STARTED
    m = RollingMetrics(window_s=window, capacity=capacity, clock=lambda: STARTED)
    seen = []
    for dt, latency in steps:
        now += dt
        m.observe(frame(latency), now=now)
        seen.append((now, {k: v for k, v in latency.items() if k != "unknown"}))
    now += wait
    snap = m.snapshot(now=now)
    want = expected(seen, capacity, window, now)
    assert snap["frames_in_window"] == want["frames_in_window"]
    assert snap["fps"] == round(want["fps"], 3)
    assert sorted(snap["latency_ms"]) == sorted(want["latency_ms"])
    for stage, figures in want["latency_ms"].items():
        got = snap["latency_ms"][stage]
        assert got["count"] == figures["count"]
        for key in ("p50", "p95", "p99", "mean", "max"):
            # both round to 3 decimals, and an interpolated percentile that lands on a half
            # (1.9125) may round either way in float32 and float64; float32 itself is exact to a
            # few units of its epsilon (6e-5 at 500 ms)
            slack = 4 * float(np.finfo(np.float32).eps) * max(1.0, abs(float(figures[key])))
            assert abs(got[key] - float(figures[key])) <= 0.0005 + slack, (stage, key, got[key], figures[key])
    assert snap["totals"]["frames"] == len(steps)


def test_a_stage_missing_from_the_newest_frames_is_not_reported_after_the_ring_wraps() -> None:
    m = RollingMetrics(window_s=60.0, capacity=4, clock=lambda: STARTED)
    for i in range(4):
        m.observe(frame({"decode": 50.0, "total": 60.0}), now=STARTED + i)
    for i in range(4):  # the decoder was switched off: the ring wraps over every decode figure
        m.observe(frame({"total": 10.0}), now=STARTED + 4 + i)
    snap = m.snapshot(now=STARTED + 8)
    assert "decode" not in snap["latency_ms"]
    assert snap["latency_ms"]["total"]["max"] == 10.0 and snap["latency_ms"]["total"]["count"] == 4
    # partly wrapped: the one decode figure still in the ring is the only one counted
    m.observe(frame({"total": 10.0}), now=STARTED + 8)
    m2 = RollingMetrics(window_s=60.0, capacity=4, clock=lambda: STARTED)
    for i, stage in enumerate(["decode", "decode", "decode", "decode", "total", "total", "total"]):
        m2.observe(frame({stage: float(i)}), now=STARTED + i)
    assert m2.snapshot(now=STARTED + 7)["latency_ms"]["decode"] == {
        "p50": 3.0, "p95": 3.0, "p99": 3.0, "mean": 3.0, "max": 3.0, "count": 1}


@pytest.mark.parametrize("age,inside", [(9.999, True), (10.0, False), (10.001, False)])
def test_a_frame_exactly_window_s_old_has_left_the_window(age: float, inside: bool) -> None:
    m = RollingMetrics(window_s=10.0, clock=lambda: STARTED)
    m.observe(frame({"total": 5.0}), now=STARTED + 20.0)
    snap = m.snapshot(now=STARTED + 20.0 + age)
    assert snap["frames_in_window"] == int(inside)
    assert ("total" in snap["latency_ms"]) is inside


@pytest.mark.parametrize("window", [0.0, -1.0])
def test_a_window_of_zero_or_less_is_refused(window: float) -> None:
    with pytest.raises(ValueError, match="window_s"):
        RollingMetrics(window_s=window)


def test_fps_before_a_window_has_passed_is_over_the_time_since_start() -> None:
    m = RollingMetrics(window_s=10.0, clock=lambda: STARTED)
    for i in range(8):
        m.observe(frame({"total": 1.0}), now=STARTED + 0.5 * (i + 1))
    assert m.snapshot(now=STARTED + 4.0)["fps"] == 2.0  # 8 frames in the 4 s since start
    assert m.snapshot(now=STARTED + 40.0)["fps"] == 0.0


def test_totals_count_from_zero() -> None:
    m = RollingMetrics(clock=lambda: STARTED)
    assert m.snapshot(now=STARTED)["totals"] == {"frames": 0, "detections": 0, "cached": 0, "batch_filled": 0,
                                                  "batch_slots": 0}
    m.observe(frame({"total": 1.0}, detections=3, cached=True, info={"batch": {"size": 4, "filled": 1}}), now=STARTED)
    m.observe(frame({"total": 1.0}, detections=2, info={"batch": {"size": 4}, "k": 1}), now=STARTED)
    m.observe(frame({"total": 1.0}), now=STARTED)
    snap = m.snapshot(now=STARTED)
    assert snap["totals"] == {"frames": 3, "detections": 5, "cached": 1, "batch_filled": 1, "batch_slots": 8}
    assert snap["info"] == {"batch": {"size": 4}, "k": 1}  # the last non-empty info
    assert m.frames == 3


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 60), st.integers(0, 20),
                                st.integers(0, 30), st.floats(0.0, 30.0)), min_size=1, max_size=8))
def test_interval_counters_are_differences_of_the_running_totals(steps) -> None:
    clock = [STARTED]
    ic = IntervalCounters(clock=lambda: clock[0])
    totals = [0, 0, 0, 0]
    detections, last_t = 0, STARTED
    for captured, processed, dropped, hits, det, dt in steps:
        before = list(totals)
        totals = [totals[0] + captured, totals[1] + processed, totals[2] + dropped, totals[3] + hits]
        detections += det
        clock[0] += dt
        out = ic.step(PipelineStats(*totals), detections)
        assert out["captured"] == captured and out["processed"] == processed and out["dropped"] == dropped
        assert out["cached"] == hits and out["detections"] == det
        assert out["seconds"] == pytest.approx(round(clock[0] - last_t, 3))
        want = 0.0 if captured == 0 else round(min(dropped / captured, 1.0), 4)
        assert out["drop_ratio"] == want
        assert all(a >= b for a, b in zip(totals, before))
        last_t = clock[0]


def test_interval_counters_never_go_negative_when_the_counters_restart() -> None:
    clock = [STARTED]
    ic = IntervalCounters(clock=lambda: clock[0])
    ic.step(PipelineStats(100, 90, 10, 5), 50)
    clock[0] -= 1.0  # a clock that stepped back
    out = ic.step(PipelineStats(3, 2, 1, 0), 4)  # the pipeline restarted: counters from zero
    assert out == {"seconds": 0.0, "captured": 0, "processed": 0, "dropped": 0, "cached": 0, "drop_ratio": 0.0,
                   "detections": 0}


def test_frames_block_names_every_counter() -> None:
    assert frames_block(PipelineStats(1, 2, 3, 4, 5, 6)) == {
        "captured": 1, "processed": 2, "dropped": 3, "cached": 4, "source_errors": 5, "reconnects": 6}
