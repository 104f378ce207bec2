"""Signed commands on the wire: the canonical form and its HMAC, shared by both ends.

The daemon checks signatures (edge_sdk.daemon.commands); whoever sends a command signs it
with `sign` for the one device it is meant for (the start-up instance check in
edge_sdk.telemetry.instances, an operator's tool):

    command = sign({"schema": "edge-sdk/cmd/1", "id": "42", "cmd": "ping"}, secret, "cam-entrance")

`hmac` is HMAC-SHA256 (hex) over the canonical JSON of the command without its `hmac` field:
``json.dumps(cmd, sort_keys=True, separators=(",", ":"))`` with json.dumps'
default ``ensure_ascii=True``: a non-ASCII character (in an `id`, say) is signed as its
``\\uXXXX`` escape. The signed body holds
`device_id`, so a command signed for one device is refused by every other one, also where a
fleet shares one secret. A command is read with `loads_command`, which refuses an object that
names a key twice: JSON keeps the last value, so the signature could otherwise be checked over a
different command than the bytes on the wire show.
"""
from __future__ import annotations

import hashlib
import hmac as _hmac
import time
from typing import Any, Dict, Mapping

from edge_sdk.validate import dumps, loads_untrusted

MAX_PAYLOAD = 16 * 1024  # a command is a few hundred bytes
MAX_DEPTH = 8  # a command nests 2 levels


def canonical(command: Mapping[str, Any]) -> bytes:
    """The bytes a command's `hmac` is computed over: its JSON without `hmac`, keys sorted."""
    body = {k: v for k, v in command.items() if k != "hmac"}
    return dumps(body, sort_keys=True).encode("ascii")


def signature(command: Mapping[str, Any], secret: bytes) -> str:
    """The hex HMAC-SHA256 of `command` (its `hmac` field left out) under `secret`."""
    return _hmac.new(secret, canonical(command), hashlib.sha256).hexdigest()


def sign(command: Mapping[str, Any], secret: bytes, device_id: str) -> Dict[str, Any]:
    """Return `command` for `device_id` (its `device_id` set), with `ts` (if missing) and its
    `hmac` set. ValueError when the command already names another device."""
    if not isinstance(device_id, str) or not device_id:
        raise ValueError("sign a command for one device: give its device_id")
    if command.get("device_id", device_id) != device_id:
        raise ValueError(f"the command names device {command['device_id']!r}, not {device_id!r}")
    out = dict(command)
    out["device_id"] = device_id
    out.setdefault("ts", int(time.time() * 1000))
    out.pop("hmac", None)
    out["hmac"] = signature(out, secret)
    return out


def loads_command(payload: Any) -> Any:
    """A command's JSON, bounded in size and depth before it is parsed, refused (UntrustedInput)
    when an object in it names a key twice or it holds a non-finite number."""
    return loads_untrusted(payload, MAX_PAYLOAD, MAX_DEPTH, what="command", unique_keys=True)
