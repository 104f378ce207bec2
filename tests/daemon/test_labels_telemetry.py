"""Class names in MQTT detection messages: the daemon with the real Pipeline (synthetic faces, ONNX
Runtime, a tiny CenterFace-shaped model whose bundle names its one class) and a real Mosquitto
broker; a subscriber of the test's own reads what the device publishes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_sdk.daemon import Daemon, daemon_config_from_dict
from edge_sdk.telemetry import schemas

from test_daemon import Running
from tiny_bundle import make_tiny_bundle

pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")
pytest.importorskip("jsonschema")

SOURCE = "synthetic://faces?width=96&height=64&count=2&min_size=8&max_size=16&fps=30"


def test_detection_messages_carry_the_class_name(tmp_path: Path, broker, message_log) -> None:
    bundle = make_tiny_bundle(tmp_path / "bundle", seed=0)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["decoder"]["labels"] = ["face"]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    log = message_log(broker.url, ["edge-sdk/#"])
    cfg = daemon_config_from_dict({
        "bundle": str(bundle), "backend": "onnxruntime-cpu", "threads": 1, "source": {"uri": SOURCE},
        "cache": {"enabled": False}, "device": {"id": "cam-1", "instance_check_s": 0},
        "telemetry": {"interval_s": 0.2, "detections": "frame"},
        "mqtt": {"url": broker.url, "queue_dir": str(tmp_path / "queue"), "reconnect_min_s": 0.1, "reconnect_max_s": 0.5},
    })
    running = Running(Daemon(cfg))
    try:
        assert log.wait(lambda m: sum(len(d["detections"]) for d in log.on("detections")) >= 5, timeout=30)
    finally:
        assert running.stop() == 0
    found = [det for message in log.on("detections") for det in message["detections"]]
    assert found and all(det["label"] == "face" and det["class_id"] == 0 for det in found)
    for message in log.on("detections"):
        assert schemas.errors(message) == [], message


def message(label: object) -> dict:
    return {"schema": "edge-sdk/detections/1", "device_id": "d", "ts": 1, "seq": 1, "kind": "frame",
            "detections": [{"xyxy": [0, 0, 1, 1], "score": 0.5, "class_id": 0, "label": label}]}


def test_the_schema_takes_a_label_only_as_a_name() -> None:
    assert schemas.errors(message("face")) == []
    assert schemas.errors(message(3)) != []
    assert schemas.errors(message("")) != []
    assert schemas.errors(message("x" * 129)) != []


def test_the_monitor_takes_named_detections_and_drops_bad_names() -> None:
    from edge_sdk.telemetry.fleet import Fleet

    fleet = Fleet()
    assert fleet.update("edge-sdk/d/detections", message("face")) is not None
    assert fleet.update("edge-sdk/d/detections", message({"x": 1})) is None and fleet.invalid == 1
