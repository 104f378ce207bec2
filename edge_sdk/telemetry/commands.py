"""Remote commands on `edge-sdk/<device_id>/cmd`: an allow-list, schema validation, optional HMAC.

A command is a JSON object (schema `edge-sdk/cmd/1`):

    {"schema": "edge-sdk/cmd/1", "id": "42", "cmd": "set", "args": {"telemetry_interval": 2},
     "ts": 1700000000000, "hmac": "<hex>"}

Only `ping`, `reload`, `set` and `snapshot` exist. Every command is answered on
`cmd/response` with the same `id`: `ok` and a `result`, or an `error`. A rejected command
changes nothing: handlers check all their arguments before they apply any.

With a shared secret, `hmac` is HMAC-SHA256 (hex) over the canonical JSON of the command
without its `hmac` field (`json.dumps(cmd, sort_keys=True, separators=(",", ":"))`, UTF-8),
`ts` (ms) must be within `max_skew_s` of the device clock and an `id` is accepted once.
"""
from __future__ import annotations

import collections
import hashlib
import hmac as _hmac
import json
import time
from typing import Any, Callable, Deque, Dict, Mapping, Optional, Set

from edge_sdk.errors import EdgeSdkError
from edge_sdk.telemetry import schemas

ALLOWED = ("ping", "reload", "set", "snapshot")
MAX_PAYLOAD = 64 * 1024
Handler = Callable[[Dict[str, Any]], Dict[str, Any]]


class CommandRejected(EdgeSdkError, ValueError):
    """A command that is refused; the message goes back in the error response."""

    exit_code = 2


def canonical(command: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in command.items() if k != "hmac"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sign(command: Mapping[str, Any], secret: bytes) -> Dict[str, Any]:
    """Return `command` with `ts` (if missing) and its `hmac` set."""
    out = dict(command)
    out.setdefault("ts", int(time.time() * 1000))
    out.pop("hmac", None)
    out["hmac"] = _hmac.new(secret, canonical(out), hashlib.sha256).hexdigest()
    return out


class CommandProcessor:
    """Validates and dispatches commands; `handle(payload)` never raises for bad input."""

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        secret: Optional[bytes] = None,
        max_skew_s: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        unknown = set(handlers) - set(ALLOWED)
        if unknown:
            raise ValueError(f"no such commands in the allow-list: {sorted(unknown)}")
        self.handlers = dict(handlers)
        self.secret = secret
        self.max_skew_s = float(max_skew_s)
        self._clock = clock
        self._seen: Set[str] = set()
        self._seen_order: Deque[str] = collections.deque()
        self.accepted = 0
        self.rejected = 0

    def _remember(self, cid: str) -> None:
        self._seen.add(cid)
        self._seen_order.append(cid)
        if len(self._seen_order) > 1024:
            self._seen.discard(self._seen_order.popleft())

    def parse(self, payload: bytes) -> Dict[str, Any]:
        """The validated command, or CommandRejected."""
        if len(payload) > MAX_PAYLOAD:
            raise CommandRejected(f"command larger than {MAX_PAYLOAD} bytes")
        try:
            command = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise CommandRejected(f"command is not UTF-8 JSON: {exc}") from None
        if not isinstance(command, dict):
            raise CommandRejected("command must be a JSON object")
        problems = schemas.errors(command, "edge-sdk/cmd/1")
        if problems:
            raise CommandRejected("invalid command: " + "; ".join(problems[:3]))
        if self.secret is not None:
            given = command.get("hmac")
            if not isinstance(given, str):
                raise CommandRejected("this device requires signed commands: add ts and hmac")
            expected = _hmac.new(self.secret, canonical(command), hashlib.sha256).hexdigest()
            if not _hmac.compare_digest(given, expected):
                raise CommandRejected("bad hmac: the command was not signed with this device's secret")
            ts = command.get("ts")
            if not isinstance(ts, int) or abs(self._clock() * 1000 - ts) > self.max_skew_s * 1000:
                raise CommandRejected(f"ts is missing or more than {self.max_skew_s:g} s away from the device clock")
            if command["id"] in self._seen:
                raise CommandRejected(f"command id {command['id']!r} was already used (replay)")
        return command

    def handle(self, payload: bytes) -> Dict[str, Any]:
        """A response body: {id, cmd, ok, result | error}."""
        cid: Optional[str] = None
        name: Optional[str] = None
        try:
            # echo the id and name when they are readable, even if the command is refused
            probe = json.loads(payload.decode("utf-8")) if len(payload) <= MAX_PAYLOAD else None
            if isinstance(probe, dict):
                cid = probe.get("id") if isinstance(probe.get("id"), str) else None
                name = probe.get("cmd") if isinstance(probe.get("cmd"), str) else None
        except (UnicodeDecodeError, ValueError):
            pass  # parse() below reports it
        try:
            command = self.parse(payload)
            handler = self.handlers.get(command["cmd"])
            if handler is None:
                raise CommandRejected(f"command {command['cmd']!r} is not enabled on this device")
            if self.secret is not None:
                self._remember(command["id"])
            result = handler(dict(command.get("args") or {}))
        except (EdgeSdkError, ValueError) as exc:
            self.rejected += 1
            return {"id": cid, "cmd": name, "ok": False, "error": str(exc) or type(exc).__name__}
        self.accepted += 1
        return {"id": cid, "cmd": name, "ok": True, "result": result}
