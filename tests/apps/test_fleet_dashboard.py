"""apps/fleet_dashboard: every metric and label value the Grafana dashboard queries exists in what
`edge-sdk monitor --prometheus` exports, fed with the messages of real daemon runs (one source:
telemetry, status and a real calibration_drift alert; two [[sources]]: the per-stream and batcher
series); the scrape config points at the monitor's port."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Dict, Set, Tuple

import pytest

from app_loader import APPS

prometheus_client = pytest.importorskip("prometheus_client")
pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")

from edge_sdk.telemetry import exposition  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

FOLDER = APPS / "fleet_dashboard"
DASHBOARD = json.loads((FOLDER / "grafana-dashboard.json").read_text())
METRIC = re.compile(r"\b(edge_sdk_[a-z_]+)\b(?:\{([^}]*)\})?")
EXACT = re.compile(r'(\w+)="([^"$]*)"')


def exprs() -> list:
    return [t["expr"] for p in DASHBOARD["panels"] for t in p["targets"]]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Dict[str, Set[Tuple[str, str]]]:
    """{metric: {(label, value)}} scraped from the monitor's collector after a real daemon run."""
    from edge_sdk.daemon import Daemon, daemon_config_from_dict
    from edge_sdk.builder.input_stats import input_stats
    from edge_sdk.telemetry.fleet import Fleet, prometheus_collector
    from tiny_bundle import make_tiny_bundle

    root = tmp_path_factory.mktemp("fleet")
    frame = (root / "calib.png")
    from edge_sdk.runtime.synthetic import SyntheticFaces

    cv2.imwrite(str(frame), SyntheticFaces.from_uri("synthetic://faces?width=320&height=192&count=3").render(0))
    bundle = make_tiny_bundle(root / "bundle")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["input_stats"] = input_stats([frame])
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    stream = io.StringIO()
    cfg = daemon_config_from_dict({
        "bundle": str(bundle), "backend": "onnxruntime-cpu", "threads": 1, "max_frames": 60,
        "source": {"uri": "synthetic://faces?width=320&height=192&count=3&gray=1"}, "cache": {"enabled": False},
        "device": {"id": "cam-7"}, "telemetry": {"interval_s": 0.05},
        "health": {"drift_sample_s": 0.0005, "drift_window": 5}})
    assert Daemon(cfg, stream=stream).run() == 0
    streams = daemon_config_from_dict({  # two cameras through one model: the stream and batch series
        "bundle": str(bundle), "backend": "onnxruntime-cpu", "threads": 1, "cache": {"enabled": False},
        "sources": [{"id": sid, "uri": f"synthetic://faces?width=320&height=192&count=3&frames=30&seed={seed}"}
                    for sid, seed in (("door", 1), ("yard", 2))],
        "device": {"id": "cam-8"}, "telemetry": {"interval_s": 0.05}})
    assert Daemon(streams, stream=stream).run() == 0
    fleet = Fleet()
    telemetry = None
    for line in stream.getvalue().splitlines():
        message = json.loads(line)
        fleet.update(message["topic"], message["payload"])
        if message["topic"].endswith("/telemetry"):
            telemetry = message["payload"]
    # temperatures and power rails are read on a Jetson only: its telemetry as the schema has it
    jetson = dict(telemetry, device_id="nx-1", system={
        "cpu_percent": 35.0, "gpu_percent": 60.0, "temperature_c": {"CPU": 48.5, "GPU": 47.0},
        "temperature_max_c": 48.5, "power_mw": {"VDD_IN": 7100}, "jetson_clocks": False})
    jetson.update(schema="edge-sdk/telemetry/1", seq=1)
    fleet.update("edge-sdk/nx-1/telemetry", jetson)
    assert fleet.invalid == 0
    registry = prometheus_client.CollectorRegistry()
    registry.register(prometheus_collector(fleet))
    out: Dict[str, Set[Tuple[str, str]]] = {}
    page = prometheus_client.generate_latest(registry).decode()  # the text /metrics serves
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels.items())
    return out


def test_every_queried_metric_and_label_value_is_exported(exported) -> None:
    queried = set()
    for expr in exprs():
        for name, labels in METRIC.findall(expr):
            queried.add(name)
            assert name in exported, f"{name} (in {expr!r}) is not exported by edge-sdk monitor --prometheus"
            for label, value in EXACT.findall(labels or ""):
                assert (label, value) in exported[name], f'{name}{{{label}="{value}"}} is never exported'
            for label in re.findall(r"(\w+)\s*[!=]~?", labels or ""):
                assert any(k == label for k, _ in exported[name]), f"{name} has no label {label}"
    assert queried >= {"edge_sdk_up", "edge_sdk_frames_per_second", "edge_sdk_latency_seconds",
                       "edge_sdk_frames_total", "edge_sdk_alert_open", "edge_sdk_temperature_celsius"}
    # every per-stream and batcher series the exposition documents has a panel
    documented = set(re.findall(r"^\s+(edge_sdk_(?:stream|batch)\w+)", exposition.__doc__, re.M))
    assert len(documented) == 9 and queried >= documented, documented - queried


def test_every_legend_names_labels_of_its_series(exported) -> None:
    """A legend's {{label}} is one of the queried metric's labels (kept by any aggregation)."""
    for p in DASHBOARD["panels"]:
        for t in p["targets"]:
            names = [name for name, _ in METRIC.findall(t["expr"])]
            kept = re.match(r"\w+ by \(([\w, ]+)\)", t["expr"])
            labels = ({x.strip() for x in kept.group(1).split(",")} if kept
                      else {k for name in names for k, _ in exported[name]})
            for label in re.findall(r"\{\{(\w+)\}\}", t.get("legendFormat", "")):
                assert label in labels, f"panel {p['title']!r}: legend {{{{{label}}}}} is not a label of {t['expr']!r}"


def test_dashboard_is_well_formed() -> None:
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in DASHBOARD["templating"]["list"]}
    assert variables == {"datasource", "device"}
    for p in DASHBOARD["panels"]:
        assert p["targets"] and all(t["expr"] for t in p["targets"]) and set(p["gridPos"]) == {"x", "y", "w", "h"}
        assert p["datasource"]["uid"] == "${datasource}"


def test_scrape_config_points_at_the_monitor() -> None:
    text = (FOLDER / "prometheus.yml").read_text()
    assert re.search(r"^\s*- targets: \[\"[\w.-]+:9108\"\]", text, re.M)
    assert "metrics_path: /metrics" in text
    readme = (FOLDER / "README.md").read_text()
    assert "edge-sdk monitor --broker" in readme and "--prometheus 9108" in readme
