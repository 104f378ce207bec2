"""Pure geometry for sliced and region-of-interest detection.

Every region is an integer box ``(x0, y0, x1, y1)`` in frame pixels, half-open: it covers the
columns ``x0 .. x1 - 1`` and the rows ``y0 .. y1 - 1``, exactly what ``frame[y0:y1, x0:x1]``
selects. Detection boxes are float32 ``xyxy`` as everywhere else in edge-sdk. A crop's place in
a canvas is an :class:`edge_sdk.geometry.Placement`; :func:`edge_sdk.geometry.move_detections`
maps what was found there back. Nothing here runs a model or allocates per-frame images:
:func:`crop_scale_pad` and :func:`paste` draw into buffers the caller owns.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.geometry import Placement, Region, resize_into



def _positions(length: int, size: int, overlap_ratio: float) -> List[int]:
    """Start offsets of windows of `size` along `length`, the last one flush with the end."""
    if size >= length:
        return [0]
    overlap = int(size * overlap_ratio)
    step = max(1, size - overlap)
    starts = list(range(0, length - size, step))
    if starts[-1] != length - size:
        starts.append(length - size)
    return starts


def slice_grid(
    frame_w: int,
    frame_h: int,
    slice_w: int,
    slice_h: int,
    overlap_w: float = 0.2,
    overlap_h: float = 0.2,
) -> np.ndarray:
    """Tiles covering the frame, row by row, as an int32 array (K, 4) of half-open regions.

    Neighbouring tiles overlap by ``int(slice * overlap)`` pixels; the last tile of each row
    and column is shifted back so that it ends at the frame edge instead of running past it,
    so every tile lies inside the frame and has the slice size (or the frame size, where the
    frame is smaller than a slice).
    """
    if frame_w <= 0 or frame_h <= 0 or slice_w <= 0 or slice_h <= 0:
        raise ValueError(f"sizes must be positive: frame {frame_w}x{frame_h}, slice {slice_w}x{slice_h}")
    for name, ratio in (("overlap_w", overlap_w), ("overlap_h", overlap_h)):
        if not 0.0 <= ratio < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {ratio}")
    xs = _positions(frame_w, slice_w, overlap_w)
    ys = _positions(frame_h, slice_h, overlap_h)
    w, h = min(slice_w, frame_w), min(slice_h, frame_h)
    return np.array([(x, y, x + w, y + h) for y in ys for x in xs], dtype=np.int32).reshape(-1, 4)


def clip_regions(regions: np.ndarray, frame_w: int, frame_h: int) -> np.ndarray:
    """Clip integer regions (K, 4) to the frame; empty ones keep x1 == x0 or y1 == y0."""
    r = np.asarray(regions, dtype=np.int64).reshape(-1, 4).copy()
    r[:, [0, 2]] = np.clip(r[:, [0, 2]], 0, frame_w)
    r[:, [1, 3]] = np.clip(r[:, [1, 3]], 0, frame_h)
    r[:, 2] = np.maximum(r[:, 2], r[:, 0])
    r[:, 3] = np.maximum(r[:, 3], r[:, 1])
    return r.astype(np.int32)


def expand_boxes(
    xyxy: np.ndarray,
    frame_w: int,
    frame_h: int,
    margin: float = 0.5,
    min_size: Tuple[int, int] = (0, 0),
    max_size: Optional[Tuple[int, int]] = None,
) -> np.ndarray:
    """Grow float boxes into integer regions around them, kept inside the frame.

    Each side grows by ``margin`` times the box's width (left/right) or height (top/bottom);
    the result is at least ``min_size`` (w, h) and at most ``max_size``, centred on the box.
    A region that would leave the frame is shifted back in (not cut), so it keeps its size
    wherever the frame is large enough.
    """
    b = np.asarray(xyxy, dtype=np.float64).reshape(-1, 4)
    if len(b) == 0:
        return np.zeros((0, 4), np.int32)
    cx = (b[:, 0] + b[:, 2]) / 2
    cy = (b[:, 1] + b[:, 3]) / 2
    w = (b[:, 2] - b[:, 0]) * (1 + 2 * margin)
    h = (b[:, 3] - b[:, 1]) * (1 + 2 * margin)
    w = np.maximum(w, min_size[0])
    h = np.maximum(h, min_size[1])
    if max_size is not None:
        w = np.minimum(w, max_size[0])
        h = np.minimum(h, max_size[1])
    w = np.minimum(np.ceil(w), frame_w)
    h = np.minimum(np.ceil(h), frame_h)
    x0 = np.clip(np.round(cx - w / 2), 0, frame_w - w)
    y0 = np.clip(np.round(cy - h / 2), 0, frame_h - h)
    return np.stack([x0, y0, x0 + w, y0 + h], axis=1).astype(np.int32)


def fit_window(region: Region, win_w: int, win_h: int, frame_w: int, frame_h: int) -> Region:
    """A window of (win_w, win_h) centred on `region`, shifted to lie inside the frame."""
    w, h = min(win_w, frame_w), min(win_h, frame_h)
    cx = (region[0] + region[2]) / 2
    cy = (region[1] + region[3]) / 2
    x0 = int(min(max(round(cx - w / 2), 0), frame_w - w))
    y0 = int(min(max(round(cy - h / 2), 0), frame_h - h))
    return (x0, y0, x0 + w, y0 + h)


def merge_regions(regions: np.ndarray, max_w: int, max_h: int, gap: int = 0) -> np.ndarray:
    """Replace regions that overlap (or come within `gap` pixels) by their union.

    Two regions are joined only where the union still fits in (max_w, max_h), so every result
    can be drawn into one model input at full resolution. Repeats until nothing changes; the
    output keeps the order of the first region of each group (so a list given in priority
    order stays in priority order).
    """
    return merge_regions_indexed(regions, max_w, max_h, gap)[0]


def merge_regions_indexed(
    regions: np.ndarray, max_w: int, max_h: int, gap: int = 0, thrifty: bool = False
) -> Tuple[np.ndarray, np.ndarray]:
    """:func:`merge_regions`, also returning for each result the index of its first input region.

    With `thrifty`, two regions are joined only where their union has no more pixels than the
    two of them apart (as for nested or strongly overlapping regions): regions that merely
    touch stay apart, since drawing both costs fewer model-input pixels than their union.
    """
    r = [list(map(int, row)) for row in np.asarray(regions, dtype=np.int64).reshape(-1, 4)]
    first = list(range(len(r)))
    changed = True
    while changed and len(r) > 1:
        changed = False
        i = 0
        while i < len(r):
            j = i + 1
            while j < len(r):
                a, b = r[i], r[j]
                near = a[0] - gap < b[2] and b[0] - gap < a[2] and a[1] - gap < b[3] and b[1] - gap < a[3]
                u = [min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])]
                fits = u[2] - u[0] <= max_w and u[3] - u[1] <= max_h
                if fits and thrifty:
                    fits = (u[2] - u[0]) * (u[3] - u[1]) <= (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1])
                if near and fits:
                    r[i] = u
                    first[i] = min(first[i], first[j])
                    del r[j]
                    del first[j]
                    changed = True
                else:
                    j += 1
            i += 1
    return np.array(r, dtype=np.int32).reshape(-1, 4), np.array(first, dtype=np.int64)


def split_region(region: Region, max_w: int, max_h: int, overlap: float = 0.2) -> np.ndarray:
    """Cut a region larger than (max_w, max_h) into overlapping windows of at most that size."""
    x0, y0, x1, y1 = (int(v) for v in region)
    w, h = x1 - x0, y1 - y0
    if w <= max_w and h <= max_h:
        return np.array([[x0, y0, x1, y1]], dtype=np.int32)
    tiles = slice_grid(w, h, min(max_w, w), min(max_h, h), overlap, overlap)
    return tiles + np.array([x0, y0, x0, y0], dtype=np.int32)


def inside(regions: np.ndarray, covers: np.ndarray) -> np.ndarray:
    """Boolean (K, M): True where regions[k] lies entirely inside covers[m]."""
    r = np.asarray(regions, dtype=np.int64).reshape(-1, 4)
    c = np.asarray(covers, dtype=np.int64).reshape(-1, 4)
    return (
        (r[:, None, 0] >= c[None, :, 0])
        & (r[:, None, 1] >= c[None, :, 1])
        & (r[:, None, 2] <= c[None, :, 2])
        & (r[:, None, 3] <= c[None, :, 3])
    )


def covered_by(regions: np.ndarray, covers: np.ndarray) -> np.ndarray:
    """Boolean (K,): True where regions[k] lies entirely inside at least one of `covers`."""
    return inside(regions, covers).any(axis=1)


def crop_scale_pad(
    frame: np.ndarray,
    region: Region,
    out: np.ndarray,
    pad_value: int = 0,
    scale: Optional[float] = None,
) -> Placement:
    """Draw `frame[region]` into the top-left of `out` (H, W, 3), scaled, the rest padded.

    Without `scale`, the region is scaled to fit `out` keeping its aspect ratio (never up
    unless it is smaller than `out` in both directions, in which case it is scaled up to fit).
    Returns the placement whose :meth:`Placement.inverse` maps boxes found in `out` back.
    """
    x0, y0, x1, y1 = (int(v) for v in region)
    h_out, w_out = out.shape[:2]
    if scale is None:
        scale = min(w_out / (x1 - x0), h_out / (y1 - y0))
    placement = Placement.region((x0, y0, x1, y1), 0, 0, float(scale))
    w, h = placement.size
    if w > w_out or h > h_out:
        raise ValueError(f"region {region} at scale {scale} needs {w}x{h}, more than the {w_out}x{h_out} canvas")
    paste(frame, placement, out, pad_value)
    return placement


def paste(frame: np.ndarray, placement: Placement, canvas: np.ndarray, pad_value: Optional[int] = None) -> None:
    """Draw ``frame[placement.src]`` into `canvas` at ``placement.dst``, resized by its scale
    (area averaging when shrinking), straight into the canvas; with `pad_value`, the rest of
    the canvas is filled with it."""
    from edge_sdk import _imports

    cv2 = _imports.cv2()
    resize_into(frame, placement, canvas, cv2.INTER_AREA if placement.scale < 1 else cv2.INTER_LINEAR, pad_value)


def scale_levels(sizes: np.ndarray, target: int) -> np.ndarray:
    """Power-of-two zoom-out level of objects of `sizes` pixels (longest side) for a model that
    sees objects best at up to `target` pixels: the smallest L >= 0 with ``size / 2**L <= target``.

    Level 0 is full resolution; a region at level L is examined at scale ``2**-L``. A `target`
    of 0 keeps every object at level 0.
    """
    s = np.asarray(sizes, dtype=np.float64).reshape(-1)
    if target <= 0 or len(s) == 0:
        return np.zeros(len(s), dtype=np.int64)
    ratio = np.maximum(s, 1.0) / float(target)
    return np.maximum(0, np.ceil(np.log2(ratio) - 1e-9)).astype(np.int64)


class ShelfPacker:
    """Places rectangles one at a time on horizontal shelves of up to `max_canvases` canvases.

    First fit: a rectangle goes on the first shelf with room (shelf tall enough, row wide
    enough), else on a new shelf below the last one, else on a new canvas. Neighbours keep
    `gap` pixels between them so that a detection cannot span two crops.
    """

    def __init__(self, canvas_w: int, canvas_h: int, gap: int = 0, max_canvases: Optional[int] = None) -> None:
        self.canvas_w = int(canvas_w)
        self.canvas_h = int(canvas_h)
        self.gap = int(gap)
        self.max_canvases = max_canvases
        self._shelves: List[List[List[int]]] = []  # per canvas: [y, height, next_x]
        self._next_y: List[int] = []

    @property
    def canvases(self) -> int:
        return len(self._shelves)

    def add(self, w: int, h: int) -> Optional[Tuple[int, int, int]]:
        """(canvas, x, y) for a w x h rectangle, or None when the canvas limit leaves no room."""
        w, h = int(w), int(h)
        if w > self.canvas_w or h > self.canvas_h or w <= 0 or h <= 0:
            raise ValueError(f"rectangle {w}x{h} does not fit a {self.canvas_w}x{self.canvas_h} canvas")
        for c, shelves in enumerate(self._shelves):
            for shelf in shelves:
                if h <= shelf[1] and shelf[2] + w <= self.canvas_w:
                    x = shelf[2]
                    shelf[2] += w + self.gap
                    return (c, x, shelf[0])
            if self._next_y[c] + h <= self.canvas_h:
                y = self._next_y[c]
                shelves.append([y, h, w + self.gap])
                self._next_y[c] += h + self.gap
                return (c, 0, y)
        if self.max_canvases is not None and len(self._shelves) >= self.max_canvases:
            return None
        self._shelves.append([[0, h, w + self.gap]])
        self._next_y.append(h + self.gap)
        return (len(self._shelves) - 1, 0, 0)


def pack_shelves(sizes: Sequence[Tuple[int, int]], canvas_w: int, canvas_h: int, gap: int = 0) -> List[Tuple[int, int, int]]:
    """Pack rectangles (w, h) into as few canvases as a shelf packer manages, tallest first.

    Returns, for each input rectangle in input order, (canvas index, x, y). A rectangle larger
    than the canvas raises ValueError: split it first (:func:`split_region`).
    """
    order = sorted(range(len(sizes)), key=lambda i: (-int(sizes[i][1]), -int(sizes[i][0]), i))
    packer = ShelfPacker(canvas_w, canvas_h, gap)
    result: List[Tuple[int, int, int]] = [(0, 0, 0)] * len(sizes)
    for i in order:
        placed = packer.add(int(sizes[i][0]), int(sizes[i][1]))
        assert placed is not None  # no canvas limit
        result[i] = placed
    return result


def canvases_needed(sizes: Sequence[Tuple[int, int]], canvas_w: int, canvas_h: int, gap: int = 0) -> int:
    placed = pack_shelves(sizes, canvas_w, canvas_h, gap)
    return 1 + max((c for c, _, _ in placed), default=-1)


def assign_to_placements(xyxy: np.ndarray, placements: Sequence[Placement]) -> np.ndarray:
    """Index of the placement whose canvas area holds each box's centre, or -1 (in a gap).

    All placements must belong to the canvas the boxes were found in.
    """
    b = np.asarray(xyxy, dtype=np.float32).reshape(-1, 4)
    owner = np.full(len(b), -1, dtype=np.int64)
    if len(b) == 0 or not placements:
        return owner
    d = np.array([p.dst for p in placements], dtype=np.float32)
    cx = (b[:, 0] + b[:, 2]) / 2
    cy = (b[:, 1] + b[:, 3]) / 2
    inside = (cx[:, None] >= d[None, :, 0]) & (cx[:, None] < d[None, :, 2]) & (cy[:, None] >= d[None, :, 1]) & (cy[:, None] < d[None, :, 3])
    hit = inside.any(axis=1)
    owner[hit] = np.argmax(inside[hit], axis=1)
    return owner


def region_area(regions: np.ndarray) -> np.ndarray:
    r = np.asarray(regions, dtype=np.int64).reshape(-1, 4)
    return (r[:, 2] - r[:, 0]) * (r[:, 3] - r[:, 1])


def sweep_bound(n_tiles: int, per_frame: int) -> int:
    """Frames after which a round-robin sweep of `per_frame` tiles has visited all `n_tiles`."""
    return int(math.ceil(n_tiles / max(1, per_frame)))
