"""Video sources chosen by one URI string, as jetson-utils users expect.

| URI | source |
|---|---|
| `csi://0` | MIPI CSI camera through GStreamer `nvarguscamerasrc` (NVMM → BGR) |
| `v4l2:///dev/video0` (or `/dev/video0`) | USB/V4L2 camera |
| `rtsp://host:8554/stream` | network stream (GStreamer `rtspsrc` when OpenCV has it, else FFMPEG) |
| `clip.mp4`, `file://clip.mp4` | video file |
| `images/`, `photo.jpg` | a folder of images (sorted by name), or one image |
| `synthetic://faces?width=3840&height=2160&fps=30&count=20&seed=0` | generated scene with ground truth |

`open_source(uri, loop=False, **options)` returns a :class:`Source`. A source reads raw frames
(`read(out)` may decode straight into `out` when sizes match); the capture thread converts
them to BGR into its preallocated buffers. A `live` source is paced by its camera and may
vanish and come back; the others are finite (unless looped) and paced by the pipeline.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union
from urllib.parse import parse_qsl, urlsplit

import numpy as np

from edge_sdk import _imports
from edge_sdk.errors import SourceError
from edge_sdk.images import read_image

logger = logging.getLogger(__name__)

SCHEMES = ("csi", "v4l2", "rtsp", "rtsps", "file", "synthetic")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


@dataclass
class SourceURI:
    """A parsed source URI. `kind` is one of csi, v4l2, rtsp, video, images, synthetic."""

    kind: str
    location: str
    params: Dict[str, str] = field(default_factory=dict)
    uri: str = ""


def parse_uri(uri: str) -> SourceURI:
    """Split a source URI into its kind, location and query parameters (no I/O except stat)."""
    uri = str(uri).strip()
    if not uri:
        raise SourceError("empty source URI; pass a file, a folder, csi://0, v4l2:///dev/video0, rtsp://… or synthetic://faces")
    if "://" not in uri:
        if uri.startswith("/dev/video"):
            return SourceURI("v4l2", uri, {}, uri)
        return _path_uri(uri, uri)
    scheme, rest = uri.split("://", 1)
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise SourceError(f"unknown source scheme {scheme + '://'!r} in {uri!r}; use one of: " + ", ".join(s + "://" for s in SCHEMES) + ", or a file/folder path")
    if scheme in ("rtsp", "rtsps"):
        return SourceURI("rtsp", uri, {}, uri)
    if scheme == "file":
        return _path_uri(rest, uri)
    parts = urlsplit(uri)
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    if scheme == "csi":
        sensor = (parts.netloc or parts.path.strip("/")) or "0"
        if not sensor.isdigit():
            raise SourceError(f"csi:// needs a sensor number, e.g. csi://0, got {uri!r}")
        return SourceURI("csi", sensor, params, uri)
    if scheme == "v4l2":
        device = parts.path or ("/dev/video" + parts.netloc if parts.netloc.isdigit() else parts.netloc)
        if not device:
            raise SourceError(f"v4l2:// needs a device, e.g. v4l2:///dev/video0, got {uri!r}")
        return SourceURI("v4l2", device, params, uri)
    # synthetic
    scene = parts.netloc or parts.path.strip("/")
    if scene != "faces":
        raise SourceError(f"unknown synthetic scene {scene!r} in {uri!r}; the available scene is synthetic://faces")
    return SourceURI("synthetic", scene, params, uri)


def _path_uri(path: str, uri: str) -> SourceURI:
    p = Path(os.path.expanduser(path))
    if p.is_dir():
        return SourceURI("images", str(p), {}, uri)
    if not p.exists():
        raise SourceError(f"source {path!r} does not exist (no such file or folder)")
    if p.suffix.lower() in IMAGE_EXTENSIONS:
        return SourceURI("images", str(p), {}, uri)
    return SourceURI("video", str(p), {}, uri)


def gstreamer_available() -> bool:
    """True when this OpenCV build was compiled with GStreamer (JetPack's is; pip wheels are not)."""
    cv2 = _imports.cv2()
    for line in cv2.getBuildInformation().splitlines():
        if line.strip().startswith("GStreamer:"):
            return "YES" in line.split(":", 1)[1]
    return False


def _require_gstreamer(what: str) -> None:
    if not gstreamer_available():
        raise SourceError(
            f"{what} needs OpenCV built with GStreamer, and this OpenCV ({_imports.cv2().__version__}) has none. "
            "On a Jetson use JetPack's OpenCV (sudo apt install python3-opencv) and uninstall pip's opencv-python*"
        )


def csi_pipeline(sensor: int, width: int = 1920, height: int = 1080, framerate: int = 30, flip: int = 0) -> str:
    """GStreamer pipeline for a CSI camera: NVMM NV12 → nvvidconv (flip) → BGR → newest-frame appsink."""
    return (
        f"nvarguscamerasrc sensor-id={int(sensor)} ! "
        f"video/x-raw(memory:NVMM), width=(int){int(width)}, height=(int){int(height)}, "
        f"framerate=(fraction){int(framerate)}/1, format=(string)NV12 ! "
        f"nvvidconv flip-method={int(flip)} ! video/x-raw, width=(int){int(width)}, height=(int){int(height)}, format=(string)BGRx ! "
        "videoconvert ! video/x-raw, format=(string)BGR ! appsink drop=true max-buffers=1 sync=false"
    )


def v4l2_pipeline(device: str, width: Optional[int] = None, height: Optional[int] = None, framerate: Optional[int] = None) -> str:
    caps = ["video/x-raw"]
    if width and height:
        caps += [f"width=(int){int(width)}", f"height=(int){int(height)}"]
    if framerate:
        caps.append(f"framerate=(fraction){int(framerate)}/1")
    return f"v4l2src device={device} ! {', '.join(caps)} ! videoconvert ! video/x-raw, format=(string)BGR ! appsink drop=true max-buffers=1 sync=false"


def rtsp_pipeline(url: str, latency: int = 200) -> str:
    """rtspsrc → decodebin (picks nvv4l2decoder on a Jetson) → BGR → newest-frame appsink."""
    return (
        f"rtspsrc location={url} latency={int(latency)} ! decodebin ! nvvidconv ! video/x-raw, format=(string)BGRx ! "
        "videoconvert ! video/x-raw, format=(string)BGR ! appsink drop=true max-buffers=1 sync=false"
        if _on_jetson()
        else f"rtspsrc location={url} latency={int(latency)} ! decodebin ! videoconvert ! video/x-raw, format=(string)BGR ! "
        "appsink drop=true max-buffers=1 sync=false"
    )


def _on_jetson() -> bool:
    return os.path.exists("/etc/nv_tegra_release")


class Source:
    """A frame source. Subclasses implement `open`, `read` and `close`.

    `read(out)` returns the next frame (uint8, HxW, HxWx3 or HxWx4), written into `out` when
    the source can (same shape), or None when there is no frame: the end of a finite source,
    or a failed read of a live one. It raises SourceError when the source is broken.
    """

    live: bool = False
    name: str = "source"
    frame_count: Optional[int] = None  # frames in one pass, when known
    fps: Optional[float] = None  # native frame rate, when known

    def open(self) -> None:
        pass

    def read(self, out: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> "Source":
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class VideoCaptureSource(Source):
    """OpenCV VideoCapture over a file, a camera index/device, a GStreamer pipeline or a URL."""

    def __init__(self, target: Union[str, int], api: int, name: str, live: bool, loop: bool = False,
                 props: Optional[Dict[int, float]] = None) -> None:
        self.target = target
        self.api = api
        self.name = name
        self.live = live
        self.loop = loop
        self.props = dict(props or {})
        self._cap: Any = None
        self._pending: Optional[np.ndarray] = None
        self._frames_read = 0
        self._pass_frames = 0  # frames of the current pass (a loop starts a new one)
        self.truncated: Optional[Tuple[int, int]] = None  # (frames read, frames the file announces)

    def open(self) -> None:
        cv2 = _imports.cv2()
        self.close()
        cap = cv2.VideoCapture(self.target, self.api)
        for prop, value in self.props.items():
            cap.set(prop, value)
        if not cap.isOpened():
            cap.release()
            if self.live:
                raise SourceError(f"cannot open {self.name}: the device or stream is not available (check the cable/URL and permissions)")
            raise SourceError(f"cannot open video {self.name}: unreadable file or unsupported container/codec")
        self._cap = cap
        self._pass_frames = 0
        self.truncated = None
        if not self.live:
            count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
            self.frame_count = count if count > 0 else None
            fps = float(cap.get(cv2.CAP_PROP_FPS) or 0)
            self.fps = fps if fps > 0 else None
            ok, first = cap.read()
            if not ok or first is None:
                self.close()
                raise SourceError(f"video {self.name} has no readable frames (empty, truncated or an unsupported codec)")
            self._pending = first

    def read(self, out: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
        """The next frame. OpenCV decodes it straight into `out` (`VideoCapture.read(image=out)`)
        when `out` is a contiguous uint8 array of the frame's shape, and returns `out`; a frame of
        another shape or channel count comes back in an array of its own."""
        if self._cap is None:
            raise SourceError(f"{self.name} is not open")
        if self._pending is not None:
            frame, self._pending = self._pending, None
            self._frames_read += 1
            self._pass_frames += 1
            if out is not None and out.shape == frame.shape:
                np.copyto(out, frame)
                return out
            return frame
        ok, frame = self._cap.read(out) if out is not None else self._cap.read()
        if ok:
            self._frames_read += 1
            self._pass_frames += 1
            return frame
        if not self.live:
            self._check_complete()
        if self.loop and not self.live and self._frames_read > 0:
            cv2 = _imports.cv2()
            self._cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            self._pass_frames = 0
            ok, frame = self._cap.read(out) if out is not None else self._cap.read()
            if ok:
                self._pass_frames += 1
                return frame
        return None

    def _check_complete(self) -> None:
        """At the end of a file: fewer frames than its header announces means a truncated or
        damaged file. Recorded in `truncated` and logged once, never silent."""
        count = self.frame_count
        if count is None or self._pass_frames >= count or self.truncated is not None:
            return
        self.truncated = (self._pass_frames, count)
        logger.warning(
            "video %s ended after %d of the %d frames its header announces: the file is truncated or damaged "
            "(frames after %d were not processed)", self.name, self._pass_frames, count, self._pass_frames,
        )

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None
        self._pending = None


class ImageFolderSource(Source):
    """Images of a folder in name order (or a single image file), read by
    :func:`edge_sdk.images.read_image`: grey or BGR uint8 (16-bit images reduced to 8 bits),
    size-capped, a truncated file refused with its name. Each image is decoded into an array
    of its own (OpenCV's Python `imdecode` takes no output array), which the capture thread
    copies into its slot. In a folder, a file that cannot be read (truncated, not an image, too
    large) is skipped with one warning and counted in `skipped` (every pass: `unreadable` names
    them); the source is broken (SourceError) only when no file of a pass can be read. A single
    image file that cannot be read is the SourceError."""

    def __init__(self, path: str, loop: bool = False) -> None:
        self.path = Path(path)
        self.name = str(path)
        self.loop = loop
        self.files: List[Path] = []
        self._next = 0
        self.skipped = 0  # reads of unreadable files, passed over
        self.unreadable: Dict[str, str] = {}  # file -> why it cannot be read

    def open(self) -> None:
        if self.path.is_dir():
            files = sorted(p for p in self.path.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
            if not files:
                raise SourceError(f"folder {self.path} has no images ({', '.join(IMAGE_EXTENSIONS)})")
        elif self.path.is_file():
            files = [self.path]
        else:
            raise SourceError(f"source {self.path} does not exist (no such file or folder)")
        self.files = files
        self.frame_count = len(files)
        self._next = 0

    def read(self, out: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
        failed = 0
        while True:
            if self._next >= len(self.files):
                if not self.loop or not self.files:
                    return None
                self._next = 0
            path = self.files[self._next]
            self._next += 1
            try:
                return read_image(str(path))  # the builder's reader too: same pixels in build and detect
            except SourceError as exc:
                if len(self.files) == 1 and not self.path.is_dir():
                    raise
                self.skipped += 1
                if str(path) not in self.unreadable:
                    self.unreadable[str(path)] = str(exc)
                    logger.warning("skipping %s: %s", path, exc)
                failed += 1
                if failed >= len(self.files):
                    raise SourceError(f"no image of folder {self.path} can be read ({len(self.files)} tried): "
                                      f"{exc}") from exc


class SyntheticSource(Source):
    """`synthetic://faces?...`: real face photos moving over a real background, with ground truth.

    `ground_truth` is the Detections of the frame most recently read. With `loop`, a source of
    `frames=N` frames starts again at frame 0.
    """

    def __init__(self, uri: str, loop: bool = False) -> None:
        self.uri = uri
        self.name = uri
        self.loop = loop
        self.ground_truth: Any = None
        self._scene: Any = None
        self._index = 0

    def open(self) -> None:
        from edge_sdk.runtime.synthetic import SyntheticFaces

        try:
            self._scene = SyntheticFaces.from_uri(self.uri)
        except TypeError as exc:
            raise SourceError(f"bad parameters in {self.uri!r}: {exc}") from exc
        self.frame_count = self._scene.frames
        self.fps = self._scene.fps
        self._index = 0

    def read(self, out: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
        scene = self._scene
        if scene is None:
            raise SourceError(f"{self.name} is not open")
        if scene.frames is not None and self._index >= scene.frames:
            if not self.loop or scene.frames == 0:
                return None
            self._index = 0
        i = self._index
        self._index += 1
        fits = out is not None and out.shape == (scene.height, scene.width, 3)
        frame = scene.render(i, out if fits else None)
        self.ground_truth = scene.ground_truth(i)
        return frame

    def close(self) -> None:
        self._scene = None


def _int_opt(options: Dict[str, Any], params: Dict[str, str], key: str, default: Optional[int]) -> Optional[int]:
    value = options.get(key, params.get(key, default))
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SourceError(f"source option {key}={value!r} must be an integer") from None


def open_source(uri: str, loop: bool = False, **options: Any) -> Source:
    """Create (not yet open) the source for `uri`. Options: width, height, framerate, flip
    (csi/v4l2), latency (rtsp, ms), api ("auto" | "gstreamer" | "ffmpeg" | "v4l2")."""
    parsed = parse_uri(uri)
    api = str(options.get("api", parsed.params.get("api", "auto")))
    if parsed.kind == "images":
        return ImageFolderSource(parsed.location, loop=loop)
    if parsed.kind == "synthetic":
        return SyntheticSource(parsed.uri, loop=loop)
    cv2 = _imports.cv2()
    if parsed.kind == "video":
        return VideoCaptureSource(parsed.location, cv2.CAP_ANY, parsed.location, live=False, loop=loop)
    if parsed.kind == "csi":
        _require_gstreamer(f"csi://{parsed.location}")
        pipe = csi_pipeline(
            int(parsed.location),
            width=_int_opt(options, parsed.params, "width", 1920) or 1920,
            height=_int_opt(options, parsed.params, "height", 1080) or 1080,
            framerate=_int_opt(options, parsed.params, "framerate", 30) or 30,
            flip=_int_opt(options, parsed.params, "flip", 0) or 0,
        )
        return VideoCaptureSource(pipe, cv2.CAP_GSTREAMER, parsed.uri, live=True)
    if parsed.kind == "v4l2":
        width = _int_opt(options, parsed.params, "width", None)
        height = _int_opt(options, parsed.params, "height", None)
        framerate = _int_opt(options, parsed.params, "framerate", None)
        if api == "gstreamer":
            _require_gstreamer(parsed.uri)
            return VideoCaptureSource(v4l2_pipeline(parsed.location, width, height, framerate), cv2.CAP_GSTREAMER, parsed.uri, live=True)
        props: Dict[int, float] = {}
        if width and height:
            props[cv2.CAP_PROP_FRAME_WIDTH] = width
            props[cv2.CAP_PROP_FRAME_HEIGHT] = height
        if framerate:
            props[cv2.CAP_PROP_FPS] = framerate
        return VideoCaptureSource(parsed.location, cv2.CAP_V4L2, parsed.uri, live=True, props=props)
    # rtsp
    latency = _int_opt(options, {}, "latency", 200) or 0
    if api == "gstreamer" or (api == "auto" and gstreamer_available()):
        _require_gstreamer(parsed.uri)
        return VideoCaptureSource(rtsp_pipeline(parsed.uri, latency), cv2.CAP_GSTREAMER, parsed.uri, live=True)
    return VideoCaptureSource(parsed.uri, cv2.CAP_FFMPEG, parsed.uri, live=True)


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """True when `a` and `b` are the same pixels: the same array, or views of one layout."""
    if a is b:
        return True
    return (a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def to_bgr(frame: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Convert a grey, BGR or BGRA uint8 frame into `out` (HxWx3, same H and W) and return it."""
    cv2 = _imports.cv2()
    if frame.dtype != np.uint8:
        raise SourceError(f"frames must be 8-bit, got {frame.dtype}")
    if frame.ndim == 2 or (frame.ndim == 3 and frame.shape[2] == 1):
        cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR, dst=out)
    elif frame.ndim == 3 and frame.shape[2] == 4:
        cv2.cvtColor(frame, cv2.COLOR_BGRA2BGR, dst=out)
    elif frame.ndim == 3 and frame.shape[2] == 3:
        if not _same_memory(frame, out):  # a source that decoded into `out` needs no copy
            np.copyto(out, frame)
    else:
        raise SourceError(f"unsupported frame shape {frame.shape}: expected HxW, HxWx3 or HxWx4")
    return out
