"""`edge-sdk detect --out`: the annotated frames as H.264 to an MP4 file and an RTSP server at
once, read back by real clients; bad --out values refused before a bundle is read."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest
from typer.testing import CliRunner

from edge_sdk.cli import app
from edge_sdk.runtime.synthetic import SyntheticFaces
from gstreamer import busy_port, needs_gstreamer
from mqtt_broker import free_port
from polling import wait_until
from tiny_bundle import make_tiny_bundle

runner = CliRunner()
SCENE = "synthetic://faces?width=320&height=240&seed=3&count=2"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bundle(tmp_path_factory.mktemp("cli-out") / "bundle")


def invoke(*args: Any) -> Any:
    return runner.invoke(app, ["detect", *map(str, args)])


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@needs_gstreamer
def test_out_to_a_file_and_rtsp_at_once(bundle: Path, tmp_path: Path) -> None:
    import cv2

    port, video = free_port(), tmp_path / "annotated.mp4"
    url = f"rtsp://127.0.0.1:{port}/live"
    done: List[Any] = []
    run = threading.Thread(target=lambda: done.append(invoke(
        f"{SCENE}&frames=90", "--bundle", bundle, "--fps", "30", "--threads", "1", "--no-cache",
        "--out", video, "--out", url)))
    run.start()
    try:
        assert wait_until(lambda: listening(port) or bool(done), timeout=60), "the RTSP server never listened"
        os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = "rtsp_transport;tcp"
        cap = cv2.VideoCapture(url, cv2.CAP_FFMPEG)
        received = [cap.read()[1] for _ in range(10)] if cap.isOpened() else []
        cap.release()
    finally:
        run.join(120)
    result = done[0]
    assert result.exit_code == 0, result.output
    assert len(received) == 10 and all(f is not None and f.shape == (240, 320, 3) for f in received)
    said = " ".join(result.output.split())
    assert f"{url}: " in said, said
    found = re.search(re.escape(str(video)) + r": (\d+) frames sent, (\d+) dropped \(x264enc, [0-9.]+ ms per frame\)", said)
    assert found is not None, said
    sent, dropped = int(found.group(1)), int(found.group(2))
    assert sent + dropped == 90 and sent >= 80, said  # the ring drops only while the encoder starts on a busy machine
    probe = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries", "stream=codec_name,nb_read_frames",
                            "-of", "json", str(video)], capture_output=True, text=True)
    assert json.loads(probe.stdout)["streams"][0] == {"codec_name": "h264", "nb_read_frames": str(sent)}
    cap = cv2.VideoCapture(str(video), cv2.CAP_FFMPEG)
    ok, first = cap.read()
    cap.release()
    source = SyntheticFaces.from_uri(f"{SCENE}&frames=90").render(0)
    # the caption (stream and frame number, white on black) over the top-left corner of the scene
    black = (lambda px: float((px.max(axis=2) < 16).mean()))
    white = (lambda px: float((px.min(axis=2) > 200).mean()))
    band, under = first[1:16, 2:100], source[1:16, 2:100]
    assert ok and black(band) > 0.5 and white(band) > 0.05, "no caption in the written frames"
    assert black(under) < 0.2 and white(under) < 0.01, "the scene looks like a caption there already"


@needs_gstreamer
def test_rtsp_port_in_use_stops_detect_with_its_code(bundle: Path) -> None:
    with busy_port() as port:
        result = invoke(f"{SCENE}&frames=3", "--bundle", bundle, "--threads", "1", "--out", f"rtsp://127.0.0.1:{port}/x")
    assert result.exit_code == 12, result.output
    assert f"port {port} on 127.0.0.1 is in use" in " ".join(result.output.split())


@pytest.mark.parametrize("args, message", [
    (["--out", "no/such/folder/v.mp4"], "the folder no/such/folder does not exist; create it"),
    (["--out", "ftp://host/v"], "unknown output"),
    ([f"{SCENE}&frames=3", "--out", "v.mp4"], "--out writes one source's frames"),
])
def test_bad_out_is_refused_before_a_bundle_is_read(args: List[str], message: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke(f"{SCENE}&frames=3", *args, "--bundle", tmp_path / "no-bundle-here")  # a bundle error would be exit 8
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
