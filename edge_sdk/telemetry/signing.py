"""Signed commands on the wire: the canonical form and its HMAC, shared by both ends.

The daemon checks signatures (edge_sdk.daemon.commands); whoever sends a command signs it
with `sign` (the start-up instance check in edge_sdk.telemetry.instances, an operator's tool):

    command = sign({"schema": "edge-sdk/cmd/1", "id": "42", "cmd": "ping"}, secret)

`hmac` is HMAC-SHA256 (hex) over the canonical JSON of the command without its `hmac` field:
``json.dumps(cmd, sort_keys=True, separators=(",", ":"))``, UTF-8.
"""
from __future__ import annotations

import hashlib
import hmac as _hmac
import time
from typing import Any, Dict, Mapping

from edge_sdk.validate import dumps


def canonical(command: Mapping[str, Any]) -> bytes:
    """The bytes a command's `hmac` is computed over: its JSON without `hmac`, keys sorted."""
    body = {k: v for k, v in command.items() if k != "hmac"}
    return dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8")


def signature(command: Mapping[str, Any], secret: bytes) -> str:
    """The hex HMAC-SHA256 of `command` (its `hmac` field left out) under `secret`."""
    return _hmac.new(secret, canonical(command), hashlib.sha256).hexdigest()


def sign(command: Mapping[str, Any], secret: bytes) -> Dict[str, Any]:
    """Return `command` with `ts` (if missing) and its `hmac` set."""
    out = dict(command)
    out.setdefault("ts", int(time.time() * 1000))
    out.pop("hmac", None)
    out["hmac"] = signature(out, secret)
    return out
