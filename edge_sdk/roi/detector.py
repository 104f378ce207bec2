"""A detector callback built from the runtime's parts: preprocess -> backend -> decode.

The strategies in :mod:`edge_sdk.roi.strategies` see a model only as a callback

    detect(images: List[np.ndarray]) -> List[Detections]   # boxes in each image's pixels

(supervision's callback style), so tests and the pipeline can pass anything that honours it.
:class:`BatchDetector` is the one the runtime uses: it fills the preprocessor's batch slots,
runs the backend once per batch and decodes.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.detections import Detections
from edge_sdk.errors import ConfigError
from edge_sdk.preprocess import InputSpec, Preprocessor, Transform

DetectFn = Callable[[List[np.ndarray]], List[Detections]]
InferFn = Callable[[Dict[str, np.ndarray]], List[np.ndarray]]
DecodeFn = Callable[[Sequence[np.ndarray], Sequence[Transform]], List[Detections]]


class BatchDetector:
    """``detect(images)`` for a backend's ``infer(feed)`` and a decoder.

    `batch` is how many images one inference takes. With ``dynamic_batch=False`` (a model
    whose batch dimension is fixed) every inference gets a full batch and the unused slots'
    results are dropped; with ``dynamic_batch=True`` the last inference is cut to size.
    The decoder's score threshold is the lowest score any caller will see: the ROI scheduler
    needs it at its proposal threshold, below the output threshold.
    """

    def __init__(
        self,
        infer: InferFn,
        input_spec: InputSpec,
        decoder: DecodeFn,
        batch: Optional[int] = None,
        dynamic_batch: bool = False,
    ) -> None:
        self.infer = infer
        self.input_spec = input_spec
        self.decoder = decoder
        self.batch = int(batch or input_spec.batch)
        if self.batch < 1:
            raise ConfigError(f"detector batch must be >= 1, got {self.batch}")
        self.dynamic_batch = dynamic_batch
        self._pre = Preprocessor(input_spec, batch=self.batch)
        self.inferences = 0  # how many times the backend ran
        # milliseconds spent per stage since the last reset_timings()
        self.timings: Dict[str, float] = {"preprocess": 0.0, "infer": 0.0, "decode": 0.0}

    def reset_timings(self) -> None:
        for key in self.timings:
            self.timings[key] = 0.0

    @property
    def input_size(self) -> Tuple[int, int]:
        """(width, height) of one network input."""
        return self.input_spec.width, self.input_spec.height

    def __call__(self, images: List[np.ndarray]) -> List[Detections]:
        results: List[Detections] = []
        for start in range(0, len(images), self.batch):
            chunk = images[start : start + self.batch]
            n = len(chunk)
            t0 = time.perf_counter()
            transforms = [self._pre.fill(img, i) for i, img in enumerate(chunk)]
            rows = n if self.dynamic_batch else self.batch
            t1 = time.perf_counter()
            # the whole tensor (the same array every call) lets a backend keep its binding
            tensor = self._pre.tensor if rows == self.batch else self._pre.tensor[:rows]
            outputs = self.infer({self.input_spec.name: tensor})
            self.inferences += 1
            t2 = time.perf_counter()
            outputs = [np.asarray(o)[:n] for o in outputs]
            results.extend(self.decoder(outputs, transforms))
            t3 = time.perf_counter()
            self.timings["preprocess"] += (t1 - t0) * 1000.0
            self.timings["infer"] += (t2 - t1) * 1000.0
            self.timings["decode"] += (t3 - t2) * 1000.0
        return results
