"""Fuzz every topic the daemon and `edge-sdk monitor` read, through a real Mosquitto broker:
random bytes, deep nesting, huge numbers, NaN/Infinity literals and wrong types. Afterwards the
daemon's pipeline still produces frames (its telemetry says so), nothing it runs changed, and
the monitor still takes a valid message. Seeded and bounded: a few hundred messages, seconds."""
from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from edge_sdk.daemon import Daemon
from edge_sdk.telemetry import schemas
from edge_sdk.telemetry.fleet import Fleet, prometheus_collector
from edge_sdk.validate import UntrustedInput, loads_untrusted

from mqtt_broker import free_port
from polling import wait_until
from test_daemon import SOURCE, Running, config, models  # noqa: F401 - models is a fixture
from test_hostile import tolerant_log  # noqa: F401 - a fixture

pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")

SEED = 20240607
MONITOR_SUFFIXES = ("status", "telemetry", "alerts", "detections", "cmd/response")
MARK = "__HOSTILE__"


def templates(device: str) -> Dict[str, Dict[str, Any]]:
    """One valid message per topic: the shapes the fuzzer bends."""
    env = lambda suffix: {"schema": schemas.TOPICS[suffix], "device_id": device, "ts": 1, "seq": 1}  # noqa: E731
    return {
        "status": dict(env("status"), state="online", started_ts=1, bundle_hash="ab", status_ts=1,
                       versions={"edge_sdk": "0"}),
        "telemetry": dict(env("telemetry"), window_s=10, fps=30.0,
                          latency_ms={"total": {"p50": 1.0, "p95": 2.0, "p99": 3.0}},
                          frames={"captured": 1, "processed": 1, "dropped": 0, "cached": 0},
                          interval={"seconds": 1, "captured": 1, "processed": 1, "dropped": 0, "drop_ratio": 0.0},
                          system={"temperature_max_c": 50.0, "power_mw": {"TOT": 5000.0}}),
        "alerts": dict(env("alerts"), alert="fps_low", state="raised", severity="warning", message="m", value=1.0),
        "detections": dict(env("detections"), kind="frame", frame=1,
                           detections=[{"xyxy": [1.0, 2.0, 3.0, 4.0], "score": 0.5, "class_id": 0}]),
        "cmd/response": dict(env("cmd/response"), id="1", cmd="ping", ok=True, result={}),
        "cmd": {"schema": "edge-sdk/cmd/1", "id": "1", "cmd": "set", "args": {"telemetry_interval": 5, "score_threshold": 0.5}},
    }


def paths(obj: Any, prefix: Tuple[Any, ...] = ()) -> List[Tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += paths(v, prefix + (i,))
    return out


def replaced(obj: Any, path: Tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = json.loads(json.dumps(obj))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return copy


HOSTILE_LITERALS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" + "0" * 10000, "-" + "9" * 400,
                    "[" * 5000, '{"a":' * 1000, "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"]
WRONG_TYPES: List[Any] = [[], [1, 2], {}, {"x": 1}, "30", "", None, True, -1, 2 ** 70, 1.5]


def hostile(rng: random.Random, template: Dict[str, Any]) -> bytes:
    kind = rng.randrange(5)
    if kind == 0:  # random bytes
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    if kind == 1:  # deep nesting, as a whole payload
        depth = rng.choice([33, 100, 1000, 5000, 50000])
        return (b"[" * depth + b"]" * depth) if rng.random() < 0.5 else (b'{"a":' * depth + b"1" + b"}" * depth)
    if kind == 2:  # a hostile literal (huge numbers, NaN, Infinity, deep nesting) inside a valid message
        text = json.dumps(replaced(template, rng.choice(paths(template)[1:]), MARK))
        return text.replace(json.dumps(MARK), rng.choice(HOSTILE_LITERALS)).encode()
    if kind == 3:  # wrong types: lists where objects go, strings where numbers go
        body = template
        for _ in range(rng.randrange(1, 4)):
            body = replaced(body, rng.choice(paths(body)), rng.choice(WRONG_TYPES))
        return json.dumps(body).encode()
    return json.dumps(template).encode()  # valid messages mixed in


def corpus(n: int) -> List[Tuple[str, bytes, bool]]:
    """(topic, payload, retain): `n` messages over the daemon's cmd topic and every topic the
    monitor reads, for three fuzzed devices."""
    rng = random.Random(SEED)
    out = []
    for _ in range(n):
        if rng.random() < 0.3:
            topic, template = schemas.topic("cam-1", "cmd"), templates("cam-1")["cmd"]
        else:
            device = rng.choice(["fz-1", "fz-2", "fz-3"])
            suffix = rng.choice(MONITOR_SUFFIXES)
            topic, template = schemas.topic(device, suffix), templates(device)[suffix]
        out.append((topic, hostile(rng, template), rng.random() < 0.05))
    return out


def test_corpus_renders_in_the_fleet_table_and_exporter() -> None:
    """The same corpus straight into the fleet model, the table and the Prometheus exporter."""
    prom = pytest.importorskip("prometheus_client")
    from rich.console import Console

    from edge_sdk.cli.monitor import render_table

    fleet = Fleet()
    kept = 0
    for topic, payload, _retain in corpus(400):
        try:
            message = loads_untrusted(payload, 1 << 20)
        except UntrustedInput:
            continue
        kept += fleet.update(topic, message) is not None
    assert kept and fleet.invalid  # both kinds occurred
    Console(file=io.StringIO(), width=200).print(render_table(fleet))
    registry = prom.CollectorRegistry()
    registry.register(prometheus_collector(fleet))
    assert b"edge_sdk_up" in prom.generate_latest(registry)


def test_fuzz_every_topic_through_the_broker(models: Path, tmp_path: Path, broker, tolerant_log, monkeypatch) -> None:
    monkeypatch.setenv("EDGE_TEST_SECRET", "s3cret")  # so no fuzzed command can be valid
    cfg = config(models, tmp_path, broker.url, device={"hmac_secret_env": "EDGE_TEST_SECRET"})
    cfg.pipeline.source.uri = SOURCE.replace("fps=30", "fps=300")  # commands are served between frames
    daemon = Daemon(cfg)
    running = Running(daemon)
    log = tolerant_log(broker.url, ["edge-sdk/cam-1/telemetry", "edge-sdk/cam-1/status"])
    record, port = tmp_path / "fleet.jsonl", free_port()
    code = "import sys; from edge_sdk.cli import main; sys.argv[0] = 'edge-sdk'; main()"
    monitor = subprocess.Popen([sys.executable, "-c", code, "monitor", "--broker", broker.url, "--json", "--record",
                                str(record), "--prometheus", str(port), "--duration", "120"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    messages = corpus(300)
    try:
        assert wait_until(lambda: daemon.frames > 0)
        assert wait_until(lambda: record.exists() and "edge-sdk/cam-1/status" in record.read_text(), 30), \
            "the monitor never subscribed"

        def state() -> tuple:
            d = daemon.pipeline.detector.decoder
            return (daemon.reporter.interval_s, daemon.reporter.detections, daemon.reporter.target_fps,
                    d.score_threshold, d.nms_iou, daemon.status()["bundle_hash"], daemon.config.pipeline.mode)

        before = state()
        for topic, payload, retain in messages:
            log.client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(5)
        # (a live subscriber gets a message published retained with the retain flag clear: it is
        # handled as any other; only those delivered from the broker's store at subscribe are ignored)
        cmds = [p for t, p, _r in messages if t.endswith("/cmd") and p]
        processor = daemon.commands
        # every delivered command was refused (none is signed), answered or not, or lost to a full inbox
        assert wait_until(lambda: processor.rejected + processor.dropped + daemon.commands_dropped == len(cmds), 30), \
            (processor.counters(), daemon.commands_dropped, len(cmds))
        assert processor.accepted == 0 and state() == before

        # the pipeline still produces frames: two telemetry messages after the fuzz, frames rising
        seen = len(log.on("telemetry"))
        assert log.wait(lambda m: len(log.on("telemetry")) >= seen + 2, timeout=20)
        last, previous = log.on("telemetry")[-1], log.on("telemetry")[-2]
        assert last["frames"]["processed"] > previous["frames"]["processed"] and schemas.errors(last) == []

        # the monitor still takes a valid message published afterwards, and still serves metrics
        after = dict(templates("after-1")["telemetry"], fps=42.5)
        log.client.publish("edge-sdk/after-1/telemetry", json.dumps(after), qos=1).wait_for_publish(5)
        assert wait_until(lambda: '"fps":42.5' in record.read_text(), 20), "the monitor went deaf"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            assert reply.status == 200 and b'edge_sdk_fps{device="after-1"} 42.5' in reply.read()
        assert monitor.poll() is None, "the monitor exited"
    finally:
        monitor.terminate()
        monitor.communicate(timeout=30)
        code_ = running.stop()
    assert code_ == 0
    for line in record.read_text().splitlines():  # the monitor recorded only valid messages
        entry = json.loads(line)
        assert schemas.errors(entry["payload"]) == [], entry
