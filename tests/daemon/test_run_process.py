"""`edge-sdk run` as a real process: signals, exit codes and the retained status."""
from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, List

import pytest

from processes import edge_sdk, kill_group, spawn
from tiny_bundle import make_tiny_bundle

pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")

SOURCE = "synthetic://faces?width=96&height=64&count=2&min_size=8&max_size=16&fps=30"


def write_config(path: Path, bundle: Path, url: str, interval: float) -> Path:
    path.write_text(
        f'bundle = "{bundle}"\nbackend = "onnxruntime-cpu"\nthreads = 1\n'
        f'[source]\nuri = "{SOURCE}"\n'
        f'[device]\nid = "proc-1"\n'
        f'[mqtt]\nurl = "{url}"\nqueue_dir = "{path.parent / "queue"}"\n'
        f'[telemetry]\ninterval_s = {interval}\n'
    )
    return path


def start(config: Path, *extra: str) -> subprocess.Popen:
    """`edge-sdk run` in a process group of its own (tests.processes)."""
    return spawn(edge_sdk("run", "--config", str(config), *extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                 text=True)


def statuses(log: Any) -> List[dict]:
    return log.on("status")


@pytest.fixture
def setup(tmp_path: Path, broker):
    bundle = make_tiny_bundle(tmp_path / "bundle")
    return write_config(tmp_path / "device.toml", bundle, broker.url, 0.3)


def test_sigkill_leaves_offline_retained(setup: Path, broker, message_log) -> None:
    log = message_log(broker.url, ["edge-sdk/proc-1/status"])
    proc = start(setup)
    try:
        assert log.wait(lambda m: any(s["state"] == "online" for s in statuses(log)), timeout=30), proc.stderr
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    assert log.wait(lambda m: statuses(log)[-1]["state"] == "offline", timeout=10)
    late = message_log(broker.url, ["edge-sdk/proc-1/status"])  # a newcomer sees the retained will
    assert late.wait(lambda m: any(x["retain"] and x["topic"].endswith("/status") for x in m), timeout=10)
    retained = [x["payload"] for x in late.messages if x["retain"]][-1]
    assert retained["state"] == "offline" and retained["reason"] == "connection lost"


@contextlib.contextmanager
def running(config: Path) -> Iterator[subprocess.Popen]:
    """`edge-sdk run --config config`, killed on the way out if it is still running."""
    proc = start(config)
    try:
        yield proc
    finally:
        kill_group(proc)


def reread_with_interval(proc: subprocess.Popen, config: Path, text: str, log: Any) -> None:
    """Write `text` with interval_s 0.7, SIGHUP, and wait for the status that shows it applied."""
    config.write_text(text.replace("interval_s = 0.3", "interval_s = 0.7"))
    proc.send_signal(signal.SIGHUP)
    assert log.wait(lambda m: any(s.get("telemetry_interval_s") == 0.7 for s in statuses(log)), timeout=15)


def sigterm(proc: subprocess.Popen) -> str:
    """SIGTERM; the process's stderr once it has exited."""
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=30)[1]


def test_sighup_rereads_and_sigterm_stops_cleanly(setup: Path, broker, message_log) -> None:
    log = message_log(broker.url, ["edge-sdk/proc-1/#"])
    with running(setup) as proc:
        assert log.wait(lambda m: len(log.on("telemetry")) >= 2, timeout=30), proc.stderr
        reread_with_interval(proc, setup, setup.read_text(), log)
        err = sigterm(proc)
    assert proc.returncode == 0, err
    assert log.wait(lambda m: statuses(log)[-1]["state"] == "offline", timeout=10)
    assert statuses(log)[-1]["reason"] == "SIGTERM"
    tel = log.on("telemetry")
    assert [t["seq"] for t in tel] == list(range(tel[0]["seq"], tel[0]["seq"] + len(tel)))
    assert "config re-read" in err and "stopped (SIGTERM)" in err


def test_sighup_with_a_config_typo_keeps_running_on_the_old_config(setup: Path, broker, message_log) -> None:
    """A quoted number in [health] used to end the daemon with a TypeError traceback on SIGHUP."""
    log = message_log(broker.url, ["edge-sdk/proc-1/#"])
    good = setup.read_text()
    with running(setup) as proc:
        assert log.wait(lambda m: len(log.on("telemetry")) >= 2, timeout=30), proc.stderr
        setup.write_text(good + '[health]\nlatency_p99_ms = "300"\n')
        proc.send_signal(signal.SIGHUP)
        assert log.wait(lambda m: any(a["alert"] == "config_invalid" for a in log.on("alerts")), timeout=15)
        alert = [a for a in log.on("alerts") if a["alert"] == "config_invalid"][0]
        assert alert["state"] == "raised" and "health.latency_p99_ms" in alert["message"]
        assert str(setup) in alert["message"]
        seen = len(log.on("telemetry"))
        assert log.wait(lambda m: len(log.on("telemetry")) >= seen + 3, timeout=15)  # still detecting, still reporting
        assert proc.poll() is None
        reread_with_interval(proc, setup, good, log)  # fixed: applied on the next SIGHUP
        assert log.wait(lambda m: any(a["alert"] == "config_invalid" and a["state"] == "cleared"
                                      for a in log.on("alerts")), timeout=15)
        err = sigterm(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "SIGHUP: config not applied, keeping the running one" in err and "health.latency_p99_ms" in err
    assert statuses(log)[-1]["reason"] == "SIGTERM"


@pytest.mark.parametrize("args,code,fragment", [
    (["--source", "nope://x"], 9, "scheme"),
    (["--bundle", "/nonexistent/bundle"], 8, "not a bundle"),
    (["--broker", "http://x"], 2, "url"),
])
def test_exit_codes(setup: Path, args: List[str], code: int, fragment: str) -> None:
    proc = start(setup, *args)
    try:
        _out, err = proc.communicate(timeout=120)
    finally:
        kill_group(proc)
    assert proc.returncode == code, err
    assert fragment in err


def test_the_will_after_an_outage_orders_after_the_last_online_status(setup: Path, broker, message_log) -> None:
    from edge_sdk.telemetry.fleet import Fleet

    log = message_log(broker.url, ["edge-sdk/proc-1/status"])
    proc = start(setup)
    try:
        assert log.wait(lambda m: any(s["state"] == "online" for s in statuses(log)), timeout=30), proc.stderr
        broker.restart()  # an outage: the daemon reconnects and publishes online again
        assert log.wait(lambda m: [s["state"] for s in statuses(log)].count("online") >= 2, timeout=30)
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    assert log.wait(lambda m: statuses(log)[-1]["state"] == "offline", timeout=10)
    online, will = [s for s in statuses(log) if s["state"] == "online"][-1], statuses(log)[-1]
    assert will["reason"] == "connection lost"
    assert will["seq"] < online["seq"]  # why seq cannot order status: the will's is from start-up
    assert will["status_ts"] >= online["status_ts"]
    fleet = Fleet()
    for s in statuses(log):
        fleet.update("edge-sdk/proc-1/status", s)
    assert fleet.devices["proc-1"].state == "offline"


def test_fleet_orders_status_by_status_ts() -> None:
    from edge_sdk.telemetry.fleet import Fleet

    def status(state: str, status_ts: int, seq: int) -> dict:
        return {"schema": "edge-sdk/status/1", "device_id": "d", "ts": seq, "seq": seq, "state": state,
                "status_ts": status_ts}

    fleet = Fleet()
    for s in (status("online", 10, 5), status("offline", 10, 1), status("online", 10, 6),  # the will wins its connection
              status("online", 5, 7)):  # an older connection's late message
        fleet.update("edge-sdk/d/status", s)
    assert fleet.devices["d"].state == "offline" and fleet.stale == 2
    fleet.update("edge-sdk/d/status", status("online", 11, 2))  # a new connection
    assert fleet.devices["d"].state == "online"


def test_a_camera_password_reaches_no_status_telemetry_log_or_error(tmp_path: Path, broker, message_log) -> None:
    """A camera URI with userinfo and a token, unreachable: the retained status, every message on
    the device's topics and the daemon's log say *** where the secrets were, and still name the
    camera."""
    import socket

    with socket.socket() as s:  # a port nothing listens on: the camera is away
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    secret = "S3cr3t-pw"
    uri = f"rtsp://admin:{secret}@127.0.0.1:{port}/cam1?token={secret}x&channel=1"
    bundle = make_tiny_bundle(tmp_path / "bundle")
    config = write_config(tmp_path / "device.toml", bundle, broker.url, 0.3)
    config.write_text(config.read_text().replace(f'uri = "{SOURCE}"', f'uri = "{uri}"'))
    log = message_log(broker.url, ["edge-sdk/proc-1/#"])
    with running(config) as proc:
        _out, stderr = proc.communicate(timeout=60)  # a camera that never opened stops the daemon
    assert log.wait(lambda m: any(s["state"] == "offline" for s in statuses(log)), timeout=10), stderr
    late = message_log(broker.url, ["edge-sdk/proc-1/status"])
    assert late.wait(lambda m: any(x["retain"] for x in m), timeout=10)
    seen = json.dumps([m["payload"] for m in log.messages + late.messages], default=str)
    assert secret not in seen and secret not in stderr, stderr[-2000:]
    named = f"rtsp://***@127.0.0.1:{port}/cam1?token=***&channel=1"
    final = statuses(late)[-1]
    assert final["source"] == named and final["streams"]["0"]["source"] == named
    assert named in final["reason"] and f"cannot open {named}" in stderr


def test_a_restart_with_the_clock_an_hour_behind_is_the_newer_session() -> None:
    """Every status of the new run is stamped before the last will of the one before: ordered by
    the session, the device is online while its telemetry flows; the old run's late will (the
    broker sends it when the new run takes the connection over) does not take it offline."""
    from edge_sdk.telemetry.fleet import Fleet

    def status(state: str, status_ts: int, seq: int, instance: str) -> dict:
        return {"schema": "edge-sdk/status/1", "device_id": "d", "ts": status_ts, "seq": seq, "state": state,
                "status_ts": status_ts, "instance_id": instance}

    hour = 3600 * 1000
    now = 1_800_000_000_000
    fleet = Fleet()
    fleet.update("edge-sdk/d/status", status("online", now, 1, "run-a"), received_ms=now)
    fleet.update("edge-sdk/d/status", status("offline", now, 2, "run-a"), received_ms=now)  # its will
    fleet.update("edge-sdk/d/status", status("online", now - hour, 1, "run-b"), received_ms=now)  # clock behind
    assert fleet.devices["d"].state == "online" and fleet.devices["d"].status["instance_id"] == "run-b"
    fleet.update("edge-sdk/d/status", status("online", now - hour + 5, 3, "run-b"), received_ms=now)
    assert fleet.devices["d"].status["seq"] == 3
    fleet.update("edge-sdk/d/status", status("online", now + 10, 3, "run-a"), received_ms=now)  # the old run, late
    assert fleet.devices["d"].status["instance_id"] == "run-b"
    fleet.update("edge-sdk/d/status", status("offline", now + 20, 9, "run-c"), received_ms=now)  # a late will of a run never seen
    assert fleet.devices["d"].state == "online"
    fleet.update("edge-sdk/d/status", status("offline", now - hour + 9, 4, "run-b"), received_ms=now)  # run-b's own will
    assert fleet.devices["d"].state == "offline"
    fleet.update("edge-sdk/d/status", status("online", now - 2 * hour, 1, "run-d"), received_ms=now)  # the next run
    assert fleet.devices["d"].state == "online"
