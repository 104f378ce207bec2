"""The daemon's liveness, as seen from outside: systemd's watchdog and a health file.

The frame loop calls `Heartbeat.beat()` once per frame; at most once per period (half the
systemd watchdog interval, 5 s without one) it sends `WATCHDOG=1` and rewrites the health file
(`$EDGE_SDK_HEALTH_FILE`, e.g. /run/edge-sdk/health.json). Both come from the frame loop, so
both stop when frames stop: a stalled source or a hung backend makes systemd restart the
service and a container's HEALTHCHECK report it unhealthy, although the process still runs.

The health file (schema `edge-sdk/health/1`):

    {"schema": "edge-sdk/health/1", "state": "running", "pid": 812, "device_id": "cam-1",
     "frames": 1520, "ts": 1700000000000, "monotonic": 5321.4, "period_s": 5.0, "reason": null}

`state` is starting (the model loads, the engine may be building), running, stopping or
stopped (`reason` says why; `exit_code` is added). `monotonic` is CLOCK_MONOTONIC when it was
written, which every process on the machine (and in its containers) shares and which does not
jump when NTP steps the wall clock. The file is replaced atomically (rename) but not fsynced:
it is a heartbeat in /run (tmpfs), worth nothing after a reboot.

The check, for a container's HEALTHCHECK or a shell (exit 0 healthy, 1 not, a one-line reason):

    python3 -m edge_sdk.daemon.health [--file PATH] [--max-age SECONDS]
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from edge_sdk.daemon.notify import SystemdNotifier
from edge_sdk.validate import UntrustedInput, dumps, loads_untrusted

log = logging.getLogger(__name__)

SCHEMA = "edge-sdk/health/1"
ENV = "EDGE_SDK_HEALTH_FILE"
STATES = ("starting", "running", "stopping", "stopped")
PERIOD_S = 5.0  # beats without a systemd watchdog
MAX_FILE = 64 * 1024
STALE_PERIODS = 3  # the check's default limit: three missed beats


def health_path_from_environ(environ: Optional[Dict[str, str]] = None) -> Optional[Path]:
    value = (os.environ if environ is None else environ).get(ENV, "")
    return Path(value) if value else None


class Heartbeat:
    """Feeds systemd's watchdog and writes the health file, from the frame loop.

    `beat()` costs one clock read per frame; the work (a datagram, a small file) happens at
    most once per `period_s`: half the watchdog interval, or PERIOD_S without a watchdog."""

    def __init__(self, notifier: SystemdNotifier, path: Optional[Path], device_id: str,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.notifier = notifier
        self.path = path
        self.device_id = device_id
        self.watchdog = notifier.watchdog_s is not None
        self.period_s = min(PERIOD_S, notifier.watchdog_s / 2) if notifier.watchdog_s else PERIOD_S
        self.frames = 0
        self._clock = clock
        self._wall = wall
        self._due = math.inf  # no beat before ready()
        self._write_failed = False

    def starting(self) -> None:
        self._write("starting")

    def ready(self, status: str) -> None:
        """The pipeline runs: READY=1 (systemd starts the watchdog now) and a first beat."""
        self.notifier.notify("READY=1", status=status)
        self._due = self._clock()
        self.beat(0)

    def beat(self, frames: int) -> None:
        now = self._clock()
        if now < self._due:
            return
        self._due = now + self.period_s
        self.frames = frames
        if self.watchdog:
            self.notifier.notify("WATCHDOG=1")
        self._write("running", now=now)

    def stopping(self, reason: str) -> None:
        self._due = math.inf
        self.notifier.notify("STOPPING=1", status=f"stopping: {reason}")
        self._write("stopping", reason=reason)

    def stopped(self, reason: str, code: int) -> None:
        self._due = math.inf
        self._write("stopped", reason=reason, exit_code=code)
        self.notifier.close()

    def _write(self, state: str, now: Optional[float] = None, reason: Optional[str] = None,
               exit_code: Optional[int] = None) -> None:
        if self.path is None:
            return
        body: Dict[str, Any] = {
            "schema": SCHEMA, "state": state, "pid": os.getpid(), "device_id": self.device_id,
            "frames": self.frames, "ts": int(self._wall() * 1000),
            "monotonic": round(self._clock() if now is None else now, 3), "period_s": self.period_s,
            "reason": reason,
        }
        if exit_code is not None:
            body["exit_code"] = exit_code
        try:
            _replace(self.path, (dumps(body) + "\n").encode("utf-8"))
        except OSError as exc:  # the check will find the file stale; detection goes on meanwhile
            if not self._write_failed:
                self._write_failed = True
                log.warning("cannot write the health file %s (%s); health checks will report the daemon unhealthy",
                            self.path, exc.strerror or exc)
            return
        self._write_failed = False


def _replace(path: Path, data: bytes) -> None:
    """Write to a temporary name beside `path`, then rename over it: a reader sees the old
    file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# -- the check --------------------------------------------------------------------------------
def read_health(path: Path) -> Dict[str, Any]:
    """The health file, validated; UntrustedInput naming what is wrong."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE + 1)
    except FileNotFoundError:
        raise UntrustedInput(f"no health file at {path}: the daemon has not started (or writes elsewhere: "
                             f"${ENV} must name the same file for both)") from None
    except OSError as exc:
        raise UntrustedInput(f"cannot read the health file {path}: {exc.strerror or exc}") from exc
    body = loads_untrusted(data, MAX_FILE, what=f"health file {path}")
    if not isinstance(body, dict) or body.get("schema") != SCHEMA:
        raise UntrustedInput(f"{path} is not an edge-sdk health file (schema {SCHEMA})")
    problems: List[str] = []
    if body.get("state") not in STATES:
        problems.append(f"state must be one of {', '.join(STATES)}")
    for key in ("monotonic", "period_s"):
        value = body.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            problems.append(f"{key} must be a number")
    frames = body.get("frames")
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 0:
        problems.append("frames must be an integer >= 0")
    period = body.get("period_s")
    if isinstance(period, (int, float)) and not isinstance(period, bool) and not 0 < period <= 3600:
        problems.append("period_s must be in (0, 3600]")
    if body.get("reason") is not None and not isinstance(body.get("reason"), str):
        problems.append("reason must be a string or null")
    if problems:
        raise UntrustedInput(f"health file {path}: {'; '.join(problems)}")
    return body


def check_health(path: Path, max_age_s: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic) -> Tuple[bool, str]:
    """(healthy, reason): healthy when the daemon runs and its frame loop beat within
    `max_age_s` (default: three of its periods)."""
    try:
        body = read_health(path)
    except UntrustedInput as exc:
        return False, str(exc)
    state = body["state"]
    if state != "running":
        why = f": {body['reason']}" if body.get("reason") else ""
        return False, f"daemon {body.get('device_id', '?')} is {state}{why}"
    limit = float(max_age_s) if max_age_s is not None else STALE_PERIODS * float(body["period_s"])
    age = clock() - float(body["monotonic"])
    if age < -1.0:
        return False, f"the health file {path} is from the future ({-age:.0f} s): written before a reboot?"
    if age > limit:
        return False, (f"no frame for {age:.0f} s (limit {limit:.0f} s): the source stalled or the daemon hangs; "
                       "see its log")
    return True, f"running: {body['frames']} frames, last beat {max(age, 0.0):.1f} s ago"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m edge_sdk.daemon.health",
                                     description="Exit 0 when the edge-sdk daemon runs and processes frames, 1 otherwise.")
    parser.add_argument("--file", type=Path, default=health_path_from_environ(),
                        help=f"the daemon's health file [default: ${ENV}]")
    parser.add_argument("--max-age", type=float, default=None,
                        help="seconds since the last beat that still count as healthy [default: 3 periods]")
    args = parser.parse_args(argv)
    if args.file is None:
        print(f"unhealthy: no health file: set ${ENV} (the daemon writes it there) or pass --file")
        return 1
    if args.max_age is not None and not (math.isfinite(args.max_age) and args.max_age > 0):
        print("unhealthy: --max-age must be a positive number of seconds")
        return 1
    healthy, reason = check_health(args.file, args.max_age)
    print(("healthy: " if healthy else "unhealthy: ") + reason)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
