"""The telemetry reporter's own clock: what its figures cover."""
from __future__ import annotations

import io

import pytest

from edge_sdk.detections import Detections
from edge_sdk.runtime.types import FrameResult, PipelineStats
from edge_sdk.telemetry.health import HealthMonitor
from edge_sdk.telemetry.publisher import LinePublisher
from edge_sdk.telemetry.reporter import Reporter

BATCHER = {"batches": 0, "efficiency": 0.0, "histogram": {}, "queue_delay_ms": {}, "max_batch_size": 2}


class Recorder:
    """A publisher that keeps what the reporter publishes, by topic, in order."""

    def __init__(self) -> None:
        self.sent: list = []

    def publish(self, topic: str, payload: dict, qos: int = 1) -> None:
        self.sent.append((topic, dict(payload)))

    def stats(self) -> dict:
        return {}


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


def test_a_camera_lost_and_back_is_reported_per_stream_even_within_one_interval() -> None:
    """Each loss of a stream's camera raises camera_lost for that stream, each return clears it,
    also when both happened between two reports (its `losses` went up, it runs again)."""
    from edge_sdk.telemetry import schemas

    pub = Recorder()
    states: dict = {}

    def report() -> dict:
        return {"batcher": BATCHER, "streams": {sid: dict(s, stats=PipelineStats()) for sid, s in states.items()}}

    rep = Reporter(pub, HealthMonitor([]), PipelineStats, interval_s=3600, streams=report)
    steps = [  # (door, yard): (state, failures in a row, losses so far)
        (("running", 0, 0), ("running", 0, 0)),
        (("running", 0, 1), ("running", 0, 0)),  # door: lost and back within the interval
        (("retrying", 2, 2), ("running", 0, 0)),  # lost again, still away
        (("retrying", 3, 2), ("running", 0, 0)),  # still away: nothing new
        (("running", 0, 2), ("given_up", 30, 1)),  # door back; yard lost for good
    ]
    cameras = []
    for door, yard in steps:
        for sid, (state, failures, losses) in (("door", door), ("yard", yard)):
            states[sid] = {"state": state, "failures": failures, "losses": losses}
        message = rep.report()
        cameras.append({sid: message["streams"][sid]["camera"] for sid in ("door", "yard")})
    alerts = [payload for topic, payload in pub.sent if topic == "alerts"]
    assert [(a["stream"], a["state"]) for a in alerts] == [
        ("door", "raised"), ("door", "cleared"), ("door", "raised"), ("door", "cleared"), ("yard", "raised")]
    stamp = {"schema": "edge-sdk/alert/1", "device_id": "dev-1", "ts": 1, "seq": 0}
    assert all(a["alert"] == "camera_lost" and schemas.errors(dict(a, **stamp)) == [] for a in alerts)
    assert cameras[-1] == {"door": {"state": "ok", "lost": 2, "back": 2}, "yard": {"state": "lost", "lost": 1, "back": 0}}
    assert cameras[2]["door"] == {"state": "lost", "lost": 2, "back": 1}
    assert rep.alerts() == ["camera_lost"]  # yard's, open


@pytest.mark.parametrize("state", ["retrying", "given_up"])
def test_a_stream_away_before_any_loss_is_counted_is_reported_lost(state: str) -> None:
    """A stream whose pipeline says it is retrying (or gave up) is a lost camera even when no loss
    has been counted for it yet (a source that never opened): camera_lost is raised for it once."""

    pub = Recorder()
    states = {"door": {"state": "running", "failures": 0, "losses": 0},
              "gate": {"state": state, "failures": 1, "losses": 0}}
    rep = Reporter(pub, HealthMonitor([]), PipelineStats, interval_s=3600,
                   streams=lambda: {"batcher": BATCHER, "streams": {s: dict(v, stats=PipelineStats()) for s, v in states.items()}})
    first = rep.report()
    second = rep.report()  # still away: nothing new
    assert first["streams"]["gate"]["camera"] == {"state": "lost", "lost": 1, "back": 0}
    assert second["streams"]["gate"]["camera"] == {"state": "lost", "lost": 1, "back": 0}
    assert first["streams"]["door"]["camera"] == {"state": "ok", "lost": 0, "back": 0}
    alerts = [(p["stream"], p["state"]) for t, p in pub.sent if t == "alerts"]
    assert alerts == [("gate", "raised")]
