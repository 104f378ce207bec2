"""The JSON Schemas of every topic, shipped in ``edge_sdk/schemas/``, and the message envelope."""
from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

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
}
_FILES = {
    "edge-sdk/status/1": "status.json",
    "edge-sdk/telemetry/1": "telemetry.json",
    "edge-sdk/alert/1": "alert.json",
    "edge-sdk/detections/1": "detections.json",
    "edge-sdk/cmd/1": "cmd.json",
    "edge-sdk/cmd-response/1": "cmd_response.json",
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
}

_cache: Dict[str, Any] = {}


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
