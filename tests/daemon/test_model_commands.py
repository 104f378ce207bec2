"""`set score_threshold`, `set nms_iou` and `set mode` in every mode, and a reload that keeps
them, through a real Mosquitto broker: the daemon runs the brightness model of
tests/runtime_factories.py on frames of two grey halves (scores 0.881 and 0.269, known by
construction), publishes every frame's detections, and the detections of the frames after each
response obey what the response says was applied."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import pytest

from edge_sdk.daemon import Daemon
from edge_sdk.runtime.sources import Source
from edge_sdk.telemetry import schemas

from polling import wait_until
from test_daemon import Running, command, config
from test_model import BRIGHT, DIM, HIGH, LOW, grey_bundle

pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")

CMD = schemas.topic("cam-1", "cmd")
NEXT_MODE = {"full": "tiles", "tiles": "roi", "roi": "full"}


class Halves(Source):
    """Endless frames of two grey halves (odd size), as a file would deliver them: nothing dropped."""

    name = "halves://"

    def __init__(self, width: int = 90, height: int = 62) -> None:
        self.frame = np.full((height, width, 3), DIM, np.uint8)
        self.frame[:, : width // 2] = BRIGHT

    def read(self, out: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
        if out is not None and out.shape == self.frame.shape:
            out[...] = self.frame
            return out
        return self.frame.copy()


def with_halves(cfg: Any, **injected: Any) -> Any:
    from edge_sdk.runtime.pipeline import Pipeline

    return Pipeline(cfg, source=Halves(), **injected)


@pytest.fixture(scope="module")
def grey(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("grey-models")
    grey_bundle(root / "a")
    grey_bundle(root / "b", score_threshold=0.3, nms_iou=0.45, width=32)
    return root


def start(grey: Path, tmp_path: Path, url: str, message_log: Any, mode: str) -> Any:
    cfg = config(grey, tmp_path, url, mode=mode, telemetry={"detections": "frame", "interval_s": 0.2})
    cfg.pipeline.source.fps = 40  # paced: commands are served between frames, the broker keeps up
    daemon = Daemon(cfg, pipeline_factory=with_halves)
    log = message_log(url, ["edge-sdk/cam-1/#"])
    running = Running(daemon)
    assert log.wait(lambda m: any(s["state"] == "online" and s.get("instance_id") == daemon.instance_id
                                  for s in log.on("status")), timeout=20), "the daemon never came online"
    return daemon, log, running


class Session:
    """Sends `set` commands and reads the detections of the frames processed after each answer."""

    def __init__(self, daemon: Daemon, log: Any) -> None:
        self.daemon, self.log, self.n = daemon, log, 0

    def send(self, args: Dict[str, Any]) -> Dict[str, Any]:
        self.n += 1
        cid = f"c{self.n}"
        command(self.log, CMD, {"schema": "edge-sdk/cmd/1", "id": cid, "cmd": "set", "args": args})
        assert self.log.wait(lambda m: any(r["id"] == cid for r in self.log.on("cmd/response")), timeout=10)
        return [r for r in self.log.on("cmd/response") if r["id"] == cid][0]

    def next_frames(self, count: int = 4) -> List[np.ndarray]:
        """The scores of `count` frames processed after now (commands are served between frames:
        a frame numbered at or above the count processed now comes after the last answer)."""
        after = self.daemon.frames

        def later() -> List[Dict[str, Any]]:
            return [d for d in self.log.on("detections") if d["kind"] == "frame" and d["frame"] >= after]

        assert self.log.wait(lambda m: len(later()) >= count, timeout=10), "no detections after the command"
        return [np.array([r["score"] for r in d["detections"]], np.float64) for d in later()[:count]]


def obeys(frames: List[np.ndarray], threshold: float) -> bool:
    return all(len(s) == 0 or s.min() >= threshold for s in frames)


@pytest.mark.parametrize("mode", ["full", "tiles", "roi"])
def test_thresholds_and_mode_are_set_in_every_mode_and_the_next_frames_obey(grey: Path, tmp_path: Path, broker,
                                                                           message_log, mode: str) -> None:
    daemon, log, running = start(grey, tmp_path, broker.url, message_log, mode)
    s = Session(daemon, log)
    try:
        frames = s.next_frames()  # the bundle's threshold (0.5): the bright half only
        assert all(len(f) and np.allclose(f, HIGH, atol=1e-3) for f in frames), frames

        r = s.send({"score_threshold": 0.99})
        assert r["ok"] and r["result"]["applied"] == {"score_threshold": 0.99}, r
        assert all(len(f) == 0 for f in s.next_frames())

        r = s.send({"score_threshold": 0.2, "nms_iou": 0.6})
        assert r["ok"] and r["result"]["applied"] == {"score_threshold": 0.2, "nms_iou": 0.6}, r
        frames = s.next_frames()
        assert obeys(frames, 0.2) and all(np.isclose(f, LOW, atol=1e-3).any() for f in frames), frames

        r = s.send({"score_threshold": 0.5})
        assert r["ok"] and r["result"]["applied"] == {"score_threshold": 0.5}, r
        frames = s.next_frames()
        assert obeys(frames, 0.5) and all(len(f) for f in frames), frames

        # refused (by the schema, or by the detector): nothing changes, the frames still obey 0.5
        for bad in ({"score_threshold": 1.5}, {"nms_iou": -0.1}, {"mode": "fast"},
                    {"mode": NEXT_MODE[mode], "score_threshold": 2}, {"score_threshold": 0.3, "nms": 0.1}):
            r = s.send(bad)
            assert r["ok"] is False and r["error"], (bad, r)
        assert daemon.model.mode == mode
        assert daemon.model.describe()["thresholds"] == {"score_threshold": 0.5, "nms_iou": 0.6}
        frames = s.next_frames()
        assert obeys(frames, 0.5) and all(len(f) for f in frames), frames

        # another mode: the thresholds set stay, and change with it when given
        other = NEXT_MODE[mode]
        r = s.send({"mode": other})
        assert r["ok"] and r["result"]["applied"] == {"mode": other}, r
        frames = s.next_frames()
        assert obeys(frames, 0.5) and all(len(f) for f in frames), frames
        assert daemon.pipeline.detector.mode == other
        r = s.send({"mode": mode, "score_threshold": 0.99})
        assert r["ok"] and r["result"]["applied"] == {"mode": mode, "score_threshold": 0.99}, r
        assert all(len(f) == 0 for f in s.next_frames())
        assert daemon.pipeline.detector.mode == mode

        # the retained status and the telemetry's model block say the same, from the one owner
        want = {"score_threshold": 0.99, "nms_iou": 0.6}
        assert log.wait(lambda m: log.on("status")[-1].get("thresholds") == want, timeout=10)
        assert log.wait(lambda m: any(t["model"]["thresholds"] == want and t["model"]["mode"] == mode
                                      for t in log.on("telemetry")), timeout=10)
    finally:
        assert running.stop() == 0
    for message in log.on("cmd/response") + log.on("status") + log.on("telemetry")[-3:]:
        assert schemas.errors(message) == [], message


def test_a_reload_keeps_the_mode_and_the_thresholds_set_by_command(grey: Path, tmp_path: Path, broker,
                                                                  message_log) -> None:
    daemon, log, running = start(grey, tmp_path, broker.url, message_log, "full")
    s = Session(daemon, log)
    try:
        r = s.send({"mode": "roi", "score_threshold": 0.6})
        assert r["ok"], r
        old_backend = daemon.pipeline.detector.backend
        command(log, CMD, {"schema": "edge-sdk/cmd/1", "id": "r1", "cmd": "reload", "args": {"bundle": "b"}})
        assert log.wait(lambda m: any(x.get("final") and x["id"] == "r1" for x in log.on("cmd/response")), timeout=20)
        final = [x for x in log.on("cmd/response") if x.get("final")][0]
        # kept: the mode and the threshold set by command; nms_iou was never set: the new bundle's 0.45
        assert final["ok"] and final["result"]["mode"] == "roi", final
        assert final["result"]["thresholds"] == {"score_threshold": 0.6, "nms_iou": 0.45}, final
        frames = s.next_frames()
        assert obeys(frames, 0.6) and all(len(f) for f in frames), frames
        assert daemon.pipeline.detector.mode == "roi" and daemon.pipeline.detector.backend is not old_backend
        assert wait_until(lambda: not old_backend.is_active, 10), "the replaced model was never closed"
        assert log.wait(lambda m: any(t["model"]["reloads"] == 1 and t["model"]["mode"] == "roi"
                                      and t["model"]["thresholds"]["nms_iou"] == 0.45 for t in log.on("telemetry")))
    finally:
        assert running.stop() == 0
    assert schemas.errors(final) == []
