"""sd_notify and the health file: a real AF_UNIX datagram socket stands where systemd's would be
(`$NOTIFY_SOCKET`), the real daemon (synthetic source, tiny model on ONNX Runtime) runs against
it, and the health check reads the file the daemon writes."""
from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

from edge_sdk.daemon import Daemon, daemon_config_from_dict
from edge_sdk.daemon.health import PERIOD_S, SCHEMA, Heartbeat, check_health, main, read_health
from edge_sdk.daemon.notify import SystemdNotifier, watchdog_interval_s

from polling import wait_until
from test_daemon import Running
from tiny_bundle import make_tiny_bundle

SOURCE = "synthetic://faces?width=96&height=64&count=2&min_size=8&max_size=16&fps=30"


class NotifySocket:
    """The receiving end of sd_notify: a datagram socket bound at a short path (AF_UNIX paths
    are limited to 108 bytes, pytest's tmp_path can be longer) or in the abstract namespace."""

    def __init__(self, abstract: bool = False) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.folder: Optional[str] = None
        if abstract:
            name = f"edge-sdk-test-{uuid.uuid4().hex[:12]}"
            self.sock.bind("\0" + name)
            self.env = "@" + name
        else:
            self.folder = tempfile.mkdtemp(prefix="sdn", dir="/tmp")
            self.env = os.path.join(self.folder, "notify")
            self.sock.bind(self.env)
        self.received: List[str] = []

    def recv(self, timeout: float = 10.0) -> Optional[str]:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except socket.timeout:
            return None
        self.received.append(data.decode())
        return self.received[-1]

    def drain(self) -> List[str]:
        """What has arrived so far (datagrams are in the queue once sendto returned)."""
        out = []
        self.sock.setblocking(False)
        try:
            while True:
                out.append(self.sock.recv(4096).decode())
        except BlockingIOError:
            pass
        self.received += out
        return out

    def close(self) -> None:
        self.sock.close()
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(params=["path", "abstract"])
def notify_socket(request) -> Iterator[NotifySocket]:
    s = NotifySocket(abstract=request.param == "abstract")
    yield s
    s.close()


# -- the protocol -----------------------------------------------------------------------------
def test_notify_sends_one_datagram_with_a_status_line(notify_socket: NotifySocket) -> None:
    notifier = SystemdNotifier.from_environ({"NOTIFY_SOCKET": notify_socket.env})
    assert notifier.enabled
    assert notifier.notify("READY=1", status="running abc\non synthetic://")
    assert notify_socket.recv() == "READY=1\nSTATUS=running abc on synthetic://"
    notifier.close()


@pytest.mark.parametrize("env,expected", [
    ({}, None),
    ({"WATCHDOG_USEC": "30000000"}, 30.0),
    ({"WATCHDOG_USEC": "250000", "WATCHDOG_PID": "SELF"}, 0.25),
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),  # for another process (we are not pid 1)
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "x1"}, None),
    ({"WATCHDOG_USEC": "0"}, None),
    ({"WATCHDOG_USEC": "-5"}, None),
    ({"WATCHDOG_USEC": "1e6"}, None),
])
def test_watchdog_interval_follows_the_environment(env: Dict[str, str], expected: Optional[float]) -> None:
    env = {k: (str(os.getpid()) if v == "SELF" else v) for k, v in env.items()}
    assert watchdog_interval_s(env) == expected


@pytest.mark.parametrize("value", ["", "vsock:2:1", "@", "relative/path"])
def test_without_a_usable_socket_notifying_is_a_no_op(value: str) -> None:
    notifier = SystemdNotifier.from_environ({"NOTIFY_SOCKET": value, "WATCHDOG_USEC": "1000000"})
    assert not notifier.enabled and notifier.watchdog_s is None
    assert notifier.notify("READY=1") is False


def test_a_socket_that_went_away_is_logged_once_and_never_raises(tmp_path: Path, caplog) -> None:
    notifier = SystemdNotifier(str(tmp_path / "gone"))
    with caplog.at_level("WARNING", logger="edge_sdk.daemon.notify"):
        assert notifier.notify("WATCHDOG=1") is False
        assert notifier.notify("WATCHDOG=1") is False
    assert len([r for r in caplog.records if "could not notify systemd" in r.getMessage()]) == 1


# -- the heartbeat (a fake clock: the cadence is exact) ---------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_heartbeat_pings_the_watchdog_at_half_its_interval(notify_socket: NotifySocket, tmp_path: Path) -> None:
    clock = Clock()
    notifier = SystemdNotifier.from_environ({"NOTIFY_SOCKET": notify_socket.env, "WATCHDOG_USEC": "4000000"})
    beat = Heartbeat(notifier, tmp_path / "health.json", "cam-1", clock=clock)
    assert beat.period_s == 2.0
    beat.starting()
    beat.beat(1)  # before READY=1: systemd's watchdog is not running, nothing is sent
    assert notify_socket.drain() == []
    assert read_health(tmp_path / "health.json")["state"] == "starting"
    beat.ready("running")
    assert notify_socket.drain() == ["READY=1\nSTATUS=running", "WATCHDOG=1"]
    pings = []
    for frame, t in enumerate([0.5, 1.0, 1.999, 2.0, 2.5, 3.9, 4.0, 4.1, 9.0], start=2):
        clock.now = 1000.0 + t
        beat.beat(frame)
        pings += [(t, m) for m in notify_socket.drain()]
    assert pings == [(2.0, "WATCHDOG=1"), (4.0, "WATCHDOG=1"), (9.0, "WATCHDOG=1")]
    body = read_health(tmp_path / "health.json")
    assert body["state"] == "running" and body["frames"] == 10 and body["monotonic"] == 1009.0
    beat.stopping("SIGTERM")
    clock.now += 10
    beat.beat(11)  # a frame during shutdown: no more pings
    assert notify_socket.drain() == ["STOPPING=1\nSTATUS=stopping: SIGTERM"]
    beat.stopped("SIGTERM", 0)
    assert read_health(tmp_path / "health.json")["state"] == "stopped"


def test_heartbeat_without_systemd_writes_the_health_file_every_period(tmp_path: Path) -> None:
    clock = Clock()
    beat = Heartbeat(SystemdNotifier(None), tmp_path / "health.json", "cam-1", clock=clock)
    beat.ready("running")
    clock.now += PERIOD_S - 0.01
    beat.beat(7)
    assert read_health(tmp_path / "health.json")["frames"] == 0  # not yet due
    clock.now += 0.01
    beat.beat(8)
    assert read_health(tmp_path / "health.json")["frames"] == 8


# -- the health check -------------------------------------------------------------------------
def _health(tmp_path: Path, **fields: Any) -> Path:
    body = {"schema": SCHEMA, "state": "running", "pid": 1, "device_id": "cam-1", "frames": 5,
            "ts": 0, "monotonic": time.monotonic(), "period_s": 1.0, "reason": None}
    body.update(fields)
    path = tmp_path / "health.json"
    path.write_text(json.dumps(body))
    return path


def test_check_is_healthy_only_for_a_recent_running_beat(tmp_path: Path) -> None:
    now = time.monotonic()
    assert check_health(_health(tmp_path, monotonic=now - 2.9), clock=lambda: now)[0] is True
    ok, why = check_health(_health(tmp_path, monotonic=now - 3.1), clock=lambda: now)  # 3 periods of 1 s
    assert not ok and "no frame for 3 s" in why
    assert check_health(_health(tmp_path, monotonic=now - 3.1), max_age_s=10, clock=lambda: now)[0] is True
    ok, why = check_health(_health(tmp_path, state="stopped", reason="error: capture: SourceError: gone"))
    assert not ok and "is stopped: error: capture: SourceError: gone" in why
    assert check_health(_health(tmp_path, state="starting"))[0] is False
    ok, why = check_health(_health(tmp_path, monotonic=now + 100), clock=lambda: now)
    assert not ok and "future" in why


@pytest.mark.parametrize("content,message", [
    (b"", "health file"),
    (b"\x00\xffnot json", "health file"),
    (b"[1, 2]", "not an edge-sdk health file"),
    (json.dumps({"schema": SCHEMA, "state": "running"}).encode(), "monotonic must be a number"),
    (b'{"schema": "edge-sdk/health/1", "state": "running", "monotonic": NaN, "period_s": 1, "frames": 1}', "health file"),
    (json.dumps({"schema": SCHEMA, "state": "dancing", "monotonic": 1.0, "period_s": 1.0, "frames": 1}).encode(), "state must be"),
    (json.dumps({"schema": SCHEMA, "state": "running", "monotonic": 1.0, "period_s": 1e9, "frames": 1}).encode(), "period_s must be"),
    (json.dumps({"schema": SCHEMA, "state": "running", "monotonic": "1", "period_s": 1.0, "frames": -1}).encode(), "frames must be"),
    (b"{" + b" " * (70 * 1024) + b"}", "health file"),
])
def test_a_hostile_health_file_is_unhealthy_with_a_reason(tmp_path: Path, capsys, content: bytes, message: str) -> None:
    path = tmp_path / "health.json"
    path.write_bytes(content)
    assert main(["--file", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("unhealthy: ") and message in out


def test_the_check_runs_as_a_module_and_says_why(tmp_path: Path) -> None:
    env = dict(os.environ, EDGE_SDK_HEALTH_FILE=str(_health(tmp_path)))
    ok = subprocess.run([sys.executable, "-m", "edge_sdk.daemon.health"], env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.startswith("healthy: running: 5 frames"), ok
    assert ok.stderr == ""  # no RuntimeWarning about the module being imported twice
    env["EDGE_SDK_HEALTH_FILE"] = str(tmp_path / "absent.json")
    bad = subprocess.run([sys.executable, "-m", "edge_sdk.daemon.health"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "no health file" in bad.stdout and "Traceback" not in bad.stderr


# -- the daemon -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    pytest.importorskip("onnxruntime")
    return make_tiny_bundle(tmp_path_factory.mktemp("notify") / "a", seed=0)


def _daemon(bundle: Path, pipeline_factory: Any = None, **extra: Any) -> Daemon:
    data: Dict[str, Any] = {"bundle": str(bundle), "backend": "onnxruntime-cpu", "threads": 1,
                            "source": {"uri": SOURCE}, "cache": {"enabled": False}, "device": {"id": "cam-1"},
                            "telemetry": {"interval_s": 0.2, "system": False}}
    data.update(extra)
    return Daemon(daemon_config_from_dict(data), stream=io.StringIO(), pipeline_factory=pipeline_factory)


def test_the_daemon_says_ready_feeds_the_watchdog_from_the_frame_loop_and_says_stopping(
        bundle: Path, notify_socket: NotifySocket, tmp_path: Path, monkeypatch) -> None:
    health = tmp_path / "run" / "health.json"
    monkeypatch.setenv("NOTIFY_SOCKET", notify_socket.env)
    monkeypatch.setenv("WATCHDOG_USEC", "200000")  # pings every 0.1 s
    monkeypatch.setenv("EDGE_SDK_HEALTH_FILE", str(health))
    daemon = _daemon(bundle)
    running = Running(daemon)
    first = notify_socket.recv(timeout=30)
    assert first is not None and first.startswith("READY=1\nSTATUS=running ") and "synthetic://faces" in first
    assert daemon.frames >= 0 and daemon.pipeline is not None  # READY=1 only once the pipeline is open
    for _ in range(3):
        assert notify_socket.recv(timeout=10) == "WATCHDOG=1"
    assert wait_until(lambda: check_health(health)[0] and read_health(health)["frames"] > 0, timeout=10)
    assert running.stop() == 0
    rest = notify_socket.drain()
    assert rest and rest[-1] == "STOPPING=1\nSTATUS=stopping: test", rest
    assert all(m == "WATCHDOG=1" for m in rest[:-1])
    body = read_health(health)
    assert body["state"] == "stopped" and body["reason"] == "test" and body["exit_code"] == 0
    assert body["frames"] <= daemon.frames
    ok, why = check_health(health)
    assert not ok and "cam-1 is stopped: test" in why


def test_a_stalled_source_stops_the_pings_and_the_check_says_unhealthy_while_the_process_runs(
        bundle: Path, notify_socket: NotifySocket, tmp_path: Path, monkeypatch) -> None:
    """The point of both: the process is alive, the frame loop is not."""
    from edge_sdk.runtime.pipeline import Pipeline

    health = tmp_path / "health.json"
    monkeypatch.setenv("NOTIFY_SOCKET", notify_socket.env)
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.setenv("EDGE_SDK_HEALTH_FILE", str(health))
    release = threading.Event()
    stalled = threading.Event()

    class Stalling(Pipeline):
        def __iter__(self) -> Iterator[Any]:
            for n, result in enumerate(super().__iter__(), start=1):
                yield result
                if n == 5:
                    stalled.set()
                    release.wait(30)  # the source delivers nothing more until released

    daemon = _daemon(bundle, pipeline_factory=lambda cfg, **kw: Stalling(cfg, **kw))
    running = Running(daemon)
    try:
        assert stalled.wait(30)
        assert wait_until(lambda: not check_health(health)[0], timeout=10)
        why = check_health(health)[1]
        assert "no frame for" in why and running.thread.is_alive()
        pings = [m for m in notify_socket.drain() if m == "WATCHDOG=1"]
        assert 1 <= len(pings) <= 5  # one per beat at most, and beats come only with frames
        assert read_health(health)["frames"] <= 5
    finally:
        release.set()
        running.stop()
