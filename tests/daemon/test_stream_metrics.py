"""A device with several sources in the monitor: a table row per stream, and Prometheus series
with a `stream` label per stream and the batcher's efficiency, queue delay and batch sizes,
checked by `promtool` and a real Prometheus server."""
from __future__ import annotations

import io
import subprocess
from pathlib import Path
from typing import Any, Dict

import pytest

from edge_sdk.telemetry import schemas
from edge_sdk.telemetry.fleet import Fleet

from mqtt_broker import MessageLog
from polling import wait_until
from test_monitor_bounds import exposition, monitor_factory, publish, subscribed, telemetry  # noqa: F401
from test_prometheus import prometheus_server, tool  # noqa: F401 (a fixture)

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def two_streams(device: str, seq: int) -> Dict[str, Any]:
    """The telemetry of a device running "door" (its camera lost) and "yard" in batches of two."""
    door = {"fps": 0.0, "latency_ms": {}, "frames": {"captured": 40, "processed": 40, "dropped": 2, "cached": 0},
            "camera": {"state": "lost", "lost": 1, "back": 0}}
    yard = {"fps": 7.5, "latency_ms": {"total": {"p50": 20.0, "p95": 30.0, "p99": 42.0},
                                       "queue": {"p50": 1.0, "p95": 2.0, "p99": 4.0}},
            "frames": {"captured": 90, "processed": 88, "dropped": 2, "cached": 0},
            "frame_age_ms": {"p50": 6.0, "p95": 8.0, "p99": 9.0}, "camera": {"state": "ok", "lost": 2, "back": 2}}
    batch = {"efficiency": 0.75, "batches": 4, "max_batch_size": 2, "filled": 6, "slots": 8,
             "histogram": {"1": 2, "2": 2}, "queue_delay_ms": {"p50": 3.0, "p99": 10.0}}
    message = telemetry(device, seq, fps=7.5, streams={"door": door, "yard": yard}, batch=batch)
    assert schemas.errors(message) == []
    return message


def test_each_stream_and_the_batcher_become_series_that_pass_promtool() -> None:
    fleet = Fleet()
    assert fleet.update("edge-sdk/cam-1/telemetry", two_streams("cam-1", 1)) is not None
    text = exposition(fleet)
    check = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    samples: Dict[Any, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "device")))] = s.value
    assert samples[("edge_sdk_stream_frames_per_second", (("stream", "yard"),))] == 7.5
    assert samples[("edge_sdk_stream_frames_per_second", (("stream", "door"),))] == 0.0
    assert samples[("edge_sdk_stream_latency_seconds", (("quantile", "0.99"), ("stage", "total"), ("stream", "yard")))] \
        == 0.042
    assert samples[("edge_sdk_stream_frame_age_seconds", (("quantile", "0.5"), ("stream", "yard")))] == 0.006
    assert samples[("edge_sdk_stream_frames_total", (("kind", "processed"), ("stream", "yard")))] == 88.0
    assert samples[("edge_sdk_stream_camera_up", (("stream", "door"),))] == 0.0
    assert samples[("edge_sdk_stream_camera_up", (("stream", "yard"),))] == 1.0
    assert samples[("edge_sdk_stream_camera_lost_total", (("stream", "yard"),))] == 2.0
    assert samples[("edge_sdk_batch_efficiency_ratio", ())] == 0.75
    assert samples[("edge_sdk_batch_queue_delay_seconds", (("quantile", "0.99"),))] == 0.01
    assert samples[("edge_sdk_batches_in_window", (("size", "1"),))] == 2.0
    # a device with one stream has none of them
    fleet.update("edge-sdk/cam-2/telemetry", telemetry("cam-2", 1))
    assert 'device="cam-2"' not in "".join(line for line in exposition(fleet).splitlines(keepends=True)
                                           if "edge_sdk_stream_" in line or "edge_sdk_batch" in line)


def test_the_monitor_table_shows_a_row_per_stream() -> None:
    from rich.console import Console

    from edge_sdk.cli.monitor import render_table

    fleet = Fleet()
    fleet.update("edge-sdk/cam-1/telemetry", two_streams("cam-1", 1))
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(render_table(fleet))
    lines = out.getvalue().splitlines()
    door = next(line for line in lines if "└ door" in line)
    yard = next(line for line in lines if "└ yard" in line)
    assert door.split("│")[2].strip() == "lost" and door.split("│")[3].strip() == "0.0"
    assert [c.strip() for c in yard.split("│")[2:7]] == ["ok", "7.5", "20.0", "42.0", "2"]
    assert lines.index(door) < lines.index(yard) and any("cam-1" in line for line in lines[:lines.index(door)])


def test_the_monitor_table_shows_the_batch_efficiency_in_the_device_row() -> None:
    """The device row's `batch eff` is its batcher's efficiency (0.75 in the message: 75%); a
    device with one source, which has no batcher, shows "-"; the stream rows leave it empty."""
    from rich.console import Console

    from edge_sdk.cli.monitor import render_table

    fleet = Fleet()
    fleet.update("edge-sdk/cam-1/telemetry", two_streams("cam-1", 1))
    fleet.update("edge-sdk/cam-2/telemetry", telemetry("cam-2", 1))
    out = io.StringIO()
    Console(file=out, width=240, color_system=None).print(render_table(fleet))
    lines = out.getvalue().splitlines()
    header = [c.strip() for c in next(line for line in lines if "device" in line and "status" in line).split("┃")]
    column = header.index("batch eff")
    cell = {name: [c.strip() for c in next(line for line in lines if name in line).split("│")][column]
            for name in ("cam-1", "cam-2", "└ door", "└ yard")}
    assert cell == {"cam-1": "75%", "cam-2": "-", "└ door": "", "└ yard": ""}


def test_a_real_prometheus_answers_per_stream_fps_and_batch_efficiency(
        broker, tmp_path: Path, monitor_factory, prometheus_server) -> None:  # noqa: F811
    mon = monitor_factory(broker.url, tmp_path)
    server = prometheus_server(tmp_path / "prometheus", [f"127.0.0.1:{mon.port}"])
    log = MessageLog(broker.url, []).start()
    try:
        subscribed(mon, log, "cam-1")
        publish(log.client, "edge-sdk/cam-1/telemetry", two_streams("cam-1", 1))
        assert wait_until(lambda: server.query('edge_sdk_stream_frames_per_second{stream="yard"}') == {"cam-1": 7.5}, 60)
        assert server.query("edge_sdk_batch_efficiency_ratio") == {"cam-1": 0.75}
        assert server.query('edge_sdk_stream_camera_up{stream="door"}') == {"cam-1": 0.0}
    finally:
        log.stop()
