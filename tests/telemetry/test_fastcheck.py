"""The consumer's fast path (`fastcheck`, msgspec) never takes more than the slow one:
`valid()` is True only for what the JSON Schema accepts (jsonschema the oracle), on a real
reporter's messages (where it must decide, or it saves nothing) and on hostile variations of
them; `parse()` returns and refuses exactly what `loads_untrusted` does, on hostile bytes too.
Without msgspec both step aside."""
from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_sdk.telemetry import fastcheck, schemas
from edge_sdk.validate import UntrustedInput, loads_untrusted

from test_compiled_schemas import VALUES, corpus, mutate  # noqa: F401

pytest.importorskip("msgspec")
pytest.importorskip("jsonschema")
SUFFIX = {sid: suffix for suffix, sid in schemas.TOPICS.items()}
LIMIT = 1 << 20


def test_a_trailing_newline_does_not_pass_a_pattern(corpus) -> None:
    tel = next(m for m in corpus if m["schema"] == "edge-sdk/telemetry/1")
    tel = dict(tel, latency_ms={"total\n": tel["latency_ms"]["total"]})
    assert not fastcheck.valid(json.dumps(tel).encode(), "telemetry")


def accepted(message: Any, schema_id: str) -> bool:
    return next(schemas.validator(schema_id).iter_errors(message), None) is None


def outcome(fn: Any, raw: bytes) -> Any:
    try:
        return ("ok", fn(raw, LIMIT))
    except UntrustedInput:
        return ("refused", None)


def test_the_fast_path_decides_every_message_of_a_real_reporter(corpus) -> None:
    for message in corpus:
        assert fastcheck.valid(json.dumps(message).encode(), SUFFIX[message["schema"]]), message


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_fast_path_never_takes_what_the_schema_refuses(corpus, data) -> None:
    original = data.draw(st.sampled_from(corpus))
    message = mutate(original, data)
    raw = json.dumps(message).encode()
    if fastcheck.valid(raw, SUFFIX[original["schema"]]):
        assert accepted(message, original["schema"]), message
        assert schemas.compiled(original["schema"])(message) is None, message  # `$` as ECMA-262 reads it too


HOSTILE_TEXT = st.sampled_from([
    b"NaN", b"[Infinity]", b'{"a": -Infinity}', b"1e999", b"-1e999", b"[1e308]", b"9223372036854775807",
    b"9223372036854775808", b"-9223372036854775808", b"-9223372036854775809", b"12345678901234567890123",
    b"1.2345678901234567890123", b'"\\ud800"', b'"\\udfff x"', b'"\\ud83d\\ude00"', b"\xff\xfe", b'"\xc3"',
    b"[" * 33 + b"]" * 33, b"[" * 32 + b"]" * 32, b'{"a":1,"a":2}', b"[1,]", b"{}", b"", b" ", b"[1] x",
    b'"\x00"', b'"\\u0000"', b"tru", b"-0", b"0.0e-0", b"1E400", b"[1.0, -0.0, 5e-324]",
])


@settings(max_examples=400, deadline=None)
@given(raw=HOSTILE_TEXT | VALUES.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=64) |
       st.tuples(VALUES, st.integers(1, 40)).map(lambda t: (b"[" * t[1]) + json.dumps(t[0]).encode() + b"]" * t[1]))
def test_parse_returns_and_refuses_what_loads_untrusted_does(raw: bytes) -> None:
    fast, slow = outcome(fastcheck.parse, raw), outcome(loads_untrusted, raw)
    assert fast[0] == slow[0], (raw, fast, slow)
    if fast[0] == "ok":
        assert json.dumps(fast[1]) == json.dumps(slow[1]) and type(fast[1]) is type(slow[1])


def test_without_msgspec_both_step_aside(corpus, monkeypatch) -> None:
    monkeypatch.setattr(fastcheck, "_msgspec", [None])
    raw = json.dumps(corpus[0]).encode()
    assert not fastcheck.valid(raw, SUFFIX[corpus[0]["schema"]])
    assert fastcheck.parse(raw, LIMIT) == loads_untrusted(raw, LIMIT)
    with pytest.raises(UntrustedInput):
        fastcheck.parse(b"NaN", LIMIT)


def test_a_detections_message_with_many_boxes_takes_the_fast_path(monkeypatch) -> None:
    """Many boxes mean many brackets but a nesting depth of 4: not a reason to leave the C parser."""
    import json as json_mod

    from edge_sdk.telemetry import fastcheck

    if not fastcheck.available():
        pytest.skip("msgspec is not installed")
    boxes = [{"xyxy": [1.0, 2.0, 3.0, 4.0], "score": 0.5, "class_id": 0} for _ in range(50)]
    raw = json_mod.dumps({"schema": "edge-sdk/detections/1", "detections": boxes}).encode()

    def slow(raw: bytes, max_bytes: int) -> None:
        raise AssertionError("fell back to the Python parser")

    monkeypatch.setattr(fastcheck, "loads_untrusted", slow)
    assert fastcheck.parse(raw, 1 << 20)["detections"] == boxes
