"""`edge-sdk run` with an [output] table: the annotated stream served over RTSP and written to an
MP4 file while the daemon runs, read back by ffprobe, with each output's figures in telemetry."""
from __future__ import annotations

import json
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
