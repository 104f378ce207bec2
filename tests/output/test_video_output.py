"""Annotated video out through real GStreamer (edge_sdk/output), read back by real clients:
ffprobe and OpenCV's FFMPEG reader over RTSP, and from the MP4 file."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import numpy as np
import pytest

from edge_sdk.detections import Detections
from edge_sdk.errors import ConfigError, OutputError
from edge_sdk.output.video import (CHILD, AnnotatedSink, OutputTarget, VideoOutput, gst_python, open_outputs,
                                   parse_output, read_index)
from edge_sdk.runtime.types import FrameResult
from gstreamer import busy_port, needs_gstreamer
from mqtt_broker import free_port
from polling import wait_until

W, H = 320, 240
BOX = (60, 50, 200, 170)  # x1, y1, x2, y2 of the one detection, class 0
GREEN = (0, 200, 0)  # runtime.sinks' colour of class 0 (BGR)


def result(index: int) -> FrameResult:
    frame = np.full((H, W, 3), 90, np.uint8)
    frame[:, (index * 4) % W] = 255  # motion, so the encoder has work
    det = Detections(np.array([BOX], np.float32), np.array([0.9], np.float32), np.array([0]))
    return FrameResult(index, time.time(), det, {"total": 1.0}, frame=frame)


class Feeder:
    """Writes results into `sink` at `fps` from a thread until stopped (a live camera)."""

    def __init__(self, sink: AnnotatedSink, fps: float = 30.0, noisy: bool = False) -> None:
        self.sink, self.period, self.stop = sink, 1.0 / fps, threading.Event()
        self.noise = np.random.default_rng(0).integers(0, 255, (H, W, 3), np.uint8) if noisy else None
        self.written = 0
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._guarded, daemon=True)

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # raised again in the test's thread by __exit__
            self.error = exc

    def _run(self) -> None:
        index = 0
        while not self.stop.wait(self.period):
            made = result(index)
            if self.noise is not None:  # a picture that costs the encoder many bytes
                made.frame[:] = np.roll(self.noise, index, axis=1)
                made.frame[BOX[1]:BOX[3], BOX[0]:BOX[2]] = 90
            self.sink.write(made)
            index += 1
            self.written = index

    def __enter__(self) -> "Feeder":
        self.thread.start()
        # a client is served once the first frame has set the stream's size
        assert wait_until(lambda: self.sink.stats()[0]["frames"] > 0)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        if self.error is not None:
            raise self.error


def box_colour_present(frame: np.ndarray) -> bool:
    """The detection's left edge (2 px wide) has class 0's colour after H.264 (within 40)."""
    x1, y1, _, y2 = BOX
    edge = frame[y1 + 20:y2 - 20, x1:x1 + 2].reshape(-1, 3).astype(int).mean(axis=0)
    return bool(np.all(np.abs(edge - np.array(GREEN)) < 40))


def rtsp_url() -> str:
    return f"rtsp://127.0.0.1:{free_port()}/live"


def opencv_frames(url: str, count: int) -> Iterator[np.ndarray]:
    import cv2

    os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = "rtsp_transport;tcp"
    cap = cv2.VideoCapture(url, cv2.CAP_FFMPEG)
    try:
        assert cap.isOpened(), f"OpenCV's FFMPEG reader could not open {url}"
        for _ in range(count):
            ok, frame = cap.read()
            assert ok, f"OpenCV's FFMPEG reader lost {url}"
            yield frame
    finally:
        cap.release()


@needs_gstreamer
def test_rtsp_serves_annotated_h264_to_ffprobe_and_opencv() -> None:
    url = rtsp_url()
    sink = AnnotatedSink(open_outputs([url], fps=30), mark_index=True)
    with sink, Feeder(sink):
        probe = subprocess.run(["ffprobe", "-v", "error", "-rtsp_transport", "tcp", "-read_intervals", "%+2",
                                "-count_frames", "-select_streams", "v", "-show_entries",
                                "stream=codec_name,width,height,nb_read_frames", "-of", "json", url],
                               capture_output=True, text=True, timeout=60)
        assert probe.returncode == 0, probe.stderr
        stream = json.loads(probe.stdout)["streams"][0]
        assert (stream["codec_name"], stream["width"], stream["height"]) == ("h264", W, H)
        # 2 s at 30 FPS, less at most one second's wait for the first keyframe
        assert int(stream["nb_read_frames"]) >= 30, stream
        indices: List[int] = []
        behind: List[int] = []  # frames written since the one just received
        for frame in opencv_frames(url, 20):
            assert frame.shape == (H, W, 3)
            assert box_colour_present(frame), "the drawn box is not in the received picture"
            indices.append(read_index(frame))
            behind.append(max(sink.put_at) - indices[-1])
        stats = sink.stats()[0]
        assert stats["encoder"] == "x264enc"
    # a live stream, not a recording played back from its start: each frame received is among the
    # latest written, counted in frames (a loaded machine slows the writer and the reader alike);
    # the glass-to-glass time is bench/bench_video_latency.py's figure
    assert 0 <= float(np.median(behind)) <= 30, behind
    assert indices == sorted(indices) and len(set(indices)) == len(indices), indices


@needs_gstreamer
def test_mp4_file_has_every_frame_in_h264_with_the_overlay(tmp_path: Path) -> None:
    import cv2

    path = tmp_path / "out.mp4"
    with AnnotatedSink(open_outputs([str(path)], fps=25, queue=64)) as sink:
        for index in range(40):
            sink.write(result(index))
    probe = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                            "stream=codec_name,nb_read_frames", "-of", "json", str(path)], capture_output=True, text=True)
    stream = json.loads(probe.stdout)["streams"][0]
    assert (stream["codec_name"], int(stream["nb_read_frames"])) == ("h264", 40)
    cap = cv2.VideoCapture(str(path), cv2.CAP_FFMPEG)
    ok, first = cap.read()
    cap.release()
    assert ok and box_colour_present(first)


@needs_gstreamer
def test_several_outputs_at_once(tmp_path: Path) -> None:
    url, path = rtsp_url(), tmp_path / "copy.mp4"
    sink = AnnotatedSink(open_outputs([url, str(path)], fps=30, queue=64))
    with sink, Feeder(sink):
        frames = list(opencv_frames(url, 10))
    assert all(box_colour_present(f) for f in frames)
    cap = __import__("cv2").VideoCapture(str(path))
    assert int(cap.get(7)) >= 10  # CAP_PROP_FRAME_COUNT
    cap.release()


@needs_gstreamer
def test_a_stalled_encoder_never_blocks_the_frame_loop() -> None:
    """The GStreamer process stopped (SIGSTOP): its pipe fills, put() still returns at once and
    the oldest frames are dropped and counted; once it runs again, frames flow again."""
    out = VideoOutput(parse_output(rtsp_url()), fps=30, queue=3)
    try:
        frame = np.zeros((H, W, 3), np.uint8)
        os.kill(out._child.pid, signal.SIGSTOP)
        try:
            put = threading.Thread(target=lambda: [out.put(frame) for _ in range(200)], daemon=True)
            put.start()  # 200 frames of 230 kB: far more than a pipe holds
            # a put() that waited for the pipe would wait for as long as the encoder is stopped
            put.join(60)
            assert not put.is_alive(), "put() blocked on a stalled encoder"
            stats = out.stats()
            assert stats["dropped"] >= 200 - 3 - 1 - stats["frames"] - 1
            assert stats["dropped"] > 150
        finally:
            os.kill(out._child.pid, signal.SIGCONT)
        sent = out.stats()["frames"]
        out.put(frame)
        assert wait_until(lambda: out.stats()["frames"] > sent, timeout=20)
    finally:
        out.close()


class StalledClient:
    """An RTSP client that asks for the stream over TCP (DESCRIBE, SETUP interleaved, PLAY) with a
    4 kB receive buffer, then never reads again."""

    def __init__(self, url: str) -> None:
        host, port = url[len("rtsp://"):].split("/", 1)[0].split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        head, sdp = self._ask(f"DESCRIBE {url} RTSP/1.0\r\nCSeq: 1\r\nAccept: application/sdp\r\n\r\n")
        control = re.search(r"a=control:(\S+)", sdp.split("m=video", 1)[1]).group(1)
        head, _ = self._ask(f"SETUP {url}/{control} RTSP/1.0\r\nCSeq: 2\r\n"
                            "Transport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n")
        session = re.search(r"Session: ([^;\r]+)", head).group(1)
        head, _ = self._ask(f"PLAY {url} RTSP/1.0\r\nCSeq: 3\r\nSession: {session}\r\n\r\n")

    def _ask(self, request: str) -> Tuple[str, str]:
        self.sock.sendall(request.encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += self.sock.recv(1)
        head = data.decode()
        assert head.startswith("RTSP/1.0 200"), head
        found = re.search(r"Content-Length: (\d+)", head)
        body = b""
        while found and len(body) < int(found.group(1)):
            body += self.sock.recv(int(found.group(1)) - len(body))
        return head, body.decode()

    def close(self) -> None:
        self.sock.close()


@needs_gstreamer
@pytest.mark.parametrize("moment", ["publish", "clock"])
def test_a_frame_that_comes_while_a_client_starts_the_stream_never_breaks_it(moment: str) -> None:
    """A frame pushed the moment the media's appsrc is handed to the reader thread (before its caps:
    a not-negotiated media, DESCRIBE answered 503), or once the pipeline has its clock but not yet
    its base time (stamped with the clock's absolute time: the sink waits hours for it): the client
    is served either way, and no buffer leaves the appsrc dated in the future."""
    script = Path(__file__).with_name("rtsp_startup.py")
    run = subprocess.run([gst_python(), str(script), str(CHILD), moment], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["describe"] == "RTSP/1.0 200 OK", seen
    assert seen["packets"] >= 100, seen  # 3 s of a 100 FPS camera
    assert seen["ahead_ms"] is not None and seen["ahead_ms"] < 50, seen


@needs_gstreamer
def test_a_stalled_rtsp_client_holds_up_neither_the_frames_nor_other_clients() -> None:
    url = rtsp_url()
    sink = AnnotatedSink(open_outputs([url], fps=30), mark_index=True)
    with sink, Feeder(sink, noisy=True) as feeder:
        stalled = StalledClient(url)
        try:
            sent = sink.stats()[0]["frames"]
            assert wait_until(lambda: sink.stats()[0]["frames"] >= sent + 60, timeout=20), sink.stats()
            frames = list(opencv_frames(url, 10))  # a second client, served while the first stalls
            assert sink.stats()[0]["clients"] == 2
        finally:
            stalled.close()
        # the frames went on while the client stalled (60 written above); how long a write takes
        # is bench/bench_video_latency.py's to say
    indices = [read_index(f) for f in frames]
    assert indices == sorted(indices) and all(box_colour_present(f) for f in frames)


@needs_gstreamer
def test_a_client_that_leaves_and_one_that_comes_late_are_both_served() -> None:
    url = rtsp_url()
    sink = AnnotatedSink(open_outputs([url], fps=30), mark_index=True)
    with sink, Feeder(sink):
        early = [read_index(f) for f in opencv_frames(url, 5)]
        assert wait_until(lambda: sink.stats()[0]["clients"] == 0, timeout=20)  # it left
        written = max(sink.put_at)
        late = [read_index(f) for f in opencv_frames(url, 5)]
    assert late[0] > max(early) and late[0] >= written - 30, (early, late, written)


@needs_gstreamer
def test_rtsp_port_in_use_is_a_typed_error_at_start() -> None:
    with busy_port() as port:
        with pytest.raises(OutputError, match=f"port {port} .*in use.*choose another port"):
            open_outputs([f"rtsp://127.0.0.1:{port}/live"], fps=30)


@needs_gstreamer
def test_a_missing_encoder_element_names_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="nvv4l2h264enc.*nvidia-l4t-gstreamer"):
        open_outputs([str(tmp_path / "a.mp4")], fps=30, encoder="nvv4l2h264enc")


@needs_gstreamer
def test_gstreamer_without_x264enc_names_the_ugly_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GStreamer whose plugin folder has only appsrc, videoconvert and the core elements."""
    probe = subprocess.run([gst_python(), "-c", "import gi; gi.require_version('Gst', '1.0'); from gi.repository import Gst; "
                            "Gst.init(None); print(Gst.ElementFactory.find('appsrc').get_plugin().get_filename())"],
                           capture_output=True, text=True, check=True)
    system_plugins = Path(probe.stdout.strip()).parent
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    for name in ("libgstapp.so", "libgstcoreelements.so", "libgstvideoconvertscale.so", "libgstvideoconvert.so"):
        if (system_plugins / name).exists():
            (plugins / name).symlink_to(system_plugins / name)
    monkeypatch.setenv("GST_PLUGIN_SYSTEM_PATH", str(plugins))
    monkeypatch.setenv("GST_REGISTRY", str(tmp_path / "registry.bin"))
    with pytest.raises(OutputError, match=r"no H\.264 encoder.*sudo apt install gstreamer1\.0-plugins-ugly \(x264enc\)"):
        open_outputs([str(tmp_path / "a.mp4")], fps=30)


@pytest.mark.parametrize("value, message", [
    ("missing/folder/out.mp4", "folder missing/folder does not exist; create it"),
    ("out.avi", "name it FILE.mp4"),
    ("rtsp://127.0.0.1/live", "rtsp://HOST:PORT/PATH"),
    ("rtsp://127.0.0.1:8554", "rtsp://HOST:PORT/PATH"),
    ("udp://127.0.0.1:5000", "unknown output"),
    ("display://one", "display://0"),
    ("display://1", "display://0"),
])
def test_bad_out_values_are_refused_before_anything_starts(value: str, message: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=message):
        parse_output(value)


def test_display_is_refused_off_a_jetson(monkeypatch: pytest.MonkeyPatch) -> None:
    import edge_sdk.telemetry.system as system

    monkeypatch.setattr(system, "is_jetson", lambda: False)
    with pytest.raises(ConfigError, match="needs a Jetson.*rtsp://"):
        parse_output("display://0")
    monkeypatch.setattr(system, "is_jetson", lambda: True)
    assert parse_output("display://0") == OutputTarget("display", "0")
