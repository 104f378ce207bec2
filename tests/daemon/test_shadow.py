"""Shadow runs on one device: `reload` with shadow, the `shadow` telemetry, `promote`, `abort`,
the automatic promotion and the rollback after a promotion. The real daemon (ONNX Runtime on
the CPU, the synthetic source, the real Pipeline) on a real Mosquitto broker."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from edge_sdk.daemon import Daemon
from edge_sdk.builder.evaluate import agreement
from edge_sdk.daemon.model import RunningModel
from edge_sdk.daemon.shadow import ShadowRun, bundle_bytes, fit_problem, ks_statistic
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.synthetic import SyntheticFaces
from edge_sdk.runtime.types import FrameResult
from edge_sdk.manifest import Bundle
from edge_sdk.telemetry import schemas

from polling import wait_until
from test_daemon import Recording, Running, command, config
from tiny_bundle import make_tiny_bundle

pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")

CMD = schemas.topic("cam-1", "cmd")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("shadow-models")
    # boxes of a few cells (size_bias): the default tiny model's are degenerate, no IoU tells them apart
    make_tiny_bundle(root / "a", seed=0, size_bias=2.0)
    make_tiny_bundle(root / "a-rebuilt", seed=0, size_bias=2.0)  # the same bundle built again
    make_tiny_bundle(root / "dim", seed=0, size_bias=2.0, score_bias=-4.0)  # every score scaled down: finds nothing
    return root


def start(models: Path, tmp_path: Path, url: str, message_log: Any, **shadow: Any) -> Any:
    log = message_log(url, ["edge-sdk/cam-1/#"])
    recording = Recording()
    settings = dict({"every_n_frames": 2, "window_frames": 20, "watch_s": 1.0, "watch_latency_ratio": 100.0,
                     "watch_fps_ratio": 0.3, "watch_rate_ratio": 3.0}, **shadow)
    cfg = config(models, tmp_path, url, shadow=settings)
    cfg.pipeline.source.fps = 60  # paced: the shadow's share of a busy CPU is what the bench measures
    daemon = Daemon(cfg, pipeline_factory=recording)
    running = Running(daemon)
    assert wait_until(lambda: daemon.frames > 10)
    return daemon, log, running, recording


def send(log: Any, cid: str, cmd: str, args: Dict[str, Any]) -> Dict[str, Any]:
    """The command's first (not final) response."""
    command(log, CMD, {"schema": "edge-sdk/cmd/1", "id": cid, "cmd": cmd, "args": args})
    assert log.wait(lambda m: any(r["id"] == cid and not r.get("final") for r in log.on("cmd/response")), timeout=20)
    return [r for r in log.on("cmd/response") if r["id"] == cid and not r.get("final")][0]


def full_window(log: Any, bundle: str) -> Dict[str, Any]:
    """The first `shadow` message of `bundle` whose figures cover a whole window."""
    def found(messages: List[Dict[str, Any]]) -> bool:
        return any(s["bundle"] == bundle and s["window_frames"] == 20 for s in log.on("shadow"))

    assert log.wait(found, timeout=30), log.on("shadow")
    return [s for s in log.on("shadow") if s["bundle"] == bundle and s["window_frames"] == 20][0]


def contiguous(recording: Recording) -> None:
    idx = recording.indices
    assert idx == list(range(idx[0], idx[0] + len(idx))), "a frame went missing"
    assert recording.pipeline.stats.frames_dropped == 0


def all_valid(log: Any) -> None:
    checked = [m for m in log.messages if isinstance(m["payload"], dict)]  # the broker log's own probe is bytes
    assert any(m["topic"].endswith("/shadow") for m in checked)
    for message in checked:
        assert schemas.errors(message["payload"]) == [], message


def test_a_rebuilt_bundle_agrees_and_is_promoted_automatically(models: Path, tmp_path: Path, broker,
                                                                message_log) -> None:
    daemon, log, running, recording = start(models, tmp_path, broker.url, message_log, auto_promote=True)
    hash_a = Bundle.load(models / "a").hash
    previous = daemon.model.model
    try:
        r = send(log, "s1", "reload", {"bundle": "a-rebuilt", "shadow": True})
        assert r["ok"] and r["result"]["shadow"] is True, r
        assert log.wait(lambda m: any(s["state"] == "promoted" for s in log.on("shadow")), timeout=30), json.dumps(log.on("shadow")[-1])
        promoted = [s for s in log.on("shadow") if s["state"] == "promoted"][0]
        # watched for 1 s after the promotion, then the status says the watch is over
        assert log.wait(lambda m: any(s.get("bundle") == "a-rebuilt" and s.get("shadow") is None
                                      and s["state"] == "online" for s in log.on("status")), timeout=20)
        frames = daemon.frames
        assert wait_until(lambda: daemon.frames > frames + 20)
        assert daemon.model.kept is None and daemon.model.model is not previous
        assert wait_until(lambda: not previous.backend.is_active, 10), "the previous model was not closed after the watch"
    finally:
        assert running.stop() == 0
    assert promoted["window_frames"] == 20 and promoted["frames_compared"] >= 20
    assert promoted["agreement"]["f1"] >= 0.97, promoted
    assert promoted["detection_rate"]["ratio"] == 1.0 and promoted["detection_rate"]["live"] > 0
    assert promoted["score_shift"] == {"statistic": "ks", "value": 0.0, "live_mean": promoted["score_shift"]["live_mean"],
                                       "shadow_mean": promoted["score_shift"]["live_mean"]}
    assert promoted["latency_ms"]["ratio"] > 0 and promoted["live_bundle_hash"] == hash_a
    running_shadow = [s["shadow"] for s in log.on("status") if s.get("shadow")]
    assert {"state": "running", "bundle": "a-rebuilt", "bundle_hash": promoted["bundle_hash"]} in running_shadow
    assert {"state": "watching", "previous_bundle": "a", "previous_bundle_hash": hash_a} in running_shadow
    assert not [a for a in log.on("alerts") if a["alert"] == "rollback"]
    final = [x for x in log.on("cmd/response") if x["id"] == "s1" and x.get("final")]
    assert final and final[0]["ok"] and final[0]["result"]["shadow"] == "a-rebuilt"
    contiguous(recording)
    all_valid(log)


def test_a_dimmed_bundle_shows_low_agreement_and_abort_keeps_the_live_model(models: Path, tmp_path: Path, broker,
                                                                             message_log) -> None:
    daemon, log, running, recording = start(models, tmp_path, broker.url, message_log)
    hash_a = Bundle.load(models / "a").hash
    try:
        assert send(log, "s1", "reload", {"bundle": "dim", "shadow": True})["ok"]
        window = full_window(log, "dim")
        candidate = daemon.shadow.run.model
        busy = send(log, "s2", "reload", {"bundle": "a-rebuilt"})
        aborted = send(log, "s3", "abort", {})
        frames = daemon.frames
        assert wait_until(lambda: daemon.frames > frames + 30)
        assert wait_until(lambda: not candidate.backend.is_active, 10), "the aborted candidate was never closed"
    finally:
        assert running.stop() == 0
    assert window["agreement"]["f1"] < 0.5 and window["detection_rate"]["ratio"] == 0.0, json.dumps(window)
    assert window["detection_rate"]["live"] > 0 and window["score_shift"]["value"] == 1.0
    assert busy["ok"] is False and busy["reason"] == "refused" and "abort" in busy["error"]
    assert aborted["ok"] and aborted["result"]["aborted"] == "dim", aborted
    assert [s["state"] for s in log.on("shadow")][-1] == "aborted"
    assert daemon.status()["bundle_hash"] == hash_a and daemon.status()["shadow"] is None
    assert daemon.model.reloads == 0  # the live model was never swapped
    contiguous(recording)
    all_valid(log)


def test_a_promoted_bad_bundle_is_rolled_back_to_the_previous_one(models: Path, tmp_path: Path, broker,
                                                                   message_log) -> None:
    daemon, log, running, recording = start(models, tmp_path, broker.url, message_log)
    hash_a, hash_dim = Bundle.load(models / "a").hash, Bundle.load(models / "dim").hash
    try:
        assert send(log, "s1", "reload", {"bundle": "dim", "shadow": True})["ok"]
        full_window(log, "dim")
        kept = daemon.model.model
        promoted = send(log, "s2", "promote", {})
        assert log.wait(lambda m: any(a["alert"] == "rollback" for a in log.on("alerts")), timeout=20)
        assert log.wait(lambda m: any(s.get("bundle") == "a" and s.get("bundle_hash") == hash_a and s.get("shadow") is None
                                      and s["state"] == "online" for s in log.on("status")[1:]), timeout=10)
        frames = daemon.frames
        assert wait_until(lambda: daemon.frames > frames + 20)
        assert daemon.model.model is kept, "the rollback did not return to the previous model, kept loaded"
        # the alert is not left open for ever: the next promotion that holds clears it
        assert send(log, "s3", "reload", {"bundle": "a-rebuilt", "shadow": True})["ok"]
        full_window(log, "a-rebuilt")
        assert send(log, "s4", "promote", {})["ok"]
        assert log.wait(lambda m: [(a["alert"], a["state"]) for a in log.on("alerts") if a["alert"] == "rollback"]
                        == [("rollback", "raised"), ("rollback", "cleared")], timeout=30), log.on("alerts")
    finally:
        assert running.stop() == 0
    assert promoted["ok"] and promoted["result"]["promoted"] == "dim" and promoted["result"]["bundle_hash"] == hash_dim
    assert promoted["result"]["previous"] == {"bundle": "a", "bundle_hash": hash_a}
    alert = [a for a in log.on("alerts") if a["alert"] == "rollback"][0]
    # the dim bundle finds (almost) nothing: its rate is far below the band's lower bound
    assert alert["severity"] == "critical" and alert["metric"] == "detection_rate", alert
    assert alert["value"] < 0.1 and alert["value"] < alert["threshold"], alert
    assert "to a (" + hash_a + ")" in alert["message"] and re.search(r"detection rate 0\.0\d/frame", alert["message"]), alert
    contiguous(recording)
    all_valid(log)


def test_abort_during_the_watch_rolls_back_at_once(models: Path, tmp_path: Path, broker, message_log) -> None:
    daemon, log, running, recording = start(models, tmp_path, broker.url, message_log, watch_s=600.0)
    hash_a = Bundle.load(models / "a").hash
    try:
        assert send(log, "s1", "reload", {"bundle": "a-rebuilt", "shadow": True})["ok"]
        full_window(log, "a-rebuilt")
        kept = daemon.model.model
        assert send(log, "s2", "promote", {})["ok"]
        watched = send(log, "s3", "reload", {"bundle": "dim", "shadow": True})
        rolled = send(log, "s4", "abort", {})
        frames = daemon.frames
        assert wait_until(lambda: daemon.frames > frames + 20)
    finally:
        assert running.stop() == 0
    assert watched["ok"] is False and "watched for" in watched["error"] and "abort" in watched["error"], watched
    assert rolled["ok"] and rolled["result"]["why"] == "abort" and rolled["result"]["bundle"] == "a", rolled
    assert rolled["result"]["bundle_hash"] == hash_a
    alert = [a for a in log.on("alerts") if a["alert"] == "rollback"][0]
    assert "abort command" in alert["message"] and alert["severity"] == "critical"
    watching = [s["shadow"] for s in log.on("status") if (s.get("shadow") or {}).get("state") == "watching"]
    assert watching == [{"state": "watching", "previous_bundle": "a", "previous_bundle_hash": hash_a}]
    assert daemon.model.model is kept and daemon.model.kept is None
    contiguous(recording)
    all_valid(log)


def test_a_candidate_that_fails_is_dropped_and_the_live_model_runs_on(models: Path, tmp_path: Path, broker,
                                                                      message_log) -> None:
    daemon, log, running, recording = start(models, tmp_path, broker.url, message_log)
    hash_a = Bundle.load(models / "a").hash
    try:
        assert send(log, "s1", "reload", {"bundle": "a-rebuilt", "shadow": True})["ok"]
        assert log.wait(lambda m: bool(log.on("shadow")), timeout=20)
        daemon.shadow.run.model.close()  # its backend stops: the next shadow inference fails
        assert log.wait(lambda m: any(a["alert"] == "shadow_failed" for a in log.on("alerts")), timeout=20)
        assert log.wait(lambda m: log.on("status")[-1].get("shadow") is None, timeout=10)
        frames = daemon.frames
        assert wait_until(lambda: daemon.frames > frames + 20)
        after = send(log, "s2", "promote", {})
        # the failure is not left open for ever: the next shadow that starts clears it
        assert send(log, "s3", "reload", {"bundle": "a-rebuilt", "shadow": True})["ok"]
        assert log.wait(lambda m: [a["state"] for a in log.on("alerts") if a["alert"] == "shadow_failed"]
                        == ["raised", "cleared"], timeout=20), log.on("alerts")
    finally:
        assert running.stop() == 0
    alert = [a for a in log.on("alerts") if a["alert"] == "shadow_failed"][0]
    assert "a-rebuilt" in alert["message"] and "BackendError" in alert["message"], alert
    assert after["ok"] is False and "no shadow runs" in after["error"]
    assert daemon.status()["bundle_hash"] == hash_a and daemon.model.reloads == 0
    contiguous(recording)
    all_valid(log)


def test_shadow_commands_with_bad_arguments_are_refused_with_typed_errors(models: Path, tmp_path: Path, broker,
                                                                          message_log) -> None:
    daemon, log, running, _ = start(models, tmp_path, broker.url, message_log, memory_margin_mb=1e6)
    try:
        no_room = send(log, "b1", "reload", {"bundle": "a-rebuilt", "shadow": True})
        not_bool = send(log, "b2", "reload", {"bundle": "a-rebuilt", "shadow": "yes"})
        nothing = send(log, "b3", "promote", {})
        nothing_to_abort = send(log, "b4", "abort", {})
        with_args = send(log, "b5", "promote", {"bundle": "a"})
        outside = send(log, "b6", "reload", {"bundle": "../elsewhere", "shadow": True})
        daemon.shadow.config.memory_margin_mb = 0.0
        assert send(log, "b7", "set", {"mode": "roi"})["ok"]
        in_roi = send(log, "b8", "reload", {"bundle": "a-rebuilt", "shadow": True})
    finally:
        assert running.stop() == 0
    size_mb = bundle_bytes(models / "a-rebuilt") / (1024 * 1024)
    assert no_room["ok"] is False and no_room["reason"] == "refused"
    assert f"{size_mb:.1f} MB" in no_room["error"] and "MB are free" in no_room["error"], no_room
    assert "1e+06 MB margin" in no_room["error"]
    assert not_bool["ok"] is False and not_bool["reason"] == "invalid"
    assert nothing["ok"] is False and nothing["reason"] == "refused" and "no shadow runs" in nothing["error"]
    assert nothing_to_abort["ok"] is False and "nothing to abort" in nothing_to_abort["error"]
    assert with_args["ok"] is False and with_args["reason"] == "invalid"
    assert outside["ok"] is False and "outside the model folder" in outside["error"]
    assert in_roi["ok"] is False and "roi" in in_roi["error"]
    assert daemon.model.reloads == 0 and daemon.shadow.run is None


def test_a_result_served_from_the_prediction_cache_is_not_compared(models: Path, tmp_path: Path) -> None:
    """A cached result carries the detections of the last frame the live model ran on, while its
    frame is the current one: compared, the same model disagrees with itself. The shadow leaves
    such frames out and counts them."""
    live = RunningModel(config(models, tmp_path, None).pipeline)
    live.open(models / "a")
    scene = SyntheticFaces.from_uri("synthetic://faces?width=96&height=64&count=2&min_size=8&max_size=16")
    still, moved = scene.render(0).copy(), scene.render(120).copy()
    own = {i: live.detector.detect(Frame(image.copy(), index=i)).detections for i, image in ((0, still), (120, moved))}
    # the oracle: the live model's own runs; the two frames' boxes differ (same count, other boxes)
    assert len(own[0]) == len(own[120]) and agreement([own[120]], [own[0]])["f1"] < 0.9
    candidate = RunningModel(config(models, tmp_path, None).pipeline)
    _, detector = candidate.open(models / "a-rebuilt")
    run = ShadowRun(candidate.model, detector, "a-rebuilt", every=1, window=10)
    try:
        for i in range(1, 4):  # the scene moved under the cache's threshold: frame 0's boxes served
            run.offer(FrameResult(index=120 + i, timestamp=0.0, detections=own[0], frame=moved, cached=True))
            run.offer(FrameResult(index=120 + i, timestamp=0.0, detections=own[120], frame=moved))
            assert wait_until(lambda: run.compared >= i, timeout=20)  # noqa: B023 - read at once
        figures = run.figures()
    finally:
        run.stop()
        candidate.close()
        live.close()
    assert run.error is None
    assert figures["agreement"]["f1"] == 1.0, figures  # the same model, on the frames it ran on
    assert figures["frames_cached"] == 3 and figures["frames_compared"] == 3
    message = dict(figures, schema="edge-sdk/shadow/1", device_id="cam-1", ts=1, seq=0, state="running",
                   bundle="a-rebuilt", bundle_hash="h", live_bundle_hash="h", every_n_frames=1)
    assert schemas.errors(message, "edge-sdk/shadow/1") == []


def test_ks_statistic_matches_scipy_and_the_edge_cases() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    for a, b in ((rng.random(40), rng.random(55)), (rng.random(30), rng.random(30) * 0.5),
                 (np.array([0.5, 0.5, 0.7]), np.array([0.5, 0.9]))):
        assert ks_statistic(a, b) == pytest.approx(stats.ks_2samp(a, b).statistic)
    assert ks_statistic(np.zeros(0), np.zeros(0)) == 0.0
    assert ks_statistic(np.zeros(0), np.ones(3)) == 1.0


def test_fit_problem_names_the_figures(tmp_path: Path) -> None:
    bundle = make_tiny_bundle(tmp_path / "b", seed=0)
    size = sum(f.stat().st_size for f in bundle.iterdir())
    assert fit_problem(bundle, 1.0, free=size + 1024 * 1024) is None
    problem = fit_problem(bundle, 1.0, free=size + 1024 * 1024 - 1)
    assert problem is not None and f"{(size + 1024 * 1024 - 1) / 1048576:.1f} MB are free" in problem
    assert json.dumps(problem)  # a plain message, sent in a response


def test_abort_in_the_first_frames_after_a_promotion_rolls_back(models: Path, tmp_path: Path, broker,
                                                                 message_log) -> None:
    """promote and abort in one batch of commands (what a rollout's undo sends at once): the watch
    has no frame yet; the abort still rolls back (it raised an internal TypeError and rolled
    nothing back)."""
    daemon, log, running, recording = start(models, tmp_path, broker.url, message_log, watch_s=600.0)
    hash_a = Bundle.load(models / "a").hash
    try:
        assert send(log, "s1", "reload", {"bundle": "a-rebuilt", "shadow": True})["ok"]
        full_window(log, "a-rebuilt")
        for cid, cmd in (("s2", "promote"), ("s3", "abort")):  # published back to back, answered together
            command(log, CMD, {"schema": "edge-sdk/cmd/1", "id": cid, "cmd": cmd, "args": {}})
        assert log.wait(lambda m: {r["id"] for r in log.on("cmd/response")} >= {"s2", "s3"}, timeout=20)
        frames = daemon.frames
        assert wait_until(lambda: daemon.frames > frames + 10)
    finally:
        assert running.stop() == 0
    answers = {r["id"]: r for r in log.on("cmd/response") if r["id"] in ("s2", "s3")}
    assert answers["s2"]["ok"], answers
    assert answers["s3"]["ok"] and answers["s3"]["result"]["why"] == "abort", answers["s3"]
    assert answers["s3"]["result"]["bundle_hash"] == hash_a
    assert daemon.model.describe()["bundle_hash"] == hash_a and daemon.model.kept is None
    contiguous(recording)


def test_the_mode_and_thresholds_cannot_change_under_a_shadow(models: Path, tmp_path: Path, broker,
                                                              message_log) -> None:
    """The shadow's detector keeps the settings it started with: a live-side change would compare
    mode roi against mode full; refused until promote or abort, then accepted."""
    daemon, log, running, _ = start(models, tmp_path, broker.url, message_log)
    try:
        assert send(log, "s1", "reload", {"bundle": "a-rebuilt", "shadow": True})["ok"]
        assert log.wait(lambda m: (daemon.shadow.run is not None), timeout=20)
        refused = send(log, "s2", "set", {"mode": "roi"})
        nudged = send(log, "s3", "set", {"score_threshold": 0.9})
        interval = send(log, "s4", "set", {"telemetry_interval": 0.5})  # not the model's: accepted
        assert send(log, "s5", "abort", {})["ok"]
        after = send(log, "s6", "set", {"mode": "roi"})
    finally:
        assert running.stop() == 0
    assert refused["ok"] is False and "set of mode refused: the shadow of a-rebuilt runs" in refused["error"], refused
    assert nudged["ok"] is False and "set of score_threshold refused" in nudged["error"], nudged
    assert interval["ok"] and after["ok"] and after["result"]["applied"]["mode"] == "roi"


def test_a_promotion_outlives_a_restart_until_the_config_names_another_bundle(models: Path, tmp_path: Path, broker,
                                                                             message_log) -> None:
    """A promoted device that restarted came back with its configured bundle while the fleet
    believed it promoted. Now, once the watch has passed, the bundle is kept on the device and a
    restart runs it (the status says `bundle_origin: promotion`); a restart during the watch does
    not (the promotion was not final); an operator who edits the config's bundle wins."""
    daemon, log, running, _ = start(models, tmp_path, broker.url, message_log, watch_s=0.5)
    try:
        assert send(log, "s1", "reload", {"bundle": "a-rebuilt", "shadow": True})["ok"]
        full_window(log, "a-rebuilt")
        assert send(log, "s2", "promote", {})["ok"]
        assert wait_until(lambda: daemon.shadow.watch is None and daemon.bundle_origin == "promotion", timeout=30)
    finally:
        assert running.stop() == 0
    record = daemon.running.path
    assert record is not None and record.is_file()
    assert json.loads(record.read_text())["bundle"] == str(models / "a-rebuilt")

    def restarted(**changes: Any) -> Dict[str, Any]:
        return started_status(Daemon(config(models, tmp_path, broker.url, shadow={"watch_s": 0.5}, **changes)))

    status = restarted()
    assert status["bundle"] == "a-rebuilt" and status["bundle_origin"] == "promotion"
    assert schemas.errors(dict(status, schema="edge-sdk/status/1", device_id="cam-1", ts=1, seq=1,
                               state="online", status_ts=1)) == []
    status = restarted(bundle=str(models / "dim"))  # the operator's edit: the config wins, the record goes
    assert status["bundle"] == "dim" and status["bundle_origin"] == "config" and not record.exists()


def test_a_restart_during_the_watch_runs_the_previous_bundle(models: Path, tmp_path: Path, broker,
                                                             message_log) -> None:
    daemon, log, running, _ = start(models, tmp_path, broker.url, message_log, watch_s=600.0)
    try:
        assert send(log, "s1", "reload", {"bundle": "a-rebuilt", "shadow": True})["ok"]
        full_window(log, "a-rebuilt")
        assert send(log, "s2", "promote", {})["ok"]
        assert daemon.shadow.watch is not None
    finally:
        assert running.stop() == 0
    assert daemon.running.path is not None and not daemon.running.path.exists()
    status = started_status(Daemon(config(models, tmp_path, broker.url)))
    assert status["bundle"] == "a" and status["bundle_origin"] == "config"


def test_a_kept_bundle_that_no_longer_loads_gives_way_to_the_configured_one(models: Path, tmp_path: Path, broker,
                                                                            caplog) -> None:
    from edge_sdk.daemon.running import SCHEMA

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{ not a manifest")
    cfg = config(models, tmp_path, broker.url)
    daemon = Daemon(cfg)
    assert daemon.running.path is not None
    daemon.running.path.parent.mkdir(parents=True, exist_ok=True)
    daemon.running.path.write_text(json.dumps({"schema": SCHEMA, "bundle": str(broken), "configured": str(models / "a"),
                                               "how": "promotion", "bundle_hash": None, "ts": 1}))
    status = started_status(daemon)
    assert status["bundle"] == "a" and status["bundle_origin"] == "config"
    assert "does not load" in caplog.text and not daemon.running.path.exists()


def started_status(daemon: Daemon) -> Dict[str, Any]:
    """Run `daemon` until a few frames have passed, stop it cleanly; its status then."""
    runner = Running(daemon)
    try:
        assert wait_until(lambda: daemon.frames > 3)
        return daemon.status()
    finally:
        assert runner.stop() == 0
