"""Where results go: JSON lines and a video file with the boxes drawn.

A sink has `write(result)` and `close()` and is a context manager; the CLI chains them.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Optional, TextIO, Tuple

import numpy as np

from edge_sdk import _imports
from edge_sdk.detections import POINT_KEYS, TRACK_ID
from edge_sdk.errors import ConfigError
from edge_sdk.runtime.types import FrameResult
from edge_sdk.validate import dumps_outgoing

log = logging.getLogger(__name__)

FOURCC_BY_SUFFIX = {".avi": "MJPG", ".mp4": "mp4v", ".mkv": "MJPG", ".mov": "mp4v"}


class Sink:
    def write(self, result: FrameResult) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> "Sink":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class JsonlSink(Sink):
    """One JSON object per frame (FrameResult.to_json), flushed after every line. `-` = stdout."""

    def __init__(self, path: Any) -> None:
        self.path = str(path)
        self._own = self.path != "-"
        if self._own:
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                self._file: TextIO = open(self.path, "w", encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"cannot write --jsonl {self.path}: {exc.strerror or exc}") from exc
        else:
            self._file = sys.stdout
        self.lines = 0

    def write(self, result: FrameResult) -> None:
        self._file.write(dumps_outgoing(result.to_json(), "--jsonl", log, separators=(", ", ": "), default=_jsonable) + "\n")
        self._file.flush()
        self.lines += 1

    def close(self) -> None:
        if self._own and not self._file.closed:
            self._file.close()


def _jsonable(value: Any) -> Any:
    """numpy values in FrameResult.info (strategy reports) as plain JSON."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    raise TypeError(f"{type(value).__name__} in FrameResult.info is not JSON serializable")


def _color(class_id: int) -> Tuple[int, int, int]:
    palette = ((0, 200, 0), (0, 128, 255), (255, 64, 64), (200, 0, 200), (0, 200, 200), (255, 200, 0))
    return palette[class_id % len(palette)]


def draw_detections(frame: np.ndarray, result: FrameResult, thickness: int = 2) -> np.ndarray:
    """Draw boxes, class names, track ids (`#7`, where the tracker gave one) and scores, and
    landmarks or keypoints of `result` onto `frame` in place, and the stream id and frame number
    in its top-left corner; returns `frame`."""
    cv2 = _imports.cv2()
    _draw_caption(cv2, frame, f"stream {result.stream}  frame {result.index}")
    det = result.detections
    points = [det.data[key] for key in POINT_KEYS if key in det.data]
    tracks = det.data.get(TRACK_ID)
    for i, (box, score, cid) in enumerate(zip(det.xyxy, det.confidence, det.class_id)):
        x1, y1, x2, y2 = (int(round(float(v))) for v in box)
        color = _color(int(cid))
        cv2.rectangle(frame, (x1, y1), (x2, y2), color, thickness)
        label = det.label(i)
        if tracks is not None and tracks[i] >= 0:
            label = f"{label} #{int(tracks[i])}" if label else f"#{int(tracks[i])}"
        text = f"{label} {float(score):.2f}" if label else f"{float(score):.2f}"
        cv2.putText(frame, text, (x1, max(0, y1 - 4)), cv2.FONT_HERSHEY_SIMPLEX, 0.45, color, 1, cv2.LINE_AA)
        for found in points:
            for x, y in np.asarray(found[i]).reshape(-1, 2):
                cv2.circle(frame, (int(round(float(x))), int(round(float(y)))), 2, (0, 0, 255), -1)
    return frame


def _draw_caption(cv2: Any, frame: np.ndarray, text: str) -> None:
    """`text` in white on a black band at the top-left corner, readable over any picture."""
    (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.45, 1)
    cv2.rectangle(frame, (0, 0), (w + 6, h + base + 6), (0, 0, 0), -1)
    cv2.putText(frame, text, (3, h + 3), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)


class VideoSink(Sink):
    """Writes each frame with its detections drawn. The codec follows the suffix (.avi → MJPG,
    .mp4 → mp4v). Frames of another size than the first are resized to it."""

    def __init__(self, path: Any, fps: float = 30.0, fourcc: Optional[str] = None) -> None:
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if fourcc is None and suffix not in FOURCC_BY_SUFFIX:
            raise ConfigError(f"--save-video {self.path}: unknown video type {suffix!r}; use one of {', '.join(FOURCC_BY_SUFFIX)}")
        self.fourcc = fourcc or FOURCC_BY_SUFFIX[suffix]
        self.fps = float(fps) if fps and fps > 0 else 30.0
        self._writer: Any = None
        self._canvas: Optional[np.ndarray] = None
        self._size: Optional[Tuple[int, int]] = None
        self.frames = 0

    def _open(self, width: int, height: int) -> None:
        cv2 = _imports.cv2()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        writer = cv2.VideoWriter(str(self.path), cv2.VideoWriter_fourcc(*self.fourcc), self.fps, (width, height))
        if not writer.isOpened():
            raise ConfigError(
                f"cannot write video {self.path} with codec {self.fourcc} (this OpenCV lacks the encoder, or the folder is not writable); "
                "try a .avi file (MJPG)"
            )
        self._writer = writer
        self._size = (width, height)
        self._canvas = np.empty((height, width, 3), np.uint8)

    def write(self, result: FrameResult) -> None:
        frame = result.frame
        if frame is None:
            raise ConfigError("--save-video needs the frames; the pipeline returned results without them")
        h, w = frame.shape[:2]
        if self._writer is None:
            self._open(w, h)
        assert self._canvas is not None and self._size is not None
        if (w, h) == self._size:
            np.copyto(self._canvas, frame)
            draw_detections(self._canvas, result)
        else:
            # a size change mid-stream: draw in the frame's own pixels, then fit the writer's size
            cv2 = _imports.cv2()
            cv2.resize(draw_detections(frame.copy(), result), self._size, dst=self._canvas)
        self._writer.write(self._canvas)
        self.frames += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None

