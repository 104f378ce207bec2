"""A/B tests with several streams: `reload` with `ab` puts arm B's streams on a candidate bundle
while arm A's stay on the live model, the `ab` telemetry compares the arms, `promote` and
`abort` end the test. The real daemon (ONNX Runtime on the CPU, three synthetic streams, the
real batched pipeline) on a real Mosquitto broker.

The oracle of which model found a frame's detections: the bundles run here by hand
(load_model, a full-frame detector) on the same synthetic frame. The candidate is the live
bundle with its score logits raised: the same boxes, every score higher."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

from edge_sdk.daemon import Daemon, daemon_config_from_dict
from edge_sdk.manifest import Bundle
from edge_sdk.runtime.detectors.factory import make_detector
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.model import load_model
from edge_sdk.runtime.synthetic import SyntheticFaces
from edge_sdk.telemetry import schemas

from polling import wait_until
from test_daemon import Running
from test_shadow import send
from tiny_bundle import make_tiny_bundle

pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")

SCENE = {"width": 96, "height": 64, "count": 2, "min_size": 8, "max_size": 16}
SEEDS = {"door": 1, "yard": 1, "gate": 2}  # door and yard see the same frames


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ab-models")
    make_tiny_bundle(root / "a", seed=0, size_bias=2.0)
    make_tiny_bundle(root / "bright", seed=0, size_bias=2.0, score_bias=1.0)  # every score higher
    return root


class Oracle:
    """The scores each bundle finds on frame `index` of a stream, run by hand."""

    def __init__(self, models: Path, mode: str = "full") -> None:
        self.detectors = {}
        for name in ("a", "bright"):
            model = load_model(models / name, backend="onnxruntime-cpu", threads=1)
            self.detectors[name] = make_detector(mode, model, None, {})
        self.sources: Dict[int, SyntheticFaces] = {}
        self.frames: Dict[int, List[np.ndarray]] = {}

    def frame(self, seed: int, index: int) -> np.ndarray:
        if seed not in self.sources:
            self.sources[seed] = SyntheticFaces(seed=seed, **SCENE)  # type: ignore[arg-type]
        frames = self.frames.setdefault(seed, [])
        while len(frames) <= index:
            frames.append(np.array(self.sources[seed].read()[0]))
        return frames[index]

    def scores(self, bundle: str, stream: str, index: int) -> List[float]:
        found = self.detectors[bundle].detect(Frame(self.frame(SEEDS[stream], index), index=index)).detections
        return sorted(float(s) for s in found.confidence)

    def which(self, stream: str, index: int, scores: List[float]) -> str:
        """The bundle whose scores on that frame are the daemon's (both would be a failure)."""
        hits = [b for b in ("a", "bright") if len(self.scores(b, stream, index)) == len(scores)
                and np.allclose(self.scores(b, stream, index), scores, atol=1e-3)]
        assert len(hits) == 1, (stream, index, scores, hits)
        return hits[0]


def source(seed: int) -> str:
    return "synthetic://faces?" + "&".join(f"{k}={v}" for k, v in SCENE.items()) + f"&seed={seed}"


def start(models: Path, tmp_path: Path, url: str, message_log: Any,
          margin_mb: float = 256.0) -> Tuple[Any, Any, Any, List[Any]]:
    cfg = daemon_config_from_dict({
        "bundle": str(models / "a"), "backend": "onnxruntime-cpu", "threads": 1, "cache": {"enabled": False},
        "sources": [{"id": sid, "uri": source(seed), "fps": 40} for sid, seed in SEEDS.items()],  # paced
        "device": {"id": "cam-1", "models_dir": str(models)},
        "telemetry": {"interval_s": 0.2, "target_fps": 0},
        "shadow": {"window_frames": 20, "memory_margin_mb": margin_mb},
        "mqtt": {"url": url, "queue_dir": str(tmp_path / "queue"), "reconnect_min_s": 0.1, "reconnect_max_s": 0.5}})
    log = message_log(url, ["edge-sdk/cam-1/#"])
    daemon = Daemon(cfg)
    seen: List[Any] = []  # (stream, index, sorted scores, arm, mode) of every result the frame loop handled
    observe = daemon.reporter.observe

    def record(result: Any) -> None:
        seen.append((result.stream, int(result.index), sorted(float(s) for s in result.detections.confidence),
                     result.info.get("arm"), result.info.get("mode", "full")))
        observe(result)

    daemon.reporter.observe = record  # type: ignore[method-assign]
    running = Running(daemon)
    assert wait_until(lambda: {s[0] for s in seen} == set(SEEDS), 30)
    return daemon, log, running, seen


def final(log: Any, cid: str) -> Dict[str, Any]:
    assert log.wait(lambda m: any(r["id"] == cid and r.get("final") for r in log.on("cmd/response")), timeout=30)
    return [r for r in log.on("cmd/response") if r["id"] == cid and r.get("final")][0]


def full_windows(log: Any) -> Dict[str, Any]:
    """The first running `ab` message whose arms' figures both cover a whole window."""
    def found(messages: List[Dict[str, Any]]) -> bool:
        return any(m["state"] == "running" and all(a["window_frames"] == 20 for a in m["arms"].values())
                   for m in log.on("ab"))

    assert log.wait(found, timeout=30), log.on("ab")[-1:]
    return [m for m in log.on("ab") if m["state"] == "running"
            and all(a["window_frames"] == 20 for a in m["arms"].values())][0]


def more_frames(seen: List[Any], n: int) -> None:
    counts = {sid: sum(1 for s in seen if s[0] == sid) for sid in SEEDS}
    assert wait_until(lambda: all(sum(1 for s in seen if s[0] == sid) >= counts[sid] + n for sid in SEEDS), 30)


def in_order(seen: List[Any]) -> None:
    """Every frame of each stream went through a model, in order, none left out."""
    for sid in SEEDS:
        indices = [s[1] for s in seen if s[0] == sid]
        assert indices == list(range(len(indices))), sid


def all_valid(log: Any) -> None:
    checked = [m for m in log.messages if isinstance(m["payload"], dict) and not m["topic"].endswith("/cmd")]
    assert any(m["topic"].endswith("/ab") for m in checked)
    for message in checked:
        assert schemas.errors(message["payload"]) == [], message


def test_arm_b_streams_run_the_candidate_and_abort_puts_them_back(models: Path, tmp_path: Path, broker,
                                                                  message_log) -> None:
    daemon, log, running, seen = start(models, tmp_path, broker.url, message_log)
    hash_a, hash_bright = Bundle.load(models / "a").hash, Bundle.load(models / "bright").hash
    try:
        r = send(log, "ab1", "reload", {"bundle": "bright", "ab": {"b": ["yard"]}})
        assert r["ok"] and r["result"]["ab"] == {"b": ["yard"]}, r
        done = final(log, "ab1")
        assert done["ok"], done
        arms = {"a": {"bundle": "a", "bundle_hash": hash_a, "streams": ["door", "gate"]},
                "b": {"bundle": "bright", "bundle_hash": hash_bright, "streams": ["yard"]}}
        assert done["result"]["ab"] == arms
        running_figures = full_windows(log)
        assert log.wait(lambda m: any(s.get("ab") == arms for s in log.on("status")), timeout=10)
        refused = send(log, "ab2", "reload", {"bundle": "a"})
        assert not refused["ok"] and "A/B test of bright runs" in refused["error"], refused
        split = len(seen)
        aborted = send(log, "ab3", "abort", {})
        more_frames(seen, 10)
    finally:
        assert running.stop() == 0
    assert aborted["ok"] and aborted["result"]["aborted"] == "bright" and aborted["result"]["bundle_hash"] == hash_a
    assert daemon.model.model.bundle_hash == hash_a and daemon.model.candidate is None
    # the figures: each arm's own bundle and streams; the candidate's scores are higher, its boxes the same
    a, b = running_figures["arms"]["a"], running_figures["arms"]["b"]
    assert {k: a[k] for k in arms["a"]} == arms["a"] and {k: b[k] for k in arms["b"]} == arms["b"]
    assert b["score_mean"] > a["score_mean"] + 0.05, running_figures
    assert a["detections_per_frame"] > 0 and b["detections_per_frame"] > 0
    assert a["fps"] > 0 and b["fps"] > 0 and a["latency_p99_ms"] > 0 and b["latency_p99_ms"] > 0
    assert 0.6 < a["fps"] / b["fps"] < 1.6, running_figures  # per stream: every source is paced at 40 fps
    assert a["frames"] >= 20 and b["frames"] >= 20
    last = [m for m in log.on("ab") if m["state"] == "aborted"]
    assert len(last) == 1 and last[0]["arms"]["b"]["frames"] >= b["frames"]
    # which model found each frame, by the oracle: yard's frames of arm b the candidate's, every other the live one's
    oracle = Oracle(models)
    arms_seen = {s[3] for s in seen}
    assert arms_seen == {None, "a", "b"}
    for stream, index, scores, arm, _ in seen[::3]:
        if scores:
            assert oracle.which(stream, index, scores) == ("bright" if arm == "b" else "a"), (stream, index, arm)
        assert arm in (None, "a") or stream == "yard"
    after = [s for s in seen[split:] if s[3] is None]
    assert {s[0] for s in after} == set(SEEDS), "every stream runs the live model again after abort"
    in_order(seen)
    all_valid(log)


def test_promote_runs_the_candidate_on_every_stream(models: Path, tmp_path: Path, broker, message_log) -> None:
    daemon, log, running, seen = start(models, tmp_path, broker.url, message_log)
    live = daemon.model.model
    hash_bright = Bundle.load(models / "bright").hash
    try:
        assert send(log, "p1", "reload", {"bundle": "bright", "ab": {"b": ["door", "gate"]}})["ok"]
        assert final(log, "p1")["ok"]
        full_windows(log)
        promoted = send(log, "p2", "promote", {})
        split_end = len(seen)
        more_frames(seen, 10)
        assert wait_until(lambda: not live.backend.is_active, 10), "arm A's model was not retired"
        assert log.wait(lambda m: any(s.get("bundle") == "bright" and s.get("ab") is None for s in log.on("status")),
                        timeout=10)
    finally:
        assert running.stop() == 0
    assert promoted["ok"], promoted
    result = promoted["result"]
    assert result["promoted"] == "bright" and result["bundle_hash"] == hash_bright
    assert result["arms"]["b"]["streams"] == ["door", "gate"] and result["arms"]["a"]["streams"] == ["yard"]
    assert daemon.model.model.bundle_hash == hash_bright and daemon.model.reloads == 1
    oracle = Oracle(models)
    tail = [s for s in seen[split_end:] if s[3] is None and s[2]]
    assert {s[0] for s in tail} == set(SEEDS)
    for stream, index, scores, _, _ in tail[-12:]:
        assert oracle.which(stream, index, scores) == "bright", (stream, index)
    for stream, index, scores, arm, _ in seen[:split_end][::3]:
        if scores and arm is not None:
            assert oracle.which(stream, index, scores) == ("bright" if arm == "b" else "a"), (stream, index, arm)
    in_order(seen)
    all_valid(log)


def test_a_mode_set_on_a_stream_of_arm_b_keeps_it_on_the_candidate(models: Path, tmp_path: Path, broker,
                                                                   message_log) -> None:
    daemon, log, running, seen = start(models, tmp_path, broker.url, message_log)
    try:
        assert send(log, "m1", "reload", {"bundle": "bright", "ab": {"b": ["yard"]}})["ok"]
        assert final(log, "m1")["ok"]
        r = send(log, "m2", "set", {"stream": "yard", "mode": "tiles"})
        assert wait_until(lambda: sum(1 for s in seen if s[0] == "yard" and s[4] == "tiles") > 10, 30)
    finally:
        assert running.stop() == 0
    assert r["ok"], r
    tiles = [s for s in seen if s[0] == "yard" and s[4] == "tiles" and s[2]]
    assert tiles and {s[3] for s in tiles} == {"b"}
    oracle = Oracle(models, "tiles")
    for stream, index, scores, _, _ in tiles[:: max(1, len(tiles) // 6)]:
        assert oracle.which(stream, index, scores) == "bright", (stream, index)
    assert {s[4] for s in seen if s[0] == "door"} == {"full"}
    in_order(seen)


@pytest.mark.parametrize("args, error", [
    ({"bundle": "bright", "ab": {"b": ["porch"]}}, "unknown stream 'porch'"),
    ({"bundle": "bright", "ab": {"b": ["door", "yard", "gate"]}}, "arm B takes every stream"),
    ({"bundle": "bright", "ab": {"b": []}}, "b"),
    ({"bundle": "bright", "ab": {"b": ["door", "door"]}}, "b"),
    ({"bundle": "bright", "ab": {}}, "b"),
    ({"bundle": "bright", "ab": {"b": ["door"]}, "shadow": True}, "shadow or ab, not both"),
])
def test_bad_arms_are_refused_and_change_nothing(models: Path, tmp_path: Path, broker, message_log,
                                                args: Dict[str, Any], error: str) -> None:
    daemon, log, running, seen = start(models, tmp_path, broker.url, message_log)
    try:
        r = send(log, "x1", "reload", args)
        more_frames(seen, 3)
    finally:
        assert running.stop() == 0
    assert not r["ok"] and error in r["error"], r
    assert r["reason"] == ("invalid" if error == "b" else "refused"), r
    assert daemon.model.candidate is None and daemon.ab.pending is None and not daemon.reloader.busy
    assert {s[3] for s in seen} == {None}
    assert not log.on("ab")
    in_order(seen)


def test_promote_and_abort_without_a_test_are_refused(models: Path, tmp_path: Path, broker, message_log) -> None:
    daemon, log, running, seen = start(models, tmp_path, broker.url, message_log)
    try:
        p = send(log, "n1", "promote", {})
        a = send(log, "n2", "abort", {})
    finally:
        assert running.stop() == 0
    assert not p["ok"] and "no shadow runs" in p["error"]
    assert not a["ok"] and "nothing to abort" in a["error"]


def test_a_candidate_that_does_not_fit_beside_the_live_model_is_refused(models: Path, tmp_path: Path, broker,
                                                                       message_log) -> None:
    daemon, log, running, seen = start(models, tmp_path, broker.url, message_log, margin_mb=1_000_000)
    try:
        r = send(log, "f1", "reload", {"bundle": "bright", "ab": {"b": ["yard"]}})
    finally:
        assert running.stop() == 0
    assert not r["ok"] and "the ab candidate bright does not fit beside the live model" in r["error"], r
    assert "MB are free (MemAvailable)" in r["error"] and r["error"].endswith("reload it without ab")
    assert daemon.model.candidate is None and not daemon.reloader.busy
