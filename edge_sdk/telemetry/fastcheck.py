"""A consumer's fast path: parse and validate a message's bytes in C (msgspec), decide in Python
only when the fast path declines.

`parse(raw, max_bytes)` returns what `validate.loads_untrusted` returns and refuses what it
refuses: msgspec parses; where it refuses, or where the bytes hold an integer of 19 digits or
more (which msgspec takes and loads_untrusted bounds to 64 bits), loads_untrusted decides.

`valid(raw, suffix)` is True only for a message its topic's JSON Schema accepts: the bytes
decode into msgspec types built from the schema (`types_from_schema`), which are never looser
than the schema — never looser, sometimes stricter: `1.0` is not an integer to msgspec, a float
field takes the JSON number as float. False means "not decided here": the compiled check
(`schemas.compiled`) decides. A schema with a keyword the translation does not know (if/then, for
one) has no fast path. `tests/telemetry/test_fastcheck.py` checks both promises with
hypothesis against jsonschema and loads_untrusted.

Measured with `bench/bench_fleet.py --validate`: parse and fast check of a daemon's telemetry
message take about a sixth of loads_untrusted plus the compiled check.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from edge_sdk import _imports
from edge_sdk.telemetry import schemas
from edge_sdk.validate import MAX_DEPTH, json_depth, loads_untrusted

from typing_extensions import Annotated  # typing.Annotated from Python 3.9 on; the device runs 3.8

# every digit to "0", everything else to " ": a run of 19 "0" is an integer loads_untrusted bounds
_DIGITS = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_LONG_RUN = b"0" * 19
_types: Dict[str, Any] = {}
_KNOWN = {"type", "properties", "required", "additionalProperties", "const", "enum", "minimum", "maximum",
          "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "maxProperties",
          "minProperties", "propertyNames", "items", "minItems", "maxItems", "$ref", "description", "title",
          "$schema", "$id", "$defs"}


class Unsupported(ValueError):
    """The schema uses a keyword this translation does not carry: no fast path for it."""


_msgspec: List[Any] = []  # the module, once imported; [None] when it is not installed


def _module() -> Any:
    if not _msgspec:
        _msgspec.append(_imports.require("msgspec") if _imports.available("msgspec") else None)
    return _msgspec[0]


def available() -> bool:
    return _module() is not None


def parse(raw: bytes, max_bytes: int) -> Any:
    """`loads_untrusted(raw, max_bytes)`, mostly in C."""
    if len(raw) > max_bytes or _LONG_RUN in raw.translate(_DIGITS) or _module() is None \
            or (raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and json_depth(raw) > MAX_DEPTH):
        return loads_untrusted(raw, max_bytes)
    msgspec = _msgspec[0]
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
        return loads_untrusted(raw, max_bytes)  # refuses it, with the reason; or takes what msgspec did not


def valid(raw: bytes, suffix: str) -> bool:
    """True: the payload validates against the schema of topic `suffix`. False: undecided."""
    schema_id = schemas.TOPICS.get(suffix)
    msgspec = _module()
    if schema_id is None or msgspec is None:
        return False
    decoder = _types.get(schema_id)
    if decoder is None:
        try:
            decoder = msgspec.json.Decoder(types_from_schema(schemas.load_schema(schema_id)))
        except (Unsupported, TypeError):  # TypeError: a union msgspec cannot decode
            decoder = False
        _types[schema_id] = decoder
    if decoder is False:
        return False
    try:
        decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
        return False
    return True


def types_from_schema(doc: Dict[str, Any]) -> Any:
    """msgspec types that accept no more than the JSON Schema `doc` (the subset its schemas use)."""
    return _Translator(doc).type_of(doc, "Message")


class _Translator:
    def __init__(self, doc: Dict[str, Any]) -> None:
        self.doc = doc
        self.count = 0
        self.msgspec = _imports.require("msgspec")

    def meta(self, base: Any, **constraints: Any) -> Any:
        given = {k: v for k, v in constraints.items() if v is not None}
        return Annotated[base, self.msgspec.Meta(**given)] if given else base

    def type_of(self, node: Dict[str, Any], name: str) -> Any:
        from typing import Literal, Union

        unknown = set(node) - _KNOWN
        if unknown:
            raise Unsupported(f"keywords {sorted(unknown)}")
        if "$ref" in node:
            ref = node["$ref"]
            if not ref.startswith("#/$defs/") or set(node) - {"$ref", "description"}:
                raise Unsupported(f"$ref {ref}")
            return self.type_of(self.doc["$defs"][ref.rsplit("/", 1)[1]], ref.rsplit("/", 1)[1])
        if "const" in node:
            if not isinstance(node["const"], str) or set(node) - {"const", "description"}:
                raise Unsupported("const")
            return Literal[node["const"]]  # type: ignore[valid-type]
        if "enum" in node:
            if not all(isinstance(v, str) for v in node["enum"]) or set(node) - {"enum", "description"}:
                raise Unsupported("enum")
            return Literal[tuple(node["enum"])]  # type: ignore[valid-type]
        kinds = node.get("type")
        if kinds is None:
            raise Unsupported("no type")
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        options = [self.one_type(node, kind, name) for kind in kinds]
        return options[0] if len(options) == 1 else Union[tuple(options)]  # type: ignore[return-value]

    def one_type(self, node: Dict[str, Any], kind: str, name: str) -> Any:
        from typing import Any as AnyType, Dict as DictType, List as ListType

        if kind == "null":
            return type(None)
        if kind == "boolean":
            return bool
        if kind in ("number", "integer"):
            return self.meta(int if kind == "integer" else float, ge=node.get("minimum"), le=node.get("maximum"),
                             gt=node.get("exclusiveMinimum"), lt=node.get("exclusiveMaximum"))
        if kind == "string":
            return self.meta(str, min_length=node.get("minLength"), max_length=node.get("maxLength"),
                             pattern=_ecma(node.get("pattern")))
        if kind == "array":
            item = self.type_of(node["items"], name + "Item") if "items" in node else AnyType
            return self.meta(ListType[item], min_length=node.get("minItems"), max_length=node.get("maxItems"))
        if kind != "object":
            raise Unsupported(f"type {kind}")
        props = node.get("properties")
        extra = node.get("additionalProperties", True)
        if props is None:
            names = node.get("propertyNames", {})
            if set(names) - {"pattern", "maxLength"}:
                raise Unsupported("propertyNames")
            key = self.meta(str, max_length=names.get("maxLength"), pattern=_ecma(names.get("pattern")))
            value = AnyType if extra is True else self.type_of(extra, name + "Value") if isinstance(extra, dict) \
                else None
            if value is None:
                raise Unsupported("additionalProperties false without properties")
            return self.meta(DictType[key, value], min_length=node.get("minProperties"),
                             max_length=node.get("maxProperties"))
        if extra not in (True, False) or {"propertyNames", "maxProperties", "minProperties"} & set(node):
            raise Unsupported("properties with additionalProperties or size bounds")
        required = set(node.get("required", ()))
        if required - set(props):
            raise Unsupported("required names no property")
        fields: List[Tuple[str, Any, Any]] = []
        rename: Dict[str, str] = {}
        for i, (key, sub) in enumerate(props.items()):
            attr = f"f{i}"
            rename[attr] = key
            t = self.type_of(sub, f"{name}_{i}")
            fields.append((attr, t) if key in required else (attr, t, None))  # type: ignore[arg-type]
        fields.sort(key=lambda f: len(f) == 3)  # required first
        self.count += 1
        return self.msgspec.defstruct(f"{name}{self.count}", fields, rename=rename, forbid_unknown_fields=not extra)


def _ecma(pattern: Optional[str]) -> Optional[str]:
    """A JSON Schema pattern for Python's re as ECMA-262 reads it: `$` only at the very end."""
    if pattern is None:
        return None
    if "$" in pattern[:-1]:
        raise Unsupported(f"pattern {pattern!r}")
    return pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern
