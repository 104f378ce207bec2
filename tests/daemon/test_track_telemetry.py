"""Track ids in MQTT detection messages: the daemon with the real pipeline (synthetic faces, ONNX
Runtime, a tiny CenterFace-shaped model) and a real Mosquitto broker, one source or two
[[sources]] through one model; with [tracking] off the messages carry none."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import pytest

from edge_sdk.daemon import Daemon, daemon_config_from_dict
from edge_sdk.telemetry import schemas

from test_daemon import Running
from tiny_bundle import make_tiny_bundle

pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")
pytest.importorskip("jsonschema")

SOURCE = "synthetic://faces?width=96&height=64&count=2&min_size=8&max_size=16&fps=30"
SOURCES: Dict[str, Dict[str, Any]] = {
    "one": {"source": {"uri": SOURCE}},
    "two": {"sources": [{"id": "door", "uri": SOURCE}, {"id": "yard", "uri": SOURCE + "&seed=3"}]},
}


@pytest.mark.parametrize("tracking", [True, False])
@pytest.mark.parametrize("sources", sorted(SOURCES))
def test_detection_messages_carry_track_ids_per_stream(tmp_path: Path, broker, message_log, sources: str,
                                                       tracking: bool) -> None:
    bundle = make_tiny_bundle(tmp_path / "bundle", seed=0)
    log = message_log(broker.url, ["edge-sdk/#"])
    cfg = daemon_config_from_dict(dict(SOURCES[sources], **{
        "bundle": str(bundle), "backend": "onnxruntime-cpu", "threads": 1, "tracking": {"enabled": tracking},
        "cache": {"enabled": False}, "device": {"id": "cam-1", "instance_check_s": 0},
        "telemetry": {"interval_s": 0.2, "detections": "frame"},
        "mqtt": {"url": broker.url, "queue_dir": str(tmp_path / "queue"), "reconnect_min_s": 0.1, "reconnect_max_s": 0.5},
    }))
    streams = {"one": {"0"}, "two": {"door", "yard"}}[sources]
    running = Running(Daemon(cfg))
    try:
        assert log.wait(lambda m: all(sum(len(d["detections"]) for d in log.on("detections") if d.get("stream") == s) >= 5
                                      for s in streams), timeout=60)
    finally:
        assert running.stop() == 0
    for message in log.on("detections"):
        assert schemas.errors(message) == [], message
    found = [(m["stream"], det) for m in log.on("detections") for det in m["detections"]]
    if not tracking:
        assert all("track_id" not in det for _, det in found)
        return
    assert all(isinstance(det["track_id"], int) and det["track_id"] >= -1 for _, det in found)
    for stream in streams:  # each stream numbers its own tracks from 1
        assert min(det["track_id"] for s, det in found if s == stream and det["track_id"] >= 0) == 1, stream


def message(track_id: object) -> dict:
    return {"schema": "edge-sdk/detections/1", "device_id": "d", "ts": 1, "seq": 1, "kind": "frame",
            "detections": [{"xyxy": [0, 0, 1, 1], "score": 0.5, "class_id": 0, "track_id": track_id}]}


def test_the_schema_takes_a_track_id_only_as_an_integer_from_minus_one() -> None:
    assert schemas.errors(message(7)) == [] and schemas.errors(message(-1)) == []
    assert schemas.errors(message(-2)) != []
    assert schemas.errors(message("7")) != []
    assert schemas.errors(message(1.5)) != []
