"""The retained status must fit what monitors accept (16 KiB), with room for what it gains while
the daemon runs: sixteen sources with long URIs made one the monitor dropped, and the device
vanished from the fleet with no word at start. The oracle is the size bound the monitor applies
to a status before it parses it (schemas.MAX_BYTES)."""
from __future__ import annotations

import json

import pytest

from edge_sdk.daemon.service import STATUS_HEADROOM, check_status_fits
from edge_sdk.errors import ConfigError
from edge_sdk.telemetry import schemas


def status(streams: int, uri_length: int) -> dict:
    uri = "rtsp://cam.local:554/" + "p" * max(0, uri_length - 21)
    return {"source": None, "bundle": "b", "bundle_hash": "0" * 16, "mode": "full",
            "streams": {f"cam{i}": {"source": uri, "mode": "full", "thresholds": {"score_threshold": 0.3}}
                        for i in range(streams)}}


def test_a_status_within_the_bound_passes() -> None:
    check_status_fits(status(16, 120))


def test_sixteen_long_uris_are_refused_at_start_naming_the_fix() -> None:
    too_big = status(16, 900)
    body = json.dumps(too_big).encode()
    assert len(body) > schemas.MAX_BYTES["status"] - STATUS_HEADROOM  # the monitor would drop it
    with pytest.raises(ConfigError, match=r"16 stream\(s\), the longest source URI 900 characters; shorten"):
        check_status_fits(too_big)
