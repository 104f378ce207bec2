"""Mode ``full``: the whole frame, letterboxed into the network input, one inference, decode.

    detector = FullFrameDetector(model.backend, model_decoder(model), model.input_spec)
    found = detector.detect(frame)    # the frame's `prepared` input when it fits, else preprocessed here

Its two halves (:meth:`FullFrameDetector.infer_stage`, :meth:`FullFrameDetector.decode_stage`)
may run on two threads: the pipeline's infer thread runs the first one frame ahead.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from edge_sdk.detections import Detections
from edge_sdk.geometry import Placement
from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime.backends.base import Backend
from edge_sdk.runtime.detectors.base import BatchDetector, DecodeFn, DecoderDetector, check_input, clock
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.types import FrameDetections


class FullFrameDetector(DecoderDetector):
    """Mode ``full``: the whole frame, letterboxed into the network input, one inference, decode,
    no merge. A batch of one of :class:`BatchDetector`.

    A frame prepared elsewhere (its `prepared`, a :class:`PreparedInput` of the same input spec)
    is inferred as it is (a :class:`PreparedPlanes` once converted into the detector's tensor); otherwise it is preprocessed here into the detector's own tensor. Either way the
    steady state allocates no frame-sized array.
    """

    mode = "full"
    splits = True

    def __init__(self, backend: Backend, decoder: DecodeFn, input_spec: InputSpec) -> None:
        self.backend = backend
        self.decoder = decoder
        self.input_spec = input_spec
        self.prepared_spec = input_spec
        self.batch = BatchDetector(self._infer, input_spec, decoder, batch=1)
        self._checked = False

    def _infer(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        if not self._checked:
            check_input(self.backend, self.input_spec)
            self._checked = True
        return self.backend.infer(feed)  # type: ignore[no-any-return]

    def detect(self, frame: Frame) -> FrameDetections:
        latency: Dict[str, float] = {}
        outputs, transform = self.infer_stage(frame, latency)
        self.batch.stage = "decode"
        detections = self.decode_stage(outputs, transform, latency)
        self.batch.stage = ""
        return FrameDetections(detections, latency)

    def infer_stage(self, frame: Frame, latency: Dict[str, float]) -> Tuple[List[np.ndarray], Placement]:
        """The first half of `detect`: preprocess (unless the frame's `prepared` input holds it)
        and infer. Returns the backend's outputs (its buffers: valid until its next run) and
        the frame's Placement, for :meth:`decode_stage`, which may run on another thread."""
        batch = self.batch
        prepared = frame.prepared
        if prepared is not None and prepared.ready and prepared.spec == self.input_spec:
            tensor, transform = prepared.batch_of_one(batch.preprocessor), prepared.transform
            preprocess_ms = prepared.ms
        else:
            batch.stage = "preprocess"
            t0 = clock()
            transform = batch.preprocessor.fill(frame.image, 0)
            preprocess_ms = (clock() - t0) * 1000.0
            tensor = batch.preprocessor.tensor
        assert transform is not None
        batch.reset_timings()
        outputs = batch.infer_tensor(tensor)
        latency["preprocess"] = preprocess_ms
        latency["infer"] = batch.timings["infer"]
        batch.stage = ""
        return outputs, transform

    def decode_stage(self, outputs: Sequence[np.ndarray], transform: Placement, latency: Dict[str, float]) -> Detections:
        """The second half of `detect`: decode `outputs` of one frame into frame pixels. It
        touches no state of the infer half, so it may run beside the next frame's inference."""
        t2 = clock()
        detections = self.batch.decoder(outputs, (transform,))[0]
        latency["decode"] = (clock() - t2) * 1000.0
        # A single full-frame pass has nothing to merge; the stage is kept so every mode
        # reports the same stages.
        latency["merge"] = 0.0
        return detections

    @property
    def stage(self) -> str:
        return self.batch.stage or "decode"
