"""The daemon with the real Pipeline (synthetic source, ONNX Runtime, CenterFace decoder on a
tiny CenterFace-shaped model) and a real Mosquitto broker."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from edge_sdk.daemon import Daemon, DaemonConfig, daemon_config_from_dict
from edge_sdk.errors import ConfigError
from edge_sdk.manifest import Bundle
from edge_sdk.telemetry import schemas
from edge_sdk.daemon.commands import sign

from tiny_bundle import make_tiny_bundle
from polling import wait_until

pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")

SOURCE = "synthetic://faces?width=96&height=64&count=2&min_size=8&max_size=16&fps=30"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("models")
    make_tiny_bundle(root / "a", seed=0)
    make_tiny_bundle(root / "b", seed=1)
    broken = make_tiny_bundle(root / "broken", seed=2)
    with open(broken / "model.onnx", "ab") as f:
        f.write(b"tampered")  # fails its sha256
    return root


def config(models: Path, tmp_path: Path, url: Optional[str], **sections: Any) -> DaemonConfig:
    data: Dict[str, Any] = {
        "bundle": str(models / "a"),
        "backend": "onnxruntime-cpu",
        "threads": 1,
        "source": {"uri": SOURCE},
        "cache": {"enabled": False},
        "device": {"id": "cam-1", "models_dir": str(models), "snapshot_dir": str(tmp_path / "snaps")},
        "telemetry": {"interval_s": 0.2, "target_fps": 0},
    }
    if url:
        data["mqtt"] = {"url": url, "queue_dir": str(tmp_path / "queue"), "reconnect_min_s": 0.1, "reconnect_max_s": 0.5}
    for key, value in sections.items():
        data.setdefault(key, {}).update(value) if isinstance(value, dict) else data.__setitem__(key, value)
    return daemon_config_from_dict(data)


class Recording:
    """Wraps the real Pipeline and records the frame indices it yields."""

    def __init__(self) -> None:
        self.indices: List[int] = []
        self.pipeline: Any = None

    def __call__(self, cfg: Any, **injected: Any) -> Any:
        from edge_sdk.runtime.pipeline import Pipeline

        outer = self

        class Recorded(Pipeline):
            def __iter__(self) -> Iterator[Any]:
                for result in super().__iter__():
                    outer.indices.append(result.index)
                    yield result

        self.pipeline = Recorded(cfg, **injected)
        return self.pipeline


class Running:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.code: Optional[int] = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.code = self.daemon.run()

    def stop(self) -> int:
        self.daemon.request_stop("test")
        self.thread.join(30)
        assert not self.thread.is_alive()
        assert self.code is not None
        return self.code


def command(log: Any, pub_topic: str, payload: Any) -> None:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    log.client.publish(pub_topic, data, qos=1).wait_for_publish(5)


def responses(log: Any) -> List[Dict[str, Any]]:
    return log.on("cmd/response")


def test_run_publishes_valid_telemetry_and_goes_offline(models: Path, tmp_path: Path, broker, message_log) -> None:
    log = message_log(broker.url, ["edge-sdk/#"])
    daemon = Daemon(config(models, tmp_path, broker.url))
    running = Running(daemon)
    assert log.wait(lambda m: len(log.on("telemetry")) >= 3, timeout=20)
    assert running.stop() == 0
    assert log.wait(lambda m: any(s["state"] == "offline" for s in log.on("status")), timeout=10)
    for message in log.messages:
        if message["topic"].startswith("edge-sdk/cam-1/"):
            assert schemas.errors(message["payload"]) == [], message
    online = log.on("status")[0]
    assert online["state"] == "online" and online["bundle_hash"] == Bundle.load(models / "a").hash
    assert online["backend"] and online["versions"]["edge_sdk"]
    tel = log.on("telemetry")
    assert tel[-1]["fps"] > 0 and tel[-1]["frames"]["processed"] > 0
    assert set(tel[-1]["latency_ms"]) >= {"preprocess", "infer", "decode", "total"}
    seqs = [t["seq"] for t in tel]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "telemetry seq must be contiguous: nothing lost or repeated"
    offline = log.on("status")[-1]
    assert offline["reason"] == "test"
    # the final telemetry went out before the goodbye
    assert tel[-1]["frames"]["processed"] == daemon.pipeline.stats.frames_processed


def test_commands_set_ping_snapshot_and_hmac(models: Path, tmp_path: Path, broker, message_log, monkeypatch) -> None:
    monkeypatch.setenv("EDGE_TEST_SECRET", "s3cret")
    log = message_log(broker.url, ["edge-sdk/cam-1/cmd/response"])
    daemon = Daemon(config(models, tmp_path, broker.url, device={"hmac_secret_env": "EDGE_TEST_SECRET"}))
    running = Running(daemon)
    cmd_topic = schemas.topic("cam-1", "cmd")
    try:
        assert _wait(lambda: daemon.frames > 0)
        unsigned = {"schema": "edge-sdk/cmd/1", "id": "u1", "cmd": "set", "args": {"telemetry_interval": 9}}
        command(log, cmd_topic, unsigned)
        assert log.wait(lambda m: len(responses(log)) == 1)
        assert responses(log)[0]["ok"] is False and "signed" in responses(log)[0]["error"]
        assert daemon.reporter.interval_s == 0.2  # nothing changed
        secret = b"s3cret"
        for i, cmd in enumerate([
            {"cmd": "set", "args": {"telemetry_interval": 9, "score_threshold": 0.9, "detections": "summary"}},
            {"cmd": "ping"},
            {"cmd": "snapshot", "args": {"name": "shot"}},
        ]):
            command(log, cmd_topic, sign(dict(cmd, schema="edge-sdk/cmd/1", id=f"s{i}"), secret, "cam-1"))
        assert log.wait(lambda m: len(responses(log)) == 4)
        replay = sign({"schema": "edge-sdk/cmd/1", "id": "s1", "cmd": "ping"}, secret, "cam-1")
        command(log, cmd_topic, replay)
        wrong_key = sign({"schema": "edge-sdk/cmd/1", "id": "w", "cmd": "set", "args": {"telemetry_interval": 1}}, b"guess", "cam-1")
        command(log, cmd_topic, wrong_key)
        assert log.wait(lambda m: len(responses(log)) == 6)
    finally:
        running.stop()
    r = {x["id"]: x for x in responses(log)[:4]}
    r["w"] = responses(log)[5]
    assert r["s0"]["ok"] and r["s0"]["result"]["applied"]["telemetry_interval"] == 9
    assert r["s1"]["ok"] and r["s1"]["result"]["pong"] is True
    assert r["s2"]["ok"] and Path(r["s2"]["result"]["image"]).stat().st_size > 0
    assert json.loads(Path(r["s2"]["result"]["detections"]).read_text())["frame"] == r["s2"]["result"]["frame"]
    assert responses(log)[4]["ok"] is False and "replay" in responses(log)[4]["error"]
    assert r["w"]["ok"] is False and "hmac" in r["w"]["error"]
    assert daemon.reporter.interval_s == 9 and daemon.reporter.detections == "summary"
    assert daemon.pipeline.detector.decoder.score_threshold == 0.9
    for x in responses(log):
        assert schemas.errors(x) == []


def test_fuzzed_commands_never_crash_or_change_state(models: Path, tmp_path: Path, broker, message_log) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    log = message_log(broker.url, ["edge-sdk/cam-1/cmd/response"])
    cfg = config(models, tmp_path, broker.url)
    cfg.pipeline.source.uri = SOURCE.replace("fps=30", "fps=300")  # commands are served between frames
    daemon = Daemon(cfg)
    running = Running(daemon)
    cmd_topic = schemas.topic("cam-1", "cmd")
    assert _wait(lambda: daemon.frames > 0)

    def state() -> tuple:
        d = daemon.pipeline.detector.decoder
        return (daemon.reporter.interval_s, daemon.reporter.detections, daemon.reporter.target_fps,
                d.score_threshold, d.nms_iou, daemon.status()["bundle_hash"], daemon.reloader.busy)

    before = state()
    json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                               lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                               max_leaves=8)
    bad_args = st.fixed_dictionaries({}, optional={
        "telemetry_interval": st.one_of(st.floats(max_value=0.09), st.floats(min_value=3601), st.text(), st.none()),
        "score_threshold": st.one_of(st.floats(min_value=1.01), st.floats(max_value=-0.01), st.text()),
        "detections": st.text().filter(lambda s: s not in ("off", "summary", "frame")),
        "bundle": st.sampled_from(["../../etc", "/etc", "broken", "nope", ""]),
        "unknown_key": json_values,
    })
    payloads = st.one_of(
        st.binary(min_size=1, max_size=64),  # an empty payload clears a retained message: not a command
        json_values.map(lambda v: json.dumps(v).encode()),
        st.builds(lambda c, a, i: json.dumps({"schema": "edge-sdk/cmd/1", "id": i, "cmd": c, "args": a}).encode(),
                  st.sampled_from(["set", "ping", "snapshot", "exec", "shutdown", "SET", ""]), bad_args,
                  st.text(min_size=1, max_size=10)),
    )
    sent = [0]

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(payloads)
    def fuzz(payload: bytes) -> None:
        sent[0] += 1
        answered = len(responses(log))
        unanswered = daemon.commands.unanswered
        command(log, cmd_topic, payload)
        # each command is answered, or refused beyond the answer budget and counted as such
        assert log.wait(lambda m: len(responses(log)) > answered or daemon.commands.unanswered > unanswered,
                        timeout=10), "no response: the daemon stopped answering"
        if len(responses(log)) > answered:
            response = responses(log)[-1]
            assert schemas.errors(response) == []
            if not response["ok"]:
                assert state() == before, (payload, response)
        else:
            assert state() == before, payload
        assert running.thread.is_alive()

    try:
        fuzz()
        frames = daemon.frames
        assert _wait(lambda: daemon.frames > frames), "the frame loop stopped"
    finally:
        code = running.stop()
    assert code == 0


def test_reload_under_load_drops_no_frame_and_refuses_a_broken_bundle(models: Path, tmp_path: Path, broker, message_log) -> None:
    log = message_log(broker.url, ["edge-sdk/cam-1/#"])
    recording = Recording()
    cfg = config(models, tmp_path, broker.url)
    cfg.pipeline.source.fps = 0  # as fast as it goes: the reload happens under full load
    cfg.pipeline.source.uri = SOURCE.replace("&fps=30", "")
    daemon = Daemon(cfg, pipeline_factory=recording)
    running = Running(daemon)
    cmd_topic = schemas.topic("cam-1", "cmd")
    hash_a, hash_b = Bundle.load(models / "a").hash, Bundle.load(models / "b").hash
    try:
        assert _wait(lambda: daemon.frames > 50)
        command(log, cmd_topic, {"schema": "edge-sdk/cmd/1", "id": "r1", "cmd": "reload", "args": {"bundle": "b"}})
        assert log.wait(lambda m: any(s["state"] == "online" and s["bundle_hash"] == hash_b for s in log.on("status")), timeout=20)
        frames_at_swap = daemon.frames
        command(log, cmd_topic, {"schema": "edge-sdk/cmd/1", "id": "r2", "cmd": "reload", "args": {"bundle": "broken"}})
        assert log.wait(lambda m: any(a["alert"] == "reload_failed" and a["state"] == "raised" for a in log.on("alerts")), timeout=20)
        command(log, cmd_topic, {"schema": "edge-sdk/cmd/1", "id": "r3", "cmd": "reload", "args": {"bundle": "../" + models.name + "/../x"}})
        assert log.wait(lambda m: len(responses(log)) == 5)
        assert _wait(lambda: daemon.frames > frames_at_swap + 50)
    finally:
        assert running.stop() == 0
    r = {x["id"]: x for x in responses(log) if not x.get("final")}
    final = {x["id"]: x for x in responses(log) if x.get("final")}
    assert r["r1"]["ok"] and r["r2"]["ok"]  # accepted for loading; the outcome follows
    assert r["r3"]["ok"] is False and "outside" in r["r3"]["error"]
    assert final["r1"]["ok"] and final["r1"]["result"]["bundle_hash"] == hash_b
    assert final["r2"]["ok"] is False and "sha256" in final["r2"]["error"]
    assert set(final) == {"r1", "r2"}
    alert = [a for a in log.on("alerts") if a["alert"] == "reload_failed"][0]
    assert "sha256" in alert["message"] and alert["severity"] == "critical"
    assert daemon.status()["bundle_hash"] == hash_b  # the broken bundle changed nothing
    assert hash_a != hash_b
    idx = recording.indices
    assert idx == list(range(idx[0], idx[0] + len(idx))), "a frame went missing around the swap"
    assert recording.pipeline.stats.frames_dropped == 0
    assert len(idx) == recording.pipeline.stats.frames_processed


def test_without_broker_telemetry_goes_to_stdout_as_json_lines(models: Path, tmp_path: Path) -> None:
    import io

    stream = io.StringIO()
    daemon = Daemon(config(models, tmp_path, None, max_frames=40), stream=stream)
    assert daemon.run() == 0
    lines = [json.loads(x) for x in stream.getvalue().splitlines()]
    topics = [schemas.split_topic(x["topic"])[1] for x in lines]
    assert topics[0] == "status" and topics[-1] == "status" and "telemetry" in topics
    assert lines[-1]["payload"]["state"] == "offline" and lines[-1]["payload"]["reason"] == "source ended"
    for x in lines:
        assert schemas.errors(x["payload"]) == []
    assert [x for x in lines if x["topic"].endswith("/telemetry")][-1]["payload"]["frames"]["processed"] == 40


@pytest.mark.parametrize("data,key", [
    ({"device": {"id": "bad/id"}}, "device.id"),
    ({"telemetry": {"interval_s": 0}}, "interval_s"),
    ({"telemetry": {"detections": "all"}}, "detections"),
    ({"mqtt": {"url": "tcp://x"}}, "url"),
    ({"mqtt": {"nope": 1}}, "mqtt.nope"),
    ({"device": {"hmac_secret_env": "EDGE_SDK_UNSET_VARIABLE"}}, "hmac_secret_env"),
])
def test_config_errors_name_the_key(data: Dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        daemon_config_from_dict(dict(data, source={"uri": SOURCE}))


def _wait(predicate, timeout: float = 20.0) -> bool:
    return wait_until(predicate, timeout)


def _hup_daemon(models: Path, tmp_path: Path) -> Tuple[Daemon, Path]:
    """A daemon built from a config file (not running: reload_config is called directly)."""
    import io

    path = tmp_path / "device.toml"
    path.write_text(f'bundle = "{models / "a"}"\nbackend = "onnxruntime-cpu"\nthreads = 1\n'
                    f'[source]\nuri = "{SOURCE}"\n[device]\nid = "cam-1"\nmodels_dir = "{models}"\n')
    from edge_sdk.daemon import load_daemon_config

    return Daemon(load_daemon_config(path), config_path=path, stream=io.StringIO()), path


def test_sighup_survives_a_loader_that_breaks(models: Path, tmp_path: Path, monkeypatch) -> None:
    """Whatever reading the config raises, SIGHUP keeps the running config and says why."""
    import edge_sdk.daemon.service as service

    daemon, _path = _hup_daemon(models, tmp_path)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("loader bug")

    monkeypatch.setattr(service, "load_daemon_config", broken)
    before = daemon.config
    daemon.reload_config()
    assert daemon.config is before
    assert "config_invalid" in daemon.reporter.health.open
    daemon.commands.close()


def test_sighup_with_a_new_bundle_while_a_reload_runs_keeps_running(models: Path, tmp_path: Path) -> None:
    """The reloader refuses a second load while one is in progress (ConfigError): SIGHUP used to
    let that end the frame loop; now the old model runs on and `reload_failed` says why."""
    daemon, path = _hup_daemon(models, tmp_path)
    daemon.reloader.load(models / "b")  # in progress until the frame loop swaps it in: never, here
    path.write_text(path.read_text().replace(str(models / "a"), str(models / "broken")))
    daemon.reload_config()
    assert daemon.config.pipeline.bundle == str(models / "a")  # not taken: a later SIGHUP tries again
    assert "reload_failed" in daemon.reporter.health.open
    daemon.reloader.join(20)
    daemon.commands.close()


def test_set_mode_switches_the_detector_between_frames(models: Path, tmp_path: Path, broker, message_log) -> None:
    from edge_sdk.runtime.detectors.strategy import StrategyDetector

    log = message_log(broker.url, ["edge-sdk/cam-1/cmd/response"])
    daemon = Daemon(config(models, tmp_path, broker.url))
    running = Running(daemon)
    cmd_topic = schemas.topic("cam-1", "cmd")
    try:
        assert _wait(lambda: daemon.frames > 0)
        full_backend = daemon.pipeline.detector.backend
        command(log, cmd_topic, {"schema": "edge-sdk/cmd/1", "id": "m1", "cmd": "set", "args": {"mode": "roi"}})
        assert log.wait(lambda m: len(responses(log)) == 1)
        frames_at_switch = daemon.frames
        assert _wait(lambda: daemon.frames > frames_at_switch + 2)
        last = daemon._last_result
    finally:
        running.stop()
    response = responses(log)[0]
    assert response["ok"], response
    assert response["result"]["applied"]["mode"] == "roi"
    assert isinstance(daemon.pipeline.detector, StrategyDetector)
    assert daemon.pipeline.detector.backend is full_backend  # same model, new strategy
    assert "sweep_tiles" in last.info  # the roi scheduler's per-frame report
    assert daemon.model.mode == "roi" and daemon.model.detector is daemon.pipeline.detector


def test_a_dying_pipeline_says_which_stage_failed(models: Path, tmp_path: Path, broker, message_log, caplog) -> None:
    import logging

    from edge_sdk.errors import SourceError
    from edge_sdk.runtime.pipeline import Pipeline

    from runtime_factories import ListSource, scene

    frames: List[Any] = [scene(i, 96, 64) for i in range(5)] + [SourceError("camera unplugged")]

    def factory(cfg: Any, **injected: Any) -> Any:
        return Pipeline(cfg, source=ListSource(frames), **injected)

    caplog.set_level(logging.ERROR, logger="edge_sdk.daemon")
    log = message_log(broker.url, ["edge-sdk/cam-1/#"])
    daemon = Daemon(config(models, tmp_path, broker.url), pipeline_factory=factory)
    assert daemon.run() == SourceError.exit_code
    assert log.wait(lambda m: any(s["state"] == "offline" for s in log.on("status")), timeout=10)
    expected = "pipeline stopped: capture: SourceError: camera unplugged"
    alerts = [a for a in log.on("alerts") if a["alert"] == "pipeline_stopped"]
    assert [(a["state"], a["severity"], a["message"]) for a in alerts] == [("raised", "critical", expected)]
    assert log.on("status")[-1]["reason"] == "error: capture: SourceError: camera unplugged"
    assert expected in caplog.text
    assert "pipeline_stopped" in log.on("telemetry")[-1]["alerts_open"]  # the final telemetry says so too
    for message in alerts + log.on("status"):
        assert schemas.errors(message) == []


def test_sighup_with_other_tracking_says_a_restart_applies_it(models: Path, tmp_path: Path, caplog) -> None:
    daemon, path = _hup_daemon(models, tmp_path)
    path.write_text(path.read_text() + "[tracking]\nenabled = false\n")
    with caplog.at_level("WARNING", logger="edge_sdk.daemon"):
        daemon.reload_config()
    assert any("NOT applied for tracking: restart the service to apply" in r.getMessage() for r in caplog.records), \
        caplog.text
    assert daemon.config.pipeline.tracking.enabled  # the running tracker stays as it is
    daemon.commands.close()


@pytest.mark.parametrize("section, text, keys, severity", [
    ("[device]", 'hmac_secret_env = "EDGE_TEST_NEW_SECRET"\nmax_skew_s = 30\n',
     "device.hmac_secret_env, device.max_skew_s", "critical"),
    ("[shadow]", "min_agreement = 0.5\n", "shadow.min_agreement", "warning"),
    ("[output]", 'out = ["rtsp://127.0.0.1:8554/x"]\n', "output.out", "warning"),
])
def test_sighup_never_reports_success_for_what_it_cannot_apply(models: Path, tmp_path: Path, monkeypatch,
                                                               caplog, section: str, text: str, keys: str,
                                                               severity: str) -> None:
    """Adding hmac_secret_env and sending SIGHUP logged "config re-read" while unsigned commands
    still ran: now the keys that need a restart are named in a warning and in the config_invalid
    alert (critical for the commands' signing), and nothing says the re-read succeeded."""
    monkeypatch.setenv("EDGE_TEST_NEW_SECRET", "s3cret")
    daemon, path = _hup_daemon(models, tmp_path)
    body = path.read_text()
    body = body.replace("[device]\n", "[device]\n" + text) if section == "[device]" else body + section + "\n" + text
    path.write_text(body)
    sent: List[Tuple[str, Dict[str, Any]]] = []
    monkeypatch.setattr(daemon.reporter.publisher, "publish", lambda suffix, body, qos=1: sent.append((suffix, body)))
    with caplog.at_level("INFO", logger="edge_sdk.daemon"):
        daemon.reload_config()
    said = [r.getMessage() for r in caplog.records]
    assert any(f"NOT applied for {keys}: restart the service" in m for m in said), said
    assert not any("config re-read from" in m for m in said), said
    (alert,) = [body for suffix, body in sent if suffix == "alerts"]
    assert alert["alert"] == "config_invalid" and alert["state"] == "raised" and alert["severity"] == severity
    assert keys in alert["message"] and schemas.errors(dict(alert, schema="edge-sdk/alert/1", device_id="cam-1",
                                                            ts=1, seq=1)) == []
    assert daemon.commands.auth == "none"  # as started: the alert says so, the log too
    daemon.commands.close()
