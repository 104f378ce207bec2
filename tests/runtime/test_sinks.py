"""Sinks: JSON lines and the annotated video."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.detections import Detections
from edge_sdk.errors import ConfigError
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.sinks import JsonlSink, VideoSink, draw_detections
from edge_sdk.runtime.types import FrameResult


def result(index: int, frame: np.ndarray, info: dict = None) -> FrameResult:
    det = Detections(np.array([[10.0, 12.0, 40.5, 44.25]]), np.array([0.91234]), np.array([0]),
                     {"landmarks": np.full((1, 5, 2), 20.0)})
    return FrameResult(index, 1764400000.1234, det, {"total": 41.234, "infer": 35.0}, frame=frame, info=info or {})


def test_jsonl_line_format_and_numpy_in_info(tmp_path: Path) -> None:
    frame = np.zeros((64, 64, 3), np.uint8)
    with JsonlSink(tmp_path / "sub" / "out.jsonl") as sink:
        sink.write(result(0, frame))
        sink.write(result(1, frame, {"rois": np.array([[1, 2, 3, 4]]), "tiles": np.int64(3)}))
        # flushed per line: readable before close
        assert len((tmp_path / "sub" / "out.jsonl").read_text().splitlines()) == 2
    first, second = [json.loads(line) for line in (tmp_path / "sub" / "out.jsonl").read_text().splitlines()]
    assert first == {"stream": "0", "frame": 0, "ts": 1764400000.123, "detections": [{"xyxy": [10.0, 12.0, 40.5, 44.25], "score": 0.9123, "class_id": 0}],
                     "latency_ms": {"total": 41.23, "infer": 35.0}}
    assert second["info"] == {"rois": [[1, 2, 3, 4]], "tiles": 3}


def test_video_sink_draws_and_handles_a_size_change(tmp_path: Path) -> None:
    import cv2

    path = tmp_path / "out.avi"
    with VideoSink(path, fps=5) as sink:
        sink.write(result(0, np.zeros((64, 96, 3), np.uint8)))
        sink.write(result(1, np.zeros((128, 192, 3), np.uint8)))
    cap = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(frame)
    assert len(frames) == 2 and all(f.shape == (64, 96, 3) for f in frames)
    assert frames[0][12:45, 10:41].max() > 100  # the box was drawn


def test_draw_detections_marks_box_and_landmarks() -> None:
    frame = np.zeros((64, 64, 3), np.uint8)
    draw_detections(frame, result(0, frame))
    assert frame[12, 25].any() and frame[20, 20, 2] == 255


def test_unknown_video_type() -> None:
    with pytest.raises(ConfigError, match="unknown video type '.gif'"):
        VideoSink("out.gif")


@pytest.mark.parametrize("tracks, texts", [
    (None, ("car 0.90", "0.75")),
    ([7, -1], ("car #7 0.90", "0.75")),  # -1: in no confirmed track, no id drawn
    ([-1, 12], ("car 0.90", "#12 0.75")),
])
def test_draw_detections_writes_the_class_name_and_track_id_before_the_score(tracks, texts) -> None:
    cv2 = pytest.importorskip("cv2")
    data = {"label": np.array(["car", ""])}
    if tracks is not None:
        data["track_id"] = np.array(tracks, np.int64)
    det = Detections(np.array([[10.0, 30.0, 90.0, 60.0], [100.0, 30.0, 150.0, 60.0]]), np.array([0.9, 0.75]),
                     np.array([2, 7]), data)
    frame = draw_detections(np.zeros((80, 200, 3), np.uint8), FrameResult(0, 0.0, det))
    # what cv2 draws for "car 0.90" above the first box and "0.75" (no name for class 7) above the
    # second, after the stream id and frame number on a black band in the top-left corner
    expected = np.zeros((80, 200, 3), np.uint8)
    (w, h), base = cv2.getTextSize("stream 0  frame 0", cv2.FONT_HERSHEY_SIMPLEX, 0.45, 1)
    cv2.rectangle(expected, (0, 0), (w + 6, h + base + 6), (0, 0, 0), -1)
    cv2.putText(expected, "stream 0  frame 0", (3, h + 3), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
    for (x1, y1, x2, y2), text, color in zip(((10, 30, 90, 60), (100, 30, 150, 60)), texts, ((255, 64, 64), (0, 128, 255))):
        cv2.rectangle(expected, (x1, y1), (x2, y2), color, 2)
        cv2.putText(expected, text, (x1, y1 - 4), cv2.FONT_HERSHEY_SIMPLEX, 0.45, color, 1, cv2.LINE_AA)
    np.testing.assert_array_equal(frame, expected)


def test_every_line_and_overlay_names_the_stream_of_its_frame(tmp_path: Path) -> None:
    cv2 = pytest.importorskip("cv2")
    frame = np.zeros((64, 256, 3), np.uint8)
    door = FrameResult(7, 1.0, Detections.empty(), captured=Frame(frame, index=7, stream_id="door"))
    assert door.stream == "door"  # from its Frame
    assert FrameResult(0, 1.0, Detections.empty()).stream == "0"  # no Frame: the one [source]
    assert FrameResult(0, 1.0, Detections.empty(), stream="yard").stream == "yard"
    with JsonlSink(tmp_path / "out.jsonl") as sink:
        sink.write(door)
    assert json.loads((tmp_path / "out.jsonl").read_text())["stream"] == "door"
    drawn = draw_detections(frame.copy(), door)
    other = draw_detections(frame.copy(), FrameResult(7, 1.0, Detections.empty(), stream="yard"))
    assert not np.array_equal(drawn, other)  # the caption differs by stream
    expected = frame.copy()  # black: the band does not show, the white text does
    (_, h), _ = cv2.getTextSize("stream door  frame 7", cv2.FONT_HERSHEY_SIMPLEX, 0.45, 1)
    cv2.putText(expected, "stream door  frame 7", (3, h + 3), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
    assert expected.max() > 200  # the text is there
    np.testing.assert_array_equal(drawn, expected)
