from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.telemetry.commands import CommandProcessor, CommandRejected, canonical, sign

pytest.importorskip("jsonschema")


class Device:
    """Handlers that record what they applied; `set` checks every key before applying any."""

    def __init__(self) -> None:
        self.applied: List[Dict[str, Any]] = []

    def handlers(self) -> Dict[str, Any]:
        return {"ping": lambda a: {"pong": True}, "set": self.set,
                "reload": lambda a: {"loading": a["bundle"]}, "snapshot": lambda a: {"image": "x.jpg"}}

    def set(self, args: Dict[str, Any]) -> Dict[str, Any]:
        if "mode" in args and args["mode"] != "full":
            raise CommandRejected("mode cannot change at run time")
        self.applied.append(args)
        return {"applied": args}


def cmd(name: str, args: Any = None, cid: str = "1") -> bytes:
    body: Dict[str, Any] = {"schema": "edge-sdk/cmd/1", "id": cid, "cmd": name}
    if args is not None:
        body["args"] = args
    return json.dumps(body).encode()


@pytest.mark.parametrize("payload,ok,fragment", [
    (cmd("ping"), True, ""),
    (cmd("set", {"telemetry_interval": 2.5}), True, ""),
    (cmd("reload", {"bundle": "faces-v2", "precision": "int8"}), True, ""),
    (cmd("snapshot"), True, ""),
    (cmd("set", {}), False, "invalid command"),
    (cmd("set", {"telemetry_interval": 0}), False, "invalid"),
    (cmd("set", {"detections": "everything"}), False, "invalid"),
    (cmd("set", {"rm": "-rf"}), False, "invalid"),
    (cmd("set", {"mode": "roi"}), False, "mode cannot change"),
    (cmd("reload"), False, "invalid"),
    (cmd("reload", {"bundle": "x", "extra": 1}), False, "invalid"),
    (cmd("shutdown"), False, "invalid"),
    (cmd("snapshot", {"name": "../../etc/passwd"}), False, "invalid"),
    (b"\xff\xfe", False, "UTF-8 JSON"),
    (b"[1, 2]", False, "JSON object"),
    (b"x" * (70 * 1024), False, "larger"),
])
def test_allow_list_and_validation(payload: bytes, ok: bool, fragment: str) -> None:
    device = Device()
    response = CommandProcessor(device.handlers()).handle(payload)
    assert response["ok"] is ok, response
    if not ok:
        assert fragment in response["error"]
        assert device.applied == []


def test_response_echoes_id_and_cmd_even_when_refused() -> None:
    response = CommandProcessor(Device().handlers()).handle(cmd("shutdown", cid="abc"))
    assert (response["id"], response["cmd"], response["ok"]) == ("abc", "shutdown", False)


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.binary(max_size=200),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
                 lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                 max_leaves=12).map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"schema": st.just("edge-sdk/cmd/1"), "id": st.text(max_size=5),
                           "cmd": st.text(max_size=8), "args": st.dictionaries(st.text(max_size=8), st.integers())})
    .map(lambda v: json.dumps(v).encode()),
))
def test_fuzz_never_raises_and_refusals_change_nothing(payload: bytes) -> None:
    device = Device()
    response = CommandProcessor(device.handlers()).handle(payload)
    assert set(response) >= {"id", "cmd", "ok"}
    if not response["ok"]:
        assert device.applied == [] and response["error"]


@pytest.mark.parametrize("tamper,fragment", [
    (lambda c: c, ""),
    (lambda c: dict(c, args={"telemetry_interval": 1}), "bad hmac"),
    (lambda c: {k: v for k, v in c.items() if k != "hmac"}, "signed"),
    (lambda c: dict(c, hmac="0" * 64), "bad hmac"),
])
def test_hmac(tamper: Any, fragment: str) -> None:
    secret = b"k"
    device = Device()
    proc = CommandProcessor(device.handlers(), secret=secret)
    signed = sign({"schema": "edge-sdk/cmd/1", "id": "1", "cmd": "set", "args": {"telemetry_interval": 2}}, secret)
    response = proc.handle(json.dumps(tamper(signed)).encode())
    assert response["ok"] is (fragment == "")
    if fragment:
        assert fragment in response["error"] and device.applied == []


def test_hmac_rejects_replay_and_stale_ts() -> None:
    secret = b"k"
    now = [1_700_000_000.0]
    proc = CommandProcessor(Device().handlers(), secret=secret, max_skew_s=60, clock=lambda: now[0])
    signed = sign({"schema": "edge-sdk/cmd/1", "id": "7", "cmd": "ping", "ts": int(now[0] * 1000)}, secret)
    assert proc.handle(json.dumps(signed).encode())["ok"]
    assert "replay" in proc.handle(json.dumps(signed).encode())["error"]
    old = sign({"schema": "edge-sdk/cmd/1", "id": "8", "cmd": "ping", "ts": int((now[0] - 120) * 1000)}, secret)
    assert "ts" in proc.handle(json.dumps(old).encode())["error"]


def test_canonical_form_ignores_key_order_and_hmac() -> None:
    a = {"id": "1", "cmd": "ping", "schema": "edge-sdk/cmd/1", "hmac": "x"}
    b = {"schema": "edge-sdk/cmd/1", "cmd": "ping", "id": "1"}
    assert canonical(a) == canonical(b) == b'{"cmd":"ping","id":"1","schema":"edge-sdk/cmd/1"}'
