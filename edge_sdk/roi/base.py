"""What every per-frame strategy shares: the detector callback's type, the result, and the checks
and clean-ups around one pass."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from edge_sdk.detections import Detections
from edge_sdk.errors import ConfigError, SourceError

DetectFn = Callable[[List[np.ndarray]], List[Detections]]


@dataclass
class StrategyResult:
    """Detections of one frame in frame pixels, and what the strategy did (for FrameResult.info).
    `track_ms`: the time it took to update the stream's tracker, where the strategy did (the
    detections then carry their track ids); None otherwise."""

    detections: Detections
    info: Dict[str, Any] = field(default_factory=dict)
    track_ms: Optional[float] = None


def model_input_size(detect: Any, input_size: Optional[Tuple[int, int]]) -> Tuple[int, int]:
    size = input_size or getattr(detect, "input_size", None)
    if size is None:
        raise ConfigError("the strategy needs the model input size (width, height): pass input_size=")
    w, h = int(size[0]), int(size[1])
    if w <= 0 or h <= 0:
        raise ConfigError(f"model input size must be positive, got {size}")
    return w, h


def check_frame(frame: np.ndarray) -> Tuple[int, int]:
    if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise SourceError(f"expected a BGR uint8 frame (H, W, 3), got shape {getattr(frame, 'shape', None)}")
    return frame.shape[1], frame.shape[0]


def above(det: Detections, threshold: float) -> Detections:
    return det[det.confidence >= threshold]


def clip_to_frame(det: Detections, w: int, h: int) -> Detections:
    det.xyxy[:, [0, 2]] = np.clip(det.xyxy[:, [0, 2]], 0, w)
    det.xyxy[:, [1, 3]] = np.clip(det.xyxy[:, [1, 3]], 0, h)
    return det
