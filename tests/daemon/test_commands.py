from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.daemon.commands import CommandProcessor, CommandRejected, canonical, sign

pytest.importorskip("jsonschema")

DEVICE = "cam-1"


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
    proc = CommandProcessor(device.handlers(), secret=secret, device_id=DEVICE)
    signed = sign({"schema": "edge-sdk/cmd/1", "id": "1", "cmd": "set", "args": {"telemetry_interval": 2}}, secret, DEVICE)
    response = proc.handle(json.dumps(tamper(signed)).encode())
    assert response["ok"] is (fragment == "")
    if fragment:
        assert fragment in response["error"] and device.applied == []


def test_hmac_rejects_replay_and_stale_ts() -> None:
    secret = b"k"
    now = [1_700_000_000.0]
    proc = CommandProcessor(Device().handlers(), secret=secret, device_id=DEVICE, max_skew_s=60, clock=lambda: now[0])
    signed = sign({"schema": "edge-sdk/cmd/1", "id": "7", "cmd": "ping", "ts": int(now[0] * 1000)}, secret, DEVICE)
    assert proc.handle(json.dumps(signed).encode())["ok"]
    assert "replay" in proc.handle(json.dumps(signed).encode())["error"]
    old = sign({"schema": "edge-sdk/cmd/1", "id": "8", "cmd": "ping", "ts": int((now[0] - 120) * 1000)}, secret, DEVICE)
    assert "ts" in proc.handle(json.dumps(old).encode())["error"]


def test_the_signature_binds_the_device() -> None:
    """One secret for the fleet: a command signed for cam-1 runs on cam-1 only."""
    secret = b"k"
    body = {"schema": "edge-sdk/cmd/1", "id": "1", "cmd": "set", "args": {"telemetry_interval": 2}}
    signed = sign(body, secret, "cam-1")
    assert signed["device_id"] == "cam-1"
    other = Device()
    response = CommandProcessor(other.handlers(), secret=secret, device_id="cam-2").handle(json.dumps(signed).encode())
    assert response["ok"] is False and response["reason"] == "wrong_device" and other.applied == []
    renamed = dict(signed, device_id="cam-2")  # the device id is signed: changing it breaks the hmac
    response = CommandProcessor(other.handlers(), secret=secret, device_id="cam-2").handle(json.dumps(renamed).encode())
    assert response["reason"] == "bad_signature" and other.applied == []
    mine = Device()
    assert CommandProcessor(mine.handlers(), secret=secret, device_id="cam-1").handle(json.dumps(signed).encode())["ok"]
    assert mine.applied == [{"telemetry_interval": 2}]
    with pytest.raises(ValueError, match="cam-2"):
        sign(dict(body, device_id="cam-2"), secret, "cam-1")
    with pytest.raises(ValueError, match="checking signed commands needs"):
        CommandProcessor(mine.handlers(), secret=secret)


def test_a_signed_command_naming_a_key_twice_is_refused() -> None:
    """JSON keeps the last of two keys; a reader that keeps the first (or a log, or a proxy) would
    see another command than the one whose signature was checked."""
    secret = b"k"
    signed = sign({"schema": "edge-sdk/cmd/1", "id": "1", "cmd": "set", "args": {"telemetry_interval": 2}}, secret,
                  DEVICE)
    twice = json.dumps(signed).replace('"args"', '"args": {"telemetry_interval": 900}, "args"', 1).encode()
    assert json.loads(twice)["args"] == {"telemetry_interval": 2}  # the signature is valid over what json keeps
    device = Device()
    response = CommandProcessor(device.handlers(), secret=secret, device_id=DEVICE).handle(twice)
    assert response["ok"] is False and response["reason"] == "malformed" and "duplicate key 'args'" in response["error"]
    nested = json.dumps(signed).replace('"telemetry_interval"', '"telemetry_interval": 900, "telemetry_interval"')
    response = CommandProcessor(device.handlers(), secret=secret, device_id=DEVICE).handle(nested.encode())
    assert response["reason"] == "malformed" and device.applied == []


@pytest.mark.parametrize("make,reason", [
    (lambda s: b"{not json", "malformed"),
    (lambda s: cmd("set", {}), "invalid"),
    (lambda s: cmd("ping"), "unsigned"),
    (lambda s: json.dumps({k: v for k, v in s.items() if k != "device_id"}).encode(), "unsigned"),
    (lambda s: json.dumps(dict(s, hmac="0" * 64)).encode(), "bad_signature"),
    (lambda s: json.dumps(sign(dict(s, ts=1), b"k", DEVICE)).encode(), "stale"),
    (lambda s: json.dumps(sign(dict(s, cmd="snapshot", id="9"), b"k", DEVICE)).encode(), "not_enabled"),
])
def test_each_refusal_says_why_in_a_typed_reason(make: Any, reason: str) -> None:
    proc = CommandProcessor({"ping": lambda a: {"pong": True}}, secret=b"k", device_id=DEVICE)
    signed = sign({"schema": "edge-sdk/cmd/1", "id": "1", "cmd": "ping"}, b"k", DEVICE)
    response = proc.handle(make(signed))
    assert response["ok"] is False and response["reason"] == reason, response


def test_reasons_are_the_response_schema_enum() -> None:
    from edge_sdk.daemon.commands import REASONS
    from edge_sdk.telemetry import schemas

    assert tuple(schemas.load_schema("edge-sdk/cmd-response/1")["properties"]["reason"]["enum"]) == REASONS


def test_canonical_form_ignores_key_order_and_hmac() -> None:
    a = {"id": "1", "cmd": "ping", "schema": "edge-sdk/cmd/1", "hmac": "x"}
    b = {"schema": "edge-sdk/cmd/1", "cmd": "ping", "id": "1"}
    assert canonical(a) == canonical(b) == b'{"cmd":"ping","id":"1","schema":"edge-sdk/cmd/1"}'


# -- hostile payloads, replay across restarts, rate limits -----------------------------------
@pytest.mark.parametrize("payload,fragment", [
    (b"[" * 1000, "deeper"),  # RecursionError inside json.loads without the depth bound
    (b'{"a":' * 2000 + b"1" + b"}" * 2000, "deeper"),
    (b"[" * 20 + b"]" * 20, "deeper"),
    (b'{"schema": "edge-sdk/cmd/1", "id": "' + b"[{" * 60 + b'", "cmd": "ping"}', ""),  # brackets in a string
    (cmd("set").replace(b'"set"', b'"set", "args": {"telemetry_interval": NaN}'), "NaN"),
    (cmd("set").replace(b'"set"', b'"set", "args": {"score_threshold": NaN}'), "NaN"),
    (cmd("set").replace(b'"set"', b'"set", "args": {"nms_iou": -Infinity}'), "Infinity"),
    (cmd("set").replace(b'"set"', b'"set", "args": {"target_fps": 1e400}'), "too large"),
    (cmd("set").replace(b'"set"', b'"set", "args": {"telemetry_interval": ' + b"9" * 10000 + b"}"), "64-bit"),
])
def test_hostile_payloads_are_refused_without_raising(payload: bytes, fragment: str) -> None:
    device = Device()
    response = CommandProcessor(device.handlers()).handle(payload)
    if fragment:
        assert response["ok"] is False and fragment in response["error"], response
        assert device.applied == []
    else:
        assert response["ok"] is True  # brackets inside a string are not nesting


def test_a_handler_that_breaks_answers_an_error_and_the_processor_goes_on() -> None:
    def broken(args: Dict[str, Any]) -> Dict[str, Any]:
        raise OSError(28, "No space left on device")

    proc = CommandProcessor({"snapshot": broken, "ping": lambda a: {"pong": True}})
    response = proc.handle(cmd("snapshot", cid="s"))
    assert response["ok"] is False and "No space left" in response["error"] and response["id"] == "s"
    assert proc.handle(cmd("ping"))["ok"] is True
    assert proc.counters() == {"accepted": 1, "rejected": 1, "dropped": 0, "unanswered": 0}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_rate_limit_per_kind_drops_counts_and_refills() -> None:
    clock = Clock()
    device = Device()
    proc = CommandProcessor(device.handlers(), limits={"snapshot": (1.0, 3.0)}, monotonic=clock)
    out = [proc.handle(cmd("snapshot", cid=str(i))) for i in range(5)]
    assert [r["ok"] for r in out] == [True, True, True, False, False]
    assert "rate limit" in out[3]["error"] and "snapshot" in out[3]["error"]
    assert proc.handle(cmd("ping"))["ok"] is True  # other kinds keep their own budget
    clock.t += 1.0  # one token back
    assert [proc.handle(cmd("snapshot"))["ok"] for _ in range(2)] == [True, False]
    assert proc.counters()["dropped"] == 3 and proc.counters()["accepted"] == 5


def test_refusals_beyond_the_answer_budget_go_unanswered_and_are_counted() -> None:
    clock = Clock()
    proc = CommandProcessor(Device().handlers(), answers=(10.0, 5.0), monotonic=clock)
    out = [proc.handle(b"garbage %d" % i) for i in range(100)]
    assert sum(r is not None for r in out) == 5
    assert proc.counters() == {"accepted": 0, "rejected": 100, "dropped": 0, "unanswered": 95}
    assert proc.handle(cmd("ping")) is not None  # accepted commands are always answered
    clock.t += 0.5
    assert sum(proc.handle(b"x") is not None for _ in range(10)) == 5


def signed(cid: str, secret: bytes, ts_s: float) -> bytes:
    return json.dumps(sign({"schema": "edge-sdk/cmd/1", "id": cid, "cmd": "ping", "ts": int(ts_s * 1000)}, secret, DEVICE)).encode()


def test_replay_window_survives_a_restart(tmp_path) -> None:
    secret, now = b"k", 1_700_000_000.0
    path = tmp_path / "state" / "cam.commands.sqlite3"
    first = CommandProcessor(Device().handlers(), secret=secret, device_id=DEVICE, clock=lambda: now, replay_path=path)
    assert first.handle(signed("a", secret, now))["ok"]
    first.close()
    second = CommandProcessor(Device().handlers(), secret=secret, device_id=DEVICE, clock=lambda: now + 10, replay_path=path)
    response = second.handle(signed("a", secret, now))
    assert response["ok"] is False and "replay" in response["error"]
    assert second.handle(signed("b", secret, now + 10))["ok"]


def test_a_corrupt_replay_file_is_moved_aside_and_older_commands_refused(tmp_path, caplog) -> None:
    secret, now = b"k", 1_700_000_000.0
    path = tmp_path / "cam.commands.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    proc = CommandProcessor(Device().handlers(), secret=secret, device_id=DEVICE, clock=lambda: now, replay_path=path)
    # kept aside for inspection, named by its UTC time as the telemetry queue's are
    assert [p.name for p in tmp_path.iterdir() if "corrupt" in p.name] == ["cam.commands.sqlite3.corrupt-20231114T221320Z"]
    assert "unreadable" in caplog.text
    # signed before the record was lost: it may be a replay of a command we no longer know
    assert "sign it again" in proc.handle(signed("old", secret, now - 5))["error"]
    assert proc.handle(signed("new", secret, now))["ok"]


def test_the_connection_to_a_corrupt_replay_file_is_closed_before_it_is_moved_aside(tmp_path, monkeypatch) -> None:
    """Every connection opened is closed once it failed: none is left open on the file kept aside."""
    import sqlite3

    opened: List[Any] = []
    real = sqlite3.connect

    class Counted(sqlite3.Connection):
        closed = False

        def close(self) -> None:
            self.closed = True
            super().close()

    def connect(*args: Any, **kwargs: Any) -> Any:
        opened.append(real(*args, factory=Counted, **kwargs))
        return opened[-1]

    monkeypatch.setattr(sqlite3, "connect", connect)
    path = tmp_path / "cam.commands.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    proc = CommandProcessor(Device().handlers(), secret=b"k", device_id=DEVICE, clock=lambda: 1_700_000_000.0, replay_path=path)
    assert [c.closed for c in opened] == [True, False]  # the corrupt file's, then the fresh one in use
    proc.close()
    assert opened[1].closed


def test_token_bucket() -> None:
    from edge_sdk.daemon.commands import TokenBucket

    clock = Clock()
    bucket = TokenBucket(2.0, 2.0, clock)
    assert [bucket.take() for _ in range(3)] == [True, True, False]
    assert bucket.wait_s() == pytest.approx(0.5)
    clock.t += 10
    assert [bucket.take() for _ in range(3)] == [True, True, False]  # never more than the burst


@pytest.mark.parametrize("message", ["database is locked", "unable to open database file"])
def test_a_replay_file_that_cannot_be_opened_is_kept_and_named_in_a_config_error(tmp_path, monkeypatch,
                                                                                   message) -> None:
    import sqlite3

    from edge_sdk.errors import ConfigError

    secret, now = b"k", 1_700_000_000.0
    path = tmp_path / "cam.commands.sqlite3"
    first = CommandProcessor(Device().handlers(), secret=secret, device_id=DEVICE, clock=lambda: now, replay_path=path)
    assert first.handle(signed("a", secret, now))["ok"]
    first.close()
    before = sorted(p.name for p in tmp_path.iterdir())

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise sqlite3.OperationalError(message)

    monkeypatch.setattr(sqlite3, "connect", refuse)
    with pytest.raises(ConfigError) as info:
        CommandProcessor(Device().handlers(), secret=secret, device_id=DEVICE, clock=lambda: now, replay_path=path)
    assert str(path) in str(info.value) and "queue_dir" in str(info.value)
    assert "no other process holds it" in str(info.value) and "is full" not in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "the replay record is not moved aside"
    monkeypatch.undo()
    again = CommandProcessor(Device().handlers(), secret=secret, device_id=DEVICE, clock=lambda: now, replay_path=path)
    assert "replay" in again.handle(signed("a", secret, now))["error"], "the record survived"
    again.close()


def test_a_corrupt_replay_file_that_cannot_be_moved_aside_is_a_config_error(tmp_path, monkeypatch) -> None:
    import os

    from edge_sdk.errors import ConfigError

    path = tmp_path / "cam.commands.sqlite3"
    path.write_bytes(b"this is not a database" * 100)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(ConfigError) as info:
        CommandProcessor(Device().handlers(), secret=b"k", device_id=DEVICE, clock=lambda: 1_700_000_000.0, replay_path=path)
    assert str(path) in str(info.value) and "corrupt" in str(info.value)


def test_a_full_disk_refuses_signed_commands_without_raising(tmp_path, monkeypatch, caplog) -> None:
    from tests.full_disk import FullDisk

    secret, now = b"k", 1_700_000_000.0
    path = tmp_path / "cam.commands.sqlite3"
    disk = FullDisk(monkeypatch, tmp_path, pages=1 << 20)
    proc = CommandProcessor(Device().handlers(), secret=secret, device_id=DEVICE, clock=lambda: now, replay_path=path,
                            limits={}, answers=(0.0, 1e9))
    assert proc.handle(signed("a", secret, now))["ok"]
    disk.free(pages=int(proc.used.db.execute("PRAGMA page_count").fetchone()[0]))  # no page left to grow into
    refused = []
    for i in range(600):  # until the last page is full, and past the periodic prune too
        response = proc.handle(signed(f"{i:04d}" + "x" * 120, secret, now))
        assert response is not None
        if not response["ok"]:
            refused.append(response["error"])
    assert len(refused) > 256, "the disk filled up early on"
    assert all("could not be recorded" in e and str(path) in e for e in refused)
    assert proc.accepted + len(refused) == 601 and "cannot record command id" in caplog.text
    disk.free()
    assert "replay" in proc.handle(signed("a", secret, now))["error"], "no id was lost"
    assert proc.handle(signed("b", secret, now))["ok"]
    proc.close()


def test_a_prune_or_lookup_that_fails_is_logged_or_refused_not_raised(tmp_path, caplog) -> None:
    import sqlite3

    secret, now = b"k", 1_700_000_000.0
    proc = CommandProcessor(Device().handlers(), secret=secret, device_id=DEVICE, clock=lambda: now, replay_path=tmp_path / "r.sqlite3")
    real = proc.used.db

    class Broken:
        def execute(self, *args: Any) -> Any:
            raise sqlite3.OperationalError("disk I/O error")

        def close(self) -> None:
            real.close()

    proc.used.db = Broken()  # type: ignore[assignment]
    proc.used._prune()
    assert "cannot prune" in caplog.text
    response = proc.handle(signed("a", secret, now))
    assert response["ok"] is False and "cannot be read" in response["error"]
    assert proc.accepted == 0
    proc.close()


def test_a_full_disk_at_start_is_a_config_error(tmp_path, monkeypatch) -> None:
    from edge_sdk.errors import ConfigError
    from tests.full_disk import FullDisk

    FullDisk(monkeypatch, tmp_path, pages=1)
    path = tmp_path / "cam.commands.sqlite3"
    with pytest.raises(ConfigError) as info:
        CommandProcessor(Device().handlers(), secret=b"k", device_id=DEVICE, clock=lambda: 1_700_000_000.0, replay_path=path)
    assert str(path) in str(info.value) and "full" in str(info.value)
    assert not [p for p in tmp_path.iterdir() if "corrupt" in p.name]
