"""The per-stream parts of the status, telemetry and alert schemas and the batcher's figures:
optional, bounded, and checked with real examples (a reporter's own telemetry message with the
parts a four-camera device adds, figures in the ranges the issue's targets name)."""
from __future__ import annotations

import copy
import io
import json
from typing import Any, Dict

import pytest

from edge_sdk.runtime.types import PipelineStats
from edge_sdk.telemetry import fastcheck, schemas
from edge_sdk.telemetry.fleet import Fleet
from edge_sdk.telemetry.health import HealthMonitor
from edge_sdk.telemetry.publisher import LinePublisher
from edge_sdk.telemetry.reporter import Reporter

pytest.importorskip("jsonschema")


def stream(fps: float, p99: float, dropped: int, state: str = "ok") -> Dict[str, Any]:
    return {"fps": fps,
            "latency_ms": {"infer": {"p50": 21.0, "p95": 24.5, "p99": p99 - 10}, "total": {"p50": 38.0, "p95": 44.0, "p99": p99}},
            "frames": {"captured": 3000, "processed": 3000 - dropped, "dropped": dropped, "cached": 12},
            "frame_age_ms": {"p50": 4.1, "p95": 9.7, "p99": 12.5, "max": 14.0, "count": 300},
            "camera": {"state": state, "lost": 1 if state == "lost" else 0, "back": 0}}


FOUR_CAMERAS = {
    "streams": {"door": stream(29.8, 61.0, 3), "yard-2": stream(30.0, 58.2, 0), "dock_1": stream(14.9, 70.4, 41),
                "0": stream(0.0, 0.0, 0, state="lost")},
    "batch": {"efficiency": 0.81, "filled": 972, "slots": 1200, "batches": 300, "max_batch_size": 4,
              "histogram": {"4": 210, "3": 56, "2": 24, "1": 10},
              "queue_delay_ms": {"p50": 3.2, "p95": 8.0, "p99": 9.6, "max": 10.0, "count": 972}},
}


@pytest.fixture(scope="module")
def real_telemetry() -> Dict[str, Any]:
    out = io.StringIO()
    pub = LinePublisher("cam-1", out).start()
    stats = PipelineStats(frames_captured=12, frames_processed=10, frames_dropped=2)
    rep = Reporter(pub, HealthMonitor([]), lambda: stats, interval_s=3600)
    rep.report()
    pub.stop(final_status={"reason": "stopped"})
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    message = next(line["payload"] for line in lines if line["topic"] == "edge-sdk/cam-1/telemetry")
    assert schemas.errors(message) == []
    return message


def with_parts(message: Dict[str, Any], **parts: Any) -> Dict[str, Any]:
    out = copy.deepcopy(message)
    for name, value in parts.items():
        out[name] = value
    return out


def accepted(topic: str, message: Dict[str, Any]) -> bool:
    """What the monitor does with it: schema errors, its fleet (fast path and compiled check)."""
    ok = schemas.errors(message) == []
    raw = json.dumps(message).encode()
    for given in (raw, None):
        view, _ = Fleet().apply(topic, message, raw=given)
        assert (view is not None) is ok
    return ok


def test_a_four_camera_telemetry_message_validates_and_takes_the_fast_path(real_telemetry: Dict[str, Any]) -> None:
    message = with_parts(real_telemetry, **copy.deepcopy(FOUR_CAMERAS))
    assert accepted("edge-sdk/cam-1/telemetry", message)
    assert fastcheck.valid(json.dumps(message).encode(), "telemetry")  # the consumer's fast path still applies
    assert accepted("edge-sdk/cam-1/telemetry", real_telemetry)  # the parts are optional


def _bad(path: str, value: Any) -> Dict[str, Any]:
    parts = copy.deepcopy(FOUR_CAMERAS)
    *keys, last = path.split("/")
    node: Any = parts
    for k in keys:
        node = node[k]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return parts


DELETE = object()
BAD_TELEMETRY = [
    ("streams/cam.1", stream(1.0, 2.0, 0)),  # not a stream id
    ("streams/" + "x" * 65, stream(1.0, 2.0, 0)),
    ("streams/door/fps", -1),
    ("streams/door/fps", DELETE),
    ("streams/door/colour", "red"),  # not a per-stream field
    ("streams/door/camera/state", "gone"),
    ("streams/door/latency_ms/Total", {"p50": 1, "p95": 2, "p99": 3}),  # stage names are lower case
    ("streams/door/frame_age_ms/p99", DELETE),
    ("batch/efficiency", 1.2),
    ("batch/histogram/0", 3),  # a batch has at least one frame
    ("batch/histogram/1000", 3),
    ("batch/histogram/4", -1),
    ("batch/queue_delay_ms/p99", DELETE),
    ("batch/queue_delay_ms/p50", -0.5),
    ("batch/max_batch_size", 0),
]


@pytest.mark.parametrize("path, value", BAD_TELEMETRY, ids=[p for p, _ in BAD_TELEMETRY])
def test_a_wrong_per_stream_or_batch_field_is_refused(real_telemetry: Dict[str, Any], path: str, value: Any) -> None:
    assert not accepted("edge-sdk/cam-1/telemetry", with_parts(real_telemetry, **_bad(path, value)))


def test_more_streams_than_a_config_allows_are_refused(real_telemetry: Dict[str, Any]) -> None:
    from edge_sdk.runtime.config import MAX_SOURCES

    many = {f"cam{i}": stream(30.0, 50.0, 0) for i in range(MAX_SOURCES)}
    assert accepted("edge-sdk/cam-1/telemetry", with_parts(real_telemetry, streams=many))
    many["one-more"] = stream(30.0, 50.0, 0)
    assert not accepted("edge-sdk/cam-1/telemetry", with_parts(real_telemetry, streams=many))


def status(**extra: Any) -> Dict[str, Any]:
    return dict({"schema": "edge-sdk/status/1", "device_id": "cam-1", "ts": schemas.now_ms(), "seq": 1,
                 "state": "online", "status_ts": schemas.now_ms(), "source": None, "mode": "full"}, **extra)


def alert(**extra: Any) -> Dict[str, Any]:
    return dict({"schema": "edge-sdk/alert/1", "device_id": "cam-1", "ts": schemas.now_ms(), "seq": 1,
                 "alert": "camera_lost", "state": "raised", "severity": "warning",
                 "message": "door: no frame for 5 s; reconnecting"}, **extra)


@pytest.mark.parametrize("topic, message, ok", [
    ("status", status(streams={"door": {"source": "rtsp://cam-door/stream", "mode": "roi"},
                               "0": {"source": None, "mode": "full"}}), True),
    ("status", status(), True),
    ("status", status(streams={"door": {"source": "x", "mode": "fast"}}), False),
    ("status", status(streams={"door": {"mode": "full"}}), False),
    ("status", status(streams={"a/b": {"source": "x", "mode": "full"}}), False),
    ("alerts", alert(stream="door"), True),
    ("alerts", alert(), True),
    ("alerts", alert(stream="door lock"), False),
], ids=["status-streams", "status-old", "status-bad-mode", "status-no-source", "status-bad-id", "alert-stream",
        "alert-old", "alert-bad-id"])
def test_status_and_alerts_take_their_optional_stream_parts(topic: str, message: Dict[str, Any], ok: bool) -> None:
    assert accepted(f"edge-sdk/cam-1/{topic}", message) is ok
