"""`synthetic://faces`: real face photos moving over a real photo, with exact ground truth.

    source = SyntheticFaces.from_uri("synthetic://faces?width=3840&height=2160&fps=30&count=20&seed=0")
    frame, truth = source.read()          # BGR uint8 (H, W, 3), Detections in frame pixels

The faces are the 100 LFW crops shipped in `edge_sdk/assets/faces.npz`, the background one of
the shipped photos (see `edge_sdk/assets/README.md`). Each face keeps a size drawn
log-uniformly from [min_size, max_size] pixels (the defaults give many small faces at 4K, the
ones that vanish when a frame is shrunk to a 640-wide network input), a slight brightness
change, and a constant velocity that bounces off the frame edges. Frame `i` is a pure
function of the parameters and `i`, so `render(i)` and `ground_truth(i)` can be asked in any
order and a seed always gives the same video.

`read()` renders into one frame buffer allocated at construction and returns it: the frame
is valid until the next `read()`; copy it to keep it, or pass `out=` a buffer of your own.
Rendering copies the pre-scaled background and pastes pre-scaled faces: no per-frame
allocation of frame-sized arrays.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple
from urllib.parse import parse_qsl, urlsplit

import numpy as np

from edge_sdk import _imports
from edge_sdk.detections import Detections
from edge_sdk.errors import SourceError

ASSETS = Path(__file__).resolve().parent.parent / "assets"
BACKGROUNDS = ("coffee", "rocket")
SCHEME = "synthetic"
KINDS = ("faces",)

# A face hidden more than this by faces drawn over it is left out of the ground truth.
MAX_OCCLUSION = 0.5
# The face inside a pasted crop (LFW crops include some hair and ears at the sides), as insets
# relative to the crop size: (left and right, top and bottom). Ground-truth boxes are this region.
FACE_INSET = (0.10, 0.03)
# Speed of a face, in frame widths per second.
SPEED_RANGE = (0.02, 0.12)
BRIGHTNESS_RANGE = (0.85, 1.15)

_INT_PARAMS = ("width", "height", "count", "seed", "min_size", "max_size", "frames")
_FLOAT_PARAMS = ("fps",)
_STR_PARAMS = ("background",)


class SyntheticFaces:
    """A deterministic video of `count` faces moving over a background photo.

    `frames=None` plays forever; otherwise `read()` returns None after `frames` frames.
    """

    def __init__(
        self,
        width: int = 3840,
        height: int = 2160,
        fps: float = 30.0,
        count: int = 20,
        seed: int = 0,
        min_size: int = 24,
        max_size: int = 64,
        frames: Optional[int] = None,
        background: str = "coffee",
    ) -> None:
        _check(width >= 32 and height >= 32, f"width and height must be at least 32 pixels, got {width}x{height}")
        _check(fps > 0, f"fps must be positive, got {fps}")
        _check(count >= 0, f"count must be >= 0, got {count}")
        _check(8 <= min_size <= max_size, f"need 8 <= min_size <= max_size, got min_size={min_size} max_size={max_size}")
        _check(
            max_size < min(width, height),
            f"max_size {max_size} does not fit in a {width}x{height} frame; lower max_size",
        )
        _check(frames is None or frames >= 0, f"frames must be >= 0 or absent, got {frames}")
        _check(background in BACKGROUNDS, f"background must be one of {list(BACKGROUNDS)}, got {background!r}")
        self.width, self.height, self.fps = int(width), int(height), float(fps)
        self.count, self.seed = int(count), int(seed)
        self.min_size, self.max_size = int(min_size), int(max_size)
        self.frames = None if frames is None else int(frames)
        self.background_name = background
        self.index = 0  # the frame the next read() renders

        cv2 = _imports.cv2()
        rng = np.random.default_rng(self.seed)
        crops = _load_faces()
        self.face_ids = rng.choice(len(crops), size=self.count, replace=self.count > len(crops)).astype(np.int32)
        log_lo, log_hi = np.log(self.min_size), np.log(self.max_size + 1)
        self.sizes = np.minimum(np.exp(rng.uniform(log_lo, log_hi, self.count)).astype(np.int64), self.max_size)
        brightness = rng.uniform(*BRIGHTNESS_RANGE, size=self.count)
        self._patches: List[np.ndarray] = []
        for face, size, gain in zip(crops[self.face_ids], self.sizes, brightness):
            gray = cv2.resize(face, (int(size), int(size)), interpolation=cv2.INTER_LINEAR).astype(np.float32)
            gray = np.clip(np.round(gray * gain), 0, 255).astype(np.uint8)
            self._patches.append(np.ascontiguousarray(np.repeat(gray[:, :, None], 3, axis=2)))
        # Motion: start anywhere, constant velocity, reflected at the edges (closed form).
        self._span = np.stack([self.width - self.sizes, self.height - self.sizes], axis=1).astype(np.float64)
        self._start = rng.uniform(0.0, 1.0, (self.count, 2)) * self._span
        angle = rng.uniform(0.0, 2.0 * np.pi, self.count)
        speed = rng.uniform(*SPEED_RANGE, size=self.count) * self.width / self.fps  # pixels per frame
        self._velocity = np.stack([np.cos(angle), np.sin(angle)], axis=1) * speed[:, None]

        bg = cv2.imread(str(ASSETS / f"{background}.jpg"), cv2.IMREAD_COLOR)
        if bg is None:
            raise SourceError(f"cannot read {ASSETS / (background + '.jpg')}; reinstall edge-sdk (its assets are missing)")
        self._background = cv2.resize(bg, (self.width, self.height), interpolation=cv2.INTER_LINEAR)
        self._frame = np.empty_like(self._background)

    # -- construction from a URI ------------------------------------------------------------------
    @classmethod
    def from_uri(cls, uri: str) -> "SyntheticFaces":
        """`synthetic://faces?width=&height=&fps=&count=&seed=&min_size=&max_size=&frames=&background=`."""
        parts = urlsplit(uri)
        if parts.scheme != SCHEME or parts.netloc not in KINDS:
            raise SourceError(f"not a synthetic source URI: {uri!r}; expected synthetic://faces?width=1920&height=1080")
        kwargs: Dict[str, object] = {}
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            try:
                if key in _INT_PARAMS:
                    kwargs[key] = int(value)
                elif key in _FLOAT_PARAMS:
                    kwargs[key] = float(value)
                elif key in _STR_PARAMS:
                    kwargs[key] = value
                else:
                    known = sorted(_INT_PARAMS + _FLOAT_PARAMS + _STR_PARAMS)
                    raise SourceError(f"unknown parameter {key!r} in {uri!r}; known parameters: {', '.join(known)}")
            except ValueError:
                raise SourceError(f"parameter {key}={value!r} in {uri!r} is not a number") from None
        return cls(**kwargs)  # type: ignore[arg-type]

    # -- frames -----------------------------------------------------------------------------------
    @property
    def background(self) -> np.ndarray:
        """The background scaled to the frame size (read-only view)."""
        view = self._background.view()
        view.setflags(write=False)
        return view

    def pasted_boxes(self, i: int) -> np.ndarray:
        """The full pasted crop of every face in frame `i` (count, 4) xyxy, hidden or not."""
        pos = self.positions(i)
        return np.concatenate([pos, pos + self.sizes[:, None]], axis=1).astype(np.float32)

    def positions(self, i: int) -> np.ndarray:
        """Top-left corner (x, y) of every face in frame `i`, integer pixels, shape (count, 2)."""
        travel = self._start + self._velocity * float(i)
        period = 2.0 * self._span
        folded = np.mod(travel, np.where(period > 0, period, 1.0))
        pos = np.where(period > 0, self._span - np.abs(folded - self._span), 0.0)
        return np.rint(pos).astype(np.int64)

    def _visible(self, boxes: np.ndarray) -> np.ndarray:
        """Faces not hidden (beyond MAX_OCCLUSION) by faces drawn after them."""
        lt = np.maximum(boxes[:, None, :2], boxes[None, :, :2])
        rb = np.minimum(boxes[:, None, 2:], boxes[None, :, 2:])
        wh = np.clip(rb - lt, 0, None)
        inter = np.triu(wh[..., 0] * wh[..., 1], k=1)  # [i, j]: face j is drawn over face i
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        return inter.sum(axis=1) <= MAX_OCCLUSION * area

    def ground_truth(self, i: int) -> Detections:
        """The faces visible in frame `i`: xyxy in frame pixels, confidence 1, class 0.

        A box is the face region of the pasted crop (the crop minus FACE_INSET); a face more
        than MAX_OCCLUSION hidden by faces pasted over it is left out.

        `data["track_id"]` is the face's index in this video (stable across frames) and
        `data["face_id"]` the crop it shows.
        """
        boxes = self.pasted_boxes(i)
        visible = self._visible(boxes)
        n = int(visible.sum())
        inset = self.sizes[:, None].astype(np.float32) * np.asarray([FACE_INSET * 2], np.float32)
        faces = boxes + inset * np.asarray([1, 1, -1, -1], np.float32)
        return Detections(
            faces[visible],
            np.ones(n, np.float32),
            np.zeros(n, np.int32),
            {"track_id": np.nonzero(visible)[0].astype(np.int32), "face_id": self.face_ids[visible]},
            {"frame": int(i), "timestamp": i / self.fps},
        )

    def render(self, i: int, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Draw frame `i` into `out` (default: the source's own buffer) and return it."""
        frame = self._frame if out is None else out
        if frame.shape != self._background.shape or frame.dtype != np.uint8:
            raise SourceError(f"out must be a uint8 array of shape {self._background.shape}, got {frame.shape} {frame.dtype}")
        np.copyto(frame, self._background)
        for (x, y), size, patch in zip(self.positions(i), self.sizes, self._patches):
            frame[y : y + size, x : x + size] = patch
        return frame

    def read(self, out: Optional[np.ndarray] = None) -> Optional[Tuple[np.ndarray, Detections]]:
        """The next frame and its ground truth, or None once `frames` frames have been read."""
        if self.frames is not None and self.index >= self.frames:
            return None
        i = self.index
        self.index += 1
        return self.render(i, out), self.ground_truth(i)

    def __iter__(self) -> Iterator[Tuple[np.ndarray, Detections]]:
        while True:
            item = self.read()
            if item is None:
                return
            yield item

    def __len__(self) -> int:
        if self.frames is None:
            raise TypeError("an endless synthetic source has no length; pass frames=")
        return self.frames

    def timestamp(self, i: int) -> float:
        """Seconds from the start of the video to frame `i`."""
        return i / self.fps

    def close(self) -> None:
        """Nothing to release; present so the source reads like the others."""

    def __enter__(self) -> "SyntheticFaces":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"SyntheticFaces(width={self.width}, height={self.height}, fps={self.fps:g}, count={self.count}, "
            f"seed={self.seed}, min_size={self.min_size}, max_size={self.max_size}, frames={self.frames}, "
            f"background={self.background_name!r})"
        )


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise SourceError(f"synthetic source: {message}")


_FACES_CACHE: Dict[str, np.ndarray] = {}


def _load_faces() -> np.ndarray:
    """The shipped face crops, (100, 25, 25) uint8; read once per process (read-only)."""
    if "faces" not in _FACES_CACHE:
        path = ASSETS / "faces.npz"
        try:
            with np.load(str(path)) as archive:
                faces = np.asarray(archive["faces"], dtype=np.uint8)
        except (OSError, KeyError, ValueError) as exc:
            raise SourceError(f"cannot read {path} ({exc}); reinstall edge-sdk (its assets are missing)") from exc
        faces.setflags(write=False)
        _FACES_CACHE["faces"] = faces
    return _FACES_CACHE["faces"]
