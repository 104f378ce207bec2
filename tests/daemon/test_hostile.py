"""Hostile input through a real Mosquitto broker: nothing received stops the daemon or the
monitor, retained commands are ignored, signed commands are not replayed after a restart,
floods are rate-limited and counted, every failed reload is reported, and two daemons with
one device id do not fight."""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import pytest

from edge_sdk.daemon import Daemon
from edge_sdk.manifest import Bundle
from edge_sdk.runtime.pipeline import Pipeline
from edge_sdk.telemetry import schemas
from edge_sdk.daemon.commands import sign
from edge_sdk.validate import UntrustedInput, loads_untrusted

from mqtt_broker import MessageLog
from polling import wait_until
from processes import edge_sdk, finish, spawn
from test_daemon import Running, command, config, models, responses  # noqa: F401 - models is a fixture

pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")

CMD = schemas.topic("cam-1", "cmd")
DEEP = b"[" * 1000  # RecursionError inside json.loads when parsed unbounded


class TolerantLog(MessageLog):
    """A recording subscriber for topics that carry hostile payloads: what is not JSON (or is too
    deep for json.loads) is recorded as raw bytes."""

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        try:
            payload: Any = loads_untrusted(msg.payload, 1 << 20)
        except UntrustedInput:
            payload = bytes(msg.payload)
        with self.cond:
            self.messages.append({"topic": msg.topic, "payload": payload, "retain": bool(msg.retain)})
            self.cond.notify_all()


@pytest.fixture
def tolerant_log() -> Iterator[Callable[..., TolerantLog]]:
    made: List[TolerantLog] = []

    def make(url: str, topics: List[str]) -> TolerantLog:
        made.append(TolerantLog(url, topics))
        return made[-1].start()

    yield make
    for log in made:
        log.stop()


def ping(cid: str) -> Dict[str, Any]:
    return {"schema": "edge-sdk/cmd/1", "id": cid, "cmd": "ping"}


def test_deep_nesting_and_nan_on_cmd_do_not_stop_the_daemon(models: Path, tmp_path: Path, broker, message_log,
                                                             caplog) -> None:
    caplog.set_level(logging.WARNING, logger="edge_sdk.daemon")
    log = message_log(broker.url, ["edge-sdk/cam-1/cmd/response", "edge-sdk/cam-1/status"])
    daemon = Daemon(config(models, tmp_path, broker.url))
    running = Running(daemon)
    try:
        assert wait_until(lambda: daemon.frames > 0)
        command(log, CMD, DEEP)
        command(log, CMD, b'{"schema": "edge-sdk/cmd/1", "id": "n", "cmd": "set", "args": {"telemetry_interval": NaN}}')
        command(log, CMD, ping("after"))
        assert log.wait(lambda m: len(responses(log)) == 3), "the daemon stopped answering"
        frames = daemon.frames
        assert wait_until(lambda: daemon.frames > frames + 5), "the frame loop stopped"
    finally:
        assert running.stop() == 0
    deep, nan, after = responses(log)
    assert deep["ok"] is False and "deeper" in deep["error"]
    assert nan["ok"] is False and "NaN" in nan["error"] and daemon.reporter.interval_s == 0.2
    assert after["ok"] and after["id"] == "after"
    # open by default, but never silently: a warning at start and a field in the status
    assert "WITHOUT authentication" in caplog.text
    status = log.on("status")[0]
    assert status["commands_auth"] == "none" and schemas.errors(status) == []


@pytest.mark.parametrize("retained", [DEEP, json.dumps(dict(ping("x"), cmd="set", args={"telemetry_interval": 9})).encode()])
def test_a_retained_command_is_ignored_and_cleared(models: Path, tmp_path: Path, broker, tolerant_log, retained: bytes) -> None:
    watcher = tolerant_log(broker.url, [CMD, "edge-sdk/cam-1/cmd/response"])
    watcher.client.publish(CMD, retained, qos=1, retain=True).wait_for_publish(5)
    assert watcher.wait(lambda m: any(x["topic"] == CMD and x["payload"] for x in m))
    daemon = Daemon(config(models, tmp_path, broker.url))
    running = Running(daemon)
    try:
        # the daemon clears it: the broker forwards the empty retained payload to subscribers
        assert watcher.wait(lambda m: any(x["topic"] == CMD and x["payload"] == b"" for x in m), timeout=20)
        assert wait_until(lambda: daemon.frames > 5)
        command(watcher, CMD, ping("live"))
        assert watcher.wait(lambda m: len(responses(watcher)) >= 1)
    finally:
        assert running.stop() == 0
    assert [r["id"] for r in responses(watcher)] == ["live"]  # the retained one was never answered
    assert daemon.reporter.interval_s == 0.2 and daemon.publisher.retained_commands == 1
    late = tolerant_log(broker.url, [CMD])  # subscribed after a round trip: a retained one would be here
    assert [x for x in late.messages if x["topic"] == CMD] == []


def test_monitor_survives_hostile_telemetry(broker, tmp_path: Path) -> None:
    from edge_sdk.telemetry.broker import BrokerConfig
    from edge_sdk.telemetry.publisher import MqttPublisher

    record = tmp_path / "fleet.jsonl"
    pub = MqttPublisher(BrokerConfig(url=broker.url), "d1", tmp_path / "d1.sqlite3")
    pub.set_status({"started_ts": 1, "versions": {"edge_sdk": "t"}})
    pub.start()
    proc = spawn(edge_sdk("monitor", "--broker", broker.url, "--json", "--record", str(record)),
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: record.exists() and "/status" in record.read_text(), 30), "monitor never subscribed"
        pub.client.publish("edge-sdk/d1/telemetry", DEEP, qos=1).wait_for_publish(5)
        pub.client.publish("edge-sdk/d1/telemetry", b'{"schema": "edge-sdk/telemetry/1", "fps": NaN}', qos=1).wait_for_publish(5)
        pub.publish("telemetry", {"window_s": 10, "fps": 12.5, "latency_ms": {},
                                  "frames": {"captured": 1, "processed": 1, "dropped": 0, "cached": 0},
                                  "interval": {"seconds": 1, "captured": 1, "processed": 1, "dropped": 0, "drop_ratio": 0.0}})
        assert wait_until(lambda: "/telemetry" in record.read_text(), 20), "the monitor went deaf"
    finally:
        try:
            _out, err = finish(proc, timeout=60)
        finally:
            pub.stop()
    lines = [json.loads(x) for x in record.read_text().splitlines()]
    assert [x["payload"]["fps"] for x in lines if x["topic"].endswith("/telemetry")] == [12.5]  # only the valid one
    assert "dropped a message on edge-sdk/d1/telemetry" in err


def test_a_signed_command_is_not_replayed_after_a_restart(models: Path, tmp_path: Path, broker, message_log,
                                                          monkeypatch) -> None:
    monkeypatch.setenv("EDGE_TEST_SECRET", "s3cret")
    log = message_log(broker.url, ["edge-sdk/cam-1/cmd/response", "edge-sdk/cam-1/status"])
    cfg = lambda: config(models, tmp_path, broker.url, device={"hmac_secret_env": "EDGE_TEST_SECRET"})  # noqa: E731
    captured = sign(ping("once"), b"s3cret", "cam-1")
    first = Daemon(cfg())
    running = Running(first)
    try:
        assert wait_until(lambda: first.frames > 0)
        command(log, CMD, captured)
        assert log.wait(lambda m: len(responses(log)) == 1)
    finally:
        assert running.stop() == 0
    second = Daemon(cfg())  # a restart: same config, same state folder
    running = Running(second)
    try:
        # its online status follows its `cmd` subscription on the same connection: once it is
        # here, a command cannot arrive before the daemon listens
        assert log.wait(lambda m: any(s["state"] == "online" and s.get("instance_id") == second.instance_id
                                      for s in log.on("status")))
        assert wait_until(lambda: second.frames > 0)
        command(log, CMD, captured)  # the attacker replays what it captured
        command(log, CMD, sign(ping("fresh"), b"s3cret", "cam-1"))
        assert log.wait(lambda m: len(responses(log)) == 3)
    finally:
        assert running.stop() == 0
    first_answer, replay, fresh = responses(log)
    assert first_answer["ok"] and fresh["ok"]
    assert replay["ok"] is False and "replay" in replay["error"]
    assert {s["commands_auth"] for s in log.on("status")} == {"hmac"}


def test_a_command_signed_for_one_device_is_refused_by_another_sharing_its_secret(
        models: Path, tmp_path: Path, broker, message_log, monkeypatch) -> None:
    """Two devices of one fleet, one secret: what was signed for cam-1 and captured does not run
    on cam-2; a signed command whose bytes name a key twice runs nowhere."""
    monkeypatch.setenv("EDGE_TEST_SECRET", "s3cret")
    log = message_log(broker.url, ["edge-sdk/+/cmd/response"])
    secured = {"hmac_secret_env": "EDGE_TEST_SECRET"}
    a = Daemon(config(models, tmp_path / "a", broker.url, device=secured))
    b = Daemon(config(models, tmp_path / "b", broker.url, device=dict(secured, id="cam-2")))
    running = [Running(a), Running(b)]
    for_a = sign({"schema": "edge-sdk/cmd/1", "id": "s1", "cmd": "set", "args": {"telemetry_interval": 9}},
                 b"s3cret", "cam-1")
    # signed over {"args": {"telemetry_interval": 3}}: JSON keeps the last of two keys, so a reader
    # that keeps the first would see another command than the one the signature was checked over
    body = sign({"schema": "edge-sdk/cmd/1", "id": "s2", "cmd": "set", "args": {"telemetry_interval": 3}},
                b"s3cret", "cam-1")
    twice = json.dumps(body).replace('"args"', '"args": {"telemetry_interval": 0.5}, "args"', 1).encode()
    try:
        assert wait_until(lambda: a.frames > 0 and b.frames > 0)
        command(log, schemas.topic("cam-2", "cmd"), for_a)  # captured on cam-1's topic, replayed on cam-2's
        command(log, schemas.topic("cam-1", "cmd"), twice)
        command(log, schemas.topic("cam-1", "cmd"), for_a)  # what it was signed for: runs
        assert log.wait(lambda m: len(answered(log)) == 3, timeout=20)
    finally:
        assert [r.stop() for r in running] == [0, 0]
    on_b = [p for device, p in answered(log) if device == "cam-2"]
    assert len(on_b) == 1 and on_b[0]["id"] == "s1"
    assert on_b[0]["ok"] is False and on_b[0]["reason"] == "wrong_device" and "cam-1" in on_b[0]["error"], on_b
    assert b.reporter.interval_s == 0.2  # nothing changed on cam-2
    duplicate, signed_for_a = [p for device, p in answered(log) if device == "cam-1"]  # in the order sent
    assert duplicate["ok"] is False and duplicate["reason"] == "malformed" and "duplicate key" in duplicate["error"]
    assert signed_for_a["ok"] is True and a.reporter.interval_s == 9
    for _device, payload in answered(log):
        assert schemas.errors(payload) == [], payload


def answered(log: Any) -> List[Any]:
    """(device, response) of every command response the log holds, in order."""
    return [(m["topic"].split("/")[1], m["payload"]) for m in list(log.messages) if m["topic"].endswith("/cmd/response")]


def test_snapshot_flood_is_rate_limited_counted_and_capped_on_disk(models: Path, tmp_path: Path, broker, message_log) -> None:
    log = message_log(broker.url, ["edge-sdk/cam-1/cmd/response", "edge-sdk/cam-1/telemetry"])
    daemon = Daemon(config(models, tmp_path, broker.url, device={"snapshot_max_files": 3}))
    running = Running(daemon)
    snaps = tmp_path / "snaps"
    try:
        assert wait_until(lambda: daemon.frames > 0)
        for i in range(40):
            command(log, CMD, {"schema": "edge-sdk/cmd/1", "id": f"s{i}", "cmd": "snapshot"})
        assert log.wait(lambda m: len(responses(log)) == 40, timeout=20)
        accepted = [r for r in responses(log) if r["ok"]]
        assert log.wait(lambda m: any((t.get("commands") or {}).get("dropped", 0) == 40 - len(accepted)
                                      for t in log.on("telemetry")), timeout=10)
    finally:
        assert running.stop() == 0
    # a burst of 5, then 1 per second: 40 commands within a few seconds cannot all run
    assert 5 <= len(accepted) < 15
    assert all("rate limit" in r["error"] for r in responses(log) if not r["ok"])
    assert len(list(snaps.glob("*.jpg"))) == 3 and len(list(snaps.glob("*.json"))) == 3
    assert sum(r["result"]["removed"] for r in accepted) == len(accepted) - 3
    tel = log.on("telemetry")[-1]
    assert tel["commands"]["accepted"] == len(accepted) and schemas.errors(tel) == []


def test_every_failed_reload_raises_an_alert_and_answers_finally(models: Path, tmp_path: Path, broker, message_log) -> None:
    log = message_log(broker.url, ["edge-sdk/cam-1/#"])
    daemon = Daemon(config(models, tmp_path, broker.url))
    running = Running(daemon)
    try:
        assert wait_until(lambda: daemon.frames > 0)
        for i in range(3):
            command(log, CMD, {"schema": "edge-sdk/cmd/1", "id": f"r{i}", "cmd": "reload", "args": {"bundle": "broken"}})
            assert log.wait(lambda m: any(r.get("final") and r["id"] == f"r{i}" for r in responses(log)), timeout=20)
        assert log.wait(lambda m: any((t.get("model") or {}).get("reload_failures") == 3 for t in log.on("telemetry")))
    finally:
        assert running.stop() == 0
    finals = [r for r in responses(log) if r.get("final")]
    assert [(r["id"], r["ok"]) for r in finals] == [("r0", False), ("r1", False), ("r2", False)]
    assert all("sha256" in r["error"] for r in finals)
    raised = [a for a in log.on("alerts") if a["alert"] == "reload_failed" and a["state"] == "raised"]
    assert len(raised) == 3
    for message in responses(log) + raised:
        assert schemas.errors(message) == []


def with_manifest(root: Path, name: str, **changes: Any) -> Path:
    """A copy of bundle `a` under `name` whose manifest's first input has `changes`: the files
    keep their sha256, only manifest.json differs."""
    shutil.copytree(root / "a", root / name)
    data = json.loads((root / name / "manifest.json").read_text())
    data["inputs"][0].update(changes)
    (root / name / "manifest.json").write_text(json.dumps(data))
    return root / name


def reload_fails_and_the_old_model_runs_on(models: Path, tmp_path: Path, broker, message_log, bundle: str) -> str:
    """Reload `bundle` by command: its final response, failed; the reload_failed alert raised; the
    daemon still runs bundle a, frame after frame, and stops cleanly. Returns the error."""
    log = message_log(broker.url, ["edge-sdk/cam-1/#"])
    daemon = Daemon(config(models, tmp_path, broker.url))
    running = Running(daemon)
    try:
        assert wait_until(lambda: daemon.frames > 0)
        command(log, CMD, {"schema": "edge-sdk/cmd/1", "id": "r", "cmd": "reload", "args": {"bundle": bundle}})
        assert log.wait(lambda m: any(r.get("final") and r["id"] == "r" for r in responses(log)), timeout=20), \
            "no final response to the reload"
        frames = daemon.frames
        assert wait_until(lambda: daemon.frames > frames + 5), "the frame loop stopped"
        assert daemon.model.describe()["bundle_hash"] == Bundle.load(models / "a").hash
        assert log.wait(lambda m: any(a["alert"] == "reload_failed" and a["state"] == "raised" for a in log.on("alerts")))
    finally:
        assert running.stop() == 0
    final = [r for r in responses(log) if r.get("final")]
    assert len(final) == 1 and final[0]["ok"] is False, final
    assert schemas.errors(final[0]) == []
    assert daemon.model.reload_failures == 1 and daemon.model.reloads == 0
    return final[0]["error"]


@pytest.mark.parametrize("pad_value", [300, -1])
def test_a_reload_to_a_manifest_with_a_bad_field_is_refused_by_name(models: Path, tmp_path: Path, broker, message_log,
                                                                    pad_value: int) -> None:
    with_manifest(models, f"pad{pad_value}", pad_value=pad_value)
    error = reload_fails_and_the_old_model_runs_on(models, tmp_path, broker, message_log, f"pad{pad_value}")
    assert f"inputs[0].pad_value must be in 0..255, got {pad_value}" in error
    assert f"pad{pad_value}/manifest.json" in error


def test_nothing_raised_while_swapping_stops_the_running_model(models: Path, tmp_path: Path, broker, message_log,
                                                               monkeypatch) -> None:
    # The swap itself raises an error that is not one of the SDK's (as building the new detector's
    # buffers raised numpy 2's OverflowError for a pad value of 300 before the manifest was
    # checked), after the bundle loaded and warmed up.
    def overflows(self: Pipeline, detector: Any) -> None:
        raise OverflowError("Python integer 300 out of bounds for uint8")

    monkeypatch.setattr(Pipeline, "swap_detector", overflows)
    with_manifest(models, "unchecked", pad_value=113)
    error = reload_fails_and_the_old_model_runs_on(models, tmp_path, broker, message_log, "unchecked")
    assert "OverflowError: Python integer 300 out of bounds" in error, error


def test_a_second_daemon_with_the_same_id_refuses_to_start(models: Path, tmp_path: Path, broker, message_log,
                                                           caplog) -> None:
    log = message_log(broker.url, ["edge-sdk/cam-1/status"])
    first = Daemon(config(models, tmp_path / "a", broker.url, device={"instance_check_s": 2}))
    running = Running(first)
    try:
        assert wait_until(lambda: first.frames > 0)
        assert log.wait(lambda m: any(s["state"] == "online" for s in log.on("status")))
        second = Daemon(config(models, tmp_path / "b", broker.url, device={"instance_check_s": 2}))
        clash = Running(second)
        clash.thread.join(20)
        if clash.thread.is_alive():
            clash.stop()
            pytest.fail("the second daemon started and fights the first for the broker connection")
        frames = first.frames
        assert wait_until(lambda: first.frames > frames + 5)
    finally:
        assert running.stop() == 0
    assert clash.code == 2
    assert "already in use" in caplog.text and first.instance_id in caplog.text
    # the refused daemon never started its publisher: the queue file it opened is closed all the same
    assert second.publisher.queue is not None and second.publisher.queue.db is None
    assert first.publisher.reconnects == 1, "the first daemon was kicked off the broker"
    states = [s["state"] for s in log.on("status")]
    assert states[-1] == "offline" and states.count("offline") == 1  # only its own goodbye


def test_a_stale_online_status_does_not_block_the_start(models: Path, tmp_path: Path, broker, message_log, caplog) -> None:
    log = message_log(broker.url, [])
    stale = {"schema": "edge-sdk/status/1", "device_id": "cam-1", "ts": 1, "seq": 1, "state": "online",
             "instance_id": "gone", "status_ts": 1}
    log.client.publish("edge-sdk/cam-1/status", json.dumps(stale), qos=1, retain=True).wait_for_publish(5)
    daemon = Daemon(config(models, tmp_path, broker.url, device={"instance_check_s": 0.5}))
    running = Running(daemon)
    try:
        assert wait_until(lambda: daemon.frames > 0)
    finally:
        assert running.stop() == 0
    assert "stale status" in caplog.text


def hostile_status_payloads() -> List[bytes]:
    return [DEEP, b"\xff\xfe", b'{"state": NaN}', b"[]"]


@pytest.mark.parametrize("payload", hostile_status_payloads())
def test_a_hostile_retained_status_does_not_stop_the_start(models: Path, tmp_path: Path, broker, message_log,
                                                           payload: bytes) -> None:
    log = message_log(broker.url, [])
    log.client.publish("edge-sdk/cam-1/status", payload, qos=1, retain=True).wait_for_publish(5)
    daemon = Daemon(config(models, tmp_path, broker.url, device={"instance_check_s": 0.5}))
    running = Running(daemon)
    try:
        assert wait_until(lambda: daemon.frames > 0)
    finally:
        assert running.stop() == 0
    assert loads_untrusted(json.dumps(daemon.status()).encode(), 1 << 16)["instance_id"] == daemon.instance_id
