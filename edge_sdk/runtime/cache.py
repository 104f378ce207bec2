"""Prediction cache: reuse the last result when the frame has not changed.

The test is cheap and allocation-free: the frame is shrunk to a small greyscale thumbnail
(64x36 by default, INTER_AREA, so each thumbnail pixel averages a whole cell of the frame and
sensor noise mostly cancels) in a preallocated buffer and compared with the thumbnail of the
last frame that was actually processed. The largest absolute difference of any thumbnail pixel
must stay under `threshold` grey levels for a hit: a mean would let one small object move
unnoticed, the maximum does not. Comparing against the last *processed* frame (not the last
seen) keeps slow drift from being cached forever.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from edge_sdk import _imports


class PredictionCache:
    def __init__(self, threshold: float = 4.0, size: Tuple[int, int] = (64, 36), enabled: bool = True) -> None:
        self.threshold = float(threshold)
        self.size = (int(size[0]), int(size[1]))
        self.enabled = enabled
        w, h = self.size
        self._small = np.empty((h, w, 3), np.uint8)
        self._gray = np.empty((h, w), np.uint8)
        self._ref = np.empty((h, w), np.uint8)
        self._has_ref = False
        self._value: Any = None
        self.hits = 0
        self.misses = 0
        self.last_difference = float("nan")
        self._cv2 = _imports.cv2()

    def thumbnail_buffers(self) -> Tuple[np.ndarray, np.ndarray]:
        """(colour scratch, grey thumbnail) buffers for :meth:`thumbnail` on another thread."""
        w, h = self.size
        return np.empty((h, w, 3), np.uint8), np.empty((h, w), np.uint8)

    def thumbnail(self, frame: np.ndarray, small: np.ndarray, gray: np.ndarray) -> np.ndarray:
        """The grey thumbnail of `frame`, written into `gray` (`small` is scratch). Thread-safe
        with its own buffers: the pipeline computes it on the capture thread."""
        cv2 = self._cv2
        cv2.resize(frame, self.size, dst=small, interpolation=cv2.INTER_AREA)
        cv2.cvtColor(small, cv2.COLOR_BGR2GRAY, dst=gray)
        return gray

    def lookup(self, frame: np.ndarray, thumbnail: Optional[np.ndarray] = None) -> Optional[Any]:
        """The cached value when `frame` matches the last stored frame, else None (a miss).

        `thumbnail` is the frame's thumbnail when it was computed already (:meth:`thumbnail`).
        After a miss, call `store(value)` with the new result for this same frame.
        """
        if not self.enabled:
            return None
        if thumbnail is not None:
            np.copyto(self._gray, thumbnail)
            gray = self._gray
        else:
            gray = self.thumbnail(frame, self._small, self._gray)
        if self._has_ref:
            self.last_difference = self._cv2.norm(gray, self._ref, self._cv2.NORM_INF)
            if self.last_difference < self.threshold:
                self.hits += 1
                return self._value
        self.misses += 1
        return None

    def store(self, value: Any) -> None:
        """Remember `value` as the result of the frame passed to the last `lookup`."""
        if not self.enabled:
            return
        np.copyto(self._ref, self._gray)
        self._has_ref = True
        self._value = value

    def clear(self) -> None:
        self._has_ref = False
        self._value = None
