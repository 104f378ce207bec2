"""Checks for data that comes from outside: the network, config files, manifests.

Two rules, shared by every reader and writer in the package:

* JSON from outside is parsed by :func:`loads_untrusted`: its size and nesting depth are bounded
  *before* parsing (a deep ``[[[[...`` otherwise ends in a RecursionError inside the parser),
  ``NaN``/``Infinity`` literals, numbers that overflow a float (``1e400``) and integers
  outside int64 are refused.
* Nothing non-finite is accepted from a config or a manifest (:func:`require_finite`; TOML has
  ``nan`` and ``inf``), and nothing non-finite is written (:func:`dumps`: ``allow_nan=False``).

Every refusal is an :class:`UntrustedInput` (or the error class the caller names) whose message
says what was wrong and where.
"""
from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any, Dict, Iterator, List, Optional, Tuple, Type

from edge_sdk.errors import EdgeSdkError

MAX_DEPTH = 32  # our messages nest 4 levels; manifests 5
INT_LIMIT = 2 ** 63  # integers beyond int64 are refused (consumers in other languages overflow)

# A string, or an unterminated one running to the end: every match attempt that starts at a quote
# succeeds, so the scan is linear (no retry from later quotes, no backtracking).
_STRING = re.compile(rb'"(?:[^"\\]+|\\.|\\\Z)*(?:"|\Z)', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


class UntrustedInput(EdgeSdkError, ValueError):
    """Data from outside (a message, a file) that is refused before it is used."""

    exit_code = 2


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text (brackets inside strings do not
    count). Linear time, no recursion, no regex backtracking."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    return max(0, max(accumulate(map(_STEP.__getitem__, brackets)), default=0))


def _refuse_constant(name: str) -> Any:
    raise UntrustedInput(f"{name} is not a number JSON allows; send a finite number")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UntrustedInput(f"number {text[:32]} is too large for a float; send a finite number")
    return value


def _parse_int(text: str) -> int:
    digits = len(text) - (text[0] == "-")
    if digits > 19 or not -INT_LIMIT <= int(text) < INT_LIMIT:
        raise UntrustedInput(f"integer {text[:32]}{'...' if len(text) > 32 else ''} is outside the 64-bit range")
    return int(text)


def _unique_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise UntrustedInput(f"duplicate key {name[:64]!r}: an object names each key once")
        out[name] = value
    return out


def loads_untrusted(data: Any, max_bytes: int, max_depth: int = MAX_DEPTH, what: str = "message",
                    unique_keys: bool = False) -> Any:
    """Parse JSON from outside: bytes (UTF-8) or str. Raises UntrustedInput, never anything else
    for bad input: too large, too deep, not UTF-8, not JSON, or holding a non-finite number; with
    `unique_keys`, also an object that names a key twice (JSON itself keeps the last one, so what
    was signed or checked could differ from what is used)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise UntrustedInput(f"{what} larger than {max_bytes} bytes ({len(raw)})")
    # cheap bound first: the depth cannot exceed the number of opening brackets
    if raw.count(b"[") + raw.count(b"{") > max_depth and json_depth(raw) > max_depth:
        raise UntrustedInput(f"{what} nests deeper than {max_depth} levels")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UntrustedInput(f"{what} is not UTF-8 JSON: {exc}") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_parse_float, parse_int=_parse_int,
                          object_pairs_hook=_unique_keys if unique_keys else None)
    except UntrustedInput as exc:
        raise UntrustedInput(f"{what} refused: {exc}") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: belt and braces after the depth check
        raise UntrustedInput(f"{what} is not UTF-8 JSON: {exc}") from None


def nesting_depth(obj: Any) -> int:
    """How deep dicts, lists and tuples nest in `obj` (a scalar is 0, `[]` is 1); no recursion,
    so a document nested thousands deep is measured, not a RecursionError."""
    deepest = 0
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, (list, tuple)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in node)
    return deepest


def non_finite(obj: Any, path: str = "") -> Iterator[Tuple[str, float]]:
    """(dotted path, value) of every NaN or infinite float inside dicts, lists and tuples."""
    if isinstance(obj, float):
        if not math.isfinite(obj):
            yield path or "<value>", obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from non_finite(value, f"{path}.{key}" if path else str(key))
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from non_finite(value, f"{path}[{i}]")


def require_finite(obj: Any, origin: str, error: Type[EdgeSdkError] = UntrustedInput) -> Any:
    """`obj` unchanged, or `error` naming the first key that holds NaN or an infinity."""
    for path, value in non_finite(obj):
        raise error(f"{origin}: {path} is {value!r}; use a finite number")
    return obj


def finite_number(value: Any, key: str, origin: str = "config", error: Type[EdgeSdkError] = UntrustedInput,
                  low: Optional[float] = None) -> float:
    """`value` as a float when it is a finite number (not a bool) >= `low`; `error` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise error(f"{origin}: {key} must be a finite number, got {value!r}")
    if low is not None and value < low:
        raise error(f"{origin}: {key} must be >= {low:g}, got {value!r}")
    return float(value)


def dumps(obj: Any, **kwargs: Any) -> str:
    """json.dumps that refuses NaN and infinities (ValueError) instead of writing invalid JSON."""
    kwargs.setdefault("separators", (",", ":"))
    return json.dumps(obj, allow_nan=False, **kwargs)


def _null_non_finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {key: _null_non_finite(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_null_non_finite(value) for value in obj]
    return obj


def dumps_outgoing(obj: Any, what: str, logger: Any = None, **kwargs: Any) -> str:
    """JSON for the network or a file: never NaN or infinities, never a credential. A non-finite
    value (a bug upstream, e.g. a rate over an empty window) is written as null and logged with its
    path, so the rest of the message still goes out as valid JSON; a URL's userinfo and secret
    query values (a camera's password) are written as *** (edge_sdk.redact)."""
    from edge_sdk.redact import redact

    try:
        return redact(dumps(obj, **kwargs))
    except ValueError:
        paths = [path for path, _ in non_finite(obj)]
        if logger is not None:
            logger.warning("%s: non-finite values at %s written as null", what, ", ".join(paths) or "?")
        return redact(dumps(_null_non_finite(obj), **kwargs))
