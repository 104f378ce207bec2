"""The command module's stated promises, at their boundaries, against oracles of their own: the
README's signing formula computed here with hmac/hashlib, "within max_skew_s of the device clock"
on both sides of now, "an id is accepted once", and the token buckets' rate and burst."""
from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, Dict, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.daemon.commands import CommandProcessor, TokenBucket, sign

pytest.importorskip("jsonschema")

DEVICE = "cam-1"
SECRET = b"fleet-secret"
NOW = 1_700_000_000.0


def documented_hmac(command: Dict[str, Any], secret: bytes) -> str:
    """The README's formula, word for word: HMAC-SHA256 hex over
    json.dumps(cmd without hmac, sort_keys=True, separators=(",", ":"))."""
    body = {k: v for k, v in command.items() if k != "hmac"}
    return hmac.new(secret, json.dumps(body, sort_keys=True, separators=(",", ":")).encode(), hashlib.sha256).hexdigest()


def operator_command(cid: str, ts_ms: int, **extra: Any) -> Dict[str, Any]:
    body = {"schema": "edge-sdk/cmd/1", "id": cid, "cmd": "ping", "device_id": DEVICE, "ts": ts_ms, **extra}
    body["hmac"] = documented_hmac(body, SECRET)
    return body


def processor(max_skew_s: float = 300.0, now: List[float] = None) -> CommandProcessor:
    clock = now if now is not None else [NOW]
    return CommandProcessor({"ping": lambda a: {"pong": True}, "set": lambda a: {"applied": a}}, secret=SECRET,
                            device_id=DEVICE, max_skew_s=max_skew_s, clock=lambda: clock[0])


@pytest.mark.parametrize("cid", ["caméra-1", "摄像头", "emoji-\U0001F4F7", "plain"])
def test_a_command_signed_by_the_documented_formula_runs_also_with_a_non_ascii_id(cid: str) -> None:
    command = operator_command(cid, int(NOW * 1000))
    response = processor().handle(json.dumps(command, ensure_ascii=False).encode("utf-8"))
    assert response["ok"] is True and response["id"] == cid, response
    # and the SDK's own signer agrees with the formula
    ours = sign({k: v for k, v in command.items() if k != "hmac"}, SECRET, DEVICE)
    assert ours["hmac"] == command["hmac"]


def test_a_command_signed_over_raw_utf8_instead_is_refused_as_a_bad_signature() -> None:
    command = operator_command("caméra", int(NOW * 1000))
    body = {k: v for k, v in command.items() if k != "hmac"}
    raw = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    command["hmac"] = hmac.new(SECRET, raw, hashlib.sha256).hexdigest()
    response = processor().handle(json.dumps(command).encode())
    assert response["ok"] is False and response["reason"] == "bad_signature"


SKEW = 60.0


# "ts (ms) must be within max_skew_s of the device clock": both sides of now, and exactly at the bound
@pytest.mark.parametrize("offset_ms,ok", [
    (0, True),
    (int(SKEW * 1000), True),             # exactly max_skew_s ahead: within
    (-int(SKEW * 1000), True),            # exactly max_skew_s behind: within
    (int(SKEW * 1000) + 1, False),        # one millisecond beyond, in the future
    (-int(SKEW * 1000) - 1, False),       # one millisecond beyond, in the past
    (3_600_000, False),                   # dated one hour in the future
    (-3_600_000, False),                  # one hour old
    (int(SKEW * 1000) // 2, True),
])
def test_ts_must_be_within_max_skew_of_the_device_clock_on_both_sides(offset_ms: int, ok: bool) -> None:
    response = processor(SKEW).handle(json.dumps(operator_command("c", int(NOW * 1000) + offset_ms)).encode())
    assert response["ok"] is ok, response
    if not ok:
        assert response["reason"] == "stale"


@settings(max_examples=200, deadline=None)
@given(offset_ms=st.integers(-10_000_000, 10_000_000), skew_s=st.integers(1, 3600))
def test_the_clock_window_is_symmetric_and_inclusive(offset_ms: int, skew_s: int) -> None:
    response = processor(skew_s).handle(json.dumps(operator_command("c", int(NOW * 1000) + offset_ms)).encode())
    assert response["ok"] is (abs(offset_ms) <= skew_s * 1000), (offset_ms, skew_s, response)


def test_an_id_is_accepted_once_even_when_the_device_clock_moves_within_the_window() -> None:
    now = [NOW]
    proc = processor(SKEW, now)
    first = json.dumps(operator_command("once", int(NOW * 1000))).encode()
    assert proc.handle(first)["ok"]
    for step in (1.0, SKEW, -SKEW):  # the same bytes again, at any time the ts is still fresh
        now[0] = NOW + step
        response = proc.handle(first)
        assert response["ok"] is False and response["reason"] == "replay", (step, response)
    # a new id at the same moment is fine
    assert proc.handle(json.dumps(operator_command("twice", int(now[0] * 1000))).encode())["ok"]


def test_ids_are_remembered_past_the_clock_window_for_a_clock_stepped_back() -> None:
    """KEEP_S: an id stays recorded an hour beyond max_skew_s, so stepping the device clock back
    does not make an old command fresh and unknown at once."""
    now = [NOW]
    proc = processor(SKEW, now)
    command = json.dumps(operator_command("a", int(NOW * 1000))).encode()
    assert proc.handle(command)["ok"]
    now[0] = NOW + SKEW + 1800  # half an hour past the window: pruning runs, the id is kept
    proc.used._prune()
    now[0] = NOW  # the clock is stepped back
    response = proc.handle(command)
    assert response["ok"] is False and response["reason"] == "replay"


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@settings(max_examples=200, deadline=None)
@given(rate=st.sampled_from([0.5, 1.0, 2.0, 4.0]), burst=st.integers(1, 20),
       gaps=st.lists(st.sampled_from([0.0, 0.125, 0.25, 0.5, 1.0, 3.0]), min_size=1, max_size=40))
def test_token_bucket_matches_a_reference_model(rate: float, burst: int, gaps: List[float]) -> None:
    """Starts full; refills `rate` per second up to `burst`; a take spends one whole token.
    The times are binary fractions, so the reference's arithmetic is exact."""
    clock = Clock()
    bucket = TokenBucket(rate, float(burst), clock)
    tokens = float(burst)
    for gap in gaps:
        clock.t += gap
        tokens = min(float(burst), tokens + gap * rate)
        expected = tokens >= 1.0
        if expected:
            tokens -= 1.0
        assert bucket.take() is expected
        assert bucket.wait_s() == pytest.approx(max(0.0, (1.0 - tokens) / rate))


def test_a_burst_is_exactly_burst_takes_and_a_second_refills_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(3.0, 5.0, clock)
    assert [bucket.take() for _ in range(6)] == [True] * 5 + [False]
    clock.t += 1.0
    assert [bucket.take() for _ in range(4)] == [True] * 3 + [False]


def test_a_bucket_with_no_refill_waits_forever_after_its_burst() -> None:
    clock = Clock()
    bucket = TokenBucket(0.0, 2.0, clock)
    assert [bucket.take() for _ in range(3)] == [True, True, False]
    assert bucket.wait_s() == float("inf")
    clock.t += 1e6
    assert bucket.take() is False


def test_an_in_memory_window_forgets_ids_past_their_keep_time_within_256_writes() -> None:
    """Ids are kept `keep_ms` past their ts, not for ever: memory stays bounded on a busy device."""
    from edge_sdk.daemon.commands import ReplayWindow

    now = [NOW]
    window = ReplayWindow(None, keep_ms=10_000, clock=lambda: now[0])
    for k in range(200):
        window.add(f"old-{k}", int(NOW * 1000))
    now[0] = NOW + 11  # every old id is past its keep time
    for k in range(56):
        window.add(f"new-{k}", int(now[0] * 1000))
    assert "old-0" not in window and "old-199" not in window
    assert "new-0" in window and "new-55" in window
    now[0] = NOW + 5  # an id still inside its keep time is never forgotten
    fresh = ReplayWindow(None, keep_ms=10_000, clock=lambda: now[0])
    for k in range(300):
        fresh.add(f"id-{k}", int(NOW * 1000))
    assert all(f"id-{k}" in fresh for k in range(300))


def test_used_ids_are_kept_an_hour_beyond_the_clock_window_and_then_forgotten() -> None:
    """KEEP_S past max_skew_s: at that age an id is still known, a second later it is pruned."""
    from edge_sdk.daemon.commands import KEEP_S

    now = [NOW]
    proc = processor(SKEW, now)
    assert proc.handle(json.dumps(operator_command("a", int(NOW * 1000))).encode())["ok"]
    now[0] = NOW + SKEW + KEEP_S - 0.5
    proc.used._prune()
    assert "a" in proc.used
    now[0] = NOW + SKEW + KEEP_S + 0.5
    proc.used._prune()
    assert "a" not in proc.used


def test_a_refused_command_is_a_typed_error_with_the_config_exit_code() -> None:
    from edge_sdk.daemon.commands import CommandRejected, RateLimited

    assert CommandRejected("x").exit_code == 2 and CommandRejected("x").reason == "refused"
    assert RateLimited("x").reason == "rate_limited" and isinstance(RateLimited("x"), ValueError)


@pytest.mark.parametrize("cid,echoed", [
    ("x" * 128, "x" * 128),  # the longest id the command schema allows is echoed
    ("x" * 129, None),       # beyond it: refused, and not echoed back
    (5, None), (None, None), (["a"], None),
])
def test_the_response_echoes_a_readable_id_only(cid: Any, echoed: Any) -> None:
    body = {"schema": "edge-sdk/cmd/1", "id": cid, "cmd": "ping"}
    response = CommandProcessor({"ping": lambda a: {"pong": True}}).handle(json.dumps(body).encode())
    assert response["id"] == echoed and response["cmd"] == "ping"
    assert response["ok"] is (echoed is not None), response
    if echoed is None:
        assert response["reason"] == "invalid"


@pytest.mark.parametrize("name,echoed", [("p" * 32, "p" * 32), ("p" * 33, None), (7, None), ({"a": 1}, None)])
def test_the_response_echoes_a_readable_command_name_only(name: Any, echoed: Any) -> None:
    body = {"schema": "edge-sdk/cmd/1", "id": "1", "cmd": name}
    response = CommandProcessor({"ping": lambda a: {"pong": True}}).handle(json.dumps(body).encode())
    assert response["ok"] is False and response["reason"] == "invalid" and response["cmd"] == echoed
    assert response["id"] == "1"


def test_an_id_is_kept_for_exactly_its_keep_time() -> None:
    from edge_sdk.daemon.commands import ReplayWindow

    now = [NOW]
    window = ReplayWindow(None, keep_ms=10_000, clock=lambda: now[0])
    window.add("a", int(NOW * 1000))
    now[0] = NOW + 10  # exactly keep_ms after its ts: still kept
    window._prune()
    assert "a" in window
    now[0] = NOW + 10.001
    window._prune()
    assert "a" not in window



def test_an_id_is_recorded_before_its_handler_runs_so_a_failed_run_is_not_replayable() -> None:
    from edge_sdk.daemon.commands import CommandRejected

    ran: List[str] = []

    def refuse(args: Dict[str, Any]) -> Dict[str, Any]:
        ran.append("set")
        raise CommandRejected("not now")

    proc = CommandProcessor({"set": refuse}, secret=SECRET, device_id=DEVICE, clock=lambda: NOW)
    body = operator_command("s1", int(NOW * 1000), cmd="set", args={"telemetry_interval": 2})
    first = proc.handle(json.dumps(body).encode())
    assert first["ok"] is False and first["reason"] == "refused"
    again = proc.handle(json.dumps(body).encode())
    assert again["reason"] == "replay" and ran == ["set"]


def test_refusals_by_a_handler_are_answered_beyond_the_answer_budget() -> None:
    """The budget bounds answers to garbage; an authenticated command always gets its answer."""
    from edge_sdk.daemon.commands import CommandRejected

    def refuse(args: Dict[str, Any]) -> Dict[str, Any]:
        raise CommandRejected("no")

    clock = Clock()
    proc = CommandProcessor({"set": refuse, "ping": lambda a: {}}, answers=(1.0, 1.0), monotonic=clock,
                            limits={"set": (100.0, 100.0)})
    assert proc.handle(b"garbage") is not None and proc.handle(b"garbage") is None  # the budget is spent
    for k in range(5):
        body = {"schema": "edge-sdk/cmd/1", "id": f"r{k}", "cmd": "set", "args": {"telemetry_interval": 2}}
        response = proc.handle(json.dumps(body).encode())
        assert response is not None and response["reason"] == "refused"
    assert proc.counters()["unanswered"] == 1
