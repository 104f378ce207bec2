"""The JSON Schemas of every topic, shipped in ``edge_sdk/schemas/``, and the message envelope."""
from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from edge_sdk import _imports
from edge_sdk.errors import ConfigError

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"

# topic suffix -> schema id
TOPICS = {
    "status": "edge-sdk/status/1",
    "telemetry": "edge-sdk/telemetry/1",
    "alerts": "edge-sdk/alert/1",
    "detections": "edge-sdk/detections/1",
    "cmd": "edge-sdk/cmd/1",
    "cmd/response": "edge-sdk/cmd-response/1",
    "shadow": "edge-sdk/shadow/1",
    "ab": "edge-sdk/ab/1",
}
_FILES = {
    "edge-sdk/status/1": "status.json",
    "edge-sdk/telemetry/1": "telemetry.json",
    "edge-sdk/alert/1": "alert.json",
    "edge-sdk/detections/1": "detections.json",
    "edge-sdk/cmd/1": "cmd.json",
    "edge-sdk/cmd-response/1": "cmd_response.json",
    "edge-sdk/shadow/1": "shadow.json",
    "edge-sdk/ab/1": "ab.json",
}
TOPIC_ROOT = "edge-sdk"

# topic suffix -> the largest payload (bytes) a consumer accepts on it, checked before parsing
# (commands: edge_sdk.daemon.commands.MAX_PAYLOAD).
# What the daemon sends is far smaller (telemetry ~2 KB, status ~1 KB, an alert ~300 B); a
# per-frame detections message of 300 boxes (decoders' default max_detections) is ~21 KB, one of
# 4096 (the schema's bound) ~285 KB, which takes ~0.2 s to validate.
MAX_BYTES = {
    "status": 16 * 1024,
    "telemetry": 32 * 1024,
    "alerts": 16 * 1024,
    "detections": 384 * 1024,
    "cmd/response": 64 * 1024,
    "shadow": 16 * 1024,
    "ab": 16 * 1024,
}

_cache: Dict[str, Any] = {}
_compiled: Dict[str, Callable[[Any], Optional[str]]] = {}


def topic(device_id: str, suffix: str) -> str:
    """`edge-sdk/<device_id>/<suffix>`."""
    return f"{TOPIC_ROOT}/{device_id}/{suffix}"


def split_topic(name: str) -> Optional[tuple]:
    """`edge-sdk/dev1/cmd/response` -> ("dev1", "cmd/response"); None for foreign topics.

    A shared-subscription prefix (``$share/<group>/``) is not part of a received topic name.
    """
    parts = name.split("/", 2)
    if len(parts) != 3 or parts[0] != TOPIC_ROOT or not parts[1]:
        return None
    return parts[1], parts[2]


def now_ms() -> int:
    return int(time.time() * 1000)


def load_schema(schema_id: str) -> Dict[str, Any]:
    """The JSON Schema document for `schema_id` (e.g. "edge-sdk/telemetry/1")."""
    try:
        name = _FILES[schema_id]
    except KeyError:
        raise ConfigError(f"unknown message schema {schema_id!r}; known: {', '.join(sorted(_FILES))}") from None
    return json.loads((SCHEMA_DIR / name).read_text())


def validator(schema_id: str) -> Any:
    """A cached jsonschema validator (needs the `mqtt` extra: jsonschema)."""
    v = _cache.get(schema_id)
    if v is None:
        jsonschema = _imports.require("jsonschema")
        doc = load_schema(schema_id)
        cls = jsonschema.validators.validator_for(doc)
        cls.check_schema(doc)
        v = cls(doc)
        _cache[schema_id] = v
    return v


def compiled(schema_id: str) -> Callable[[Any], Optional[str]]:
    """A cached check of `schema_id`: message -> its first validation error, or None when valid.

    Compiled to Python code by fastjsonschema when it is installed (a daemon's telemetry message:
    ~65 us instead of ~750 us with jsonschema; `bench/bench_fleet.py --validate`), jsonschema
    otherwise; consumers try `fastcheck.valid` on the bytes first. Both accept and refuse the same messages (tests/telemetry/test_compiled_schemas.py),
    with one difference: a `pattern` ending in `$` does not match before a trailing newline here,
    as ECMA-262 (the regex dialect of JSON Schema) has it, while jsonschema's Python `re` lets
    one newline through. The documents are drafts 2020-12 in the keywords they use that draft 7
    also has ($ref to $defs, const, if/then, propertyNames, exclusiveMinimum as a number), so they
    compile as draft 7; no $ref leaves the document."""
    check = _compiled.get(schema_id)
    if check is None:
        check = _compile(schema_id)
        _compiled[schema_id] = check
    return check


def _compile(schema_id: str) -> Callable[[Any], Optional[str]]:
    if not _imports.available("fastjsonschema"):
        v = validator(schema_id)

        def check_with_jsonschema(message: Any) -> Optional[str]:
            err = next(v.iter_errors(message), None)
            if err is None:
                return None
            return f"{'/'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"

        return check_with_jsonschema
    fastjsonschema = _imports.require("fastjsonschema")
    doc = load_schema(schema_id)
    doc.pop("$id", None)  # a relative id would make fastjsonschema resolve $ref against it
    doc["$schema"] = "http://json-schema.org/draft-07/schema#"
    validate = fastjsonschema.compile(doc, handlers={}, use_default=False, use_formats=False)
    invalid = fastjsonschema.JsonSchemaException

    def check_compiled(message: Any) -> Optional[str]:
        try:
            validate(message)
        except invalid as exc:
            return str(exc.message)
        return None

    return check_compiled


def errors(message: Dict[str, Any], schema_id: Optional[str] = None, limit: Optional[int] = None) -> List[str]:
    """Validation errors of `message` against its schema (its own `schema` field by default);
    the first `limit` only, when given: finding the first costs what `is_valid` does, finding
    all of them validates everything (40 ms for a 20 KB message with 600 stage names)."""
    sid = schema_id or message.get("schema")
    if not isinstance(sid, str) or sid not in _FILES:
        return [f"unknown schema {sid!r}"]
    out = []
    for err in itertools.islice(validator(sid).iter_errors(message), limit):
        where = "/".join(str(p) for p in err.absolute_path) or "<root>"
        out.append(f"{where}: {err.message}")
    return out
