"""One placement type for every image-to-image mapping of the frame path, the one function that
moves detections through it, and the one routine that draws a source region into a buffer.

A :class:`Placement` says where a source rectangle lands in a destination image: the letterboxed
or stretched frame in the network input, a crop of the frame in an ROI canvas, the frame shrunk
for the coarse pass. ``dst_px = (src_px - src_origin) * (scale_x, scale_y) + (x, y)``;
:meth:`Placement.forward` applies it, :meth:`Placement.inverse` undoes it, :meth:`Placement.then`
chains two (frame -> canvas, then canvas -> network input: frame -> network input in one step).

Source rectangles are ``(x0, y0, x1, y1)`` in source pixels, half-open as ``image[y0:y1, x0:x1]``
selects; boxes are float32 ``xyxy``, points ``(..., 2)`` as (x, y).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from edge_sdk.detections import POINT_KEYS, Detections

Region = Tuple[int, int, int, int]


@dataclass(frozen=True)
class Placement:
    """Source rectangle `src` drawn into destination image number `canvas` with its top-left at
    (x, y), scaled by `scale_x` and `scale_y`. It occupies :attr:`size` destination pixels."""

    src: Region
    x: float = 0
    y: float = 0
    scale_x: float = 1.0
    scale_y: float = 1.0
    canvas: int = 0

    # -- constructors ------------------------------------------------------------------------
    @classmethod
    def letterbox(cls, frame_w: int, frame_h: int, net_w: int, net_h: int, where: str = "center") -> "Placement":
        """The whole frame scaled to fit (net_w, net_h), aspect kept: "center" pads evenly on both
        sides (Ultralytics' LetterBox, auto=False), "top-left" on the right and bottom only
        (YOLOX's preproc). The scales are the drawn size over the frame size per axis."""
        r = min(net_w / frame_w, net_h / frame_h)
        if where == "center":
            w = max(1, min(net_w, int(round(frame_w * r))))
            h = max(1, min(net_h, int(round(frame_h * r))))
            x = (net_w - w) // 2
            y = (net_h - h) // 2
        else:  # YOLOX's preproc truncates: (int(iw * r), int(ih * r))
            w = max(1, min(net_w, int(frame_w * r)))
            h = max(1, min(net_h, int(frame_h * r)))
            x, y = 0, 0
        return cls((0, 0, frame_w, frame_h), x, y, w / frame_w, h / frame_h)

    @classmethod
    def stretch(cls, frame_w: int, frame_h: int, net_w: int, net_h: int) -> "Placement":
        """The whole frame scaled to fill (net_w, net_h), each axis by its own factor."""
        return cls((0, 0, frame_w, frame_h), 0, 0, net_w / frame_w, net_h / frame_h)

    @classmethod
    def region(cls, src: Region, x: int = 0, y: int = 0, scale: float = 1.0, canvas: int = 0) -> "Placement":
        """Frame region `src` (a crop, a tile, an ROI) at (x, y) of canvas `canvas`, zoomed by `scale`."""
        return cls(tuple(int(v) for v in src), x, y, float(scale), float(scale), canvas)  # type: ignore[arg-type]

    @classmethod
    def affine(cls, scale_x: float, scale_y: float, pad_x: float, pad_y: float, frame_w: int, frame_h: int) -> "Placement":
        """A whole (frame_w, frame_h) frame mapped by ``net = frame * scale + pad`` (as recorded
        in a bundle's gate reference)."""
        return cls((0, 0, frame_w, frame_h), pad_x, pad_y, scale_x, scale_y)

    # -- what it covers --------------------------------------------------------------------------
    @property
    def scale(self) -> float:
        """The zoom of a placement that keeps the aspect ratio (ROI crops: scale_x == scale_y)."""
        return self.scale_x

    @property
    def size(self) -> Tuple[int, int]:
        """(w, h) the source rectangle occupies in the destination."""
        w = self.src[2] - self.src[0]
        h = self.src[3] - self.src[1]
        return (max(1, int(round(w * self.scale_x))), max(1, int(round(h * self.scale_y))))

    @property
    def dst(self) -> Region:
        """The destination rectangle (x0, y0, x1, y1) the source is drawn into."""
        w, h = self.size
        x, y = int(self.x), int(self.y)
        return (x, y, x + w, y + h)

    # -- mapping ---------------------------------------------------------------------------------
    def forward(self, xyxy: np.ndarray) -> np.ndarray:
        """Source-pixel boxes (N, 4) -> destination pixels (float32, new array)."""
        out = np.asarray(xyxy, dtype=np.float32).reshape(-1, 4).copy()
        out[:, [0, 2]] = (out[:, [0, 2]] - self.src[0]) * self.scale_x + self.x
        out[:, [1, 3]] = (out[:, [1, 3]] - self.src[1]) * self.scale_y + self.y
        return out

    def inverse(self, xyxy: np.ndarray, clip: bool = False, dtype: type = np.float32) -> np.ndarray:
        """Destination-pixel boxes (N, 4) -> source pixels (a new array of `dtype`: float32, or
        float64 where whole-pixel edges must come out exact); with `clip`, kept inside the source
        rectangle."""
        out = np.asarray(xyxy, dtype=dtype).reshape(-1, 4).copy()
        out[:, [0, 2]] = (out[:, [0, 2]] - self.x) / self.scale_x + self.src[0]
        out[:, [1, 3]] = (out[:, [1, 3]] - self.y) / self.scale_y + self.src[1]
        if clip:
            out[:, [0, 2]] = np.clip(out[:, [0, 2]], self.src[0], self.src[2])
            out[:, [1, 3]] = np.clip(out[:, [1, 3]], self.src[1], self.src[3])
        return out

    def forward_points(self, points: np.ndarray) -> np.ndarray:
        """Source-pixel points (..., 2) -> destination pixels (float32, new array)."""
        out = np.asarray(points, dtype=np.float32).copy()
        out[..., 0] = (out[..., 0] - self.src[0]) * self.scale_x + self.x
        out[..., 1] = (out[..., 1] - self.src[1]) * self.scale_y + self.y
        return out

    def inverse_points(self, points: np.ndarray, clip: bool = False) -> np.ndarray:
        """Destination-pixel points (..., 2) -> source pixels (float32, new array); with `clip`,
        kept inside the source rectangle."""
        out = np.asarray(points, dtype=np.float32).copy()
        out[..., 0] = (out[..., 0] - self.x) / self.scale_x + self.src[0]
        out[..., 1] = (out[..., 1] - self.y) / self.scale_y + self.src[1]
        if clip:
            np.clip(out[..., 0], self.src[0], self.src[2], out=out[..., 0])
            np.clip(out[..., 1], self.src[1], self.src[3], out=out[..., 1])
        return out

    def then(self, outer: "Placement") -> "Placement":
        """This placement followed by `outer`, whose source is this one's destination (a frame
        region in a canvas, then the canvas in the network input): one placement from this
        source to `outer`'s destination."""
        return Placement(
            self.src,
            (self.x - outer.src[0]) * outer.scale_x + outer.x,
            (self.y - outer.src[1]) * outer.scale_y + outer.y,
            self.scale_x * outer.scale_x,
            self.scale_y * outer.scale_y,
            outer.canvas,
        )


def move_detections(det: Detections, placement: Placement, clip: bool = False, forward: bool = False) -> Detections:
    """Detections found in `placement`'s destination, in its source's pixels: the boxes and every
    point field (POINT_KEYS: landmarks, keypoints) mapped back, the rest kept; with `clip`, kept
    inside the source rectangle. With `forward`, detections found in the source are mapped into
    the destination instead (a small copy's detections scaled up to the frame it was made from).
    The input is left alone."""
    if forward and clip:
        raise ValueError("clip keeps detections inside the source rectangle: it applies to the mapping back only")
    data = dict(det.data)
    for key in POINT_KEYS:
        if key in data:
            data[key] = placement.forward_points(data[key]) if forward else placement.inverse_points(data[key], clip)
    xyxy = placement.forward(det.xyxy) if forward else placement.inverse(det.xyxy, clip)
    return Detections(xyxy, det.confidence, det.class_id, data, dict(det.metadata))


def resize_into(image: np.ndarray, placement: Placement, out: np.ndarray, interpolation: int,
                pad_value: Optional[int] = None) -> np.ndarray:
    """Draw ``image[placement.src]`` into `out` at ``placement.dst``, resized to
    :attr:`Placement.size` with the cv2 `interpolation` flag (copied when the size is the same),
    straight into `out`: nothing image-sized is allocated. With `pad_value`, the rest of `out`
    is filled with it first. Returns the view of `out` drawn into."""
    x0, y0, x1, y1 = placement.src
    dx0, dy0, dx1, dy1 = placement.dst
    if dx1 > out.shape[1] or dy1 > out.shape[0]:
        raise ValueError(f"region {placement.src} at scale {placement.scale_x:g}x{placement.scale_y:g} needs "
                         f"{dx1 - dx0}x{dy1 - dy0} from ({dx0}, {dy0}), more than the {out.shape[1]}x{out.shape[0]} buffer")
    if pad_value is not None:
        out[...] = pad_value
    view = out[dy0:dy1, dx0:dx1]
    crop = image[y0:y1, x0:x1]
    if view.shape[:2] == crop.shape[:2]:
        view[...] = crop
        return view
    from edge_sdk import _imports

    drawn = _imports.cv2().resize(crop, (dx1 - dx0, dy1 - dy0), dst=view, interpolation=interpolation)
    if drawn is not None and not np.shares_memory(drawn, view):
        view[...] = drawn
    return view
