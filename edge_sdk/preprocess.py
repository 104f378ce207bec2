"""Frame → network input tensor. The runtime and the builder's calibration both use this code.

The network sees `(pixel - mean) * scale` per channel, in the colour order and layout of its
`InputSpec`. Buffers are allocated once per (frame size, input size); converting a frame in
steady state allocates nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from edge_sdk import _imports
from edge_sdk.errors import ConfigError, SourceError
from edge_sdk.geometry import Placement, resize_into
from edge_sdk.images import read_image

RESIZE_MODES = ("letterbox", "stretch")
# Where a letterboxed frame lies in the network input. "center": padded evenly on both sides
# (Ultralytics' LetterBox, auto=False). "top-left": padded on the right and bottom only (YOLOX's
# preproc: ratio min(h / ih, w / iw), the resized image at [0, 0] of a canvas of 114).
PLACEMENTS = ("center", "top-left")
# How a frame is resampled to the network size. "linear": cv2.INTER_LINEAR, what the usual
# inference code does (cv2.dnn.blobFromImage, Ultralytics' LetterBox), about 0.5 ms from 1080p
# to 640x384 on one x86 core. "area": cv2.INTER_AREA when the frame shrinks, INTER_LINEAR when it
# grows: no aliasing, but a non-integer shrink costs about 8 ms there.
INTERPOLATIONS = ("linear", "area")
# what a spec written before `interpolation` existed was built and calibrated with
LEGACY_INTERPOLATION = "area"
COLORS = ("BGR", "RGB")


@dataclass
class InputSpec:
    """What the network expects. `shape` is NCHW: [batch, 3, height, width]."""

    name: str = "input"
    shape: List[int] = field(default_factory=lambda: [1, 3, 384, 640])
    dtype: str = "float32"
    layout: str = "NCHW"
    color: str = "BGR"
    mean: List[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    scale: List[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])
    resize: str = "letterbox"
    pad_value: int = 0
    interpolation: str = "linear"
    placement: str = "center"

    def __post_init__(self) -> None:
        self.shape = [int(v) for v in self.shape]
        if len(self.shape) != 4 or self.shape[1] != 3 or min(self.shape) <= 0:
            raise ConfigError(f"input shape must be [batch, 3, height, width] with positive sizes, got {self.shape}")
        if self.layout != "NCHW":
            raise ConfigError(f"input layout {self.layout!r} is not supported; use NCHW")
        if self.color not in COLORS:
            raise ConfigError(f"input color must be one of {COLORS}, got {self.color!r}")
        if self.resize not in RESIZE_MODES:
            raise ConfigError(f"input resize must be one of {RESIZE_MODES}, got {self.resize!r}")
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"input placement must be one of {PLACEMENTS}, got {self.placement!r}")
        if isinstance(self.pad_value, bool) or not isinstance(self.pad_value, int) or not 0 <= self.pad_value <= 255:
            raise ConfigError(f"input pad_value must be a grey level 0..255 (an integer), got {self.pad_value!r}")
        if self.interpolation not in INTERPOLATIONS:
            raise ConfigError(f"input interpolation must be one of {INTERPOLATIONS}, got {self.interpolation!r}")
        if self.dtype not in ("float32", "float16"):
            raise ConfigError(f"input dtype must be float32 or float16, got {self.dtype!r}")
        self.mean = _triple(self.mean, "mean")
        self.scale = _triple(self.scale, "scale")

    @property
    def height(self) -> int:
        return self.shape[2]

    @property
    def width(self) -> int:
        return self.shape[3]

    @property
    def batch(self) -> int:
        return self.shape[0]

    def to_dict(self) -> Dict[str, object]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "layout": self.layout,
            "color": self.color,
            "mean": list(self.mean),
            "scale": list(self.scale),
            "resize": self.resize,
            "pad_value": self.pad_value,
            "interpolation": self.interpolation,
            "placement": self.placement,
        }

    @classmethod
    def from_dict(cls, d: Dict[str, object]) -> "InputSpec":
        """The spec a manifest (or a cache key) recorded. One recorded before `interpolation`
        existed keeps the resampling it was built and calibrated with."""
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known.setdefault("interpolation", LEGACY_INTERPOLATION)
        return cls(**known)  # type: ignore[arg-type]


def _triple(value: Sequence[float], key: str) -> List[float]:
    if isinstance(value, (int, float)):
        value = [value] * 3
    value = [float(v) for v in value]
    if len(value) != 3:
        raise ConfigError(f"input {key} must have 3 values (one per channel), got {value}")
    return value


def plan_transform(frame_w: int, frame_h: int, net_w: int, net_h: int, resize: str = "letterbox",
                   placement: str = "center") -> Tuple[Placement, Tuple[int, int, int, int]]:
    """The placement of a (frame_w, frame_h) frame in the network input, letterboxed `placement`
    "center" or "top-left" (see PLACEMENTS) or stretched, and the (x, y, w, h) region it fills."""
    if resize == "stretch":
        where = Placement.stretch(frame_w, frame_h, net_w, net_h)
    else:
        where = Placement.letterbox(frame_w, frame_h, net_w, net_h, placement)
    x0, y0, x1, y1 = where.dst
    return where, (x0, y0, x1 - x0, y1 - y0)


class Preprocessor:
    """Converts BGR uint8 frames (H, W, 3) into the network input tensor, reusing its buffers.

    `__call__(frame)` fills `self.tensor[0]` and returns the tensor and the frame's Placement. For
    batches, `fill(frame, index)` writes one slot. The returned tensor is owned by the
    preprocessor and overwritten by the next call.

    `fill` is two steps, which may run apart: `fill_planes(frame, planes)` resizes the frame
    into (3, H, W) uint8 planes in the network's colour order (a quarter of the float32 row),
    and `write_row(planes, index)` converts them into a row of the tensor. `batch=0` makes a
    preprocessor with no tensor, for `fill_planes` only.
    """

    def __init__(self, spec: InputSpec, batch: Optional[int] = None) -> None:
        self.spec = spec
        n = spec.batch if batch is None else int(batch)
        self.tensor = np.zeros((n, 3, spec.height, spec.width), dtype=np.dtype(spec.dtype))
        self._canvas = np.full((spec.height, spec.width, 3), spec.pad_value, dtype=np.uint8)
        self._mean = np.asarray(spec.mean, np.float32).reshape(3, 1, 1)
        self._scale = np.asarray(spec.scale, np.float32).reshape(3, 1, 1)
        self._identity = bool(np.all(self._mean == 0) and np.all(self._scale == 1))
        self._plan_key: Optional[Tuple[int, int]] = None
        self._plan: Optional[Tuple[Placement, Tuple[int, int, int, int]]] = None
        self._cv2 = _imports.cv2()
        # HWC → CHW goes through uint8 planes: cv2.split writes the planes in place, then one
        # contiguous cast fills the tensor (about 2.5x faster than casting a transposed view).
        self._planes = np.empty((3, spec.height, spec.width) if n else (3, 0, 0), np.uint8)  # fill's; none at batch 0
        self._order = (0, 1, 2) if spec.color == "BGR" else (2, 1, 0)  # frame channel k → tensor plane order[k]
        self._plane_views = [self._planes[c] for c in self._order]
        self._split_in_place: Optional[bool] = None
        self._area = spec.interpolation == "area"

    def _plan_for(self, w: int, h: int) -> Tuple[Placement, Tuple[int, int, int, int]]:
        if self._plan_key != (w, h):
            self._plan = plan_transform(w, h, self.spec.width, self.spec.height, self.spec.resize,
                                        self.spec.placement)
            self._plan_key = (w, h)
            self._canvas[...] = self.spec.pad_value
        assert self._plan is not None
        return self._plan

    def fill(self, frame: np.ndarray, index: int = 0) -> Placement:
        """`frame` into row `index` of the tensor; its Placement."""
        placement = self.fill_planes(frame)
        self.write_row(self._planes, index)
        return placement

    def fill_planes(self, frame: np.ndarray, planes: Optional[np.ndarray] = None) -> Placement:
        """`frame` resized into the network input as (3, H, W) uint8 planes in the network's
        colour order: into `planes` (the caller's, C-contiguous), else the preprocessor's own.
        Its Placement. The resize scratch (the canvas) is the preprocessor's."""
        if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            shape = getattr(frame, "shape", None)
            dtype = getattr(frame, "dtype", None)
            raise SourceError(f"expected a BGR uint8 frame of shape (H, W, 3), got shape {shape} dtype {dtype}")
        h, w = frame.shape[:2]
        placement, (x, y, rw, rh) = self._plan_for(w, h)
        if (rw, rh) == (w, h) and (w, h) == (self.spec.width, self.spec.height):
            src = frame  # already the network size: no canvas copy
        else:
            cv2 = self._cv2
            interp = cv2.INTER_AREA if self._area and rw < w else cv2.INTER_LINEAR
            resize_into(frame, placement, self._canvas, interp)
            src = self._canvas
        self._to_planes(src, self._planes if planes is None else planes)
        return placement

    def write_row(self, planes: np.ndarray, index: int = 0) -> None:
        """(3, H, W) uint8 `planes` (from `fill_planes`) into row `index` of the tensor, as the
        network sees them: `(pixel - mean) * scale` in the tensor's type."""
        dst = self.tensor[index]
        np.copyto(dst, planes, casting="unsafe")
        if not self._identity:
            np.subtract(dst, self._mean, out=dst, casting="unsafe")
            np.multiply(dst, self._scale, out=dst, casting="unsafe")

    def _to_planes(self, src: np.ndarray, out: np.ndarray) -> None:
        """HWC uint8 `src` → the (3, H, W) uint8 planes `out` in the network's colour order."""
        if self._split_in_place is not False and src.flags.c_contiguous and out.flags.c_contiguous:
            views = self._plane_views if out is self._planes else [out[c] for c in self._order]
            planes = self._cv2.split(src, views)
            if self._split_in_place is None:
                # An OpenCV that returns new arrays instead of writing ours is caught once.
                self._split_in_place = all(np.shares_memory(a, b) for a, b in zip(planes, views))
            if self._split_in_place:
                return
        np.copyto(out, src.transpose(2, 0, 1) if self.spec.color == "BGR" else src[..., ::-1].transpose(2, 0, 1))

    def __call__(self, frame: np.ndarray) -> Tuple[np.ndarray, Placement]:
        placement = self.fill(frame, 0)
        return self.tensor[:1], placement


def load_image(path: str) -> np.ndarray:
    """Read an image file as BGR uint8 (H, W, 3) through :func:`edge_sdk.images.read_image`
    (the reader of the runtime's image sources); raises SourceError naming the file."""
    img = read_image(path)
    if img.ndim == 2:
        cv2 = _imports.cv2()
        return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    return img
