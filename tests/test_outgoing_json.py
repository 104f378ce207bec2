"""Nothing we publish or write is invalid JSON: NaN and infinities go out as null, logged."""
from __future__ import annotations

import io
import json
import logging
import math

import pytest

from edge_sdk.telemetry.publisher import LinePublisher
from edge_sdk.validate import dumps_outgoing


def strict_loads(text: str):
    def refuse(name: str):
        raise ValueError(f"invalid JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_dumps_outgoing_nulls_non_finite_values_and_names_them(bad: float, caplog: pytest.LogCaptureFixture) -> None:
    message = {"fps": bad, "stages": {"infer": [1.0, bad]}, "frames": 3}
    with caplog.at_level(logging.WARNING):
        text = dumps_outgoing(message, "telemetry", logging.getLogger("t"))
    assert strict_loads(text) == {"fps": None, "stages": {"infer": [1.0, None]}, "frames": 3}
    assert "fps" in caplog.text and "stages.infer[1]" in caplog.text


def test_dumps_outgoing_leaves_finite_messages_alone() -> None:
    message = {"fps": 29.5, "n": [1, 2], "s": "x"}
    assert dumps_outgoing(message, "telemetry") == json.dumps(message, separators=(",", ":"))


def test_line_publisher_never_writes_nan() -> None:
    stream = io.StringIO()
    publisher = LinePublisher("dev-1", stream=stream)
    with publisher:
        publisher.publish("telemetry", {"fps": math.nan, "frames": 1})
    lines = [strict_loads(line) for line in stream.getvalue().splitlines()]
    telemetry = [line["payload"] for line in lines if line["topic"].endswith("/telemetry")]
    assert telemetry and telemetry[0]["fps"] is None and telemetry[0]["frames"] == 1
