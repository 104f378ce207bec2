"""One frame from capture to sinks: its pixels on the host and, where a device holds them, on
the device, with what the stream knows of it.

    frame = Frame(image)                        # a BGR (H, W, 3) uint8 array: enough for a detector
    found = detector.detect(frame)              # FrameDetections: detections, latency, info

The capture ring keeps one Frame per slot, made once and refilled with every frame the slot
takes (nothing is allocated per frame): `image` is the slot's buffer, `index`, `timestamp` and
`t_capture` are written when the frame is captured. The pipeline then attaches what its stages
made for the frame before the detector runs: the network input prepared beside capture
(`prepared`, a :class:`~edge_sdk.runtime.detectors.base.PreparedInput`), for a detector that
preprocesses on the GPU, the device address the frame is read from (`device_ptr`, with the
CUDA `stream` its copy was queued on), and, where [tracking] is on, the stream's tracker
(`tracker`, for a detector that follows it: mode roi). A FrameResult carries the Frame to the sinks.

Where a device holds the pixels, the Frame exposes ``__cuda_array_interface__`` (version 3), so
CUDA libraries read it in place, as jetson-utils' cudaImage does.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

DEFAULT_STREAM_ID = "0"  # the camera a frame came from, when there is one


def stream_handle(stream: Any) -> Optional[int]:
    """The integer handle of a CUDA stream object for ``__cuda_array_interface__`` (None: no
    stream, the legacy default one, or a stream object that gives no handle)."""
    if stream is None:
        return None
    try:
        handle = int(stream)
    except (TypeError, ValueError):
        return None
    return handle or None  # 0 is ambiguous in the interface: it is left out


class Frame:
    """The pixels of one frame and what the stream knows about it.

    `image`: the BGR uint8 (H, W, 3) host view. `device_ptr`: where a device holds the same
    pixels (a mapping of `image`, or a device copy queued on `stream`), None when only the host
    does. `stream_id`: the camera or stream it came from. `index`: its number in that stream.
    `timestamp`: wall-clock seconds at capture; `t_capture`: the monotonic clock then
    (time.perf_counter), from which latencies are measured. `prepared`: its network input, when
    the pipeline prepared it ahead of the detector (None otherwise). `tracker`: the stream's
    tracker (edge_sdk.tracking.tracker.ByteTracker) while the detector runs, where [tracking] is
    on: a detector that follows tracks (mode roi) proposes from it, updates it and returns the
    track ids; the others leave it to the pipeline (None: no tracking, or not the pipeline's).
    """

    __slots__ = ("image", "device_ptr", "stream", "stream_id", "index", "timestamp", "t_capture", "prepared",
                 "tracker")

    def __init__(self, image: Optional[np.ndarray] = None, index: int = -1, timestamp: float = 0.0,
                 t_capture: float = 0.0, stream_id: str = DEFAULT_STREAM_ID) -> None:
        self.image = image
        self.device_ptr: Optional[int] = None
        self.stream: Any = None  # the CUDA stream the device copy was queued on (None: in place, or none)
        self.stream_id = stream_id
        self.index = index
        self.timestamp = timestamp
        self.t_capture = t_capture
        self.prepared: Any = None
        self.tracker: Any = None

    @property
    def shape(self) -> tuple:
        assert self.image is not None, "this frame holds no pixels yet"
        return tuple(self.image.shape)

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """The device view of the pixels (CUDA Array Interface, version 3). AttributeError where
        no device holds them, so that ``hasattr(frame, "__cuda_array_interface__")`` tells."""
        if self.device_ptr is None or self.image is None:
            raise AttributeError("no device holds this frame's pixels: read `image`")
        return {"shape": tuple(self.image.shape), "typestr": "|u1", "data": (int(self.device_ptr), False),
                "version": 3, "strides": None, "stream": stream_handle(self.stream)}

    def on_device(self, device_ptr: Optional[int], stream: Any = None) -> None:
        """Record where a device holds this frame's pixels now (None: nowhere)."""
        self.device_ptr = device_ptr
        self.stream = stream if device_ptr is not None else None

    def __repr__(self) -> str:
        size = "x".join(str(d) for d in self.image.shape[1::-1]) if self.image is not None else "empty"
        where = "host+device" if self.device_ptr is not None else "host"
        return f"Frame(stream {self.stream_id}, #{self.index}, {size}, {where})"
