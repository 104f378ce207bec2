"""The shared checks for outside data: bounded JSON parsing, non-finite numbers."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from edge_sdk.errors import ConfigError
from edge_sdk.validate import UntrustedInput, dumps, json_depth, loads_untrusted, require_finite


@pytest.mark.parametrize("text,depth", [
    (b"1", 0), (b"[]", 1), (b'{"a": [1, {"b": []}]}', 4), (b'["[[[[", "]]]]]]"]', 1),
    (b'["\\"[[[", []]', 2),  # an escaped quote does not end the string
    (b'"\\\\", [[]]', 2),  # an escaped backslash does
])
def test_json_depth(text: bytes, depth: int) -> None:
    assert json_depth(text) == depth


@pytest.mark.parametrize("hostile", [
    b'"' + b'\\"' * 30000,  # unterminated string full of escaped quotes
    b'"' * 65536,
    b"[" * 65536,
    b'["' + b"a" * 65000,
])
def test_json_depth_is_linear_on_hostile_text(hostile: bytes) -> None:
    # A bound against a hang, not a speed figure: the linear scan takes milliseconds on these
    # even on a saturated machine, a backtracking one minutes (bench/ holds the figures).
    t0 = time.perf_counter()
    json_depth(hostile)
    assert time.perf_counter() - t0 < 30.0


@pytest.mark.parametrize("payload,fragment", [
    (b"[" * 1000, "deeper than 32"),
    (b"x" * 2001, "larger than 2000"),
    (b"\xff", "not UTF-8"),
    (b"{", "not UTF-8 JSON"),
    (b"NaN", "NaN"),
    (b"[Infinity]", "Infinity"),
    (b'{"a": -Infinity}', "Infinity"),
    (b"1e400", "too large"),
    (b"-1e400", "too large"),
    (b"9223372036854775808", "64-bit"),
    (b"1" * 99, "64-bit"),
])
def test_loads_untrusted_refuses(payload: bytes, fragment: str) -> None:
    with pytest.raises(UntrustedInput, match=fragment):
        loads_untrusted(payload, max_bytes=2000)


def test_loads_untrusted_keeps_what_is_valid() -> None:
    text = '{"a": [1.5, -9223372036854775808, 9223372036854775807, "[[[["], "b": 1e-400, "é": null}'
    assert loads_untrusted(text.encode(), 1000) == json.loads(text)


def test_require_finite_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"f\.py: telemetry\.window_s is nan"):
        require_finite({"telemetry": {"window_s": math.nan}}, "f.py", ConfigError)
    with pytest.raises(UntrustedInput, match=r"x\[1\] is inf"):
        require_finite({"x": [1.0, math.inf]}, "m")
    assert require_finite({"x": [1.0, 2]}, "m") == {"x": [1.0, 2]}


def test_dumps_refuses_non_finite() -> None:
    with pytest.raises(ValueError):
        dumps({"fps": math.nan})
    assert dumps({"fps": 1.5}) == '{"fps":1.5}'


@pytest.mark.parametrize("line,key", [
    ("[telemetry]\nwindow_s = nan", "telemetry.window_s"),
    ("[source]\nfps = inf", "source.fps"),
    ("[health]\nlatency_p99_ms = -inf", "health.latency_p99_ms"),
    ("[device]\nmax_skew_s = nan", "device.max_skew_s"),
])
def test_toml_with_nan_or_inf_is_refused_naming_the_key_and_file(tmp_path: Path, line: str, key: str) -> None:
    from edge_sdk.fsutil import read_toml

    path = tmp_path / "device.toml"
    path.write_text(f'bundle = "b"\n{line}\n')
    with pytest.raises(ConfigError, match=str(path).replace(".", r"\.") + ": " + key.replace(".", r"\.")):
        read_toml(path)


def test_atomic_write_json_refuses_nan(tmp_path: Path) -> None:
    from edge_sdk.fsutil import atomic_write_json

    with pytest.raises(ValueError):
        atomic_write_json(tmp_path / "x.json", {"score": math.nan})
    assert not (tmp_path / "x.json").exists()
