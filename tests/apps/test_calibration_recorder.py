"""apps/calibration_recorder: which frames it keeps (real colour photos), recording on demand
from synthetic://, and recording started by a calibration_drift alert through a real Mosquitto."""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.preprocess import load_image
from edge_sdk.telemetry import schemas

from app_loader import APPS, load_app
from full_disk import run_on_small_disk
from polling import wait_until

cv2 = pytest.importorskip("cv2")
rec = load_app("calibration_recorder")
SCENES = sorted((Path(__file__).resolve().parents[2] / "calibrate" / "images").glob("scene_*.jpg"))


def test_duplicates_and_blank_frames_are_not_kept() -> None:
    frame = load_image(str(SCENES[0]))
    sel = rec.Selector(max_images=50)
    assert sel.offer(frame) is not None
    assert sel.offer(frame.copy()) is None  # the same scene again
    assert sel.offer(np.zeros_like(frame)) is None  # a black frame: no content
    assert sel.offer(load_image(str(SCENES[1]))) is not None and sel.kept == 2


def test_brightness_bins_are_capped_so_dark_frames_get_their_share() -> None:
    bright = [load_image(str(p)) for p in SCENES[:30]]
    sel = rec.Selector(max_images=16, min_change=2.0)  # 2 per brightness bin
    for frame in bright:
        sel.offer(frame)
    assert max(sel.bins) <= 2 and sel.kept < 16
    before = sel.kept
    for frame in bright:
        sel.offer((frame * 0.15).astype(np.uint8))  # dusk: the same scenes, much darker
    assert sel.bins[0] == 2 and sel.kept > before


def test_record_on_demand_from_a_synthetic_source(tmp_path: Path) -> None:
    out = tmp_path / "calib-new"
    code = rec.main(["--source", "synthetic://faces?width=640&height=384&count=12&seed=2", "--out", str(out),
                     "--max-images", "40", "--max-frames", "120", "--min-change", "4", "--duration", "0"])
    assert code == 0
    files = sorted(out.glob("*.jpg"))
    assert 2 <= len(files) <= 5  # one brightness bin: 40 / 8 frames at most
    thumbs = []
    for f in files:
        img = load_image(str(f))  # what `edge-sdk build --calib` reads
        assert img.shape == (384, 640, 3)
        thumbs.append(cv2.resize(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY), (32, 18), interpolation=cv2.INTER_AREA).astype(float))
    for i in range(len(thumbs)):
        for j in range(i):
            assert np.abs(thumbs[i] - thumbs[j]).mean() > 3.0  # no two near-duplicates (JPEG noise aside)
    assert not list(out.glob(".*")), "a temporary file was left behind"


def alert(device: str, name: str = "calibration_drift", state: str = "raised") -> dict:
    return {"schema": "edge-sdk/alert/1", "device_id": device, "ts": int(time.time() * 1000), "seq": 1,
            "alert": name, "state": state, "severity": "warning", "message": "live input left the calibrated range",
            "metric": "drift.distance", "value": 0.61, "threshold": 0.4}


def test_only_a_valid_raised_drift_alert_of_the_device_triggers(broker, message_log) -> None:
    pytest.importorskip("paho.mqtt.client")
    trigger = rec.AlertTrigger(broker.url, "cam-2").start()
    log = message_log(broker.url, [])
    try:
        assert trigger.subscribed.wait(10)
        topic = schemas.topic("cam-2", "alerts")
        hostile = [b"\xff\x00", b"[" * 5000, json.dumps(dict(alert("cam-2"), state="maybe")).encode(),
                   json.dumps(alert("cam-3")).encode()]  # another device's id on this topic
        for payload in hostile + [json.dumps(alert("cam-2", "fps_low")).encode(),
                                  json.dumps(alert("cam-2", state="cleared")).encode()]:
            log.client.publish(topic, payload, qos=1).wait_for_publish(5)
        assert wait_until(lambda: trigger.ignored == len(hostile), timeout=10)
        assert not trigger.fired.is_set()
        log.client.publish(topic, json.dumps(alert("cam-2")).encode(), qos=1).wait_for_publish(5)
        assert trigger.fired.wait(10) and "calibrated range" in trigger.message
    finally:
        trigger.stop()


def test_record_after_the_alert(tmp_path: Path, broker, message_log) -> None:
    pytest.importorskip("paho.mqtt.client")
    out = tmp_path / "calib-new"
    ready = threading.Event()
    codes = []
    argv = ["--source", "synthetic://faces?width=320&height=192&count=6", "--out", str(out), "--on-alert",
            "--broker", broker.url, "--device", "cam-2", "--max-frames", "60", "--max-images", "4",
            "--min-change", "2", "--duration", "0", "--wait", "30"]
    worker = threading.Thread(target=lambda: codes.append(rec.main(argv, ready=ready)))
    worker.start()
    assert ready.wait(15)
    assert not out.exists()  # nothing recorded before the alert
    log = message_log(broker.url, [])
    log.client.publish(schemas.topic("cam-2", "alerts"), json.dumps(alert("cam-2")).encode(), qos=1).wait_for_publish(5)
    worker.join(60)
    assert codes == [0] and 1 <= len(list(out.glob("*.jpg"))) <= 4


def test_a_full_disk_stops_the_recording_cleanly_and_keeps_what_was_written(tmp_path: Path) -> None:
    """A real ENOSPC: a 300 KiB tmpfs under --out holds two of these ~120 KB JPEGs, not three."""
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    disk.mkdir()
    kept.mkdir()
    argv = [sys.executable, str(APPS / "calibration_recorder" / "calibration_recorder.py"),
            "--source", "synthetic://faces?width=640&height=384&count=40&seed=2", "--out", str(disk / "calib-new"),
            "--max-images", "400", "--max-frames", "400", "--min-change", "2", "--duration", "0"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(APPS.parent), os.environ.get("PYTHONPATH", "")]))
    result = run_on_small_disk(argv, disk, 300, kept, env=env)
    assert "Traceback" not in result.stderr and result.returncode == 12, result.stderr
    summary = json.loads(result.stdout)
    files = sorted((kept / "calib-new").iterdir())
    assert summary["stopped"] == "disk full" and summary["images"] == len(files) >= 1
    assert sum(summary["brightness_bins"]) == len(files)  # the frame that did not fit is not counted
    assert f"recording stopped after {len(files)} image(s), kept in {disk / 'calib-new'}" in result.stderr
    assert "Free some space or choose another --out" in result.stderr
    for f in files:  # no temporary file left, and every image whole (read_image refuses a truncated JPEG)
        assert f.suffix == ".jpg" and not f.name.startswith(".")
        assert load_image(str(f)).shape == (384, 640, 3)
    assert rec.DiskFullError.exit_code == 12  # the code the app's README documents
