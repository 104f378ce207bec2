"""Sinks: JSON lines and the annotated video."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.detections import Detections
from edge_sdk.errors import ConfigError
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
    assert first == {"frame": 0, "ts": 1764400000.123, "detections": [{"xyxy": [10.0, 12.0, 40.5, 44.25], "score": 0.9123, "class_id": 0}],
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


def test_draw_detections_writes_the_class_name_before_the_score() -> None:
    cv2 = pytest.importorskip("cv2")
    det = Detections(np.array([[10.0, 30.0, 90.0, 60.0], [100.0, 30.0, 150.0, 60.0]]), np.array([0.9, 0.75]),
                     np.array([2, 7]), {"label": np.array(["car", ""])})
    frame = draw_detections(np.zeros((80, 200, 3), np.uint8), FrameResult(0, 0.0, det))
    # what cv2 draws for "car 0.90" above the first box and "0.75" (no name for class 7) above the second
    expected = np.zeros((80, 200, 3), np.uint8)
    for (x1, y1, x2, y2), text, color in (((10, 30, 90, 60), "car 0.90", (255, 64, 64)), ((100, 30, 150, 60), "0.75", (0, 128, 255))):
        cv2.rectangle(expected, (x1, y1), (x2, y2), color, 2)
        cv2.putText(expected, text, (x1, y1 - 4), cv2.FONT_HERSHEY_SIMPLEX, 0.45, color, 1, cv2.LINE_AA)
    np.testing.assert_array_equal(frame, expected)
