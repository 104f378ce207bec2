"""Fuzz every topic the daemon and `edge-sdk monitor` read, through a real Mosquitto broker:
random bytes, deep nesting, huge numbers, NaN/Infinity literals and wrong types. Afterwards the
daemon's pipeline still produces frames (its telemetry says so), nothing it runs changed, and
the monitor still takes a valid message. Then every fuzzed command that parses to an object, and
a list of hostile `set` arguments, is sent again properly signed, so it passes the signature
check and reaches the handlers: each is answered, and the settings change exactly when the
response says ok and the value is valid. Seeded and bounded: a few hundred messages, seconds."""
from __future__ import annotations

import functools
import hashlib
import hmac
import io
import json
import math
import random
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from edge_sdk.daemon import Daemon
from edge_sdk.telemetry import schemas
from edge_sdk.daemon.commands import LIMITS, MAX_DEPTH, MAX_PAYLOAD, CommandProcessor, sign
from edge_sdk.telemetry.fleet import Fleet, prometheus_collector
from edge_sdk.validate import UntrustedInput, loads_untrusted

from mqtt_broker import free_port
from polling import wait_until
from processes import edge_sdk, finish, spawn
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


SECRET = b"s3cret"
# the `set` arguments (cmd.json) and where each lands in the test's state() tuple
SET_NUMBERS = {"telemetry_interval": (0.1, 3600.0), "score_threshold": (0.0, 1.0), "nms_iou": (0.0, 1.0),
               "target_fps": (0.0, 10000.0)}
SET_ENUMS = {"detections": ("off", "summary", "frame"), "mode": ("full", "tiles", "roi")}
STATE_INDEX = {"telemetry_interval": 0, "detections": 1, "target_fps": 2, "score_threshold": 3, "nms_iou": 4, "mode": 6}
MISSING = object()
HOSTILE_VALUES: List[Any] = ["NaN", "nan", "Infinity", "-Infinity", "1e400", 1e308, -1e308, 2 ** 63 - 1, -1, -0.5,
                             1.0000001, [0.5], {"v": 0.5}, True, False, "0.5", "", None]
# hostile `set` args (MISSING: no args at all); the last few are valid, so the check below has cases
# that must change something
TARGETED_SET_ARGS: List[Any] = (
    [{key: value} for key in SET_NUMBERS for value in HOSTILE_VALUES]
    + [{"telemetry_interval": 0.05}, {"telemetry_interval": 0}, {"target_fps": 10000.5}, {"score_threshold": 2 ** 64},
       {"detections": "all"}, {"detections": 1}, {"detections": ["frame"]}, {"detections": None},
       {"mode": "fast"}, {"mode": None}, {"mode": ["full"]},
       {"telemetry_intervall": 1}, {"__proto__": {"score_threshold": 0.1}}, {"score_threshold": 0.3, "unknown": 1},
       {"telemetry_interval": 0.5, "score_threshold": 2}, {"nms_iou": 0.3, "target_fps": "fast"},
       MISSING, {}, [], "telemetry_interval=1", 1, True, None,
       {"stream": "door", "score_threshold": 0.4}, {"stream": "0", "telemetry_interval": 1}, {"stream": "0"},
       {"stream": 0, "nms_iou": 0.3}, {"stream": "0/1", "nms_iou": 0.3}]
    + [{"telemetry_interval": 0.5, "score_threshold": 0.4}, {"nms_iou": 0.3}, {"score_threshold": 0},
       {"score_threshold": 1}, {"target_fps": 15}, {"telemetry_interval": 0.1}, {"detections": "summary"},
       {"stream": "0", "score_threshold": 0.35}]
)


def signed_copy(payload: bytes, cid: str) -> Optional[bytes]:
    """`payload` signed with a fresh id and timestamp, as an authorised sender would sign it;
    None when it does not parse to a JSON object."""
    try:
        body = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    body = dict(body, id=cid, ts=int(time.time() * 1000))
    try:
        return json.dumps(sign(body, SECRET, "cam-1")).encode()
    except ValueError:  # NaN or an infinity: the product's canonical form refuses them, so sign by hand
        body.pop("hmac", None)
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        body["hmac"] = hmac.new(SECRET, canonical, hashlib.sha256).hexdigest()
        return json.dumps(body).encode()


def valid_set(payload: bytes) -> Optional[Dict[str, Any]]:
    """The settings a signed `payload` must apply when it is a valid `set` command, else None.
    Written from cmd.json independently of the product: finite numbers (not booleans) within
    range, known enums, no unknown keys."""
    try:
        body = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict) or set(body) - {"schema", "id", "cmd", "args", "device_id", "ts", "hmac"}:
        return None
    if body.get("device_id") != "cam-1":  # signed for another device (or by hand, without one)
        return None
    args = body.get("args")
    if body.get("schema") != "edge-sdk/cmd/1" or body.get("cmd") != "set" or not isinstance(args, dict) or not args:
        return None
    if "stream" in args:  # the device runs one stream, "0"; a stream's set changes its mode and thresholds only
        if args["stream"] != "0" or set(args) & {"telemetry_interval", "detections", "target_fps"} or len(args) == 1:
            return None
        args = {k: v for k, v in args.items() if k != "stream"}
    for key, value in args.items():
        if key in SET_NUMBERS:
            low, high = SET_NUMBERS[key]
            if type(value) not in (int, float) or not low <= value <= high or not math.isfinite(value):
                return None
        elif key in SET_ENUMS:
            if value not in SET_ENUMS[key]:
                return None
        else:
            return None
    return args


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
    monkeypatch.setenv("EDGE_TEST_SECRET", SECRET.decode())  # so no unsigned fuzzed command can be valid
    # the signed phase sends ~150 commands in a few seconds: lift the per-kind rate limits and the
    # answer budget, so that every signed command is run (or refused by its checks) and answered
    monkeypatch.setattr("edge_sdk.daemon.service.CommandProcessor", functools.partial(
        CommandProcessor, limits={kind: (1e6, 1e6) for kind in LIMITS}, answers=(1e6, 1e6)))
    cfg = config(models, tmp_path, broker.url, device={"hmac_secret_env": "EDGE_TEST_SECRET"})
    cfg.pipeline.source.uri = SOURCE.replace("fps=30", "fps=300")  # commands are served between frames
    daemon = Daemon(cfg)
    running = Running(daemon)
    log = tolerant_log(broker.url, ["edge-sdk/cam-1/telemetry", "edge-sdk/cam-1/status", "edge-sdk/cam-1/cmd/response"])
    record, port = tmp_path / "fleet.jsonl", free_port()
    monitor = spawn(edge_sdk("monitor", "--broker", broker.url, "--json", "--record", str(record), "--prometheus",
                             str(port)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    messages = corpus(300)
    try:
        assert wait_until(lambda: daemon.frames > 0)
        assert wait_until(lambda: record.exists() and "edge-sdk/cam-1/status" in record.read_text(), 30), \
            "the monitor never subscribed"

        def state() -> tuple:
            model = daemon.model.describe()  # the running model's one owner: thresholds and mode in every mode
            return (daemon.reporter.interval_s, daemon.reporter.detections, daemon.reporter.target_fps,
                    model["thresholds"]["score_threshold"], model["thresholds"]["nms_iou"], model["bundle_hash"],
                    model["mode"])

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

        # the same commands signed, and hostile `set` arguments: each passes the signature check, reaches the
        # handlers, is answered, and changes the settings exactly when it is a valid `set`
        signed = [signed_copy(p, f"sg-{i}") for i, p in enumerate(cmds)]
        targeted = [{"schema": "edge-sdk/cmd/1", "cmd": "set"} if args is MISSING
                    else {"schema": "edge-sdk/cmd/1", "cmd": "set", "args": args} for args in TARGETED_SET_ARGS]
        signed += [signed_copy(json.dumps(body).encode(), f"st-{i}") for i, body in enumerate(targeted)]
        sent = [p for p in signed if p is not None]
        assert len(sent) > len(TARGETED_SET_ARGS) + 20  # most fuzzed commands parse
        answers = lambda: log.on("cmd/response")  # noqa: E731
        # (with the answer budget lifted, every refused fuzzed command was answered: wait for the last)
        assert processor.unanswered == 0 and wait_until(lambda: len(answers()) == processor.rejected + processor.dropped)
        # sent in order, in batches that end at each valid `set` (at most 16: under the inbox's 64):
        # the commands before it must change nothing, and it must change exactly what it sets
        batches: List[List[bytes]] = [[]]
        for payload in sent:
            if len(batches[-1]) == 16:
                batches.append([])
            batches[-1].append(payload)
            if valid_set(payload) is not None:
                batches.append([])
        frames, changed, accepted = daemon.frames, 0, processor.accepted
        for batch in filter(None, batches):
            seen, prev = len(answers()), state()
            for payload in batch:
                log.client.publish(schemas.topic("cam-1", "cmd"), payload, qos=1).wait_for_publish(5)
            assert log.wait(lambda m: len(answers()) >= seen + len(batch), timeout=10), \
                f"{seen + len(batch) - len(answers())} signed commands not answered in {batch!r}"[:2000]
            want = list(prev)
            for payload, response in zip(batch, answers()[seen:]):
                if response["id"] is None:  # refused before its id could be read: NaN, infinities, beyond int64
                    with pytest.raises(UntrustedInput):
                        loads_untrusted(payload, MAX_PAYLOAD, MAX_DEPTH)
                else:
                    assert response["id"] == json.loads(payload)["id"], (payload[:300], response)
                args = valid_set(payload)
                assert response["ok"] is (args is not None), (payload[:300], response)
                for key, value in (args or {}).items():
                    want[STATE_INDEX[key]] = value
                assert args is None or set(response["result"]["applied"]) == set(args), (payload, response)
            now = state()
            assert now == tuple(want), (batch, answers()[seen:], prev, now)
            changed += now != prev
        assert changed >= 5 and processor.accepted - accepted == sum(valid_set(p) is not None for p in sent)
        assert daemon.frames > frames, "the frame loop stopped during the signed commands"
        restore = dict(zip(("telemetry_interval", "detections", "target_fps", "score_threshold", "nms_iou"), before))
        payload = signed_copy(json.dumps({"schema": "edge-sdk/cmd/1", "cmd": "set", "args": restore}).encode(), "restore")
        log.client.publish(schemas.topic("cam-1", "cmd"), payload, qos=1).wait_for_publish(5)
        assert log.wait(lambda m: answers()[-1].get("id") == "restore", timeout=10) and answers()[-1]["ok"] is True
        assert state() == before

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
            assert reply.status == 200 and b'edge_sdk_frames_per_second{device="after-1"} 42.5' in reply.read()
        assert monitor.poll() is None, "the monitor exited"
    finally:
        try:
            finish(monitor, timeout=60)
        finally:
            code_ = running.stop()
    assert code_ == 0
    for line in record.read_text().splitlines():  # the monitor recorded only valid messages
        entry = json.loads(line)
        assert schemas.errors(entry["payload"]) == [], entry
