"""Where the picture moves: a running-average background on a small grey copy of the frame,
for the ROI scheduler to look where something moves."""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from edge_sdk import _imports


class MotionDetector:
    """Moving regions from a running-average background on a small grey copy of the frame.

    Buffers are created for the first frame size and reused. Returns boxes in frame pixels;
    when more than `max_fraction` of the copy moves (camera shake, a light switched on) it
    returns nothing and sets `saturated`, since such motion says nothing about where to look.
    """

    def __init__(self, width: int = 480, threshold: int = 18, learning_rate: float = 0.05, max_fraction: float = 0.2) -> None:
        self.width = width
        self.threshold = threshold
        self.learning_rate = learning_rate
        self.max_fraction = max_fraction
        self.saturated = False
        self._key: Optional[Tuple[int, int]] = None
        self._cv2 = _imports.cv2()
        self._kernel = np.ones((3, 3), np.uint8)

    def reset(self) -> None:
        self._key = None

    def _allocate(self, w: int, h: int) -> None:
        mw = min(self.width, w)
        mh = max(1, int(round(h * mw / w)))
        self._small = np.zeros((mh, mw, 3), np.uint8)
        self._grey = np.zeros((mh, mw), np.uint8)
        self._background = np.zeros((mh, mw), np.float32)
        self._background_u8 = np.zeros((mh, mw), np.uint8)
        self._diff = np.zeros((mh, mw), np.uint8)
        self._mask = np.zeros((mh, mw), np.uint8)
        self._scale = (w / mw, h / mh)
        self._key = (w, h)

    def absorb(self, regions: np.ndarray) -> None:
        """Take the last image's pixels inside `regions` (xyxy in that image's pixels) into the
        background at once: motion there is explained (it was examined), and a moving object
        leaves no trail of stale background behind it."""
        if self._key is None:
            return
        sx, sy = self._scale
        mh, mw = self._grey.shape
        for x0, y0, x1, y1 in np.asarray(regions, np.float64).reshape(-1, 4):
            a0, b0 = max(0, int(math.ceil(x0 / sx))), max(0, int(math.ceil(y0 / sy)))
            a1, b1 = min(mw, int(x1 // sx)), min(mh, int(y1 // sy))
            if a1 > a0 and b1 > b0:
                self._background[b0:b1, a0:a1] = self._grey[b0:b1, a0:a1]

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        cv2 = self._cv2
        h, w = frame.shape[:2]
        first = self._key != (w, h)
        if first:
            self._allocate(w, h)
        mh, mw = self._grey.shape
        cv2.resize(frame, (mw, mh), dst=self._small, interpolation=cv2.INTER_AREA)
        cv2.cvtColor(self._small, cv2.COLOR_BGR2GRAY, dst=self._grey)
        self.saturated = False
        if first:
            self._background[...] = self._grey
            return np.zeros((0, 4), np.float32)
        cv2.convertScaleAbs(self._background, dst=self._background_u8)
        cv2.absdiff(self._grey, self._background_u8, dst=self._diff)
        cv2.accumulateWeighted(self._grey, self._background, self.learning_rate)
        cv2.threshold(self._diff, self.threshold, 255, cv2.THRESH_BINARY, dst=self._mask)
        moving = cv2.countNonZero(self._mask)
        if moving == 0:
            return np.zeros((0, 4), np.float32)
        if moving > self.max_fraction * mw * mh:
            self.saturated = True
            return np.zeros((0, 4), np.float32)
        cv2.dilate(self._mask, self._kernel, dst=self._mask, iterations=1)
        n, _labels, stats, _centroids = cv2.connectedComponentsWithStats(self._mask, connectivity=8)
        boxes = stats[1:n, :4].astype(np.float32)  # x, y, w, h on the small copy
        boxes[:, 2] += boxes[:, 0]
        boxes[:, 3] += boxes[:, 1]
        boxes[:, [0, 2]] *= self._scale[0]
        boxes[:, [1, 3]] *= self._scale[1]
        return boxes
