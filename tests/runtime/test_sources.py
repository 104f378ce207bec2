"""URI parsing, GStreamer pipeline strings, and the file/folder/synthetic sources."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_sdk.errors import SourceError
from edge_sdk.runtime import sources
from edge_sdk.runtime.sources import (
    ImageFolderSource,
    SyntheticSource,
    VideoCaptureSource,
    csi_pipeline,
    open_source,
    parse_uri,
    rtsp_pipeline,
    to_bgr,
)

from runtime_factories import scene


@pytest.mark.parametrize(
    "uri, kind, location, params",
    [
        ("csi://0", "csi", "0", {}),
        ("csi://1?width=1280&height=720&flip=2", "csi", "1", {"width": "1280", "height": "720", "flip": "2"}),
        ("v4l2:///dev/video0", "v4l2", "/dev/video0", {}),
        ("v4l2://1", "v4l2", "/dev/video1", {}),
        ("/dev/video2", "v4l2", "/dev/video2", {}),
        ("rtsp://user:pw@cam.local:8554/live?x=1", "rtsp", "rtsp://user:pw@cam.local:8554/live?x=1", {}),
        ("synthetic://faces?width=640&height=480&seed=3", "synthetic", "faces", {"width": "640", "height": "480", "seed": "3"}),
        ("synthetic://faces", "synthetic", "faces", {}),
    ],
)
def test_parse_uri(uri: str, kind: str, location: str, params: dict) -> None:
    parsed = parse_uri(uri)
    assert (parsed.kind, parsed.location, parsed.params) == (kind, location, params)


def test_parse_paths(tmp_path: Path) -> None:
    video = tmp_path / "clip.avi"
    video.write_bytes(b"x")
    image = tmp_path / "a.png"
    image.write_bytes(b"x")
    assert parse_uri(str(video)).kind == "video"
    assert parse_uri(f"file://{video}").kind == "video"
    assert parse_uri(str(tmp_path)).kind == "images"
    assert parse_uri(str(image)).kind == "images"


@pytest.mark.parametrize(
    "uri, message",
    [
        ("foo://bar", "unknown source scheme 'foo://'"),
        ("", "empty source URI"),
        ("/no/such/clip.mp4", "does not exist"),
        ("file:///no/such/clip.mp4", "does not exist"),
        ("csi://front", "needs a sensor number"),
        ("synthetic://cats", "unknown synthetic scene 'cats'"),
    ],
)
def test_bad_uris(uri: str, message: str) -> None:
    with pytest.raises(SourceError, match=message):
        open_source(uri)


def test_csi_pipeline_string() -> None:
    pipe = csi_pipeline(1, width=1280, height=720, framerate=60, flip=2)
    assert pipe.startswith("nvarguscamerasrc sensor-id=1 ! video/x-raw(memory:NVMM)")
    for part in ("width=(int)1280", "height=(int)720", "framerate=(fraction)60/1", "nvvidconv flip-method=2",
                 "format=(string)BGR", "appsink drop=true max-buffers=1"):
        assert part in pipe


def test_rtsp_pipeline_string() -> None:
    pipe = rtsp_pipeline("rtsp://cam/live", latency=50)
    assert pipe.startswith("rtspsrc location=rtsp://cam/live latency=50 ! ")
    assert pipe.endswith("appsink drop=true max-buffers=1 sync=false")


@pytest.mark.parametrize("uri", ["csi://0", "v4l2:///dev/video0?api=gstreamer"])
def test_gstreamer_source_without_gstreamer_says_so(uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "gstreamer_available", lambda: False)
    kwargs = {"api": "gstreamer"} if "api=" in uri else {}
    with pytest.raises(SourceError, match="needs OpenCV built with GStreamer"):
        open_source(uri.split("?")[0], **kwargs)


def test_csi_with_gstreamer_builds_a_live_gstreamer_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    import cv2

    monkeypatch.setattr(sources, "gstreamer_available", lambda: True)
    src = open_source("csi://0?width=640&height=480", framerate=15)
    assert isinstance(src, VideoCaptureSource) and src.live and src.api == cv2.CAP_GSTREAMER
    assert "width=(int)640" in src.target and "framerate=(fraction)15/1" in src.target


def test_rtsp_falls_back_to_ffmpeg_without_gstreamer(monkeypatch: pytest.MonkeyPatch) -> None:
    import cv2

    monkeypatch.setattr(sources, "gstreamer_available", lambda: False)
    src = open_source("rtsp://cam/live")
    assert isinstance(src, VideoCaptureSource) and src.live and src.api == cv2.CAP_FFMPEG


def test_this_opencv_build_is_detected() -> None:
    import cv2

    expected = any(line.strip().startswith("GStreamer:") and "YES" in line for line in cv2.getBuildInformation().splitlines())
    assert sources.gstreamer_available() is expected


def test_video_file_reads_all_frames_in_order_into_the_buffer(video_factory) -> None:
    path = video_factory(frames=6, width=96, height=64)
    src = open_source(str(path))
    buf = np.zeros((64, 96, 3), np.uint8)
    with src:
        assert src.frame_count == 6 and not src.live
        frames = []
        while True:
            frame = src.read(buf)
            if frame is None:
                break
            frames.append(frame.copy())
    assert len(frames) == 6
    # MJPG is lossy: compare the bright square's position, which moves 8 px per frame
    for i, frame in enumerate(frames):
        expected = scene(i, 96, 64)
        assert np.abs(frame.astype(int) - expected.astype(int)).mean() < 6


def truncate(path: Path, keep: float = 0.5) -> Path:
    with open(path, "r+b") as f:
        f.truncate(int(path.stat().st_size * keep))
    return path


def test_a_truncated_video_is_reported_not_silent(video_factory, caplog: pytest.LogCaptureFixture) -> None:
    path = truncate(video_factory(frames=100, width=96, height=64))
    src = open_source(str(path))
    with caplog.at_level("WARNING", logger="edge_sdk.runtime.sources"), src:
        assert src.frame_count == 100  # what the file's header announces
        read = 0
        while src.read() is not None:
            read += 1
        assert src.read() is None
    assert 0 < read < 100
    assert src.truncated == (read, 100)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [f"video {path} ended after {read} of the 100 frames its header announces: the file is truncated "
                        f"or damaged (frames after {read} were not processed)"]


def test_a_complete_video_reports_nothing(video_factory, caplog: pytest.LogCaptureFixture) -> None:
    src = open_source(str(video_factory(frames=12)), loop=True)
    with caplog.at_level("WARNING", logger="edge_sdk.runtime.sources"), src:
        assert all(src.read() is not None for _ in range(30))  # two and a half passes
    assert src.truncated is None and not caplog.records


def test_a_looped_truncated_video_warns_once(video_factory, caplog: pytest.LogCaptureFixture) -> None:
    src = open_source(str(truncate(video_factory(frames=40))), loop=True)
    with caplog.at_level("WARNING", logger="edge_sdk.runtime.sources"), src:
        assert all(src.read() is not None for _ in range(100))
    assert src.truncated is not None and src.truncated[1] == 40
    assert len(caplog.records) == 1


def test_video_loop_restarts(video_factory) -> None:
    src = open_source(str(video_factory(frames=3)), loop=True)
    with src:
        got = [src.read() is not None for _ in range(7)]
    assert all(got)


@pytest.mark.parametrize("content", [b"", b"this is not a video at all" * 10])
def test_empty_or_garbage_video_is_a_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "broken.mp4"
    path.write_bytes(content)
    with pytest.raises(SourceError, match="broken.mp4"):
        open_source(str(path)).open()


def test_image_folder_sorted_and_channels(tmp_path: Path) -> None:
    import cv2

    cv2.imwrite(str(tmp_path / "b.png"), scene(1)[:, :, 0])  # grey
    cv2.imwrite(str(tmp_path / "a.png"), scene(0))
    cv2.imwrite(str(tmp_path / "c.png"), np.dstack([scene(2), np.full(scene(2).shape[:2], 255, np.uint8)]))  # BGRA
    (tmp_path / "notes.txt").write_text("not an image")
    src = open_source(str(tmp_path))
    assert isinstance(src, ImageFolderSource)
    with src:
        raws = [src.read() for _ in range(3)]
        assert src.read() is None
    assert [r.ndim if r.ndim == 2 else r.shape[2] for r in raws] == [3, 2, 3]  # grey stays grey; alpha is dropped
    out = np.empty((96, 128, 3), np.uint8)
    assert np.array_equal(to_bgr(raws[1], out), np.repeat(scene(1)[:, :, :1], 3, axis=2))
    assert np.array_equal(to_bgr(raws[2], out), scene(2))


def test_empty_folder_and_unreadable_image(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="has no images"):
        open_source(str(tmp_path)).open()
    (tmp_path / "x.jpg").write_bytes(b"not a jpeg")
    src = open_source(str(tmp_path))
    src.open()
    with pytest.raises(SourceError, match="cannot read image .*x.jpg"):
        src.read()


def test_to_bgr_rejects_other_formats() -> None:
    with pytest.raises(SourceError, match="8-bit"):
        to_bgr(np.zeros((4, 4, 3), np.uint16), np.zeros((4, 4, 3), np.uint8))
    with pytest.raises(SourceError, match="unsupported frame shape"):
        to_bgr(np.zeros((4, 4, 2), np.uint8), np.zeros((4, 4, 3), np.uint8))


def test_synthetic_source_renders_into_the_buffer_with_ground_truth() -> None:
    src = open_source("synthetic://faces?width=320&height=240&count=3&frames=4&seed=1&min_size=16&max_size=32")
    assert isinstance(src, SyntheticSource)
    buf = np.zeros((240, 320, 3), np.uint8)
    with src:
        assert src.frame_count == 4
        frame = src.read(buf)
        assert frame is buf and buf.any()
        assert src.ground_truth is not None and len(src.ground_truth) <= 3
        assert sum(src.read(buf) is not None for _ in range(5)) == 3


def test_synthetic_bad_parameter() -> None:
    with pytest.raises(SourceError, match="width"):
        open_source("synthetic://faces?width=abc").open()


def test_a_truncated_image_in_a_looped_folder_is_skipped_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """b.jpg cut in half: a and c are read on every pass (each a real JPEG of its own colour), b is
    skipped with one warning and counted each pass, never raised (which stopped the capture and
    re-opened the folder at a: c was never read)."""
    import cv2

    colours = {"a": (0, 0, 255), "b": (0, 255, 0), "c": (255, 0, 0)}
    for name, bgr in colours.items():
        cv2.imwrite(str(tmp_path / f"{name}.jpg"), np.full((48, 64, 3), bgr, np.uint8))
    truncate(tmp_path / "b.jpg")
    src = ImageFolderSource(str(tmp_path), loop=True)
    src.open()
    frames = [src.read() for _ in range(6)]
    dominant = ["bgr"[int(np.argmax(f.reshape(-1, 3).mean(axis=0)))] for f in frames]
    assert dominant == ["r", "b"] * 3  # a (red), c (blue), a, c, ...: b never returned, nothing raised
    assert src.skipped == 3 and list(src.unreadable) == [str(tmp_path / "b.jpg")]
    assert "truncated" in src.unreadable[str(tmp_path / "b.jpg")]
    assert sum("skipping" in r.getMessage() for r in caplog.records) == 1


def test_a_folder_of_only_unreadable_images_is_a_source_error(tmp_path: Path) -> None:
    (tmp_path / "x.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really")
    (tmp_path / "y.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    src = ImageFolderSource(str(tmp_path), loop=True)
    src.open()
    with pytest.raises(SourceError, match="no image of folder .* can be read \\(2 tried\\)"):
        src.read()
    single = ImageFolderSource(str(tmp_path / "x.jpg"))
    single.open()
    with pytest.raises(SourceError, match="x.jpg"):
        single.read()  # one image file: its own error
