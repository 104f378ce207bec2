"""The stated bounds of edge_sdk.validate and edge_sdk.config_schema, at their edges, against a
reference written here from the docstrings: sizes and depths "bounded before parsing", integers
"outside int64 are refused", a number's range "each end included unless *_open", strings of at
most `max_len` characters and no NUL, lists and tables of at most `max_len` entries, table keys of
1 to MAX_NAME characters. Plus the command reader's own bounds (edge_sdk.telemetry.signing)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.config_schema import MAX_ITEMS, MAX_NAME, MAX_STR, Bounds, from_table, key
from edge_sdk.errors import ConfigError
from edge_sdk.telemetry.signing import MAX_DEPTH as CMD_DEPTH, MAX_PAYLOAD, loads_command
from edge_sdk.validate import (
    INT_LIMIT,
    MAX_DEPTH,
    UntrustedInput,
    finite_number,
    json_depth,
    loads_untrusted,
    nesting_depth,
    non_finite,
    require_finite,
)


# -- validate ------------------------------------------------------------------------------------
def reference_depth(obj: Any) -> int:
    if isinstance(obj, dict):
        return 1 + max([reference_depth(v) for v in obj.values()], default=0)
    if isinstance(obj, (list, tuple)):
        return 1 + max([reference_depth(v) for v in obj], default=0)
    return 0


documents = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.text("ab[]{}\"\\ ", max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text("xy[{", max_size=3), c, max_size=3),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(documents)
def test_depths_match_a_recursive_reference(doc: Any) -> None:
    text = json.dumps(doc).encode()
    assert json_depth(text) == reference_depth(doc) == nesting_depth(doc)


@pytest.mark.parametrize("depth", [1, 2, 5, 8, MAX_DEPTH])
def test_a_document_exactly_at_the_depth_bound_is_read_one_deeper_is_refused(depth: int) -> None:
    inside = ("[" * depth + "]" * depth).encode()
    assert reference_depth(loads_untrusted(inside, 1 << 20, depth)) == depth
    with pytest.raises(UntrustedInput, match=f"deeper than {depth}"):
        loads_untrusted(("[" * (depth + 1) + "]" * (depth + 1)).encode(), 1 << 20, depth)
    objects = ('{"a":' * depth + "1" + "}" * depth).encode()
    assert reference_depth(loads_untrusted(objects, 1 << 20, depth)) == depth
    if depth >= 2:  # more brackets than levels: the cheap count alone must not decide
        wide = ("[" + "[],{}," * 5 + "[" * (depth - 1) + "]" * (depth - 1) + "]").encode()
        assert reference_depth(loads_untrusted(wide, 1 << 20, depth)) == depth
        deeper = ("[" + "[]," * 5 + "[" * depth + "]" * depth + "]").encode()
        with pytest.raises(UntrustedInput, match=f"deeper than {depth}"):
            loads_untrusted(deeper, 1 << 20, depth)


@pytest.mark.parametrize("size", [2, 100, 4096])
def test_a_payload_exactly_at_the_size_bound_is_read_one_byte_more_is_refused(size: int) -> None:
    at = b'"' + b"x" * (size - 2) + b'"'
    assert loads_untrusted(at, size) == "x" * (size - 2)
    assert loads_untrusted(at.decode(), size) == "x" * (size - 2)  # str: counted in UTF-8 bytes
    with pytest.raises(UntrustedInput, match=f"larger than {size} bytes"):
        loads_untrusted(at + b" ", size)
    with pytest.raises(UntrustedInput, match="larger"):
        loads_untrusted('"' + "é" * (size // 2) + '"', size)  # fewer characters than bytes


@pytest.mark.parametrize("value,ok", [
    (INT_LIMIT - 1, True), (-INT_LIMIT, True), (INT_LIMIT, False), (-INT_LIMIT - 1, False),
    (0, True), (-1, True), (10 ** 18, True), (10 ** 19, False), (-(10 ** 19), False), (10 ** 30, False),
])
def test_integers_are_int64(value: int, ok: bool) -> None:
    text = str(value).encode()
    if ok:
        assert loads_untrusted(text, 100) == value
        assert loads_untrusted(b"[%s]" % text, 100) == [value]
    else:
        with pytest.raises(UntrustedInput, match="64-bit"):
            loads_untrusted(text, 100)


@pytest.mark.parametrize("text,ok", [
    (b"1.7976931348623157e308", True), (b"-1.7976931348623157e308", True), (b"1e309", False), (b"-1e309", False),
    (b"NaN", False), (b"Infinity", False), (b"-Infinity", False), (b"5e-324", True), (b"1e-400", True),
])
def test_floats_are_finite(text: bytes, ok: bool) -> None:
    if ok:
        assert math.isfinite(loads_untrusted(text, 100))
    else:
        with pytest.raises(UntrustedInput):
            loads_untrusted(text, 100)


def test_duplicate_keys_are_refused_only_when_asked() -> None:
    assert loads_untrusted(b'{"a":1,"a":2}', 100) == {"a": 2}
    with pytest.raises(UntrustedInput, match="duplicate key 'a'"):
        loads_untrusted(b'{"a":1,"a":2}', 100, unique_keys=True)
    assert loads_untrusted(b'{"a":1,"b":{"a":2}}', 100, unique_keys=True) == {"a": 1, "b": {"a": 2}}


@pytest.mark.parametrize("value,low,ok", [
    (0, 0, True), (-1e-9, 0, False), (0.5, 0.5, True), (0.4999, 0.5, False), (7, None, True), (-7, None, True),
    (True, None, False), (float("nan"), None, False), (float("inf"), None, False), ("1", None, False),
])
def test_finite_number_low_bound_is_inclusive(value: Any, low: Optional[float], ok: bool) -> None:
    if ok:
        assert finite_number(value, "k", low=low) == float(value)
    else:
        with pytest.raises(UntrustedInput, match="k must be"):
            finite_number(value, "k", low=low)


def test_outgoing_json_writes_non_finite_values_as_null_and_keeps_the_rest(caplog) -> None:
    import logging

    from edge_sdk.validate import dumps_outgoing

    message = {"a": float("nan"), "b": "text", "c": [1, 2.5, None, float("-inf")], "d": {"e": True}, "f": (float("inf"),)}
    text = dumps_outgoing(message, "telemetry", logging.getLogger("t"))
    assert json.loads(text) == {"a": None, "b": "text", "c": [1, 2.5, None, None], "d": {"e": True}, "f": [None]}
    assert "a, c[3], f[0]" in caplog.text
    assert dumps_outgoing({"x": 1.5}, "t") == '{"x":1.5}'


def test_untrusted_input_is_a_typed_error_with_exit_code_2() -> None:
    assert UntrustedInput("x").exit_code == 2 and isinstance(UntrustedInput("x"), ValueError)


def test_non_finite_values_are_found_by_path() -> None:
    doc = {"a": 1.0, "b": [0.0, float("nan"), {"c": float("-inf")}], "d": (float("inf"),), "e": "nan"}
    assert [p for p, _ in non_finite(doc)] == ["b[1]", "b[2].c", "d[0]"]
    with pytest.raises(UntrustedInput, match=r"here: b\[1\] is nan"):
        require_finite(doc, "here")
    with pytest.raises(ConfigError):
        require_finite([float("inf")], "cfg", ConfigError)
    assert require_finite({"ok": [1.5]}, "x") == {"ok": [1.5]}


# -- commands on the wire ------------------------------------------------------------------------
def test_a_command_is_read_up_to_its_size_and_depth_bounds_and_no_further() -> None:
    pad = MAX_PAYLOAD - len(b'{"x":""}')
    assert loads_command(b'{"x":"' + b"y" * pad + b'"}')["x"] == "y" * pad
    with pytest.raises(UntrustedInput, match="larger"):
        loads_command(b'{"x":"' + b"y" * (pad + 1) + b'"}')
    deep = '{"a":' * CMD_DEPTH + "1" + "}" * CMD_DEPTH
    assert reference_depth(loads_command(deep.encode())) == CMD_DEPTH
    with pytest.raises(UntrustedInput, match="deeper"):
        loads_command(('{"a":' * (CMD_DEPTH + 1) + "1" + "}" * (CMD_DEPTH + 1)).encode())
    assert MAX_PAYLOAD == 16 * 1024 and CMD_DEPTH == 8  # the sizes the docstring promises


@pytest.mark.parametrize("device_id", ["", None, 7])
def test_a_command_is_signed_for_one_named_device(device_id: Any) -> None:
    from edge_sdk.telemetry.signing import sign

    with pytest.raises(ValueError, match="device_id"):
        sign({"schema": "edge-sdk/cmd/1", "id": "1", "cmd": "ping"}, b"k", device_id)


# -- config_schema -------------------------------------------------------------------------------
@dataclass
class Table:
    closed: float = key(1.0, low=-2.5, high=10.0)
    half_open: float = key(1.0, low=0, high=1, low_open=True)
    upper_open: int = key(0, low=-3, high=3, high_open=True)
    count: int = key(0)
    word: str = key("a", max_len=5)
    ident: str = key("ab", pattern=r"[a-z]+", allows="lower-case letters")
    mode: str = key("x", choices=("x", "y"))
    items: List[int] = key(factory=list, max_len=3, item=Bounds(low=0, high=9))
    extra: Dict[str, Any] = key(factory=dict, max_len=2)
    maybe: Optional[float] = key(None, low=0, high=1)
    flag: bool = key(False)
    at_least: float = key(1.0, low=0)


def accepted(name: str, value: Any) -> bool:
    try:
        from_table(Table, {name: value}, "t.toml")
    except ConfigError as exc:
        assert "t.toml" in str(exc) and name in str(exc), exc
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(st.floats(-20, 20, allow_nan=False) | st.integers(-20, 20) | st.sampled_from([-2.5, 10.0, 0.0, 1.0, -3, 3]))
def test_number_ranges_include_each_end_unless_open(x: Any) -> None:
    assert accepted("closed", x) is (-2.5 <= x <= 10.0)
    assert accepted("half_open", x) is (0 < x <= 1)
    assert accepted("upper_open", x) is (isinstance(x, int) and -3 <= x < 3)
    assert accepted("maybe", x) is (0 <= x <= 1)


@pytest.mark.parametrize("name,value,ok", [
    ("count", INT_LIMIT - 1, True), ("count", -INT_LIMIT, True), ("count", INT_LIMIT, False),
    ("count", -INT_LIMIT - 1, False), ("count", 1.0, False), ("count", True, False),
    ("closed", True, False), ("closed", float("nan"), False), ("closed", float("inf"), False), ("closed", "1", False),
    ("word", "abcde", True), ("word", "abcdef", False), ("word", "a\x00", False), ("word", 5, False),
    ("ident", "abc", True), ("ident", "abc1", False), ("ident", "", False),
    ("mode", "y", True), ("mode", "z", False), ("mode", "X", False),
    ("items", [0, 9, 5], True), ("items", [0, 1, 2, 3], False), ("items", [10], False), ("items", [-1], False),
    ("items", (1, 2), True), ("items", "12", False),
    ("extra", {"a": 1, "b": "x"}, True), ("extra", {"a": 1, "b": 2, "c": 3}, False),
    ("extra", {"k" * MAX_NAME: 1}, True), ("extra", {"k" * (MAX_NAME + 1): 1}, False), ("extra", {"": 1}, False),
    ("extra", {"a": [1]}, False), ("extra", {"a": None}, False), ("extra", [], False),
    ("maybe", None, True), ("flag", 1, False), ("flag", True, True),
])
def test_each_kind_of_bound_at_its_edge(name: str, value: Any, ok: bool) -> None:
    assert accepted(name, value) is ok


def test_an_int_for_a_float_is_held_as_a_float_and_unknown_keys_are_named() -> None:
    table = from_table(Table, {"closed": 3, "items": [1, 2]})
    assert table.closed == 3.0 and isinstance(table.closed, float) and table.items == [1, 2]
    with pytest.raises(ConfigError, match="unknown key.*nope"):
        from_table(Table, {"nope": 1})


def test_the_shared_limits_are_the_documented_ones() -> None:
    assert (MAX_STR, MAX_ITEMS, MAX_NAME) == (4096, 1024, 64)
    assert accepted("extra", {f"k{i}": i for i in range(2)})


def every_bounded_key():
    import dataclasses
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from config_reference import sections

    from edge_sdk.config_schema import bounds_of, hints

    for _table, cls, _where in sections():
        types = hints(cls)
        for f in dataclasses.fields(cls):
            b = bounds_of(f)
            tp = types[f.name]
            plain = tp if typing_origin(tp) is None else next((a for a in tp.__args__ if a is not type(None)), tp)
            if plain in (int, float) and b.low is not None and b.high is not None:
                yield cls, f.name, plain, b


def typing_origin(tp: Any) -> Any:
    import typing

    return typing.get_origin(tp)


@pytest.mark.parametrize("cls,name,tp,b", list(every_bounded_key()), ids=lambda v: getattr(v, "__name__", str(v)))
def test_every_numeric_config_key_accepts_its_ends_and_refuses_beyond(cls: Any, name: str, tp: Any, b: Any) -> None:
    """The configuration reference's [low, high] for every key, at and just beyond each end."""
    from edge_sdk.config_schema import _Bad, check_value

    step = 1 if tp is int else max(1e-6, abs(b.high - b.low) * 1e-6)

    def ok(value: Any) -> bool:
        try:
            check_value(tp(value), tp, b, name)
        except _Bad:
            return False
        return True

    assert ok(b.low) is not b.low_open and ok(b.high) is not b.high_open
    assert not ok(b.low - step) and not ok(b.high + step)


# -- what the config reference and the errors show -----------------------------------------------
@pytest.mark.parametrize("bounds,tp,text", [
    (dict(low=0, high=1), float, "[0, 1]"), (dict(low=0, high=1, low_open=True), float, "(0, 1]"),
    (dict(low=0, high=1, high_open=True), float, "[0, 1)"), (dict(low=0), float, "[0, inf]"),
    (dict(high=5), float, "[-inf, 5]"), (dict(low=0.5, high=1e15), float, "[0.5, 1e+15]"),
    (dict(low=-3, high=1e14), int, "[-3, 100000000000000]"), (dict(choices=("a", "b")), str, "a | b"),
    (dict(max_len=7), str, "at most 7 characters"), (dict(max_len=7, allows="digits"), str, "digits, at most 7 characters"),
    (dict(max_len=3), List[Any], "at most 3 entries, each a string, a number or true/false"),
    (dict(max_len=3), List[int], "at most 3 entries"),
    (dict(max_len=3, item=Bounds(low=0, high=9)), List[int], "at most 3 entries, each [0, 9]"),
    (dict(max_len=2), Dict[str, Any], "at most 2 entries, each a string, a number or true/false"),
    (dict(max_len=7), Optional[str], "at most 7 characters"), (dict(), bool, ""),
])
def test_bounds_are_described_as_the_reference_shows_them(bounds: Dict[str, Any], tp: Any, text: str) -> None:
    assert Bounds(**bounds).describe(tp) == text


def test_errors_show_values_short() -> None:
    from edge_sdk.config_schema import shown

    assert len(shown("x" * 100)) == 60 and "..." in shown("x" * 100)  # at most 60 characters
    assert shown("x" * 58) == repr("x" * 58)
    assert shown(list(range(10))) == "[0, 1, 2, 3, ...]" and shown(list(range(4))) == "[0, 1, 2, 3]"
    assert shown({k: k for k in "abcdef"}) == "{'a': 'a', 'b': 'b', 'c': 'c', 'd': 'd', ...}"
    assert shown([[[1]]]) == "[[[...]]]" and shown([[1]]) == "[[1]]"
    assert shown(10 ** 5000) == f"<an integer of {(10 ** 5000).bit_length()} bits>"


def test_a_number_out_of_its_range_says_the_range_and_one_without_a_range_says_the_type() -> None:
    with pytest.raises(ConfigError, match=r"closed must be a number in \[-2.5, 10\], got 11"):
        from_table(Table, {"closed": 11})
    with pytest.raises(ConfigError, match=r"at_least must be a number in \[0, inf\], got -1"):
        from_table(Table, {"at_least": -1})
    with pytest.raises(ConfigError, match=r"count must be an integer, got 'x'"):
        from_table(Table, {"count": "x"})
    with pytest.raises(ConfigError, match=r"mode must be one of x, y, got 'z'"):
        from_table(Table, {"mode": "z"})


def test_an_unknown_key_is_named_in_full_up_to_max_name_characters() -> None:
    with pytest.raises(ConfigError) as info:
        from_table(Table, {"k" * MAX_NAME: 1})
    assert "k" * MAX_NAME in str(info.value)
    with pytest.raises(ConfigError) as info:
        from_table(Table, {"k" * 200: 1})
    assert "k" * 200 not in str(info.value) and "..." in str(info.value)


@pytest.mark.parametrize("name,ok", [("EDGE_SECRET", True), ("_x1", True), ("x" * 255, True), ("x" * 256, False),
                                     ("1ABC", False), ("A-B", False), ("", False)])
def test_environment_variable_names(name: str, ok: bool) -> None:
    from edge_sdk.config_schema import ENV_VAR, _Bad, check_value

    try:
        check_value(name, str, Bounds(**ENV_VAR), "password_env")
    except _Bad:
        assert not ok
    else:
        assert ok


def test_a_config_built_in_code_holds_an_int_given_for_a_float_as_a_float_and_keeps_its_lists() -> None:
    from edge_sdk.config_schema import check_fields

    items = [1, 2]
    table = Table(closed=3, items=items)
    check_fields(table)
    assert isinstance(table.closed, float) and table.closed == 3.0
    assert table.items is items  # the caller's list itself, checked, not replaced
