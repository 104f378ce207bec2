"""The stream id in every MQTT detections message: what the reporter sends per frame and per
stream summary validates, the monitor's fleet (and so its Prometheus exposition) takes it, and a
message from a device older than several sources (no `stream`) is still taken. Real Mosquitto
where MQTT is involved."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from edge_sdk.detections import Detections
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.types import FrameResult, PipelineStats
from edge_sdk.telemetry import schemas
from edge_sdk.telemetry.broker import BrokerConfig
from edge_sdk.telemetry.fleet import Fleet
from edge_sdk.telemetry.health import HealthMonitor
from edge_sdk.telemetry.publisher import LinePublisher, MqttPublisher
from edge_sdk.telemetry.reporter import Reporter

pytest.importorskip("jsonschema")

# frames of two cameras, interleaved: (stream, boxes in the frame)
FRAMES = [("door", 1), ("yard-2", 3), ("door", 2), ("yard-2", 0), ("yard-2", 4)]


def result(i: int, stream: str, boxes: int) -> FrameResult:
    image = np.zeros((48, 64, 3), np.uint8)
    dets = Detections(np.tile(np.array([[1, 2, 30, 40]], np.float32), (boxes, 1)), np.full(boxes, 0.9), np.zeros(boxes))
    return FrameResult(i, 1.0 + i, dets, {"total": 5.0}, captured=Frame(image, index=i, stream_id=stream))


def reporter(publisher: Any, mode: str) -> Reporter:
    stats = PipelineStats()
    return Reporter(publisher, HealthMonitor([]), lambda: stats, interval_s=3600, detections=mode)


def run(mode: str) -> List[Dict[str, Any]]:
    out = io.StringIO()
    pub = LinePublisher("dev-1", out).start()
    rep = reporter(pub, mode)
    for i, (stream, boxes) in enumerate(FRAMES):
        rep.observe(result(i, stream, boxes))
    rep.report()
    pub.stop(final_status={"reason": "stopped"})
    return [json.loads(line)["payload"] for line in out.getvalue().splitlines()
            if json.loads(line)["topic"].endswith("/detections")]


def test_each_frame_message_names_its_stream_and_validates() -> None:
    messages = run("frame")
    assert [(m["stream"], m["frame"], len(m["detections"])) for m in messages] == \
        [(stream, i, boxes) for i, (stream, boxes) in enumerate(FRAMES)]
    for m in messages:
        assert schemas.errors(m) == [], schemas.errors(m)


def test_the_summary_is_one_message_per_stream_with_that_streams_counts() -> None:
    messages = run("summary")
    by_stream = {m["stream"]: (m["frames"], m["count"], m["max_per_frame"]) for m in messages}
    assert by_stream == {"door": (2, 3, 2), "yard-2": (3, 7, 4)}  # counted by hand from FRAMES
    for m in messages:
        assert m["kind"] == "summary" and schemas.errors(m) == []


def detections(device: str, seq: int, **extra: Any) -> Dict[str, Any]:
    return dict({"schema": "edge-sdk/detections/1", "device_id": device, "ts": schemas.now_ms(), "seq": seq,
                 "kind": "frame", "frame": seq, "detections": [{"xyxy": [1, 2, 3, 4], "score": 0.5, "class_id": 0}]},
                **extra)


@pytest.mark.parametrize("message, ok", [
    (detections("cam-1", 1, stream="door"), True),
    (detections("cam-1", 1), True),  # a device from before several sources
    (detections("cam-1", 1, stream="0"), True),
    (dict(detections("cam-1", 1, stream="door"), kind="summary", frames=2, count=3, max_per_frame=2), True),
    (detections("cam-1", 1, stream="a b"), False),
    (detections("cam-1", 1, stream=""), False),
    (detections("cam-1", 1, stream="x" * 65), False),
    (detections("cam-1", 1, stream=3), False),
], ids=["stream", "no-stream", "stream-0", "summary", "space", "empty", "too-long", "number"])
def test_the_monitor_takes_a_valid_stream_and_refuses_a_bad_one(message: Dict[str, Any], ok: bool) -> None:
    assert (schemas.errors(message) == []) is ok
    raw = json.dumps(message).encode()
    for given_raw in (raw, None):  # the fast path and the compiled check agree
        fleet = Fleet()
        view, why = fleet.apply("edge-sdk/cam-1/detections", message, raw=given_raw)
        assert (view is not None) is ok, why


def test_a_two_stream_device_through_mosquitto_reaches_the_monitor_and_its_prometheus_counters(
        broker, tmp_path: Path, message_log) -> None:
    prom = pytest.importorskip("prometheus_client")
    from edge_sdk.telemetry.fleet import prometheus_collector

    log = message_log(broker.url, ["edge-sdk/cam-1/detections"])
    pub = MqttPublisher(BrokerConfig(url=broker.url), "cam-1", tmp_path / "cam-1.sqlite3")
    pub.set_status({"started_ts": 1, "versions": {"edge_sdk": "test"}, "target": None, "backend": "onnxruntime",
                    "bundle_hash": "abc", "source": "synthetic://faces"})
    pub.start()
    rep = reporter(pub, "frame")
    try:
        for i, (stream, boxes) in enumerate(FRAMES):
            rep.observe(result(i, stream, boxes))
        assert log.wait(lambda m: len(m) >= len(FRAMES) + 1), log.messages  # + the subscription probe
    finally:
        pub.stop(final_status={"reason": "stopped"})
    fleet = Fleet()
    got = [m for m in log.messages if m["topic"] == "edge-sdk/cam-1/detections"]
    for m in got:
        view, why = fleet.apply(m["topic"], m["payload"], raw=json.dumps(m["payload"]).encode())
        assert view is not None, why
    assert sorted((m["payload"]["stream"], m["payload"]["frame"]) for m in got) == \
        sorted((stream, i) for i, (stream, _) in enumerate(FRAMES))
    registry = prom.CollectorRegistry()
    registry.register(prometheus_collector(fleet, None))
    text = prom.generate_latest(registry).decode()
    assert re.search(r'edge_sdk_monitor_messages_total\{outcome="accepted"\} 5\.0', text), text
    assert re.search(r'edge_sdk_monitor_messages_total\{outcome="invalid"\} 0\.0', text), text
