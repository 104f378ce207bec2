from __future__ import annotations

import io
import json
from typing import Any, Dict

import numpy as np
import pytest

from edge_sdk.detections import Detections
from edge_sdk.runtime.types import FrameResult, PipelineStats
from edge_sdk.telemetry import schemas
from edge_sdk.telemetry.health import HealthConfig, HealthMonitor
from edge_sdk.telemetry.publisher import LinePublisher
from edge_sdk.telemetry.reporter import Reporter
from edge_sdk.telemetry.system import SystemStats, jtop_fields

pytest.importorskip("jsonschema")


@pytest.mark.parametrize("schema_id", sorted(set(schemas.TOPICS.values())))
def test_every_schema_is_a_valid_json_schema(schema_id: str) -> None:
    doc = schemas.load_schema(schema_id)
    assert doc["$id"] == schema_id
    schemas.validator(schema_id)  # check_schema runs here


def run_reporter(detections: str = "summary") -> list:
    stream = io.StringIO()
    pub = LinePublisher("dev-1", stream).start()
    stats = PipelineStats(frames_captured=12, frames_processed=10, frames_dropped=2)
    rep = Reporter(pub, HealthMonitor(HealthConfig().rules()), lambda: stats, interval_s=60, target_fps=1e7,
                   model=lambda: {"bundle_hash": "abc", "backend": "onnxruntime", "precision": "fp32"},
                   system=SystemStats(use_jtop=False), detections=detections)
    pub.set_status({"started_ts": 1, "versions": {"edge_sdk": "0"}, "target": None, "backend": "x",
                    "bundle_hash": "abc", "source": "synthetic://faces"})
    for i in range(10):
        dets = Detections(np.array([[1, 2, 30, 40]], np.float32), [0.9], [0])
        rep.observe(FrameResult(i, 1.0 + i, dets, {"infer": 2.0, "total": 400.0 + i},
                                info={"batch": {"size": 4, "filled": 2}}))
    rep.report()
    rep.raise_alert("reload_failed", True, "bad bundle", "critical")
    pub.stop(final_status={"reason": "stopped"})
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.mark.parametrize("mode", ["summary", "frame"])
def test_reporter_messages_validate(mode: str) -> None:
    lines = run_reporter(mode)
    by_topic: Dict[str, list] = {}
    for line in lines:
        suffix = schemas.split_topic(line["topic"])[1]
        by_topic.setdefault(suffix, []).append(line["payload"])
        assert schemas.errors(line["payload"]) == [], (line, schemas.errors(line["payload"]))
        assert line["payload"]["schema"] == schemas.TOPICS[suffix]
        # a consumer refuses larger payloads unparsed: what the reporter sends is far below
        assert len(json.dumps(line["payload"]).encode()) < schemas.MAX_BYTES[suffix] / 4
    assert set(by_topic) == {"status", "telemetry", "alerts", "detections"}
    tel = by_topic["telemetry"][0]
    assert tel["interval"]["drop_ratio"] == pytest.approx(2 / 12, abs=1e-3)
    assert tel["batch"]["efficiency"] == 0.5
    # p99 of 400+ ms, FPS far below a 10 MFPS target, 17 % dropped, half-full batches: all raised
    raised = {a["alert"] for a in by_topic["alerts"] if a["state"] == "raised"}
    assert raised == {"latency_p99", "fps_low", "frames_dropped", "batch_efficiency", "reload_failed"}
    assert [s["state"] for s in by_topic["status"]] == ["online", "offline"]
    seqs = [p["seq"] for p in by_topic["detections"]]
    assert seqs == list(range(1, len(seqs) + 1))


@pytest.mark.parametrize(
    "message",
    [
        {"schema": "edge-sdk/telemetry/1", "device_id": "d", "ts": 1, "seq": 1},  # required fields missing
        {"schema": "edge-sdk/alert/1", "device_id": "d", "ts": 1, "seq": 1, "alert": "x", "state": "open",
         "severity": "warning", "message": ""},  # unknown state
        {"schema": "edge-sdk/status/1", "device_id": "", "ts": 1, "seq": 1, "state": "online"},  # empty id
        {"schema": "edge-sdk/nope/1"},
    ],
)
def test_invalid_messages_are_reported(message: Dict[str, Any]) -> None:
    assert schemas.errors(message) != []


def test_jtop_fields_maps_and_omits() -> None:
    stats = {"GPU": 41.0, "Temp CPU": 48.5, "Temp GPU": 47.0, "Temp PMIC": -256, "Power TOT": 5400,
             "Power VDD_CPU": 1200, "nvp model": "MODE_15W_6CORE", "jetson_clocks": "OFF", "RAM": 0.5}
    out = jtop_fields(stats)
    assert out == {"gpu_percent": 41.0, "temperature_c": {"CPU": 48.5, "GPU": 47.0}, "temperature_max_c": 48.5,
                   "power_mw": {"TOT": 5400.0, "VDD_CPU": 1200.0}, "nvpmodel": "MODE_15W_6CORE", "jetson_clocks": False}
    assert jtop_fields({}) == {}


def test_system_stats_off_jetson_has_no_jetson_fields() -> None:
    out = SystemStats(use_jtop=False).read()
    assert "memory_percent" in out and "process_rss_mb" in out
    assert not {"gpu_percent", "temperature_c", "power_mw", "nvpmodel"} & set(out)


MODEL_BLOCK = {"bundle_hash": "abc", "target": "host", "backend": "onnxruntime", "precision": "fp32",
               "precision_reason": "ONNX Runtime on a CPU runs fp32 best", "mode": "roi",
               "thresholds": {"score_threshold": 0.6, "nms_iou": 0.45}, "reloads": 1, "reload_failures": 0}
TELEMETRY = {"schema": "edge-sdk/telemetry/1", "device_id": "d", "ts": 1, "seq": 1, "window_s": 10, "fps": 1.0,
             "latency_ms": {}, "frames": {"captured": 1, "processed": 1, "dropped": 0, "cached": 0},
             "interval": {"seconds": 1, "captured": 1, "processed": 1, "dropped": 0, "drop_ratio": 0.0}}
STATUS = {"schema": "edge-sdk/status/1", "device_id": "d", "ts": 1, "seq": 1, "state": "online"}


@pytest.mark.parametrize("change,valid", [
    ({}, True),
    ({"mode": "fast"}, False),
    ({"thresholds": {"score_threshold": 1.5, "nms_iou": 0.45}}, False),
    ({"thresholds": {"score_threshold": 0.5, "iou": 0.45}}, False),
    ({"precision_reason": None, "target": None, "bundle_hash": None}, True),
])
def test_the_model_block_of_telemetry_and_status(change: Dict[str, Any], valid: bool) -> None:
    """The running model's block (the daemon's RunningModel.describe()) in telemetry, and its
    fields in the retained status: mode and thresholds are checked, not only passed through."""
    block = dict(MODEL_BLOCK, **change)
    status = dict(STATUS, **{k: v for k, v in block.items() if k not in ("reloads", "reload_failures")})
    assert (schemas.errors(dict(TELEMETRY, model=block)) == []) is valid
    assert (schemas.errors(status) == []) is valid

