"""GStreamer for the video output tests: skipped, with the packages to install, only where the
system has no GStreamer RTSP server, x264enc or ffprobe (.ci/run installs them, and sets
EDGE_SDK_REQUIRE_GSTREAMER_TESTS=1 so that their absence fails there instead)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from contextlib import contextmanager
from typing import Iterator

import pytest

from edge_sdk.errors import OutputError
from edge_sdk.output.video import gst_python

PACKAGES = ("python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-rtsp gstreamer1.0-plugins-base gstreamer1.0-plugins-good "
            "gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly ffmpeg")
PROBE = ("import gi; gi.require_version('Gst', '1.0'); gi.require_version('GstRtspServer', '1.0'); "
         "from gi.repository import Gst, GstRtspServer; Gst.init(None); "
         "assert all(Gst.ElementFactory.find(e) for e in ('x264enc', 'h264parse', 'mp4mux', 'rtph264pay'))")


def missing() -> str:
    """Why the GStreamer tests cannot run here ('' when they can)."""
    if shutil.which("ffprobe") is None:
        return f"ffprobe is not installed (sudo apt install {PACKAGES})"
    try:
        python = gst_python()
    except OutputError as exc:
        return str(exc)
    if subprocess.run([python, "-c", PROBE], capture_output=True).returncode != 0:
        return f"GStreamer with its RTSP server and x264enc is not installed for {python} (sudo apt install {PACKAGES})"
    return ""


REASON = missing()
if REASON and os.environ.get("EDGE_SDK_REQUIRE_GSTREAMER_TESTS") == "1":  # .ci/run: these tests must run
    raise RuntimeError(f"EDGE_SDK_REQUIRE_GSTREAMER_TESTS=1, but {REASON}")
needs_gstreamer = pytest.mark.skipif(bool(REASON), reason=REASON)


@contextmanager
def busy_port() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that another socket listens on, for as long as the block runs."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        yield int(busy.getsockname()[1])
