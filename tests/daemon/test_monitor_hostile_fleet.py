"""The issue's bad input, through a real Mosquitto to `edge-sdk monitor --prometheus`: device ids
with quotes and backslashes, and sensor names with newlines too (Mosquitto refuses a topic with a
control character), come out of /metrics exactly (promtool-clean), a 10 kB id never does; 50,000 distinct device ids leave the monitor's memory bounded, every id beyond
--max-devices counted as evicted, and /metrics as large as --max-devices allows. (~20 s: the
50,000 messages are what the bound is about.)"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mqtt_broker import MessageLog
from polling import wait_until
from test_monitor_bounds import monitor_factory, publish, subscribed, telemetry  # noqa: F401
from test_prometheus import tool

prom = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

HOSTILE = ['q"uote', "back\\slash", 'all"\\{}=,"', "ünï €", "sp ace"]
SENSORS = {'G"PU\n\\': 47.0, "CPU": 51.5}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmRSS")


def test_hostile_ids_come_out_of_metrics_exactly_and_a_huge_one_never(broker, tmp_path: Path,
                                                                      monitor_factory) -> None:
    mon = monitor_factory(broker.url, tmp_path)
    log = MessageLog(broker.url, []).start()
    try:
        subscribed(mon, log, "first")
        huge = "x" * 10_000
        publish(log.client, f"edge-sdk/{huge}/telemetry", telemetry(huge, 1))
        for i, name in enumerate(HOSTILE):
            publish(log.client, f"edge-sdk/{name}/telemetry",
                    telemetry(name, 1, fps=10.0 + i, system={"temperature_c": SENSORS}))

        def fps() -> dict:
            families = {f.name: f for f in text_string_to_metric_families(mon.metrics())}
            f = families.get("edge_sdk_frames_per_second")
            return {s.labels["device"]: s.value for s in f.samples} if f else {}

        want = {name: 10.0 + i for i, name in enumerate(HOSTILE)}
        assert wait_until(lambda: fps() == want, 30), fps()
        text = mon.metrics()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        temps = {(s.labels["device"], s.labels["sensor"]): s.value for s in families["edge_sdk_temperature_celsius"].samples}
        assert temps == {(name, sensor): value for name in HOSTILE for sensor, value in SENSORS.items()}
        check = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True,
                               timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "xxxxxxxxxx" not in text
        assert mon.value("edge_sdk_monitor_messages_total", 'outcome="invalid"') == 1.0  # the 10 kB id
    finally:
        log.stop()


def test_fifty_thousand_device_ids_keep_the_monitor_bounded(broker, tmp_path: Path, monitor_factory) -> None:
    mon = monitor_factory(broker.url, tmp_path, "--max-devices", "1000")
    log = MessageLog(broker.url, [])
    log.client.max_inflight_messages_set(1000)
    log.start()
    try:
        subscribed(mon, log, "first")
        before = rss_mib(mon.proc.pid)
        last = None
        for i in range(50_000):
            name = f"id-{i:05d}"
            last = log.client.publish(f"edge-sdk/{name}/telemetry", json.dumps(telemetry(name, 1)).encode(), qos=1)
        last.wait_for_publish(60)

        def outcomes() -> dict:
            families = {f.name: f for f in text_string_to_metric_families(mon.metrics())}
            return {s.labels["outcome"]: s.value for s in families["edge_sdk_monitor_messages"].samples
                    if s.name.endswith("_total")} if "edge_sdk_monitor_messages" in families else {}

        # every message is accounted for: applied, or dropped from a full backlog (counted)
        assert wait_until(lambda: outcomes().get("accepted", 0) + outcomes().get("backlog", 0) >= 50_001, 120), \
            outcomes()
        c = outcomes()
        text = mon.metrics()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert families["edge_sdk_monitor_devices"].samples[0].value == 1000.0
        evicted = {s.labels["reason"]: s.value for s in families["edge_sdk_monitor_evictions"].samples
                   if s.name.endswith("_total")}
        assert evicted["capacity"] == c["accepted"] - 1000  # every new id beyond 1000 pushed the oldest out
        assert len(families["edge_sdk_up"].samples) == 1000 and c["invalid"] == 0
        after = rss_mib(mon.proc.pid)
        print(f"50,000 ids: {c}; evicted {evicted}; monitor RSS {before:.0f} -> {after:.0f} MiB")
        assert after - before < 100, (before, after)
    finally:
        log.stop()
