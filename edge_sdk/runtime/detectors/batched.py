"""Frames of several streams in one backend call: each frame preprocessed into its row of one
batch tensor, the model run once, the outputs decoded row by row.

    detector = make_batch_detector(model, max_batch_size=4)
    found = detector.detect_batch([frame_a, frame_b, frame_c])   # one FrameDetections per Frame
    found = detector.detect(frame)                               # a batch of one

The frames may come from different streams and differ in size: each row has its own Placement,
so each frame's detections come back in its own pixels. A model whose batch dimension is free
runs up to `max_batch_size` frames per call. A model whose batch dimension is fixed runs them
in calls of that size (the unused rows of the last one are left out of the results); fixed at 1,
that is one call per frame, one after another, and `describe()` says so.

The first batch of a free batch dimension is preceded by one run of `max_batch_size` rows, which
lays the backend's working memory out for the largest batch (see `_lay_out`).

Latency per frame (ms): `preprocess` and `decode` are that frame's own row; `infer` is the whole
call, which the frame waited for; `info["batch"]` tells the call's size and the frame's row.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.errors import ConfigError
from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime.backends.base import Backend
from edge_sdk.runtime.detectors.base import BatchDetector, DecodeFn, DecoderDetector, clock, model_decoder
from edge_sdk.runtime.detectors.full import FullFrameDetector
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.types import FrameDetections


def batch_rows(backend: Backend, spec: InputSpec) -> Tuple[int, Optional[int]]:
    """(fewest, most) rows one call of the model `backend` opened takes for input `spec` (most
    None: any). The backend's own `batch_range` first (TensorRT: the optimization profile), else
    the first dimension of its input's shape (fixed, or symbolic: any); a backend that can tell
    neither runs the bundle's batch, `spec.batch`."""
    declared = backend.batch_range(spec.name)
    if declared is not None:
        low, high = (int(v) for v in declared)
        return max(1, low), max(1, high)
    shape = backend.input_shape(spec.name)
    if shape is None:
        return spec.batch, spec.batch
    first = shape[0] if shape else None
    if isinstance(first, (int, np.integer)) and not isinstance(first, bool) and first > 0:
        return int(first), int(first)
    return 1, None


def fixed_batch(backend: Backend, spec: InputSpec) -> Optional[int]:
    """The batch the model `backend` opened fixes for input `spec` (None: a range of batches
    runs, see batch_rows)."""
    low, high = batch_rows(backend, spec)
    return low if low == high else None


def rows_per_call(backend: Backend, spec: InputSpec, max_batch_size: int) -> Tuple[int, int]:
    """(rows per call, fewest rows a call may carry) for batches of up to `max_batch_size`: a
    fixed batch is its size; a range is `max_batch_size` within its most (an engine built for
    1..8 under max_batch_size 4: calls of up to 4 rows)."""
    low, high = batch_rows(backend, spec)
    if low == high:
        return low, low
    rows = max_batch_size if high is None else min(max_batch_size, high)
    return max(rows, low), low


def calls_note(max_batch_size: int, fixed: Optional[int], unit: str, most: Optional[int] = None) -> str:
    """How the backend is called, for describe(): one call per batch of up to `max_batch_size`
    `unit`s ("frame", "row") within the model's `most`, or, with the model's batch dimension
    `fixed`, calls of that size."""
    if fixed is None:
        if most is not None and most < max_batch_size:
            return f"one call per batch of up to {most} {unit}s: the engine's optimization profile takes at most {most}"
        return f"one call per batch of up to {max_batch_size} {unit}s"
    if fixed == 1:
        return f"consecutive calls, one {unit} each: the model's batch dimension is fixed at 1"
    return f"calls of {fixed} rows: the model's batch dimension is fixed at {fixed}"


class StreamBatchDetector(DecoderDetector):
    """Mode ``full`` over a batch of Frames: one :class:`BatchDetector` (its preprocessor's rows,
    its backend call, its decoder) run once per batch of up to `max_batch_size` frames."""

    mode = "full"

    def __init__(self, backend: Backend, decoder: DecodeFn, input_spec: InputSpec, max_batch_size: int) -> None:
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
        self.backend = backend
        self.decoder = decoder
        self.input_spec = input_spec
        self.prepared_spec = input_spec  # a frame's network input may be prepared ahead (PreparedInput)
        self.max_batch_size = max_batch_size
        fixed = fixed_batch(backend, input_spec)
        self.fixed_batch = fixed
        rows, self.min_rows = rows_per_call(backend, input_spec, max_batch_size)
        self.batch = BatchDetector(self._infer, input_spec, decoder, batch=rows, dynamic_batch=fixed is None)
        self._checked = False
        self._laid_out = fixed is not None or rows == 1  # see _lay_out

    # the backend call of mode full: the bundle's input checked against the model once, then infer
    _infer = FullFrameDetector._infer

    @property
    def stage(self) -> str:
        return self.batch.stage or "decode"

    def describe(self) -> Dict[str, Any]:
        return dict(super().describe(), batch={"max_batch_size": self.max_batch_size, "rows_per_call": self.batch.batch,
                                               "calls": calls_note(self.max_batch_size, self.fixed_batch, "frame",
                                                                   self.batch.batch)})

    def detect(self, frame: Frame) -> FrameDetections:
        return self.detect_batch([frame])[0]

    def detect_batch(self, frames: Sequence[Frame]) -> List[FrameDetections]:
        """One FrameDetections per Frame, in the order given."""
        rows = self.batch.batch
        if not self._laid_out:
            self._lay_out()
        results: List[FrameDetections] = []
        for start in range(0, len(frames), rows):
            results.extend(self._call(frames[start: start + rows]))
        return results

    def _lay_out(self) -> None:
        """Before the first batch of a free batch dimension: one run of the largest batch (its
        outputs unused, not counted in `batch.inferences`), so that the backend lays its working
        memory out for it and smaller batches fit inside. ONNX Runtime's CPU arena, grown
        batch size by batch size instead, keeps regions of each: CenterFace 640x384 grew the
        process's peak by 203 MB over batches of 1, 2, 3 and 4 rows, by 180 MB with 4 first.
        On the calling (batch) thread, as every call of the backend."""
        self._laid_out = True
        self.batch.stage = "infer"
        self._infer({self.input_spec.name: self.batch.preprocessor.tensor})
        self.batch.stage = ""

    def _call(self, frames: Sequence[Frame]) -> List[FrameDetections]:
        batch = self.batch
        pre = batch.preprocessor
        n = len(frames)
        latencies: List[Dict[str, float]] = []
        transforms = []
        for row, frame in enumerate(frames):
            batch.stage = "preprocess"
            t0 = clock()
            prepared = frame.prepared
            if prepared is not None and prepared.ready and prepared.spec == self.input_spec:
                prepared.into_row(pre, row)  # a PreparedInput or PreparedPlanes
                transforms.append(prepared.transform)
                ms = prepared.ms
            else:
                transforms.append(pre.fill(frame.image, row))
                ms = 0.0
            latencies.append({"preprocess": ms + (clock() - t0) * 1000.0})
        # fixed: full rows; a range: at least its fewest (the rows past n are not read back)
        tensor = pre.tensor if n == batch.batch or not batch.dynamic_batch else pre.tensor[:max(n, self.min_rows)]
        batch.reset_timings()
        outputs = [np.asarray(o) for o in batch.infer_tensor(tensor)]
        infer_ms = batch.timings["infer"]
        batch.stage = "decode"
        results = []
        for row, latency in enumerate(latencies):
            t2 = clock()
            detections = batch.decoder([o[row: row + 1] for o in outputs], (transforms[row],))[0]
            latency.update(infer=infer_ms, decode=(clock() - t2) * 1000.0, merge=0.0)
            results.append(FrameDetections(detections, latency, {"batch": {"size": n, "row": row}}))
        batch.stage = ""
        return results


def make_batch_detector(model: Any, max_batch_size: int, thresholds: Optional[Mapping[str, Any]] = None) -> StreamBatchDetector:
    """The StreamBatchDetector of a loaded Model, with its bundle's decoder (`thresholds` in place)."""
    return StreamBatchDetector(model.backend, model_decoder(model, thresholds), model.input_spec, max_batch_size)
