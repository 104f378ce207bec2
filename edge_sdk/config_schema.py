"""The type and bounds of every config key, in one place: the config dataclasses themselves.

A key's type is its field's annotation; its bounds are declared beside it with :func:`key`:

    latency_p99_ms: float = key(300.0, low=0, high=600000)  # the comment is the reference's text

Everything that reads a config goes through this module: :func:`from_table` builds a config
object from a TOML table (unknown keys, missing keys, wrong types and values out of bounds are a
ConfigError naming the key and the file), and each config's ``validate()`` starts with
:func:`check_fields`, so an object built in code is held to the same table. What is left to a
``validate()`` is what one key cannot say alone (``reconnect_min_s <= reconnect_max_s``, a file
that must exist). ``tools/config_reference.py`` writes the same table into
docs/configuration.md, so the reference and the checks cannot disagree.

Nothing is unbounded: a number has a range (a float is also finite), a string at most
``MAX_STR`` characters and no NUL, a list or table at most ``MAX_ITEMS`` entries, and a value
typed ``Any`` (the entries of ``[source] options``) is a plain string, number or boolean.
"""
from __future__ import annotations

import contextvars
import dataclasses
import functools
import math
import re
import reprlib
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from edge_sdk.errors import ConfigError
from edge_sdk.validate import INT_LIMIT

MAX_STR = 4096  # characters of a string (PATH_MAX on Linux)
MAX_ITEMS = 1024  # entries of a list or a table
MAX_NAME = 64  # characters of a key inside a free-form table
BOUNDS = "edge_sdk.bounds"  # the field metadata entry
NAME, NAME_CHARS = r"[A-Za-z0-9._-]+", "letters, digits, '-', '_' and '.'"  # ids in MQTT topics, alert names
ENV_VAR: Dict[str, Any] = {"max_len": 255, "pattern": r"[A-Za-z_][A-Za-z0-9_]*",
                           "allows": "the name of an environment variable (letters, digits, '_')"}

_repr = reprlib.Repr()
_repr.maxstring, _repr.maxother, _repr.maxlist, _repr.maxdict, _repr.maxlevel = 60, 60, 4, 4, 2


def shown(value: Any) -> str:
    """A short repr of `value` for an error message: a long string or list is cut, and an
    integer too long to print (Python refuses more than 4300 digits) is shown by its size."""
    try:
        return _repr.repr(value)
    except ValueError:
        return f"<an integer of {value.bit_length()} bits>" if isinstance(value, int) else f"<{type(value).__name__}>"


@dataclass(frozen=True)
class Bounds:
    """What a key allows beyond its type. Numbers: `low` .. `high` (each end included unless
    `*_open`); strings: `max_len` characters, one of `choices`, matching `pattern` in full
    (`allows` says what it allows in words); lists and tables: `max_len` entries, each held to
    `item` (or, with `table`, a table of that dataclass's keys)."""

    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    choices: Tuple[Any, ...] = ()
    max_len: int = MAX_STR
    pattern: Optional[str] = None
    allows: str = ""
    item: Optional["Bounds"] = None
    table: Any = None

    def describe(self, tp: Any) -> str:
        """The bounds as the configuration reference shows them."""
        if self.choices:
            return " | ".join(str(c) for c in self.choices)
        if self.low is not None or self.high is not None:
            low = "-inf" if self.low is None else _num(self.low)
            high = "inf" if self.high is None else _num(self.high)
            return f"{'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        kind = _base(tp)
        if kind is str:
            return f"{self.allows + ', ' if self.allows else ''}at most {self.max_len} characters"
        if kind in (list, dict):
            text = f"at most {self.max_len} entries"
            if self.table is not None:
                return f"{text}, each a table of {self.table.__name__}'s keys"
            inner = typing.get_args(_plain(tp))
            if self.item is not None:
                return f"{text}, each {self.item.describe(inner[-1])}"
            if inner and inner[-1] is Any:
                return f"{text}, each a string, a number or true/false"
            return text
        return ""


def key(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, **bounds: Any) -> Any:
    """A dataclass field with `default` (or `factory`) whose bounds (:class:`Bounds`) travel in
    its metadata."""
    return field(default=default, default_factory=factory, metadata={BOUNDS: Bounds(**bounds)})


def bounds_of(f: "dataclasses.Field[Any]") -> Bounds:
    return f.metadata.get(BOUNDS) or Bounds()


@functools.lru_cache(maxsize=None)
def hints(cls: Any) -> Dict[str, Any]:
    """{field: resolved type} of a config dataclass."""
    return typing.get_type_hints(cls)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def _plain(tp: Any) -> Any:
    """`tp` without Optional[...]."""
    if typing.get_origin(tp) is typing.Union:
        return next(a for a in typing.get_args(tp) if a is not type(None))
    return tp


def _base(tp: Any) -> Any:
    """The type `tp` is checked as: str, int, float, bool, list, dict, a dataclass, or Any."""
    tp = _plain(tp)
    return typing.get_origin(tp) or tp


class _Bad(Exception):
    """What is wrong with a value, before the key and the file are put in front of it."""


def check_value(value: Any, tp: Any, b: Bounds, path: str) -> Any:
    """`value` as the config holds it (an int given for a float becomes a float), or _Bad."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        return check_value(value, rest[0], b, path)
    if tp is Any:
        if isinstance(value, (str, bool, int, float)):
            return check_value(value, type(value), b, path)
        raise _Bad(f"must be a string, a number or true/false, got {shown(value)}")
    if tp is bool:
        if not isinstance(value, bool):
            raise _Bad(f"must be true or false, got {shown(value)}")
        return value
    if tp in (int, float):
        return _number(value, tp, b)
    if tp is str:
        return _string(value, b)
    if origin in (list, typing.List):
        if not isinstance(value, (list, tuple)):
            raise _Bad(f"must be a list, got {shown(value)}")
        _length(value, b, "entries")
        item_tp = args[0] if args else Any
        return [_at(v, item_tp, b.item or Bounds(), f"{path}[{i}]", b.table) for i, v in enumerate(value)]
    if origin in (dict, typing.Dict):
        if not isinstance(value, Mapping):
            raise _Bad(f"must be a table, got {shown(value)}")
        _length(value, b, "entries")
        out = {}
        for name, v in value.items():
            if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
                raise _Bad(f"keys must be names of 1 to {MAX_NAME} characters, got {shown(name)}")
            out[name] = _at(v, args[1] if args else Any, b.item or Bounds(), f"{path}.{name}")
        return out
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            _check_instance(value, path)
            return value
        if isinstance(value, Mapping):
            return _build(tp, value, path)
        raise _Bad(f"must be a table, got {shown(value)}")
    raise TypeError(f"config key {path}: no check for type {tp!r}")  # a field typed beyond this module


def _at(value: Any, tp: Any, b: Bounds, path: str, table: Any = None) -> Any:
    """check_value (or, with `table`, _table_values) whose errors name `path`: the key, or the
    entry of a list or table, they are about."""
    try:
        if table is not None:
            return dict(_table_values(table, value, path))
        return check_value(value, tp, b, path)
    except _Nested:
        raise
    except _Bad as exc:
        raise _Nested(path, str(exc)) from None


class _Nested(_Bad):
    """A _Bad that already names the entry it is about (`path`)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def _number(value: Any, tp: Any, b: Bounds) -> Any:
    what = "an integer" if tp is int else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (tp is int and not isinstance(value, int)):
        raise _Bad(f"must be {what}{_range(b)}, got {shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Bad(f"must be a finite number{_range(b)}, got {value!r}")
    low, high = b.low, b.high
    if tp is int and low is None:
        low = -INT_LIMIT
    if tp is int and high is None:
        high = INT_LIMIT - 1
    if (low is not None and (value < low or (b.low_open and value == low))) or \
            (high is not None and (value > high or (b.high_open and value == high))):
        raise _Bad(f"must be {what}{_range(b)}, got {shown(value)}")
    return float(value) if tp is float else value


def _range(b: Bounds) -> str:
    if b.choices:
        return f" (one of {', '.join(str(c) for c in b.choices)})"
    if b.low is None and b.high is None:
        return ""
    return f" in {b.describe(float)}"


def _string(value: Any, b: Bounds) -> str:
    if not isinstance(value, str):
        raise _Bad(f"must be a string{_range(b) if b.choices else ''}, got {shown(value)}")
    if b.choices:
        if value not in b.choices:
            raise _Bad(f"must be one of {', '.join(str(c) for c in b.choices)}, got {shown(value)}")
        return value
    _length(value, b, "characters")
    if "\x00" in value:
        raise _Bad(f"must not hold a NUL character, got {shown(value)}")
    if b.pattern is not None and not re.fullmatch(b.pattern, value):
        raise _Bad(f"may hold only {b.allows or b.pattern}, got {shown(value)}")
    return value


def _length(value: Any, b: Bounds, unit: str) -> None:
    if len(value) > b.max_len:
        raise _Bad(f"must have at most {b.max_len} {unit}, got {len(value)}")


def _table_values(cls: Any, data: Any, path: str) -> Dict[str, Any]:
    """The values of a table of `cls`'s keys, each checked; _Bad for unknown or missing keys."""
    if not isinstance(data, Mapping):
        raise _Nested(f"[{path}]" if path else "", f"must be a table, got {shown(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(str(k) for k in data if k not in fields)
    if unknown:
        names = ", ".join(_join(path, shown(k) if len(k) > MAX_NAME else k) for k in unknown[:5])
        known = f"known keys in [{path}]" if path else "known keys"
        raise _Nested("", f"unknown key(s) {names}; {known}: {', '.join(fields)}")
    missing = [name for name, f in fields.items() if name not in data and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
    if missing:
        raise _Nested(path, f"needs {', '.join(missing)}")
    types = hints(cls)
    return {name: _at(value, types[name], bounds_of(fields[name]), _join(path, name)) for name, value in data.items()}


def _build(cls: Any, data: Any, path: str) -> Any:
    return cls(**_table_values(cls, data, path))


def _check_instance(obj: Any, path: str) -> None:
    types = hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        checked = _at(value, types[f.name], bounds_of(f), _join(path, f.name))
        if checked is not value and not isinstance(value, (list, dict)):
            setattr(obj, f.name, checked)  # an int given for a float


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _error(origin: str, exc: _Bad) -> ConfigError:
    where = exc.path if isinstance(exc, _Nested) else ""
    return ConfigError(f"{origin}: {where + ' ' if where else ''}{exc}")


_origin: "contextvars.ContextVar[str]" = contextvars.ContextVar("config_origin", default="config")


def building_from() -> str:
    """The file (or "config") whose table :func:`from_table` is building: the origin for the
    checks a config class runs in its ``__post_init__`` (BrokerConfig's URL, say)."""
    return _origin.get()


def from_table(cls: Any, data: Any, origin: str = "config", path: str = "") -> Any:
    """A `cls` built from a TOML table whose keys are `cls`'s fields (at `path`, "" for the top
    level, "health" for `[health]`). ConfigError naming the key and `origin` for an unknown or
    missing key, a wrong type or a value out of bounds; nothing else is raised for any input."""
    token = _origin.set(origin)
    try:
        return _build(cls, data, path)
    except _Bad as exc:
        raise _error(origin, exc) from None
    finally:
        _origin.reset(token)


def check_fields(obj: Any, origin: str = "config", path: str = "") -> Any:
    """`obj` (a config dataclass built in code or from a file), each field checked against its
    type and bounds; ConfigError naming the first key that is wrong."""
    try:
        _check_instance(obj, path)
    except _Bad as exc:
        raise _error(origin, exc) from None
    return obj
