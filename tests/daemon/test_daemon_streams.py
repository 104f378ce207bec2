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
        {"cmd": "set", "args": {"stream": "door", "score_threshold": 0.9}},  # door's only
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
    assert r["c1"]["ok"] and r["c1"]["result"] == {"applied": {"score_threshold": 0.9}, "streams": ["door"]}
    assert r["c2"]["ok"] and r["c2"]["result"] == {"applied": {"score_threshold": 0.8}, "streams": ["door", "yard"]}
    assert final["ok"] and final["result"]["bundle_hash"] == daemon.model.describe()["bundle_hash"]
    assert final["result"]["thresholds"]["score_threshold"] == 0.8  # kept across the reload, for every stream
    assert {sid: daemon.model.stream_settings(sid)["thresholds"]["score_threshold"] for sid in ("door", "yard")} \
        == {"door": 0.8, "yard": 0.8}
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


def test_a_set_with_a_stream_changes_that_stream_s_mode_and_threshold_only(models: Path, tmp_path: Path,  # noqa: F811
                                                                          broker, message_log) -> None:
    """door starts in roi, yard in full (the top level); `set` door to tiles at a score threshold
    of 0.9: door's later frames run tiles and keep no detection under 0.9, yard's run on as they
    did, with the bundle's threshold, and every frame of each comes back in order."""
    log = message_log(broker.url, ["edge-sdk/cam-1/#"])
    daemon = Daemon(two_streams(models, tmp_path, broker.url, sources=[
        {"id": "door", "uri": source(1), "mode": "roi", "roi": {"sweep_tiles": 1}}, {"id": "yard", "uri": source(2)}]))
    seen: List[Any] = []
    observe = daemon.reporter.observe
    daemon.reporter.observe = lambda result: (seen.append(result), observe(result))[1]  # type: ignore[method-assign]
    running = Running(daemon)
    try:
        assert wait_until(lambda: {r.stream for r in seen} == {"door", "yard"}, 30)
        before = daemon.model.stream_settings("yard")
        assert daemon.model.stream_settings("door")["mode"] == "roi" and before["mode"] == "full"
        command(log, schemas.topic("cam-1", "cmd"), {"schema": "edge-sdk/cmd/1", "id": "s1", "cmd": "set",
                                                     "args": {"stream": "door", "mode": "tiles", "score_threshold": 0.9}})
        assert log.wait(lambda m: any(r.get("id") == "s1" for r in responses(log)), timeout=30), responses(log)
        assert wait_until(lambda: sum(1 for r in seen if r.stream == "door" and r.info.get("mode") == "tiles") > 3
                          and sum(1 for r in seen if r.stream == "yard") > 10, 30)
    finally:
        assert running.stop() == 0
    all_valid(log)
    response = next(r for r in responses(log) if r.get("id") == "s1")
    assert response["ok"], response
    assert response["result"] == {"applied": {"mode": "tiles", "score_threshold": 0.9}, "streams": ["door"]}
    modes = [r.info.get("mode") for r in seen if r.stream == "door"]
    switched = modes.index("tiles")  # from one frame on (results decoded before the set were still queued)
    assert set(modes[:switched]) == {"roi"} and set(modes[switched:]) == {"tiles"} and len(modes) - switched > 3
    door = [r for r in seen if r.stream == "door"][switched:]
    yard = [r for r in seen if r.stream == "yard"]
    assert all(float(c) >= 0.9 for r in door for c in r.detections.confidence)
    assert all(r.info.get("mode") in (None, "full") for r in yard)
    # yard keeps the bundle's threshold: it still reports what door's 0.9 now leaves out
    assert any(float(c) < 0.9 for r in yard[-10:] for c in r.detections.confidence)
    assert daemon.model.stream_settings("yard") == before  # yard's mode and thresholds untouched
    assert daemon.model.stream_settings("door")["thresholds"]["score_threshold"] == 0.9
    statuses = [m["payload"] for m in log.messages if m["topic"].endswith("/status") and "streams" in m["payload"]]
    assert statuses[-1]["streams"]["door"]["mode"] == "tiles" and statuses[-1]["streams"]["yard"]["mode"] == "full"
    for sid in ("door", "yard"):
        indices = [r.index for r in seen if r.stream == sid]
        assert indices == list(range(len(indices))), sid
