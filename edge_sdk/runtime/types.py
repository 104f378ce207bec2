"""What a detector returns for a frame (FrameDetections) and what the pipeline hands to its
consumers (one FrameResult per processed frame)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import numpy as np

from edge_sdk.detections import Detections
from edge_sdk.runtime.frame import DEFAULT_STREAM_ID, Frame

# Stage names, in pipeline order. Latencies are milliseconds.
STAGES = ("capture_wait", "preprocess", "infer", "decode", "merge")
TRACK = "track"  # after the detector: the tracker's time, where [tracking] is on
RESULT_STAGES = STAGES + (TRACK,)  # what a FrameResult's latency_ms may hold, beside "total"


class FrameDetections:
    """What a detector found in one frame: `detections` in frame pixels, `latency` (ms per stage
    it ran: preprocess, infer, decode, merge) and `info` (its report, e.g. the ROI scheduler's;
    it ends up in FrameResult.info)."""

    __slots__ = ("detections", "latency", "info")

    def __init__(self, detections: Detections, latency: Optional[Dict[str, float]] = None,
                 info: Optional[Dict[str, Any]] = None) -> None:
        self.detections = detections
        self.latency: Dict[str, float] = latency if latency is not None else {}
        self.info: Dict[str, Any] = info if info is not None else {}


@dataclass
class FrameResult:
    """Detections for one frame, with per-stage latencies and pipeline counters.

    `latency_ms` has one entry per stage that ran plus `total`: capture (the moment the
    source delivered the frame) to result. `frame` is the source's buffer, valid only until
    the next result is requested unless the consumer copies it; `captured` is the Frame it is
    the host view of (stream id, capture clocks, the device pointer where a device held it),
    equally the capture ring's until the next result. `stream` is the id of the source the
    frame came from (its Frame's `stream_id`; "0" for the one `[source]`), in every JSONL row
    and MQTT detections message. `tracks` are the detections with a confirmed track id.
    """

    index: int
    timestamp: float  # wall-clock seconds when the frame was captured
    detections: Detections
    latency_ms: Dict[str, float] = field(default_factory=dict)
    frame: Optional[np.ndarray] = None
    cached: bool = False  # served from the prediction cache
    info: Dict[str, Any] = field(default_factory=dict)  # e.g. ROI scheduler report, source events
    ground_truth: Optional[Detections] = None  # synthetic sources: the true boxes (not serialized)
    captured: Optional[Frame] = None
    stream: str = ""  # "": the captured Frame's stream id (DEFAULT_STREAM_ID without one)

    def __post_init__(self) -> None:
        if not self.stream:
            self.stream = self.captured.stream_id if self.captured is not None else DEFAULT_STREAM_ID

    @property
    def tracks(self) -> Detections:
        """The detections that have a confirmed track (Detections.tracked): empty when tracking
        is off."""
        return self.detections.tracked()

    def to_json(self) -> Dict[str, Any]:
        """The `--jsonl` line format."""
        out: Dict[str, Any] = {
            "stream": self.stream,
            "frame": self.index,
            "ts": round(self.timestamp, 3),
            "detections": self.detections.to_records(),
            "latency_ms": {k: round(v, 2) for k, v in self.latency_ms.items()},
        }
        if self.cached:
            out["cached"] = True
        if self.info:
            out["info"] = self.info
        return out


@dataclass
class PipelineStats:
    """Running counters a pipeline keeps; read by telemetry."""

    frames_captured: int = 0
    frames_processed: int = 0
    frames_dropped: int = 0
    cache_hits: int = 0
    source_errors: int = 0
    reconnects: int = 0
