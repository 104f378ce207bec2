"""`--out rtsp://HOST:PORT/PATH`, `--out FILE.mp4`, `--out display://0`: the annotated frames as
H.264 over RTSP, in an MP4 file, or on a Jetson's screen.

Each output is a child process (edge_sdk/output/gst_child.py) run by an interpreter that has
GStreamer's Python bindings: this one when it has `gi`, else /usr/bin/python3 (on a Jetson,
JetPack's Python 3.8 with `sudo apt install python3-gi gir1.2-gst-rtsp-server-1.0`). Frames go to
it over a pipe from a writer thread. The frame loop only copies a frame into a bounded ring
(`queue` frames): when the ring is full the oldest frame waiting is dropped and counted, so a
client that stalls, an encoder that falls behind or a dead GStreamer costs the pipeline one copy
per frame, never a wait.

    outputs = open_outputs(["rtsp://0.0.0.0:8554/live", "out.mp4"], fps=30)   # errors here, at start
    sink = AnnotatedSink(outputs)             # draws boxes, labels and FPS once for all outputs
    for result in pipeline: sink.write(result)
    sink.close()                              # the file gets its end and is finished
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

import numpy as np

from edge_sdk import _imports
from edge_sdk.errors import ConfigError, OutputError
from edge_sdk.runtime.sinks import Sink, draw_detections
from edge_sdk.runtime.types import FrameResult

CHILD = Path(__file__).with_name("gst_child.py")
HEADER = b"EDGF"
SYSTEM_PYTHON = "/usr/bin/python3"
FILE_SUFFIXES = (".mp4",)
ENCODERS = ("auto", "x264enc", "nvv4l2h264enc")  # auto: nvv4l2h264enc where GStreamer has it, else x264enc


@dataclass
class OutputTarget:
    """One `--out` value: kind rtsp, file or display; `target` what the child opens."""

    kind: str
    target: str


def parse_output(text: str, origin: str = "--out") -> OutputTarget:
    """The OutputTarget of one `--out` value; ConfigError naming the fix for what cannot work."""
    if text.startswith("rtsp://"):
        parts = urlsplit(text)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if port is None or not 0 < port < 65536 or not parts.hostname or len(parts.path) < 2:
            raise ConfigError(f"{origin} {text!r}: write rtsp://HOST:PORT/PATH, e.g. rtsp://0.0.0.0:8554/live")
        return OutputTarget("rtsp", text)
    if text.startswith("display://"):
        screen = text[len("display://"):]
        if screen != "0":
            raise ConfigError(f"{origin} {text!r}: write display://0 (nv3dsink shows frames on the first screen)")
        from edge_sdk.telemetry.system import is_jetson

        if not is_jetson():
            raise ConfigError(f"{origin} {text}: display:// shows frames with JetPack's nv3dsink and needs a Jetson; "
                              "here, serve them with --out rtsp://0.0.0.0:8554/live or write a .mp4 file")
        return OutputTarget("display", screen)
    if "://" in text:
        raise ConfigError(f"{origin} {text!r}: unknown output; use rtsp://HOST:PORT/PATH, FILE.mp4 or display://0")
    path = Path(text)
    if path.suffix.lower() not in FILE_SUFFIXES:
        raise ConfigError(f"{origin} {text}: H.264 goes into a .mp4 file; name it FILE.mp4")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ConfigError(f"{origin} {text}: the folder {folder} does not exist; create it (mkdir -p {folder}) or "
                          "choose another path")
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"{origin} {text}: the folder {folder} is not writable; choose another path")
    return OutputTarget("file", str(path))


def gst_python(explicit: Optional[str] = None) -> str:
    """The interpreter that runs the GStreamer child: `explicit`, this one when it has `gi`, else
    the system's (where apt installs python3-gi)."""
    if explicit:
        return explicit
    if find_spec("gi") is not None:
        return sys.executable
    if Path(SYSTEM_PYTHON).exists():
        return SYSTEM_PYTHON
    raise OutputError("no Python with GStreamer's bindings for the video output: install them "
                      "(sudo apt install python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-rtsp), or set [output] python")


class VideoOutput:
    """One GStreamer child fed through a ring of `queue` frames that drops the oldest when full.

    `put` never waits on the child; `stats()` has frames sent, frames dropped (here and in the
    child's RTSP media), the encoder's ms per frame and the clients watching."""

    def __init__(self, target: OutputTarget, fps: float = 30.0, queue: int = 4, encoder: str = "auto",
                 python: Optional[str] = None, start_timeout_s: float = 20.0) -> None:
        if queue < 1:
            raise ConfigError(f"output queue must hold at least 1 frame, not {queue}")
        self.target = target
        self.queue = queue
        self._cond = threading.Condition()
        self._ready: Deque[np.ndarray] = deque()
        self._free: List[np.ndarray] = []
        self._closing = False
        self._error: Optional[str] = None
        self._child_stats: Dict[str, Any] = {}
        self._first = threading.Event()
        self._hello: Dict[str, Any] = {}
        self._stderr: Deque[str] = deque(maxlen=20)
        self.sent = 0
        self.dropped = 0
        cmd = [gst_python(python), str(CHILD), target.kind, target.target, "--fps", f"{fps or 30.0:g}", "--encoder", encoder]
        try:
            self._child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            raise OutputError(f"cannot start {cmd[0]} for the video output {self.name}: {exc.strerror or exc}; "
                              "set [output] python to an interpreter with python3-gi") from exc
        threading.Thread(target=self._read_stdout, name="output-stats", daemon=True).start()
        threading.Thread(target=self._read_stderr, name="output-log", daemon=True).start()
        if not self._first.wait(start_timeout_s):
            self._kill()
            raise OutputError(f"the video output {self.name} did not start in {start_timeout_s:g} s "
                              f"(GStreamer: {self._log_tail() or 'no output'})")
        if "error" in self._hello:
            self._kill()
            raise OutputError(f"video output {self.name}: {self._hello['error']}")
        self.encoder = self._hello.get("encoder")
        self._writer = threading.Thread(target=self._write_loop, name="output-writer", daemon=True)
        self._writer.start()

    @property
    def name(self) -> str:
        return self.target.target if self.target.kind != "display" else f"display://{self.target.target}"

    def _read_stdout(self) -> None:
        assert self._child.stdout is not None
        for line in self._child.stdout:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if not self._first.is_set():
                self._hello = row
                self._first.set()
            elif "error" in row:
                with self._cond:
                    self._error = str(row["error"])
            else:
                with self._cond:
                    self._child_stats = row
        self._first.set()  # the child ended before saying anything: its stderr tells why
        with self._cond:
            if not self._closing and self._error is None:  # it died (killed, out of memory): the next put says so
                code = self._child.poll()
                self._error = f"the GStreamer process ended{'' if code is None else f' (exit {code})'}; {self._log_tail()}"

    def _read_stderr(self) -> None:
        assert self._child.stderr is not None
        for line in self._child.stderr:
            self._stderr.append(line.decode("utf-8", "replace").rstrip())

    def _log_tail(self) -> str:
        return " | ".join(list(self._stderr)[-3:])

    def put(self, frame: np.ndarray) -> None:
        """Queue a copy of `frame` (HxWx3 uint8 BGR, the size of the first) for the child; never
        waits. OutputError when the child has died."""
        with self._cond:
            if self._error is not None:
                raise OutputError(f"video output {self.name} stopped: {self._error}")
            if self._free:
                buf = self._free.pop()
            elif len(self._ready) >= self.queue:
                buf = self._ready.popleft()  # the oldest waiting frame gives way
                self.dropped += 1
            else:
                buf = np.empty(0, np.uint8)
            if buf.size != len(HEADER) + 8 + frame.size:  # the first frames, or a new size: a buffer that fits
                buf = np.empty(len(HEADER) + 8 + frame.size, np.uint8)
            buf[:len(HEADER)] = np.frombuffer(HEADER, np.uint8)
            buf[len(HEADER):len(HEADER) + 8] = np.array(frame.shape[1::-1], "<u4").view(np.uint8)
            buf[len(HEADER) + 8:] = frame.reshape(-1)
            self._ready.append(buf)
            self._cond.notify()

    def _write_loop(self) -> None:
        stdin = self._child.stdin
        assert stdin is not None
        while True:
            with self._cond:
                while not self._ready and not self._closing:
                    self._cond.wait()
                if not self._ready:
                    break
                buf = self._ready.popleft()
            try:
                stdin.write(memoryview(buf))
                stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                with self._cond:
                    self._error = self._error or f"the GStreamer process ended ({exc}); {self._log_tail()}"
                    self._ready.clear()
                break
            with self._cond:
                self.sent += 1
                self._free.append(buf)
        try:
            stdin.close()
        except OSError:
            pass

    def stats(self) -> Dict[str, Any]:
        """frames sent to the child, dropped (here and in the child), its encoder's ms per frame
        (the last second's mean and the mean since the start) and its RTSP clients."""
        with self._cond:
            child = dict(self._child_stats)
            return {"out": self.name, "kind": self.target.kind, "encoder": self.encoder, "frames": self.sent,
                    "dropped": self.dropped + int(child.get("dropped") or 0), "encode_ms": child.get("encode_ms"),
                    "encode_ms_mean": child.get("encode_ms_mean"),
                    "clients": int(child.get("clients") or 0), "error": self._error}

    def close(self, timeout_s: float = 30.0) -> bool:
        """Send what is queued, end the stream (a file is finished) and wait for the child, all
        within `timeout_s`; past it the child is killed (a stalled or stopped process). True when
        it ended on its own (a file then has its end), False when it was killed."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._writer.join(max(0.0, deadline - time.monotonic()))
        try:
            self._child.wait(max(0.01, deadline - time.monotonic()))
            return True
        except subprocess.TimeoutExpired:
            self._kill()
            return False

    def _kill(self) -> None:
        self._child.kill()
        self._child.wait()


def open_outputs(values: Sequence[str], fps: float, queue: int = 4, encoder: str = "auto",
                 python: Optional[str] = None, origin: str = "--out") -> List[VideoOutput]:
    """A started VideoOutput per value; on any error the ones started are closed again."""
    if encoder not in ENCODERS:
        raise ConfigError(f"{origin}: encoder {encoder!r} is not one of {', '.join(ENCODERS)}")
    targets = [parse_output(value, origin) for value in values]
    outputs: List[VideoOutput] = []
    try:
        for target in targets:
            outputs.append(VideoOutput(target, fps=fps, queue=queue, encoder=encoder, python=python))
    except BaseException:
        for out in outputs:
            out.close(5.0)
        raise
    return outputs


def burn_index(frame: np.ndarray, index: int, bits: int = 16, block: int = 16) -> None:
    """Write `index` into the bottom-left corner as `bits` black/white blocks of `block` pixels,
    most significant first, readable after H.264 (read_index); for latency measurements."""
    h = frame.shape[0]
    for bit in range(bits):
        value = 255 if (index >> (bits - 1 - bit)) & 1 else 0
        frame[h - block:h, bit * block:(bit + 1) * block] = value


def read_index(frame: np.ndarray, bits: int = 16, block: int = 16) -> int:
    """The index burn_index wrote into `frame` (each block's centre, thresholded at mid-grey)."""
    h = frame.shape[0]
    q = block // 4
    index = 0
    for bit in range(bits):
        centre = frame[h - block + q:h - q, bit * block + q:(bit + 1) * block - q]
        index = (index << 1) | int(float(centre.mean()) > 127.0)
    return index


MARKED_KEPT = 4096  # frame indices whose queueing time AnnotatedSink keeps with mark_index (latency reading)

class AnnotatedSink(Sink):
    """A Sink (write/close) that draws each result once (runtime.sinks.draw_detections and the
    output's FPS) and hands the picture to every VideoOutput. Frames of another size than the
    first are fitted to it. `mark_index` burns the frame index in (burn_index)."""

    def __init__(self, outputs: Sequence[VideoOutput], mark_index: bool = False) -> None:
        self.outputs = list(outputs)
        self.mark_index = mark_index
        self._canvas: Optional[np.ndarray] = None
        self._size: Optional[Tuple[int, int]] = None
        self._times: Deque[float] = deque(maxlen=30)
        self.put_at: Dict[int, float] = {}  # frame index -> perf_counter() when queued (with mark_index; the latest MARKED_KEPT)

    def fps(self) -> float:
        """Frames per second over the last 30 written."""
        if len(self._times) < 2:
            return 0.0
        return (len(self._times) - 1) / max(self._times[-1] - self._times[0], 1e-9)

    def write(self, result: FrameResult) -> None:
        cv2 = _imports.cv2()
        frame = result.frame
        if frame is None:
            raise ConfigError("the video output (--out, [output]) needs the frames; the pipeline returned results without them")
        h, w = frame.shape[:2]
        if self._canvas is None:
            self._size = (w, h)
            self._canvas = np.empty((h, w, 3), np.uint8)
        if (w, h) == self._size:
            np.copyto(self._canvas, frame)
            draw_detections(self._canvas, result)
        else:
            cv2.resize(draw_detections(frame.copy(), result), self._size, dst=self._canvas)
        self._times.append(time.perf_counter())
        text = f"{self.fps():.1f} FPS"
        (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.45, 1)
        x = self._canvas.shape[1] - tw - 6
        cv2.rectangle(self._canvas, (x - 3, 0), (self._canvas.shape[1], th + base + 6), (0, 0, 0), -1)
        cv2.putText(self._canvas, text, (x, th + 3), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
        if self.mark_index:
            burn_index(self._canvas, int(result.index))
            self.put_at[int(result.index)] = time.perf_counter()
            if len(self.put_at) > MARKED_KEPT:  # the oldest goes: a long run holds no more than these
                del self.put_at[next(iter(self.put_at))]
        for out in self.outputs:
            out.put(self._canvas)

    def stats(self) -> List[Dict[str, Any]]:
        return [out.stats() for out in self.outputs]

    def close(self, timeout_s: float = 30.0) -> List[str]:
        """Close every output within `timeout_s` in all; the names of those that had to be killed
        (a file among them may lack its end)."""
        deadline = time.monotonic() + timeout_s
        killed = []
        for out in self.outputs:
            if out.close(max(0.0, deadline - time.monotonic())) is False:
                killed.append(out.name)
        return killed
