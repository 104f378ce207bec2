"""Commands per stream: `set` (mode, thresholds) and `snapshot` take an optional `stream`; without
it they apply to all; a stream the device does not run is refused naming the ones it runs. A real
daemon on a `[[sources]]` table with its own id, through a real Mosquitto."""
from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any, Dict

import pytest

from edge_sdk.daemon import Daemon, daemon_config_from_dict
from edge_sdk.daemon.commands import CommandRejected, UnknownStream
from edge_sdk.daemon.config import DaemonConfig
from edge_sdk.daemon.handlers import CommandHandlers
from edge_sdk.errors import ConfigError
from edge_sdk.runtime.config import PipelineConfig, StreamConfig
from edge_sdk.telemetry import schemas

from polling import wait_until
from test_daemon import SOURCE, Running, command, models, responses  # noqa: F401 (models: a fixture)

pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")


def door_config(models: Path, tmp_path: Path, url: str) -> DaemonConfig:  # noqa: F811
    return daemon_config_from_dict({
        "bundle": str(models / "a"), "backend": "onnxruntime-cpu", "threads": 1, "cache": {"enabled": False},
        "sources": [{"id": "door", "uri": SOURCE, "mode": "full"}],
        "device": {"id": "cam-1", "models_dir": str(models), "snapshot_dir": str(tmp_path / "snaps")},
        "telemetry": {"interval_s": 0.2, "target_fps": 0, "detections": "frame"},
        "mqtt": {"url": url, "queue_dir": str(tmp_path / "queue"), "reconnect_min_s": 0.1, "reconnect_max_s": 0.5},
    })


def test_commands_name_the_stream_and_an_unknown_one_changes_nothing(models: Path, tmp_path: Path, broker,  # noqa: F811
                                                                    message_log) -> None:
    log = message_log(broker.url, ["edge-sdk/cam-1/#"])
    daemon = Daemon(door_config(models, tmp_path, broker.url))
    running = Running(daemon)
    cmd_topic = schemas.topic("cam-1", "cmd")
    sent = [
        {"cmd": "set", "args": {"stream": "door", "score_threshold": 0.9}},
        {"cmd": "set", "args": {"stream": "0", "score_threshold": 0.1}},  # the old single source's id: not here
        {"cmd": "set", "args": {"stream": "door", "telemetry_interval": 1}},  # a device setting
        {"cmd": "set", "args": {"stream": "door"}},
        {"cmd": "set", "args": {"nms_iou": 0.3}},  # no stream: every stream
        {"cmd": "snapshot", "args": {"name": "door-shot", "stream": "door"}},
        {"cmd": "snapshot", "args": {"stream": "yard"}},
        {"cmd": "set", "args": {"stream": "do/or", "nms_iou": 0.3}},  # not a stream id: the schema refuses it
    ]
    try:
        assert wait_until(lambda: daemon.frames > 0)
        for i, cmd in enumerate(sent):
            command(log, cmd_topic, dict(cmd, schema="edge-sdk/cmd/1", id=f"c{i}"))
        assert log.wait(lambda m: len(responses(log)) == len(sent), timeout=20), responses(log)
        assert log.wait(lambda m: any(d.get("stream") == "door" for d in log.on("detections")))
    finally:
        running.stop()
    r: Dict[str, Any] = {x["id"]: x for x in responses(log)}
    assert r["c0"]["ok"] and r["c0"]["result"] == {"applied": {"score_threshold": 0.9}, "streams": ["door"]}
    assert not r["c1"]["ok"] and r["c1"]["reason"] == "refused"
    assert "unknown stream '0'" in r["c1"]["error"] and "'door'" in r["c1"]["error"]
    assert not r["c2"]["ok"] and "telemetry_interval apply to the whole device" in r["c2"]["error"]
    assert not r["c3"]["ok"] and "changes nothing" in r["c3"]["error"]
    assert r["c4"]["ok"] and r["c4"]["result"]["streams"] == ["door"]
    assert r["c5"]["ok"] and r["c5"]["result"]["stream"] == "door"
    assert json.loads(Path(r["c5"]["result"]["detections"]).read_text())["stream"] == "door"
    assert not r["c6"]["ok"] and "unknown stream 'yard'" in r["c6"]["error"]
    assert not r["c7"]["ok"] and r["c7"]["reason"] == "invalid"
    decoder = daemon.pipeline.detector.decoder
    assert (decoder.score_threshold, decoder.nms_iou) == (0.9, 0.3)  # c1 changed nothing
    assert daemon.reporter.interval_s == 0.2  # nor did c2
    online = next(s for s in log.on("status") if s["state"] == "online")
    assert online["streams"] == {"door": {"source": SOURCE, "mode": "full", "thresholds": online["thresholds"]}}
    assert online["source"] == SOURCE
    assert {d["stream"] for d in log.on("detections")} == {"door"}
    for m in log.messages:
        if m["topic"].startswith("edge-sdk/cam-1/") and not m["topic"].endswith("/cmd"):
            assert schemas.errors(m["payload"]) == [], m


def test_with_several_streams_configured_an_unknown_one_is_refused_naming_them_all() -> None:
    cfg = PipelineConfig(sources=[StreamConfig(id="door", uri="csi://0"), StreamConfig(id="yard", uri="csi://1")])
    handlers = CommandHandlers(types.SimpleNamespace(config=DaemonConfig(pipeline=cfg)))  # only its config is read
    assert handlers.streams({}) == ["door", "yard"]
    assert handlers.streams({"stream": "yard"}) == ["yard"]
    for name in ("set", "snapshot"):
        with pytest.raises(UnknownStream) as err:
            handlers.table()[name]({"stream": "dock", "mode": "roi"} if name == "set" else {"stream": "dock"})
        assert isinstance(err.value, CommandRejected) and err.value.known == ["door", "yard"]
        assert "this device runs 'door', 'yard'" in str(err.value)


def test_run_source_replaces_the_config_files_sources(tmp_path: Path) -> None:
    from edge_sdk.daemon.config import load_daemon_config

    path = tmp_path / "device.toml"
    path.write_text(f'[[sources]]\nid = "door"\nuri = "{SOURCE}"\nmode = "roi"\n\n[device]\nid = "cam-1"\n')
    assert load_daemon_config(path).pipeline.stream_ids() == ["door"]
    cfg = load_daemon_config(path, {"source": {"uri": "csi://0"}})  # edge-sdk run --config device.toml --source csi://0
    assert cfg.pipeline.stream_ids() == ["0"] and cfg.pipeline.source.uri == "csi://0"
