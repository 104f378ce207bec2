"""Every long-running command stops cleanly on SIGTERM and on SIGINT, started in the foreground
and as a background job of a non-interactive shell (which inherits SIGINT ignored): `run`,
`monitor`, `rollout` and `detect` with its outputs, each a real process.

The oracle is what a clean stop leaves behind, read independently of the command: the monitor's
recording holds every message it accepted and its summary counts them; detect's JSONL holds as
many complete lines, and its video as many frames (read back by OpenCV), as it says it wrote;
the rollout's state file says which step to go on from; the daemon's retained status says
`offline` with the signal as its reason.
"""
from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from edge_sdk.telemetry.broker import BrokerConfig
from edge_sdk.telemetry.publisher import MqttPublisher

from gstreamer import needs_gstreamer
from polling import wait_until
from processes import edge_sdk, finish, running
from tiny_bundle import make_tiny_bundle

pytest.importorskip("onnxruntime")
pytest.importorskip("paho.mqtt.client")

SOURCE = "synthetic://faces?width=96&height=64&count=2&min_size=8&max_size=16"
WAYS = [pytest.param(how, sig, id=f"{name}-{how}") for how in ("default", "ignored")
        for sig, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM"))]
READY_S = 120.0  # generous: a loaded machine starts a Python process slowly
WIDE = dict(os.environ, COLUMNS="400")  # rich wraps what it prints at the terminal's width (80 in a pipe)


def run_then_stop(tmp_path: Path, argv: List[str], how: str, sig: int, ready: Callable[[], bool],
            env: Optional[Dict[str, str]] = None) -> Tuple[int, str, str]:
    """Run `argv` started `how`, wait until `ready()` holds, send `sig`, wait for the
    exit: (exit code, stdout, stderr). Its outputs go to files: no pipe fills while it runs."""
    out_path, err_path = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        with running(argv, how, stdout=out, stderr=err, env=env) as proc:
            assert wait_until(ready, READY_S), err_path.read_text()
            finish(proc, sig, timeout=60)
            code = proc.returncode
    return code, out_path.read_text(), err_path.read_text()


def device_status(url: str, tmp_path: Path, device: str = "cam-1") -> MqttPublisher:
    """A device that is online (its retained status) and answers no command."""
    pub = MqttPublisher(BrokerConfig(url=url), device, tmp_path / f"{device}.sqlite3")
    pub.set_status({"started_ts": 1, "versions": {"edge_sdk": "t"}, "bundle_hash": "ab", "bundle": "old"})
    return pub.start()


@pytest.mark.parametrize("how, sig", WAYS)
def test_monitor_stops_with_its_summary_and_a_whole_recording(how: str, sig: int, broker, tmp_path: Path) -> None:
    pub = device_status(broker.url, tmp_path)
    record = tmp_path / "fleet.jsonl"
    try:  # ready once it recorded the retained status
        code, _, said = run_then_stop(
            tmp_path, edge_sdk("monitor", "--broker", broker.url, "--json", "--record", str(record)),
            how, sig, lambda: record.exists() and record.read_text().count("\n") >= 1)
    finally:
        pub.stop()
    assert code == 0, said
    name = signal.Signals(sig).name
    summary = re.search(r"monitor: stopped by (\w+); (\d+) devices; messages: (\d+) accepted", said)
    assert summary is not None, said
    lines = [json.loads(line) for line in record.read_text().splitlines()]  # every line whole
    assert summary.group(1) == name and int(summary.group(2)) == 1
    assert int(summary.group(3)) == len(lines) >= 1 and lines[0]["topic"] == "edge-sdk/cam-1/status"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return make_tiny_bundle(tmp_path_factory.mktemp("stop") / "bundle")


@pytest.mark.parametrize("how, sig", WAYS)
def test_detect_stops_with_its_summary_and_its_files_complete(how: str, sig: int, bundle: Path, tmp_path: Path) -> None:
    cv2 = pytest.importorskip("cv2")
    jsonl, video = tmp_path / "frames.jsonl", tmp_path / "frames.avi"
    code, _, said = run_then_stop(
        tmp_path, edge_sdk("detect", SOURCE, "--bundle", str(bundle), "--backend", "onnxruntime-cpu", "--fps", "30",
                           "--jsonl", str(jsonl), "--save-video", str(video)),
        how, sig, lambda: jsonl.exists() and jsonl.read_text().count("\n") >= 5, env=WIDE)
    assert code == 0, said
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]  # no half-written line
    stopped = re.search(r"stopped by (\w+) after (\d+) frames", said)
    wrote = re.search(r"wrote (\d+) lines to", said)
    frames = re.search(r"wrote (\d+) frames to", said)
    assert stopped and wrote and frames, said
    assert stopped.group(1) == signal.Signals(sig).name
    assert int(stopped.group(2)) == int(wrote.group(1)) == int(frames.group(1)) == len(lines) >= 5
    capture = cv2.VideoCapture(str(video))
    try:
        read = 0
        while capture.read()[0]:
            read += 1
    finally:
        capture.release()
    assert read == len(lines), "the video must be closed with every frame written"
    assert re.search(r"frames \d+ .* FPS", said), "the summary table is printed"


@pytest.mark.parametrize("how, sig", WAYS)
def test_rollout_stops_with_its_state_saved_and_says_how_to_go_on(how: str, sig: int, broker, tmp_path: Path) -> None:
    pub = device_status(broker.url, tmp_path)
    state = tmp_path / "state.json"
    stdout = tmp_path / "stdout.txt"
    try:  # ready once the canary's shadow was sent
        code, printed, said = run_then_stop(
            tmp_path, edge_sdk("rollout", "new", "--broker", broker.url, "--devices", "cam-*", "--state", str(state),
                               "--json", "--timeout", "300"),
            how, sig, lambda: stdout.exists() and '"event": "shadow"' in stdout.read_text())
    finally:
        pub.stop()
    assert code == 14, said
    saved = json.loads(state.read_text())
    assert saved["done"] == 0 and saved["steps"][0]["devices"] == ["cam-1"] and saved.get("outcome") is None
    assert f"rollout stopped by {signal.Signals(sig).name}: run the same command again to go on from step 1 of 1" \
        in said, said
    events: List[Dict[str, Any]] = [json.loads(line) for line in printed.splitlines()]
    assert events[-1]["event"] == "stopped" and events[-1]["role"] == "canary"


@pytest.mark.parametrize("how, sig", WAYS)
def test_run_stops_with_offline_retained(how: str, sig: int, broker, message_log, tmp_path: Path) -> None:
    folder = tmp_path / "device"
    folder.mkdir()
    bundle = make_tiny_bundle(folder / "bundle")
    config = folder / "device.toml"
    config.write_text(
        f'bundle = "{bundle}"\nbackend = "onnxruntime-cpu"\nthreads = 1\n[source]\nuri = "{SOURCE}&fps=30"\n'
        f'[device]\nid = "stop-1"\n[mqtt]\nurl = "{broker.url}"\nqueue_dir = "{folder / "queue"}"\n'
        f'[telemetry]\ninterval_s = 0.3\n')
    log = message_log(broker.url, ["edge-sdk/stop-1/status"])
    code, _, said = run_then_stop(tmp_path, edge_sdk("run", "--config", str(config)), how, sig,
                                  lambda: any(s["state"] == "online" for s in log.on("status")))
    name = signal.Signals(sig).name
    assert code == 0, said
    assert log.wait(lambda m: log.on("status")[-1]["state"] == "offline", timeout=30)
    assert log.on("status")[-1]["reason"] == name and f"stopped ({name})" in said


@needs_gstreamer
@pytest.mark.parametrize("how", ["default", "ignored"])
def test_detect_with_an_mp4_out_finishes_the_file_on_sigterm(how: str, bundle: Path, tmp_path: Path) -> None:
    """An MP4 whose encoder is not told the stream ended has no index and cannot be read: the
    stop must end the GStreamer pipeline with its EOS before the process exits."""
    cv2 = pytest.importorskip("cv2")
    video = tmp_path / "annotated.mp4"
    code, _, said = run_then_stop(
        tmp_path, edge_sdk("detect", SOURCE, "--bundle", str(bundle), "--backend", "onnxruntime-cpu", "--fps", "30",
                           "--out", str(video)),
        how, signal.SIGTERM, lambda: video.exists() and video.stat().st_size > 0, env=WIDE)
    assert code == 0, said
    sent = re.search(re.escape(str(video)) + r": (\d+) frames sent", said)
    assert sent and int(sent.group(1)) > 0, said
    capture = cv2.VideoCapture(str(video))
    try:
        assert capture.isOpened(), "the MP4 was left without its index"
        read = 0
        while capture.read()[0]:
            read += 1
    finally:
        capture.release()
    assert read == int(sent.group(1)), (read, said)
