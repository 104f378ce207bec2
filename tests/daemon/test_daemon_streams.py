"""Several `[[sources]]` in one daemon: one model, one batcher, per-stream telemetry. A real
daemon on a real Mosquitto with two synthetic streams (and an unreadable third where a source
must fail), every message checked against its schema."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from edge_sdk.daemon import Daemon, daemon_config_from_dict
from edge_sdk.daemon.config import DaemonConfig
from edge_sdk.errors import ConfigError
from edge_sdk.telemetry import schemas

from polling import wait_until
from test_daemon import Running, command, models, responses  # noqa: F401 (models: a fixture)

pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")


def source(seed: int) -> str:
    return f"synthetic://faces?width=96&height=64&count=2&min_size=8&max_size=16&fps=30&seed={seed}"


def two_streams(models: Path, tmp_path: Path, url: str, **extra: Any) -> DaemonConfig:  # noqa: F811
    data: Dict[str, Any] = {
        "bundle": str(models / "a"), "backend": "onnxruntime-cpu", "threads": 1, "cache": {"enabled": False},
        "sources": [{"id": "door", "uri": source(1)}, {"id": "yard", "uri": source(2)}],
        "device": {"id": "cam-1", "models_dir": str(models), "snapshot_dir": str(tmp_path / "snaps")},
        "telemetry": {"interval_s": 0.2, "target_fps": 0, "detections": "frame"},
        "mqtt": {"url": url, "queue_dir": str(tmp_path / "queue"), "reconnect_min_s": 0.1, "reconnect_max_s": 0.5},
    }
    data.update(extra)
    return daemon_config_from_dict(data)


def all_valid(log: Any) -> None:
    for m in log.messages:
        if m["topic"].startswith("edge-sdk/cam-1/") and not m["topic"].endswith("/cmd"):
            assert schemas.errors(m["payload"]) == [], m


def both_running(message: Dict[str, Any]) -> bool:
    streams = message.get("streams", {})
    return sorted(streams) == ["door", "yard"] and all(s["frames"]["processed"] > 0 for s in streams.values())


def test_two_streams_run_through_one_model_and_report_each(models: Path, tmp_path: Path, broker,  # noqa: F811
                                                           message_log) -> None:
    log = message_log(broker.url, ["edge-sdk/cam-1/#"])
    daemon = Daemon(two_streams(models, tmp_path, broker.url))
    running = Running(daemon)
    try:
        assert log.wait(lambda m: any(both_running(t) and t["streams"]["door"]["fps"] > 0
                                      and t["streams"]["yard"]["fps"] > 0 for t in log.on("telemetry")), timeout=30)
    finally:
        assert running.stop() == 0
    all_valid(log)
    telemetry = [t for t in log.on("telemetry") if both_running(t)]
    last = telemetry[-1]
    batch = last["batch"]
    # the test bundle takes one frame per call: the two streams' batches are capped at 1, as detect's
    assert 0.0 <= batch["efficiency"] <= 1.0 and batch["max_batch_size"] == 1
    assert sum(batch["histogram"].values()) == batch["batches"] > 0
    assert set(batch["histogram"]) == {"1"} and batch["queue_delay_ms"]["p99"] >= 0
    for sid in ("door", "yard"):
        stream = last["streams"][sid]
        assert stream["camera"] == {"state": "ok", "lost": 0, "back": 0}
        assert stream["latency_ms"]["total"]["p99"] >= stream["latency_ms"]["total"]["p50"] > 0
        assert "queue" in stream["latency_ms"] and stream["frame_age_ms"]["p50"] >= 0
    # the device's totals are the streams' sums, and each detections message names its stream
    assert last["frames"]["processed"] >= sum(s["frames"]["processed"] for s in last["streams"].values()) > 0
    assert {d["stream"] for d in log.on("detections")} == {"door", "yard"}
    online = next(s for s in log.on("status") if s["state"] == "online")
    assert sorted(online["streams"]) == ["door", "yard"]


def test_a_source_that_cannot_open_is_reported_with_its_stream_while_the_others_run(
        models: Path, tmp_path: Path, broker, message_log) -> None:  # noqa: F811
    broken = tmp_path / "gate.mp4"
    broken.write_bytes(b"")  # exists, but no video can be read from it
    cfg = daemon_config_from_dict({
        "bundle": str(models / "a"), "backend": "onnxruntime-cpu", "threads": 1, "cache": {"enabled": False},
        "reconnect": {"initial_s": 0.1, "max_s": 0.2, "max_attempts": 0},
        "sources": [{"id": "door", "uri": source(1)}, {"id": "gate", "uri": str(broken)}],
        "device": {"id": "cam-1"}, "telemetry": {"interval_s": 0.2, "target_fps": 0},
        "mqtt": {"url": broker.url, "queue_dir": str(tmp_path / "queue"), "reconnect_min_s": 0.1,
                 "reconnect_max_s": 0.5}})
    log = message_log(broker.url, ["edge-sdk/cam-1/#"])
    daemon = Daemon(cfg)
    running = Running(daemon)

    def lost_gate_and_door_runs(messages: List[Dict[str, Any]]) -> bool:
        t = log.on("telemetry")
        return bool(t) and "gate" in t[-1].get("streams", {}) and t[-1]["streams"]["gate"]["camera"]["state"] == "lost" \
            and t[-1]["streams"]["door"]["frames"]["processed"] > 0 and t[-1]["streams"]["door"]["fps"] > 0

    try:
        assert log.wait(lost_gate_and_door_runs, timeout=30), log.on("telemetry")[-1:]
    finally:
        assert running.stop() == 0
    all_valid(log)
    raised = [a for a in log.on("alerts") if a["alert"] == "camera_lost" and a["state"] == "raised"]
    assert [a["stream"] for a in raised] == ["gate"]
    assert "stream gate" in raised[0]["message"]
    last = [t for t in log.on("telemetry") if "streams" in t][-1]
    assert last["streams"]["gate"]["camera"]["lost"] == 1 and last["streams"]["gate"]["frames"]["processed"] == 0
    assert last["streams"]["door"]["camera"]["state"] == "ok"
    assert "camera_lost" in last["alerts_open"]


@pytest.mark.parametrize("change, words", [
    ({"mode": "tiles"}, "mode 'tiles' with several \\[\\[sources\\]\\]: only mode \"full\""),
    ({"sources": [{"id": "door", "uri": "synthetic://faces", "mode": "roi"}, {"id": "yard", "uri": "synthetic://faces"}]},
     "'door': its own mode or \\[sources.roi\\]"),
])
def test_several_sources_in_tiles_or_roi_are_refused_at_start_naming_what_runs(change: Dict[str, Any], words: str) -> None:
    data: Dict[str, Any] = {"sources": [{"id": "door", "uri": "synthetic://faces"}, {"id": "yard", "uri": "synthetic://faces"}],
                            "device": {"id": "cam-1"}}
    data.update(change)
    with pytest.raises(ConfigError, match="device.toml: " + ".*" + words):
        daemon_config_from_dict(data, "device.toml")


def test_commands_per_stream_and_a_reload_that_keeps_both_streams_running(models: Path, tmp_path: Path,  # noqa: F811
                                                                          broker, message_log) -> None:
    log = message_log(broker.url, ["edge-sdk/cam-1/#"])
    daemon = Daemon(two_streams(models, tmp_path, broker.url))
    seen: List[Any] = []  # (stream, frame index) of every result the frame loop handled, in order
    observe = daemon.reporter.observe

    def record(result: Any) -> None:
        seen.append((result.stream, result.index))
        observe(result)

    daemon.reporter.observe = record  # type: ignore[method-assign]
    running = Running(daemon)
    cmd_topic = schemas.topic("cam-1", "cmd")
    sent = [
        {"cmd": "snapshot", "args": {"name": "yard-shot", "stream": "yard"}},
        {"cmd": "set", "args": {"stream": "door", "score_threshold": 0.9}},  # the model's: every stream's
        {"cmd": "set", "args": {"score_threshold": 0.8}},
        {"cmd": "reload", "args": {"bundle": "b"}},
    ]

    def frames_of(sid: str) -> int:
        return sum(1 for s, _ in seen if s == sid)

    try:
        assert wait_until(lambda: frames_of("door") > 0 and frames_of("yard") > 0, 30)
        for i, cmd in enumerate(sent):
            command(log, cmd_topic, dict(cmd, schema="edge-sdk/cmd/1", id=f"c{i}"))
        assert log.wait(lambda m: any(r.get("final") for r in responses(log)), timeout=30), responses(log)
        after = {sid: frames_of(sid) for sid in ("door", "yard")}
        assert wait_until(lambda: all(frames_of(sid) > after[sid] + 3 for sid in after), 30)
    finally:
        assert running.stop() == 0
    all_valid(log)
    r = {x["id"]: x for x in responses(log) if not x.get("final")}
    final = next(x for x in responses(log) if x.get("final"))
    assert r["c0"]["ok"] and r["c0"]["result"]["stream"] == "yard"
    snapshot = json.loads(Path(r["c0"]["result"]["detections"]).read_text())
    assert snapshot["stream"] == "yard" and Path(r["c0"]["result"]["image"]).stat().st_size > 0
    assert not r["c1"]["ok"] and "every stream runs through (door, yard)" in r["c1"]["error"]
    assert r["c2"]["ok"] and r["c2"]["result"] == {"applied": {"score_threshold": 0.8}, "streams": ["door", "yard"]}
    assert final["ok"] and final["result"]["bundle_hash"] == daemon.model.describe()["bundle_hash"]
    assert final["result"]["thresholds"]["score_threshold"] == 0.8  # kept across the reload
    assert daemon.model.reloads == 1
    assert daemon.pipeline.multi.detector is daemon.model.detector  # the new model is the one that runs
    for sid in ("door", "yard"):  # every frame of each stream went through a model, in order, none left out
        indices = [i for s, i in seen if s == sid]
        assert indices == list(range(len(indices))), sid


def test_a_max_batch_the_bundle_cannot_take_stops_the_daemon_naming_the_rebuild(models: Path, tmp_path: Path,  # noqa: F811
                                                                                broker, caplog) -> None:
    """The test bundle has no batch range (a fixed batch of 1): an explicit max_batch_size of 2
    is refused at start with the rebuild that lifts it, as `edge-sdk detect` refuses it."""
    import logging

    caplog.set_level(logging.ERROR, logger="edge_sdk.daemon")
    daemon = Daemon(two_streams(models, tmp_path, broker.url, batching={"max_batch_size": 2}))
    assert daemon.run() == ConfigError.exit_code
    stopped = [r.getMessage() for r in caplog.records if "pipeline stopped" in r.getMessage()]
    assert len(stopped) == 1 and "takes at most 1" in stopped[0] and "edge-sdk build --max-batch 2" in stopped[0], stopped
