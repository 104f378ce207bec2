"""`edge-sdk run` with an [output] table: the annotated stream served over RTSP and written to an
MP4 file while the daemon runs, read back by ffprobe, with each output's figures in telemetry."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest

from edge_sdk.telemetry.schemas import errors
from gstreamer import busy_port, needs_gstreamer
from mqtt_broker import free_port
from polling import wait_until
from test_run_process import start
from tiny_bundle import make_tiny_bundle

pytest.importorskip("onnxruntime")


SCENE = "synthetic://faces?width=320&height=240&count=2&fps=30"


def device_toml(tmp_path: Path, outs: List[str], sources: str = f'[source]\nuri = "{SCENE}"\n', extra: str = "") -> Path:
    bundle = make_tiny_bundle(tmp_path / "bundle")
    config = tmp_path / "device.toml"
    config.write_text(f'bundle = "{bundle}"\nbackend = "onnxruntime-cpu"\nthreads = 1\n{sources}'
                      '[device]\nid = "cam-out"\n[telemetry]\ninterval_s = 0.3\n'
                      f'[output]\nout = {json.dumps(outs)}\n{extra}')  # no broker: JSON lines on stdout
    return config


class Lines:
    """The daemon's stdout, one parsed message per line, read by a thread."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.rows: List[Dict[str, Any]] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.rows.append(json.loads(line))

    def outputs(self) -> List[Dict[str, Any]]:
        """The `output` block of the latest telemetry that has one."""
        found = [r["payload"]["output"] for r in self.rows if r["topic"].endswith("/telemetry") and "output" in r["payload"]]
        return found[-1] if found else []


@needs_gstreamer
def test_the_daemon_streams_and_records_with_the_encoder_cost_in_telemetry(tmp_path: Path) -> None:
    url, video = f"rtsp://127.0.0.1:{free_port()}/live", tmp_path / "run.mp4"
    proc = start(device_toml(tmp_path, [url, str(video)]))
    lines = Lines(proc)
    try:
        assert wait_until(lambda: all(o["frames"] > 0 for o in lines.outputs()) and len(lines.outputs()) == 2
                          or proc.poll() is not None, 60), lines.rows[-1:]
        assert proc.poll() is None, proc.stderr.read()
        probe = subprocess.run(["ffprobe", "-v", "error", "-rtsp_transport", "tcp", "-read_intervals", "%+1.5",
                                "-count_frames", "-select_streams", "v", "-show_entries", "stream=codec_name,nb_read_frames",
                                "-of", "json", url], capture_output=True, text=True, timeout=60)
        assert probe.returncode == 0, probe.stderr
        stream = json.loads(probe.stdout)["streams"][0]
        assert stream["codec_name"] == "h264" and int(stream["nb_read_frames"]) >= 15, stream  # 1.5 s at 30 FPS, less 1 s for a keyframe
        assert wait_until(lambda: any(o["encode_ms"] is not None for o in lines.outputs()), 30)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        lines.thread.join(10)
    assert proc.returncode == 0, err
    rtsp, file = lines.outputs()
    assert (rtsp["out"], rtsp["kind"], rtsp["encoder"], file["kind"]) == (url, "rtsp", "x264enc", "file")
    assert rtsp["encode_ms_mean"] > 0 and rtsp["error"] is None
    for row in lines.rows:
        if row["topic"].endswith("/telemetry"):
            assert errors(row["payload"]) == [], row["payload"]
    probe = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries", "stream=codec_name,nb_read_frames",
                            "-of", "json", str(video)], capture_output=True, text=True)
    stream = json.loads(probe.stdout)["streams"][0]
    assert stream["codec_name"] == "h264" and int(stream["nb_read_frames"]) >= file["frames"] > 0


@needs_gstreamer
def test_a_port_in_use_stops_the_daemon_at_start_with_exit_12(tmp_path: Path) -> None:
    with busy_port() as port:
        proc = start(device_toml(tmp_path, [f"rtsp://127.0.0.1:{port}/live"]))
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 12, err
    assert f"port {port} on 127.0.0.1 is in use" in err


@needs_gstreamer
def test_with_several_sources_the_output_shows_the_stream_it_names(tmp_path: Path) -> None:
    """Stream b's scene is 160x120, a's 320x240: the file's size says whose frames it has."""
    video = tmp_path / "b.mp4"
    sources = (f'[[sources]]\nid = "a"\nuri = "{SCENE}&frames=30"\n'
               '[[sources]]\nid = "b"\nuri = "synthetic://faces?width=160&height=120&count=1&fps=30&frames=30"\n')
    proc = start(device_toml(tmp_path, [str(video)], sources, extra='stream = "b"\nqueue = 64\n'))  # room for every frame while x264enc starts
    _, err = proc.communicate(timeout=120)  # both sources end: the daemon stops by itself
    assert proc.returncode == 0, err
    probe = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                            "stream=width,height,nb_read_frames", "-of", "json", str(video)], capture_output=True, text=True)
    assert json.loads(probe.stdout)["streams"][0] == {"width": 160, "height": 120, "nb_read_frames": "30"}


def test_an_output_in_a_missing_folder_is_a_config_error(tmp_path: Path) -> None:
    proc = start(device_toml(tmp_path, [str(tmp_path / "nowhere" / "run.mp4")]))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert "output.out" in err and "does not exist; create it" in err


def gst_children(parent: int) -> List[int]:
    """The video output processes (gst_child.py) the daemon `parent` started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"gst_child.py" in cmdline:
            found.append(int(entry.name))
    return found


def probe_rtsp(url: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ffprobe", "-v", "error", "-rtsp_transport", "tcp", "-read_intervals", "%+1.5",
                           "-count_frames", "-select_streams", "v", "-show_entries", "stream=codec_name,nb_read_frames",
                           "-of", "json", url], capture_output=True, text=True, timeout=60)


@needs_gstreamer
def test_an_output_killed_is_started_again_and_detection_never_stops(tmp_path: Path) -> None:
    """The GStreamer child killed with SIGKILL (as the OOM killer does): the daemon exited 12 and
    detection, telemetry and commands stopped. Now detection and telemetry go on, `output_failed`
    is raised, the output is started again (`restarts`), the alert clears, and ffprobe reads the
    stream again."""
    url = f"rtsp://127.0.0.1:{free_port()}/live"
    proc = start(device_toml(tmp_path, [url]))
    lines = Lines(proc)

    def frames() -> int:
        found = [r["payload"]["frames"]["processed"] for r in lines.rows if r["topic"].endswith("/telemetry")]
        return found[-1] if found else 0

    def alerts() -> List[str]:
        return [r["payload"]["state"] for r in lines.rows
                if r["topic"].endswith("/alerts") and r["payload"]["alert"] == "output_failed"]

    try:
        assert wait_until(lambda: lines.outputs() and lines.outputs()[0]["frames"] > 0 or proc.poll() is not None, 60)
        assert proc.poll() is None, proc.stderr.read()
        (child,) = gst_children(proc.pid)
        os.kill(child, signal.SIGKILL)
        assert wait_until(lambda: alerts()[:1] == ["raised"] or proc.poll() is not None, 60), lines.rows[-3:]
        seen = frames()
        assert wait_until(lambda: frames() > seen + 10 or proc.poll() is not None, 60)
        assert proc.poll() is None, "the daemon stopped with its output"
        assert wait_until(lambda: alerts() == ["raised", "cleared"] and lines.outputs()[0].get("restarts") == 1, 90), \
            (alerts(), lines.outputs())
        assert gst_children(proc.pid) and child not in gst_children(proc.pid)
        probe = probe_rtsp(url)
        assert probe.returncode == 0, probe.stderr
        assert json.loads(probe.stdout)["streams"][0]["codec_name"] == "h264"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        lines.thread.join(10)
    assert proc.returncode == 0, err
    for row in lines.rows:
        if row["topic"].endswith(("/telemetry", "/alerts")):
            assert errors(row["payload"]) == [], row["payload"]


@needs_gstreamer
def test_a_stalled_output_does_not_hold_the_stop_past_the_unit_s_bound(tmp_path: Path) -> None:
    """The GStreamer process stopped (SIGSTOP: it reads nothing), then SIGTERM: the stop took 60.5 s
    (the output closed first, waiting 30 s twice), past the unit's TimeoutStopSec, after which
    systemd kills the daemon without its last status. Now the outputs have a budget that keeps the
    stop within that bound: the stalled output is killed and named, the offline status sent."""
    import re
    import time

    unit = (Path(__file__).resolve().parents[2] / "device_images" / "edge-sdk.service").read_text()
    bound = float(re.search(r"^TimeoutStopSec=(\d+)", unit, re.M).group(1))
    url = f"rtsp://127.0.0.1:{free_port()}/live"
    proc = start(device_toml(tmp_path, [url]))
    lines = Lines(proc)
    try:
        assert wait_until(lambda: lines.outputs() and lines.outputs()[0]["frames"] > 0 or proc.poll() is not None, 60)
        assert proc.poll() is None, proc.stderr.read()
        (child,) = gst_children(proc.pid)
        os.kill(child, signal.SIGSTOP)
        asked = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        took = time.monotonic() - asked
        err = proc.stderr.read()  # stdout is the reader thread's alone
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
        lines.thread.join(10)
    # what bounds the stop, not how fast this machine was: the output's budget and the waits after it
    from edge_sdk.daemon.service import OUTPUT_STOP_S

    assert OUTPUT_STOP_S + 10.0 + 5.0 < bound  # + the reload worker's join + the last status
    assert proc.returncode == 0, (err, took)
    assert f"video output(s) {url} did not end within" in err and "killed" in err
    assert not lines.thread.is_alive()  # it read stdout to its end
    assert [r["payload"]["state"] for r in lines.rows if r["topic"].endswith("/status")][-1] == "offline"
