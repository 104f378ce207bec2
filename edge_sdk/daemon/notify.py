"""systemd's service notification protocol (sd_notify), without libsystemd.

Under a unit with `Type=notify`, systemd passes the path of a datagram socket in
`$NOTIFY_SOCKET` (a leading `@` means Linux's abstract namespace). The service sends
newline-separated `KEY=VALUE` assignments to it, one datagram per message:

- `READY=1` once the service runs (systemd then counts it started, and starts its watchdog);
- `WATCHDOG=1` at least once per `WatchdogSec` (given to the service as `$WATCHDOG_USEC`, for
  the process in `$WATCHDOG_PID` when set), else systemd kills and restarts the service;
- `STOPPING=1` when it begins to shut down; `STATUS=...` a line `systemctl status` shows.

    notifier = SystemdNotifier.from_environ()   # disabled (every call a no-op) outside systemd
    notifier.notify("READY=1", status="running")

A failed send is logged once per kind of error and never raises: the daemon keeps detecting,
and systemd, missing its pings, restarts it if it has to.
"""
from __future__ import annotations

import logging
import os
import socket
from typing import Mapping, Optional, Set

log = logging.getLogger(__name__)


def watchdog_interval_s(environ: Mapping[str, str], pid: Optional[int] = None) -> Optional[float]:
    """The watchdog interval systemd gave this process, in seconds, or None (no watchdog).

    `$WATCHDOG_USEC` is a positive integer; `$WATCHDOG_PID`, when set, must be this process (a
    child that inherited the variables must not ping for its parent)."""
    raw = environ.get("WATCHDOG_USEC")
    if not raw:
        return None
    owner = environ.get("WATCHDOG_PID")
    if owner:
        if not owner.isdigit() or int(owner) != (os.getpid() if pid is None else pid):
            return None
    if not raw.isdigit() or int(raw) <= 0:
        log.warning("ignoring WATCHDOG_USEC=%r: not a positive number of microseconds", raw)
        return None
    return int(raw) / 1e6


def socket_address(value: str) -> Optional[str]:
    """The AF_UNIX address for a `$NOTIFY_SOCKET` value: a path, or `@name` for the abstract
    namespace; None for anything else (systemd's vsock addresses are not supported)."""
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    return None


class SystemdNotifier:
    """Sends sd_notify messages to `address` (None: disabled, every call returns False)."""

    def __init__(self, address: Optional[str], watchdog_s: Optional[float] = None) -> None:
        self.address = address
        self.watchdog_s = watchdog_s if address is not None else None
        self._sock: Optional[socket.socket] = None
        self._failed: Set[str] = set()

    @classmethod
    def from_environ(cls, environ: Optional[Mapping[str, str]] = None) -> "SystemdNotifier":
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        address = socket_address(raw) if raw else None
        if raw and address is None:
            log.warning("NOTIFY_SOCKET=%r is not a path or an abstract socket name; not notifying systemd", raw)
        return cls(address, watchdog_interval_s(env))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, message: str, status: Optional[str] = None) -> bool:
        """Send `message` (e.g. "READY=1"), with a `STATUS=` line when `status` is given.
        True when the datagram was sent."""
        if self.address is None:
            return False
        text = message if status is None else f"{message}\nSTATUS={' '.join(status.split())}"
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.sendto(text.encode("utf-8"), self.address)
        except OSError as exc:
            kind = type(exc).__name__
            if kind not in self._failed:
                self._failed.add(kind)
                log.warning("could not notify systemd at %s (%s); without READY=1 and WATCHDOG=1 systemd "
                            "restarts the service", self.address.replace("\0", "@"), exc)
            return False
        return True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
