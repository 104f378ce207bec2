"""Statistics of one frame, as the calibration-drift check measures them: the builder over the
calibration images (edge_sdk.builder.input_stats), the daemon over live frames
(edge_sdk.daemon.drift). The record they are kept in is edge_sdk.input_stats, beside the manifest.

What is measured, on a copy downscaled to :data:`~edge_sdk.input_stats.SAMPLE_WIDTH` pixels wide
(area interpolation): per-channel mean and standard deviation (B, G, R on 0..255) and two
histograms of :data:`~edge_sdk.input_stats.BINS` bins, brightness (HSV value, max(B, G, R)) and
saturation (HSV saturation). A near-constant frame — a black, grey or blue "no signal" picture,
brightness standard deviation below :data:`NO_CONTENT_STD` — carries no content and is not
measured.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from edge_sdk import _imports
from edge_sdk.input_stats import BINS, SAMPLE_WIDTH

NO_CONTENT_STD = 3.0  # brightness std (0..255) below which a frame is "no content"


class FrameStats:
    """Statistics of one frame, into buffers reused from call to call (sized on the first frame
    and again only when the frame size changes)."""

    def __init__(self, bins: int = BINS, width: int = SAMPLE_WIDTH) -> None:
        self.bins = int(bins)
        self.width = int(width)
        self.brightness = np.zeros(self.bins, np.float64)  # normalized histogram
        self.saturation = np.zeros(self.bins, np.float64)
        self.mean = np.zeros(3, np.float64)  # B, G, R
        self.std = np.zeros(3, np.float64)
        self.brightness_mean = 0.0
        self.brightness_std = 0.0
        self.saturation_mean = 0.0
        self._shape: Optional[Tuple[int, ...]] = None
        self._small: Optional[np.ndarray] = None
        self._hsv: Optional[np.ndarray] = None

    def compute(self, frame: np.ndarray) -> bool:
        """Measure `frame` (BGR uint8, H×W×3); False when it is not such a frame or carries no
        content (brightness std below NO_CONTENT_STD), and the statistics are then not updated."""
        if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8 \
                or frame.shape[0] < 1 or frame.shape[1] < 1:
            return False
        cv2 = _imports.cv2()
        if frame.shape != self._shape:
            h, w = frame.shape[:2]
            sw = min(self.width, w)
            sh = max(1, int(round(h * sw / w)))
            self._small = np.empty((sh, sw, 3), np.uint8)
            self._hsv = np.empty((sh, sw, 3), np.uint8)
            self._shape = frame.shape
        small = cv2.resize(frame, (self._small.shape[1], self._small.shape[0]), dst=self._small,
                           interpolation=cv2.INTER_AREA)
        hsv = cv2.cvtColor(small, cv2.COLOR_BGR2HSV, dst=self._hsv)
        hsv_mean, hsv_std = cv2.meanStdDev(hsv)
        if float(hsv_std[2, 0]) < NO_CONTENT_STD:
            return False
        mean, std = cv2.meanStdDev(small)
        self.mean[:] = mean[:, 0]
        self.std[:] = std[:, 0]
        self.brightness_mean = float(hsv_mean[2, 0])
        self.brightness_std = float(hsv_std[2, 0])
        self.saturation_mean = float(hsv_mean[1, 0])
        for out, channel in ((self.saturation, 1), (self.brightness, 2)):
            hist = cv2.calcHist([hsv], [channel], None, [self.bins], [0, 256])
            out[:] = hist[:, 0]
            out /= max(float(out.sum()), 1.0)
        return True
