"""Scaling a fleet's consumers: monitors sharing a subscription (`--share`) on a real Mosquitto
split the telemetry between them and together receive all of it; the fleet bench runs (--quick:
simulated devices through a real broker to a monitor process, every message received)."""
from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from mqtt_broker import MessageLog
from polling import wait_until
from processes import complete
from test_monitor_bounds import monitor_factory, publish, subscribed, telemetry  # noqa: F401

pytest.importorskip("paho.mqtt.client")
BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_fleet.py"


def test_monitors_sharing_a_subscription_each_get_a_part_and_together_all(broker, tmp_path: Path,
                                                                          monitor_factory) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = monitor_factory(broker.url, tmp_path / "a", "--share", "fleet")
    b = monitor_factory(broker.url, tmp_path / "b", "--share", "fleet")
    log = MessageLog(broker.url, []).start()
    try:
        subscribed(a, log, "cam-0")  # retained status: every member reads all of it
        assert wait_until(lambda: b.value("edge_sdk_up", 'device="cam-0"') == 1.0, 120)
        sent = []

        def received(mon):
            return [(m["payload"]["device_id"], m["payload"]["seq"]) for m in mon.lines()
                    if m["topic"].endswith("/telemetry")]

        # The broker picks a member per message, and one that is busy (a loaded machine) may be
        # passed over for a while: publish in rounds, each waited for, until both have a share.
        for seq in range(1, 201):
            for d in range(10):
                name = f"cam-{d}"
                publish(log.client, f"edge-sdk/{name}/telemetry", telemetry(name, seq))
                sent.append((name, seq))
            assert wait_until(lambda: len(received(a)) + len(received(b)) >= len(sent), 120), \
                (len(received(a)), len(received(b)), len(sent))
            if seq >= 20 and received(a) and received(b):
                break
        got_a, got_b = received(a), received(b)
        assert got_a and got_b, "a shared subscription gives each member a part"
        assert Counter(got_a + got_b) == Counter(sent), "together every message, each once"
        statuses = [m for mon in (a, b) for m in mon.lines() if m["topic"] == "edge-sdk/cam-0/status"]
        assert len(statuses) == 2
    finally:
        log.stop()


def test_the_fleet_bench_runs_a_small_fleet_through_a_real_broker(mosquitto: str) -> None:
    out = complete([sys.executable, str(BENCH), "--quick"], timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    row = re.search(r"^\s+20\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)/(\d+)", out.stdout, re.M)
    assert row, out.stdout
    p50, p99, rss = float(row.group(3)), float(row.group(4)), float(row.group(5))
    received, sent = int(row.group(6)), int(row.group(7))
    assert sent >= 200 and received == sent, out.stdout
    assert 0 <= p50 <= p99 and rss > 10
    assert re.search(r"monitor: 20 devices; messages: \d+ accepted, 0 invalid", out.stdout), out.stdout
    validate = complete([sys.executable, str(BENCH), "--validate", "--count", "200"], timeout=300)
    assert validate.returncode == 0 and "validate: compiled" in validate.stdout, validate.stderr[-3000:]
