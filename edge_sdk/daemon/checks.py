"""Checks the daemon makes of its own state: the retained status fits what monitors accept, and
which config keys a SIGHUP cannot apply."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List

from edge_sdk.errors import ConfigError

# How long the outputs have to end at a stop: with the reload worker's 10 s and the last status's
# 5 s, the daemon stops within the unit's TimeoutStopSec (30 s) even with a stalled GStreamer process.
OUTPUT_STOP_S = 10.0
STATUS_HEADROOM = 3 * 1024  # what the status gains while it runs: shadow, A/B, download, engine build, a reason


def check_status_fits(status: Dict[str, Any]) -> None:
    """ConfigError when the retained status, with room for what it gains while the daemon runs
    (STATUS_HEADROOM), would be over the size monitors accept (schemas.MAX_BYTES["status"]): the
    monitor would drop every status, and the device would vanish from the fleet and its rollouts.
    Sixteen sources with long URIs are one way there."""
    from edge_sdk.telemetry.schemas import MAX_BYTES
    from edge_sdk.validate import dumps_outgoing

    size = len(dumps_outgoing(dict(status, schema="edge-sdk/status/1", device_id="", ts=0, seq=0,
                                   state="online", status_ts=0), "status").encode())
    limit = MAX_BYTES["status"]
    if size + STATUS_HEADROOM > limit:
        streams = status.get("streams") or {}
        longest = max((len(str(s.get("source") or "")) for s in streams.values()), default=0)
        raise ConfigError(
            f"the retained status would take {size:,} bytes, and with the {STATUS_HEADROOM:,} it gains while running "
            f"more than the {limit:,} monitors accept (the device would vanish from the fleet): "
            f"{len(streams)} stream(s), the longest source URI {longest} characters; shorten the source URIs "
            "(an RTSP path, not a query string) or run fewer [[sources]] on this device")


def changed_keys(section: str, old: Any, new: Any) -> List[str]:
    """`section.field` for each field of two config dataclasses that differs."""
    return [f"{section}.{f.name}" for f in dataclasses.fields(old) if getattr(old, f.name) != getattr(new, f.name)]
