"""`synthetic://faces`: real face photos moving over a real photo, with exact ground truth.

    source = SyntheticFaces.from_uri("synthetic://faces?width=3840&height=2160&fps=30&count=20&seed=0")
    frame, truth = source.read()          # BGR uint8 (H, W, 3), Detections in frame pixels

The faces are the 84 colour crops of real face photos shipped in `edge_sdk/assets/faces.npz`
(each with the exact face box inside it), the background one of the shipped photos (see
`edge_sdk/assets/README.md`), so channel order, white balance and skin tones matter as they do
in a camera's frames; `gray=1` turns the whole scene grey (a monochrome camera). Each face keeps
a height drawn log-uniformly from [min_size, max_size] pixels (the defaults give many small
faces at 4K, the ones that vanish when a frame is shrunk to a 640-wide network input; the
pasted crop around a face is 1.2-1.8 times its height), a slight brightness change, and a
constant velocity that bounces off the frame edges (`exits=1`: that leaves the frame at one edge
and comes back in at the opposite one, as a new face). Frame `i` is a pure function of the
parameters and `i`, so `render(i)` and `ground_truth(i)` can be asked in any order and a seed
always gives the same video.

`read()` renders into one frame buffer allocated at construction and returns it: the frame
is valid until the next `read()`; copy it to keep it, or pass `out=` a buffer of your own.
Rendering copies the pre-scaled background and pastes pre-scaled faces: no per-frame
allocation of frame-sized arrays.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple
from urllib.parse import parse_qsl, urlsplit

import numpy as np

from edge_sdk import _imports
from edge_sdk.detections import Detections
from edge_sdk.errors import SourceError

ASSETS = Path(__file__).resolve().parent.parent / "assets"
BACKGROUNDS = ("coffee", "rocket")
SCHEME = "synthetic"
KINDS = ("faces",)

# A face hidden more than this (share of its face box) by crops drawn over it is left out of
# the ground truth.
MAX_OCCLUSION = 0.5
# Speed of a face, in frame widths per second.
SPEED_RANGE = (0.02, 0.12)
BRIGHTNESS_RANGE = (0.85, 1.15)

_INT_PARAMS = ("width", "height", "count", "seed", "min_size", "max_size", "frames")
_FLOAT_PARAMS = ("fps",)
_STR_PARAMS = ("background",)
_BOOL_PARAMS = ("gray", "exits")
_BOOLS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


class SyntheticFaces:
    """A deterministic video of `count` faces moving over a background photo.

    `min_size` and `max_size` bound the height of the faces (their ground-truth boxes), in
    frame pixels. `frames=None` plays forever; otherwise `read()` returns None after `frames`
    frames. `gray=True` renders every pixel grey (R = G = B), faces and background alike.
    `exits=True`: a face leaves the frame at one edge and comes back in at the opposite one, with a
    new identity in the ground truth (each pass through the frame is another object).
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
        gray: bool = False,
        exits: bool = False,
    ) -> None:
        _check(width >= 32 and height >= 32, f"width and height must be at least 32 pixels, got {width}x{height}")
        _check(fps > 0, f"fps must be positive, got {fps}")
        _check(count >= 0, f"count must be >= 0, got {count}")
        _check(8 <= min_size <= max_size, f"need 8 <= min_size <= max_size, got min_size={min_size} max_size={max_size}")
        faces = face_crops()
        largest = int(np.ceil(max_size / faces.heights.min() * faces.cell))  # the crop around the tallest face
        _check(
            largest < min(width, height),
            f"max_size {max_size} does not fit in a {width}x{height} frame (a face of {max_size} px comes in a crop of "
            f"up to {largest} px); lower max_size",
        )
        _check(frames is None or frames >= 0, f"frames must be >= 0 or absent, got {frames}")
        _check(background in BACKGROUNDS, f"background must be one of {list(BACKGROUNDS)}, got {background!r}")
        self.width, self.height, self.fps = int(width), int(height), float(fps)
        self.count, self.seed = int(count), int(seed)
        self.min_size, self.max_size = int(min_size), int(max_size)
        self.frames = None if frames is None else int(frames)
        self.background_name = background
        self.gray = bool(gray)
        self.exits = bool(exits)
        self.index = 0  # the frame the next read() renders

        cv2 = _imports.cv2()
        rng = np.random.default_rng(self.seed)
        n = len(faces.boxes)
        self.face_ids = rng.choice(n, size=self.count, replace=self.count > n).astype(np.int32)
        log_lo, log_hi = np.log(self.min_size), np.log(self.max_size + 1)
        # Face heights; each crop is scaled so that its face box has that height.
        self.sizes = np.minimum(np.exp(rng.uniform(log_lo, log_hi, self.count)).astype(np.int64), self.max_size)
        brightness = rng.uniform(*BRIGHTNESS_RANGE, size=self.count)
        self.patch_sizes = np.maximum(1, np.rint(self.sizes / faces.heights[self.face_ids] * faces.cell)).astype(np.int64)
        # The face box inside each pasted crop, in crop pixels (xyxy).
        self._face_in_patch = (faces.boxes[self.face_ids] * (self.patch_sizes / faces.cell)[:, None]).astype(np.float32)
        self._patches: List[np.ndarray] = []
        for k, side, gain in zip(self.face_ids, self.patch_sizes, brightness):
            crop = faces.images[k]
            inter = cv2.INTER_AREA if side < faces.cell else cv2.INTER_LINEAR
            patch = cv2.resize(crop, (int(side), int(side)), interpolation=inter).astype(np.float32)
            patch = np.clip(np.round(patch * gain), 0, 255).astype(np.uint8)
            self._patches.append(_grey(patch, cv2) if self.gray else np.ascontiguousarray(patch))
        # Motion: start anywhere, constant velocity, reflected at the edges (closed form).
        self._span = np.stack([self.width - self.patch_sizes, self.height - self.patch_sizes], axis=1).astype(np.float64)
        self._start = rng.uniform(0.0, 1.0, (self.count, 2)) * self._span
        angle = rng.uniform(0.0, 2.0 * np.pi, self.count)
        speed = rng.uniform(*SPEED_RANGE, size=self.count) * self.width / self.fps  # pixels per frame
        self._velocity = np.stack([np.cos(angle), np.sin(angle)], axis=1) * speed[:, None]

        bg = cv2.imread(str(ASSETS / f"{background}.jpg"), cv2.IMREAD_COLOR)
        if bg is None:
            raise SourceError(f"cannot read {ASSETS / (background + '.jpg')}; reinstall edge-sdk (its assets are missing)")
        self._background = cv2.resize(bg, (self.width, self.height), interpolation=cv2.INTER_LINEAR)
        if self.gray:
            self._background = _grey(self._background, cv2)
        self._frame = np.empty_like(self._background)

    # -- construction from a URI ------------------------------------------------------------------
    @classmethod
    def from_uri(cls, uri: str) -> "SyntheticFaces":
        """`synthetic://faces?width=&height=&fps=&count=&seed=&min_size=&max_size=&frames=&background=&gray=`."""
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
                elif key in _BOOL_PARAMS:
                    if value.lower() not in _BOOLS:
                        raise SourceError(f"parameter {key}={value!r} in {uri!r} is not a switch; use {key}=1 or {key}=0")
                    kwargs[key] = _BOOLS[value.lower()]
                else:
                    known = sorted(_INT_PARAMS + _FLOAT_PARAMS + _STR_PARAMS + _BOOL_PARAMS)
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
        return np.concatenate([pos, pos + self.patch_sizes[:, None]], axis=1).astype(np.float32)

    def face_boxes(self, i: int) -> np.ndarray:
        """The face box of every face in frame `i` (count, 4) xyxy, hidden or not."""
        pos = self.positions(i).astype(np.float32)
        return self._face_in_patch + np.concatenate([pos, pos], axis=1)

    def positions(self, i: int) -> np.ndarray:
        """Top-left corner (x, y) of every pasted crop in frame `i`, integer pixels, shape (count, 2).
        With `exits`, a corner runs from -side - 1 to the frame's size + 1 and wraps, so that a crop
        is wholly outside the frame when it does (partly or wholly outside in between)."""
        if self.exits:
            return np.rint(np.mod(self._travel(i), self._wrap) - (self.patch_sizes[:, None] + 1)).astype(np.int64)
        travel = self._start + self._velocity * float(i)
        period = 2.0 * self._span
        folded = np.mod(travel, np.where(period > 0, period, 1.0))
        pos = np.where(period > 0, self._span - np.abs(folded - self._span), 0.0)
        return np.rint(pos).astype(np.int64)

    @property
    def _wrap(self) -> np.ndarray:
        """With `exits`: the length of one pass through the frame per face and axis (count, 2)."""
        return np.array([self.width, self.height], np.float64)[None, :] + self.patch_sizes[:, None] + 2

    def _travel(self, i: int) -> np.ndarray:
        return self._start + self.patch_sizes[:, None] + 1 + self._velocity * float(i)

    def identities(self, i: int) -> np.ndarray:
        """The identity of every face in frame `i` (count,): its index, plus `count` for each time
        it has left the frame and come back (`exits`; without, always its index)."""
        ids = np.arange(self.count, dtype=np.int64)
        if not self.exits:
            return ids
        passes = np.abs(np.floor(self._travel(i) / self._wrap) - np.floor(self._travel(0) / self._wrap)).sum(axis=1)
        return ids + self.count * passes.astype(np.int64)

    @staticmethod
    def _visible(faces: np.ndarray, crops: np.ndarray) -> np.ndarray:
        """Faces whose box is not hidden (beyond MAX_OCCLUSION) by crops drawn after them."""
        lt = np.maximum(faces[:, None, :2], crops[None, :, :2])
        rb = np.minimum(faces[:, None, 2:], crops[None, :, 2:])
        wh = np.clip(rb - lt, 0, None)
        inter = np.triu(wh[..., 0] * wh[..., 1], k=1)  # [i, j]: crop j is drawn over face i
        area = (faces[:, 2] - faces[:, 0]) * (faces[:, 3] - faces[:, 1])
        return inter.sum(axis=1) <= MAX_OCCLUSION * area

    def ground_truth(self, i: int) -> Detections:
        """The faces visible in frame `i`: xyxy in frame pixels, confidence 1, class 0.

        A box is the face box of the pasted crop (drawn by hand on the source photo, moved and
        scaled with the crop); a face is left out when the crops pasted over it overlap its box
        by more than MAX_OCCLUSION of its area (overlaps summed), or (`exits`) when more than that
        share of it is outside the frame; a face partly outside is cut to the frame.

        `data["track_id"]` is the face's identity (`identities`: its index in this video, stable
        across frames; with `exits` a new one each time it comes back in) and `data["face_id"]`
        the crop it shows.
        """
        faces = self.face_boxes(i)
        visible = self._visible(faces, self.pasted_boxes(i))
        if self.exits:
            inside = np.clip(faces, 0, [self.width, self.height, self.width, self.height]).astype(np.float32)
            area = (faces[:, 2] - faces[:, 0]) * (faces[:, 3] - faces[:, 1])
            shown = np.clip(inside[:, 2] - inside[:, 0], 0, None) * np.clip(inside[:, 3] - inside[:, 1], 0, None)
            visible &= shown >= (1.0 - MAX_OCCLUSION) * area
            faces = inside
        n = int(visible.sum())
        return Detections(
            faces[visible],
            np.ones(n, np.float32),
            np.zeros(n, np.int32),
            {"track_id": self.identities(i)[visible].astype(np.int32), "face_id": self.face_ids[visible]},
            {"frame": int(i), "timestamp": i / self.fps},
        )

    def render(self, i: int, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Draw frame `i` into `out` (default: the source's own buffer) and return it."""
        frame = self._frame if out is None else out
        if frame.shape != self._background.shape or frame.dtype != np.uint8:
            raise SourceError(f"out must be a uint8 array of shape {self._background.shape}, got {frame.shape} {frame.dtype}")
        np.copyto(frame, self._background)
        for (x, y), side, patch in zip(self.positions(i), self.patch_sizes, self._patches):
            x0, y0 = max(x, 0), max(y, 0)  # exits: the part inside the frame
            x1, y1 = min(x + side, self.width), min(y + side, self.height)
            if x0 < x1 and y0 < y1:
                frame[y0:y1, x0:x1] = patch[y0 - y : y1 - y, x0 - x : x1 - x]
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
            f"background={self.background_name!r}, gray={self.gray}, exits={self.exits})"
        )


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise SourceError(f"synthetic source: {message}")


class FaceCrops(NamedTuple):
    """The shipped face crops: `images` (N, cell, cell, 3) BGR uint8 and `boxes` (N, 4) float32,
    the face box inside each crop (xyxy, crop pixels); `photo` (N,) indexes `photos`, the names
    of the source photos (see edge_sdk/assets/README.md). Read-only arrays."""

    images: np.ndarray
    boxes: np.ndarray
    photo: np.ndarray
    photos: Tuple[str, ...]
    cell: int

    @property
    def heights(self) -> np.ndarray:
        """Face box heights, crop pixels (N,)."""
        return self.boxes[:, 3] - self.boxes[:, 1]


def _grey(bgr: np.ndarray, cv2: object) -> np.ndarray:
    """BGR with every pixel's three channels set to its luma."""
    luma = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)  # type: ignore[attr-defined]
    return cv2.cvtColor(luma, cv2.COLOR_GRAY2BGR)  # type: ignore[attr-defined]


_FACES_CACHE: Dict[str, FaceCrops] = {}


def face_crops() -> FaceCrops:
    """The colour face crops in `edge_sdk/assets/faces.npz`; read once per process."""
    if "faces" not in _FACES_CACHE:
        path = ASSETS / "faces.npz"
        cv2 = _imports.cv2()
        try:
            with np.load(str(path)) as archive:
                atlas = cv2.imdecode(np.asarray(archive["atlas"], np.uint8), cv2.IMREAD_COLOR)
                cell = int(archive["cell"])
                boxes = np.asarray(archive["boxes"], np.float32)
                photo = np.asarray(archive["photo"], np.int16)
                photos = tuple(str(p) for p in archive["photos"])
        except (OSError, KeyError, ValueError, TypeError) as exc:
            raise SourceError(f"cannot read {path} ({exc}); reinstall edge-sdk (its assets are missing)") from exc
        valid = (
            atlas is not None and cell > 0 and atlas.shape[0] % cell == 0 and atlas.shape[1] % cell == 0
            and boxes.ndim == 2 and boxes.shape[1] == 4 and 0 < len(boxes) <= (atlas.shape[0] // cell) * (atlas.shape[1] // cell)
            and photo.shape == (len(boxes),) and bool(np.all((photo >= 0) & (photo < len(photos))))
            and bool(np.all((boxes >= 0) & (boxes <= cell))) and bool(np.all(boxes[:, 2:] - boxes[:, :2] >= 1))
        )
        if not valid:
            raise SourceError(f"{path} holds no valid face crops and boxes; reinstall edge-sdk (its assets are damaged)")
        columns = atlas.shape[1] // cell
        images = np.stack([atlas[(k // columns) * cell : (k // columns + 1) * cell, (k % columns) * cell : (k % columns + 1) * cell]
                           for k in range(len(boxes))])
        for array in (images, boxes, photo):
            array.setflags(write=False)
        _FACES_CACHE["faces"] = FaceCrops(images, boxes, photo, photos, cell)
    return _FACES_CACHE["faces"]
