"""The health file and its check at their stated limits: "healthy when the daemon runs and its
frame loop beat within max_age_s (default: three of its periods)", "at most once per period (half
the systemd watchdog interval, 5 s without one)", "period_s must be in (0, 3600]", and a file
more than a second from the future is not trusted."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, List

import pytest

from edge_sdk.daemon import health as health_mod
from edge_sdk.daemon.health import PERIOD_S, SCHEMA, Heartbeat, check_health, main, read_health


class FakeNotifier:
    """Records what a SystemdNotifier would send."""

    def __init__(self, watchdog_s: Any = None) -> None:
        self.watchdog_s = watchdog_s
        self.sent: List[str] = []
        self.closed = False

    def notify(self, message: str, status: Any = None) -> bool:
        self.sent.append(message)
        return True

    def close(self) -> None:
        self.closed = True


def write(tmp_path: Path, **fields: Any) -> Path:
    body = {"schema": SCHEMA, "state": "running", "pid": 1, "device_id": "cam-1", "frames": 5, "ts": 0,
            "monotonic": 1000.0, "period_s": 2.0, "reason": None}
    body.update(fields)
    path = tmp_path / "health.json"
    path.write_text(json.dumps(body))
    return path


@pytest.mark.parametrize("age,max_age,healthy", [
    (6.0, None, True), (6.001, None, False), (5.999, None, True),  # three periods of 2 s
    (10.0, 10.0, True), (10.01, 10.0, False), (0.0, None, True),
    (-1.0, None, True), (-1.01, None, False),  # a second of clock skew is tolerated, more is the future
])
def test_the_check_at_its_limits(tmp_path: Path, age: float, max_age: Any, healthy: bool) -> None:
    path = write(tmp_path, monotonic=1000.0)
    ok, why = check_health(path, max_age, clock=lambda: 1000.0 + age)
    assert ok is healthy, why
    if not healthy:
        assert ("future" in why) is (age < 0)


@pytest.mark.parametrize("state", ["starting", "stopping", "stopped"])
def test_only_running_is_healthy(tmp_path: Path, state: str) -> None:
    ok, why = check_health(write(tmp_path, state=state, reason="SIGTERM"), clock=lambda: 1000.0)
    assert not ok and why == f"daemon cam-1 is {state}: SIGTERM"


@pytest.mark.parametrize("field,value,ok", [
    ("period_s", 3600, True), ("period_s", 3600.5, False), ("period_s", 0, False), ("period_s", 0.001, True),
    ("period_s", -1, False), ("frames", 0, True), ("frames", -1, False), ("frames", True, False), ("frames", 1.5, False),
    ("monotonic", True, False), ("monotonic", 0, True), ("reason", 3, False), ("reason", "x", True),
    ("state", "stopped", True), ("state", "Running", False),
])
def test_read_health_at_its_bounds(tmp_path: Path, field: str, value: Any, ok: bool) -> None:
    path = write(tmp_path, **{field: value})
    if ok:
        assert read_health(path)[field] == value
    else:
        with pytest.raises(Exception, match=field):
            read_health(path)


@pytest.mark.parametrize("watchdog,period", [(None, PERIOD_S), (4.0, 2.0), (10.0, 5.0), (20.0, 5.0), (1.0, 0.5)])
def test_the_period_is_half_the_watchdog_at_most_five_seconds(watchdog: Any, period: float) -> None:
    beat = Heartbeat(FakeNotifier(watchdog), None, "cam-1", clock=lambda: 0.0)
    assert beat.period_s == period
    assert beat.watchdog is (watchdog is not None)


def test_beats_are_sent_exactly_when_due_and_the_file_says_what_was_sent(tmp_path: Path) -> None:
    now = [100.0]
    notifier = FakeNotifier(4.0)
    path = tmp_path / "run" / "health.json"
    beat = Heartbeat(notifier, path, "cam-7", clock=lambda: now[0], wall=lambda: 1700000000.1234)
    beat.beat(1)
    assert notifier.sent == [] and not path.exists()  # no beat before ready()
    beat.starting()
    assert read_health(path)["state"] == "starting"
    beat.ready("up")
    assert notifier.sent == ["READY=1", "WATCHDOG=1"]
    sent = []
    for t, frames in [(101.0, 3), (101.999, 4), (102.0, 5), (103.0, 6), (104.0, 7), (110.5, 8)]:
        now[0] = t
        before = len(notifier.sent)
        beat.beat(frames)
        sent += [(t, m) for m in notifier.sent[before:]]
    assert sent == [(102.0, "WATCHDOG=1"), (104.0, "WATCHDOG=1"), (110.5, "WATCHDOG=1")]
    body = read_health(path)
    assert body == {"schema": SCHEMA, "state": "running", "pid": os.getpid(), "device_id": "cam-7", "frames": 8,
                    "ts": 1700000000123, "monotonic": 110.5, "period_s": 2.0, "reason": None}
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in path.parent.iterdir()) == ["health.json"]  # no temporary left behind
    beat.stopping("SIGTERM")
    now[0] = 200.0
    beat.beat(9)
    assert notifier.sent[-1] == "STOPPING=1" and read_health(path)["state"] == "stopping"
    beat.stopped("SIGTERM", 3)
    body = read_health(path)
    assert body["state"] == "stopped" and body["exit_code"] == 3 and body["reason"] == "SIGTERM" and notifier.closed


def test_without_a_watchdog_no_watchdog_ping_is_sent(tmp_path: Path) -> None:
    notifier = FakeNotifier(None)
    beat = Heartbeat(notifier, tmp_path / "h.json", "cam", clock=lambda: 5.0)
    beat.ready("up")
    assert notifier.sent == ["READY=1"] and read_health(tmp_path / "h.json")["state"] == "running"


def test_the_file_is_replaced_by_a_rename_and_a_failed_write_leaves_the_old_one(tmp_path: Path, monkeypatch, caplog) -> None:
    path = tmp_path / "health.json"
    now = [0.0]
    beat = Heartbeat(FakeNotifier(None), path, "cam", clock=lambda: now[0])
    beat.ready("up")
    renames = []
    real = os.replace
    monkeypatch.setattr(health_mod.os, "replace", lambda a, b: (renames.append((a, b)), real(a, b)))
    now[0] = PERIOD_S
    beat.beat(3)
    assert len(renames) == 1 and Path(renames[0][1]) == path and Path(renames[0][0]).parent == tmp_path
    assert read_health(path)["frames"] == 3

    def broken(a: Any, b: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(health_mod.os, "replace", broken)
    for k in (1, 2):
        now[0] = PERIOD_S * (1 + k)
        beat.beat(3 + k)
    assert read_health(path)["frames"] == 3  # the old file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["health.json"]
    assert [r.levelname for r in caplog.records].count("WARNING") == 1  # said once
    monkeypatch.setattr(health_mod.os, "replace", real)
    now[0] = PERIOD_S * 4
    beat.beat(9)
    monkeypatch.setattr(health_mod.os, "replace", broken)
    now[0] = PERIOD_S * 5
    beat.beat(10)
    assert [r.levelname for r in caplog.records].count("WARNING") == 2  # a new failure after a success is said again


@pytest.mark.parametrize("max_age", ["0", "-1", "nan", "inf"])
def test_a_max_age_that_is_not_positive_is_unhealthy(tmp_path: Path, capsys, max_age: str) -> None:
    assert main(["--file", str(write(tmp_path)), "--max-age", max_age]) == 1
    assert "--max-age must be a positive number" in capsys.readouterr().out


def test_the_check_counts_from_the_monotonic_clock(tmp_path: Path, capsys) -> None:
    import time

    path = write(tmp_path, monotonic=time.monotonic() - 2.0)
    assert main(["--file", str(path), "--max-age", "60"]) == 0
    assert capsys.readouterr().out.startswith("healthy: running: 5 frames, last beat 2.")
    assert main(["--file", str(path), "--max-age", "1"]) == 1
    assert capsys.readouterr().out.startswith("unhealthy: no frame for 2 s (limit 1 s)")


@pytest.mark.parametrize("size,ok", [(health_mod.MAX_FILE, True), (health_mod.MAX_FILE + 1, False)])
def test_a_health_file_of_at_most_64_kib_is_read(tmp_path: Path, size: int, ok: bool) -> None:
    assert health_mod.MAX_FILE == 64 * 1024
    body = json.dumps({"schema": SCHEMA, "state": "running", "pid": 1, "device_id": "cam-1", "frames": 5, "ts": 0,
                       "monotonic": 1000.0, "period_s": 2.0, "reason": None})
    path = tmp_path / "health.json"
    path.write_text(body[:-1] + " " * (size - len(body)) + "}")
    assert path.stat().st_size == size
    ok_, why = check_health(path, clock=lambda: 1000.0)
    assert ok_ is ok, why


def test_the_file_before_the_first_frame_and_its_rounding(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    beat = Heartbeat(FakeNotifier(None), path, "cam", clock=lambda: 123.456789, wall=lambda: 5.0019)
    beat.starting()
    body = read_health(path)
    assert (body["state"], body["frames"], body["monotonic"], body["ts"], body["reason"]) == ("starting", 0, 123.457, 5001, None)
    assert "exit_code" not in body


def test_without_a_health_file_to_read_the_check_says_how_to_name_one(monkeypatch, capsys) -> None:
    monkeypatch.delenv("EDGE_SDK_HEALTH_FILE", raising=False)
    assert main([]) == 1
    assert capsys.readouterr().out == ("unhealthy: no health file: set $EDGE_SDK_HEALTH_FILE (the daemon writes it there) "
                                       "or pass --file\n")
