"""`edge-sdk monitor` and `edge-sdk report` against a real broker, and the fleet model."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import pytest
from typer.testing import CliRunner

from edge_sdk.cli import app
from edge_sdk.telemetry.broker import BrokerConfig
from edge_sdk.telemetry.fleet import Fleet, prometheus_collector
from edge_sdk.telemetry.publisher import MqttPublisher
from edge_sdk.telemetry.schemas import TOPICS

from polling import wait_until
from processes import edge_sdk, finish, spawn

pytest.importorskip("paho.mqtt.client")


def tel(seq: int, fps: float = 30.0, p99: float = 20.0) -> Dict[str, Any]:
    return {"schema": "edge-sdk/telemetry/1", "device_id": "d1", "ts": 1000 * seq, "seq": seq, "window_s": 10,
            "fps": fps, "latency_ms": {"total": {"p50": p99 / 2, "p95": p99 * 0.9, "p99": p99}},
            "frames": {"captured": seq, "processed": seq, "dropped": 0, "cached": 0},
            "interval": {"seconds": 1, "captured": 1, "processed": 1, "dropped": 0, "drop_ratio": 0.0},
            "system": {"cpu_percent": 12.0, "temperature_max_c": 51.0, "power_mw": {"TOT": 6500.0}}}


def env(suffix: str, seq: int, device: str = "d1", **body: Any) -> Dict[str, Any]:
    """A message as a device sends it: envelope plus body."""
    return dict({"schema": TOPICS[suffix], "device_id": device, "ts": 1000 * seq, "seq": seq}, **body)


def alert(seq: int, name: str, state: str) -> Dict[str, Any]:
    return env("alerts", seq, alert=name, state=state, severity="warning", message=name)


def test_fleet_tracks_status_telemetry_alerts_and_repeats() -> None:
    fleet = Fleet()
    fleet.update("edge-sdk/d1/status", env("status", 1, state="online", bundle_hash="ab", started_ts=5))
    fleet.update("edge-sdk/d1/telemetry", tel(1))
    fleet.update("edge-sdk/d1/telemetry", tel(2, fps=25))
    fleet.update("edge-sdk/d1/telemetry", tel(1, fps=99))  # a QoS 1 repeat: ignored
    fleet.update("edge-sdk/d1/alerts", alert(1, "fps_low", "raised"))
    fleet.update("edge-sdk/d1/alerts", alert(2, "latency_p99", "raised"))
    fleet.update("edge-sdk/d1/alerts", alert(3, "fps_low", "cleared"))
    fleet.update("other/topic", {"x": 1})
    [row] = fleet.rows()
    assert row == {"device": "d1", "status": "online", "fps": 25, "p50": 10.0, "p99": 20.0, "dropped": 0,
                   "drop_ratio": 0.0, "temperature_c": 51.0, "power_w": 6.5, "alerts": ["latency_p99"], "bundle": "ab",
                   "streams": [], "batch_efficiency": None}
    assert fleet.devices["d1"].repeats == 1


def test_prometheus_exposition() -> None:
    prom = pytest.importorskip("prometheus_client")
    fleet = Fleet()
    fleet.update("edge-sdk/d1/status", env("status", 1, state="online"))
    fleet.update("edge-sdk/d1/telemetry", tel(1))
    fleet.update("edge-sdk/d1/alerts", alert(1, "temperature", "raised"))
    registry = prom.CollectorRegistry()
    registry.register(prometheus_collector(fleet))
    text = prom.generate_latest(registry).decode()
    for line in ('edge_sdk_up{device="d1"} 1.0', 'edge_sdk_frames_per_second{device="d1"} 30.0',
                 'edge_sdk_latency_seconds{device="d1",quantile="0.99",stage="total"} 0.02',
                 'edge_sdk_alert_open{alert="temperature",device="d1"} 1.0',
                 'edge_sdk_cpu_usage_ratio{device="d1"} 0.12', 'edge_sdk_power_watts{device="d1",rail="TOT"} 6.5'):
        assert line in text, text


def _publisher(url: str, tmp_path: Path, device: str = "d1") -> MqttPublisher:
    pub = MqttPublisher(BrokerConfig(url=url), device, tmp_path / f"{device}.sqlite3")
    pub.set_status({"started_ts": 1, "versions": {"edge_sdk": "t"}, "bundle_hash": "ab"})
    return pub.start()


def _body(i: int) -> Dict[str, Any]:
    b = tel(i, fps=20.0 + i, p99=10.0 + i)
    return {k: v for k, v in b.items() if k not in ("schema", "device_id", "ts", "seq")}


def test_monitor_records_and_report_plots(broker, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    record = tmp_path / "fleet.jsonl"
    pub = _publisher(broker.url, tmp_path)
    runner = CliRunner()
    proc = spawn(edge_sdk("monitor", "--broker", broker.url, "--json", "--record", str(record)),
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def telemetry_lines() -> List[Dict[str, Any]]:
        return [x for x in map(json.loads, record.read_text().splitlines()) if x["topic"].endswith("/telemetry")] \
            if record.exists() else []

    try:
        # the retained status arrives once the monitor subscribed
        assert wait_until(lambda: record.exists() and record.stat().st_size > 0, 120), "the monitor never subscribed"
        for i in range(10):
            pub.publish("telemetry", _body(i))
        assert wait_until(lambda: len(telemetry_lines()) >= 10, 120), telemetry_lines()
    finally:
        streamed, said = finish(proc, timeout=60)
        pub.stop()
    assert proc.returncode == 0, said
    assert [x["payload"]["fps"] for x in telemetry_lines()] == [20.0 + i for i in range(10)]
    assert streamed.count("\"topic\":\"edge-sdk/d1/telemetry\"") == 10  # --json streamed them too
    out = runner.invoke(app, ["report", str(record), "--out", str(tmp_path / "plots")])
    assert out.exit_code == 0, out.output
    png = (tmp_path / "plots" / "d1.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_report_on_a_file_without_telemetry_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "empty.jsonl"
    f.write_text('{"topic": "edge-sdk/d1/status", "payload": {"state": "online"}}\n')
    out = CliRunner().invoke(app, ["report", str(f)])
    assert out.exit_code == 2 and "no telemetry" in out.output


def test_shared_subscription_splits_telemetry_between_monitors(broker, tmp_path: Path) -> None:
    records = [tmp_path / f"m{i}.jsonl" for i in range(2)]
    pub = _publisher(broker.url, tmp_path)
    procs = [spawn(edge_sdk("monitor", "--broker", broker.url, "--share", "g", "--json", "--record", str(r)),
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for r in records]

    def shares() -> List[List[int]]:
        return [[json.loads(x)["payload"]["seq"] for x in r.read_text().splitlines() if "/telemetry" in x]
                if r.exists() else [] for r in records]

    published = 0
    try:
        # each monitor records the retained status once subscribed (bounds generous for a loaded machine)
        assert wait_until(lambda: all(r.exists() and r.stat().st_size for r in records), 120)
        # The broker picks a group member per message; publish in rounds until both have a share.
        while not all(shares()) and published < 2000:
            for _ in range(10):
                pub.publish("telemetry", _body(published))
                published += 1
            assert wait_until(lambda: sum(len(s) for s in shares()) >= published, 120), (shares(), published)
        got = shares()
    finally:
        for p in procs:
            finish(p, timeout=60)
        pub.stop()
    assert sorted(got[0] + got[1]) == list(range(1, published + 1)), "the group must receive each message exactly once"
    assert got[0] and got[1], "both members should get a share"
