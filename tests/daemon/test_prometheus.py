"""The monitor's /metrics by Prometheus' conventions, checked by Prometheus' own tools: `promtool
check metrics` (names, units, types) on an exposition with hostile label values, label values
that come back unchanged through the text format, the example alert rules, and a real Prometheus
server scraping a monitor on a real Mosquitto, asked over its HTTP API for each device's fps."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

from edge_sdk.telemetry.fleet import Fleet
from edge_sdk.telemetry.intake import Intake

from mqtt_broker import MessageLog, free_port
from polling import wait_until
from test_monitor_bounds import alert, exposition, monitor_factory, publish, status, subscribed, telemetry  # noqa: F401

prom = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

HOSTILE = ['quote"d', "back\\slash", "new\nline", "tab\there", "ünï €", "{}=,", 'x\\"y\\n']
JETSON_SYSTEM = {"cpu_percent": 35.0, "gpu_percent": 60.0, "memory_percent": 40.0, "load_1m": 1.5,
                 "memory_used_mb": 2048.0, "process_rss_mb": 300.0, "temperature_c": {"CPU": 48.5, 'G"PU\n': 47.0},
                 "temperature_max_c": 48.5, "power_mw": {"VDD_IN": 7100, "VDD\\CPU": 1200}, "jetson_clocks": True}


def tool(name: str) -> str:
    """A binary of Debian's `prometheus` package: skips without it, fails when CI is set."""
    found = shutil.which(name)
    if found is None:
        reason = f"{name} is not installed (apt-get install -y prometheus)"
        if os.environ.get("CI"):
            pytest.fail(reason + "; CI must check the exposition with Prometheus' own tools")
        pytest.skip(reason)
    return found


def hostile_fleet() -> Fleet:
    fleet = Fleet()
    for i, name in enumerate(HOSTILE):
        fleet.update(f"edge-sdk/{name}/status", status(name, 1, "online", 1000 + i, "i1"))
        latency = {"total": {"p50": 12.5, "p95": 20.0, "p99": 31.0}, "infer": {"p50": 8.0, "p95": 9.0, "p99": 10.0}}
        fleet.update(f"edge-sdk/{name}/telemetry", telemetry(name, 2, fps=10.0 + i, latency=latency,
                                                             system=JETSON_SYSTEM))
        fleet.update(f"edge-sdk/{name}/alerts", alert(name, 3, "temperature"))
    assert fleet.invalid == 0
    return fleet


def test_the_exposition_passes_promtool(tmp_path: Path) -> None:
    promtool = tool("promtool")
    text = exposition(hostile_fleet(), Intake(lambda *a: None))
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "quantile=\"p" not in text and "_ms" not in text


def test_units_types_and_label_values_come_back_unchanged() -> None:
    families = {f.name: f for f in text_string_to_metric_families(exposition(hostile_fleet()))}
    assert families["edge_sdk_latency_seconds"].type == "summary"
    assert families["edge_sdk_frames"].type == "counter"
    assert families["edge_sdk_monitor_messages"].type == "counter"
    assert families["edge_sdk_monitor_message_age_seconds"].type == "histogram"
    latency = {(s.labels["device"], s.labels["stage"], s.labels["quantile"]): s.value
               for s in families["edge_sdk_latency_seconds"].samples}
    fps = {s.labels["device"]: s.value for s in families["edge_sdk_frames_per_second"].samples}
    assert fps == {name: 10.0 + i for i, name in enumerate(HOSTILE)}  # every hostile id, exactly
    for name in HOSTILE:
        assert latency[(name, "total", "0.5")] == 0.0125 and latency[(name, "total", "0.99")] == 0.031
        assert latency[(name, "infer", "0.95")] == 0.009
    temps = {(s.labels["device"], s.labels["sensor"]): s.value for s in families["edge_sdk_temperature_celsius"].samples}
    assert temps[("new\nline", 'G"PU\n')] == 47.0
    watts = {(s.labels["device"], s.labels["rail"]): s.value for s in families["edge_sdk_power_watts"].samples}
    assert watts[("quote\"d", "VDD\\CPU")] == 1.2
    one = {s.name: s.value for f in families.values() for s in f.samples if s.labels.get("device") == "tab\there"}
    assert one["edge_sdk_cpu_usage_ratio"] == 0.35 and one["edge_sdk_gpu_usage_ratio"] == 0.6
    assert one["edge_sdk_memory_used_bytes"] == 2048 * 2 ** 20 and one["edge_sdk_jetson_clocks_enabled"] == 1.0
    frames = {s.labels["kind"]: s.value for s in families["edge_sdk_frames"].samples if s.labels["device"] == "tab\there"}
    assert frames == {"captured": 2.0, "processed": 2.0, "dropped": 0.0, "cached": 0.0}


def test_a_ten_kilobyte_id_or_name_never_becomes_a_label() -> None:
    fleet = Fleet()
    huge = "x" * 10_000
    assert fleet.update(f"edge-sdk/{huge}/telemetry", telemetry(huge, 1)) is None
    assert fleet.update("edge-sdk/ok/alerts", alert("ok", 1, huge)) is None
    sensors = dict(JETSON_SYSTEM, temperature_c={huge: 1.0})
    assert fleet.update("edge-sdk/ok/telemetry", telemetry("ok", 2, system=sensors)) is None
    text = exposition(fleet)
    assert fleet.invalid == 3 and "xxxxxxxxxx" not in text
    assert 'edge_sdk_monitor_messages_total{outcome="invalid"} 3.0' in text


def test_the_example_alert_rules_are_valid_and_use_exported_names() -> None:
    promtool = tool("promtool")
    rules = Path(__file__).resolve().parents[2] / "apps" / "fleet_dashboard" / "alerts.yml"
    check = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    fleet = hostile_fleet()
    intake = Intake(lambda *a: None)
    exported = {s.name for f in text_string_to_metric_families(exposition(fleet, intake)) for s in f.samples}
    used = set(re.findall(r"\b(edge_sdk_[a-z_]+)", rules.read_text()))
    assert used and used <= exported, used - exported


# -- a real Prometheus server -------------------------------------------------------------------

class PrometheusServer:
    """`prometheus` on 127.0.0.1 and a free port, scraping `targets` every 0.5 s, data in tmp."""

    def __init__(self, binary: str, folder: Path, targets: List[str]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        config = folder / "prometheus.yml"
        config.write_text(json.dumps({  # YAML is a superset of JSON
            "global": {"scrape_interval": "500ms", "evaluation_interval": "500ms"},
            "scrape_configs": [{"job_name": "edge-sdk-fleet", "metrics_path": "/metrics",
                                "static_configs": [{"targets": targets}]}]}))
        self.log = open(folder / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=self.log, stderr=subprocess.STDOUT)

    def get(self, path: str, **query: str) -> Optional[Dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}{path}" + ("?" + urllib.parse.urlencode(query) if query else "")
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                body = reply.read().decode()
        except OSError:
            return None
        return json.loads(body) if body.startswith("{") else {"text": body}

    def query(self, promql: str) -> Dict[str, float]:
        """{device: value} of an instant query."""
        reply = self.get("/api/v1/query", query=promql) or {}
        assert reply.get("status", "success") == "success", reply
        return {r["metric"].get("device", ""): float(r["value"][1]) for r in (reply.get("data") or {}).get("result", [])}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


@pytest.fixture
def prometheus_server() -> Iterator[Any]:
    binary = tool("prometheus")
    made: List[PrometheusServer] = []

    def make(folder: Path, targets: List[str]) -> PrometheusServer:
        made.append(PrometheusServer(binary, folder, targets))
        return made[-1]

    yield make
    for p in made:
        p.stop()


def test_a_real_prometheus_scrapes_the_monitor_and_answers_per_device_fps(
        broker, tmp_path: Path, monitor_factory, prometheus_server) -> None:
    mon = monitor_factory(broker.url, tmp_path)
    server = prometheus_server(tmp_path / "prometheus", [f"127.0.0.1:{mon.port}"])
    log = MessageLog(broker.url, []).start()
    try:
        subscribed(mon, log, "cam-1")
        publish(log.client, "edge-sdk/cam-2/status", status("cam-2", 1, "online", 1, "i2"), retain=True)
        publish(log.client, "edge-sdk/cam-1/telemetry", telemetry("cam-1", 1, fps=24.5))
        publish(log.client, 'edge-sdk/cam-2/telemetry', telemetry("cam-2", 1, fps=11.0))
        want = {"cam-1": 24.5, "cam-2": 11.0}
        assert wait_until(lambda: server.query("edge_sdk_frames_per_second") == want, 60), \
            (server.query("edge_sdk_frames_per_second"), (tmp_path / "prometheus" / "prometheus.log").read_text()[-2000:])
        up = server.query('up{job="edge-sdk-fleet"}')
        assert list(up.values()) == [1.0]  # the scrape itself succeeded
        p99 = server.query('edge_sdk_latency_seconds{stage="total",quantile="0.99"}')
        assert p99 == {"cam-1": 0.009, "cam-2": 0.009}
    finally:
        log.stop()


def test_the_monitors_own_lag_is_exported_as_histograms() -> None:
    """Waiting in the intake: 2.6 s on a stepped clock; age on arrival: 0.3 s after the device's ts."""
    now = [10_000]
    handled = []
    fleet = Fleet()
    intake = Intake(lambda topic, raw, received: handled.append(fleet.update(topic, json.loads(raw), received)),
                    clock=lambda: now[0])
    message = telemetry("cam-1", 1)
    message["ts"] = 10_000 - 300
    assert intake.put("edge-sdk/cam-1/telemetry", json.dumps(message).encode()) is None
    now[0] += 2600
    intake.start()
    intake.stop()
    assert handled and handled[0] is not None
    families = {f.name: f for f in text_string_to_metric_families(exposition(fleet, intake))}
    wait = {s.labels.get("le"): s.value for s in families["edge_sdk_monitor_queue_wait_seconds"].samples}
    assert wait["2.5"] == 0.0 and wait["5.0"] == 1.0 and wait["+Inf"] == 1.0
    assert {s.name: s.value for s in families["edge_sdk_monitor_queue_wait_seconds"].samples}[
        "edge_sdk_monitor_queue_wait_seconds_sum"] == 2.6
    age = {s.labels.get("le"): s.value for s in families["edge_sdk_monitor_message_age_seconds"].samples}
    assert age["0.25"] == 0.0 and age["0.5"] == 1.0
    queued = families["edge_sdk_monitor_queued_messages"].samples[0].value
    assert queued == 0.0
