"""What every detector is made of: the Detector interface, its thresholds, the batch runner and
the prepared input.

    found = detector.detect(Frame(image))                 # BGR frame -> FrameDetections in frame pixels
    detector.set_thresholds(score_threshold=0.4)           # in every mode

- :class:`Detector` is the interface the pipeline calls, the same way for every detector:
  ``detect(frame) -> FrameDetections``. What the pipeline made for the frame ahead of it (a
  prepared network input, the device address of its pixels) travels with the Frame.
- :class:`BatchDetector` is the one place that runs a model: it fills the preprocessor's batch
  slots, runs the backend once per batch and decodes. As a callable
  ``detect(images) -> List[Detections]`` it is the callback the strategies of
  :mod:`edge_sdk.roi.strategies` take (supervision's callback style).
- :class:`PreparedInput` is one network input filled ahead of `detect` (by the pipeline's
  preprocess stage, on another thread), so that inference never waits for preprocessing;
  :class:`PreparedPlanes` the same in uint8, for a batch detector that copies it into its
  batch tensor (the conversion is done in that copy).
- :func:`model_decoder` is the one decoder set-up of every detector: the bundle's decoder
  settings with the thresholds given in their place.

The detectors are :mod:`.full` (mode ``full``), :mod:`.gpu` (mode ``full`` preprocessed on the
inference stream) and :mod:`.strategy` (modes ``tiles`` and ``roi``); :mod:`.factory` builds the
one for a mode from its registry.

The output score threshold and the NMS IoU have one owner, the detector: it starts from the
bundle's decoder settings (or the pipeline's top-level ``score_threshold`` / ``nms_iou``) and
``set_thresholds`` changes them in every mode. In mode ``roi`` the decoder runs at the lower
proposal threshold the coarse pass needs and the strategy filters at the output threshold.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.detections import Detections
from edge_sdk.errors import ConfigError
from edge_sdk.geometry import Placement
from edge_sdk.preprocess import InputSpec, Preprocessor
from edge_sdk.runtime.backends.base import Backend
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.types import FrameDetections

InferFn = Callable[[Dict[str, np.ndarray]], List[np.ndarray]]
DecodeFn = Callable[[Sequence[np.ndarray], Sequence[Placement]], List[Detections]]
THRESHOLDS = ("score_threshold", "nms_iou")

clock = time.perf_counter


def check_threshold(key: str, value: Any) -> float:
    """A threshold in [0, 1] as a float; ConfigError naming `key` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ConfigError(f"{key} must be a number in [0, 1], got {value!r}")
    return float(value)


def check_input(backend: Backend, spec: InputSpec) -> None:
    """The bundle's input `spec` is an input of the model `backend` opened (when it tells its
    inputs): ConfigError otherwise."""
    names = backend.input_names
    if names and spec.name not in names:
        raise ConfigError(f"the bundle's input {spec.name!r} is not an input of the model (its inputs: {names}); "
                          "rebuild the bundle")


def model_decoder(model: Any, thresholds: Optional[Mapping[str, Any]] = None) -> Any:
    """The decoder of a loaded Model's bundle settings, with `thresholds` (score_threshold,
    nms_iou; None leaves the bundle's) checked and put in their place: every detector's decoder."""
    from edge_sdk.decoders import make_decoder

    spec = dict(model.decoder_spec)
    for key, value in (thresholds or {}).items():
        if value is not None:
            spec[key] = check_threshold(key, value)
    return make_decoder(spec, model.input_spec)


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
        self.preprocessor = Preprocessor(input_spec, batch=self.batch)
        self.inferences = 0  # how many times the backend ran
        # milliseconds spent per stage since the last reset_timings()
        self.timings: Dict[str, float] = {"preprocess": 0.0, "infer": 0.0, "decode": 0.0}
        self._feed: Dict[str, np.ndarray] = {}
        self.stage = ""  # the stage running now ("" between calls): names the one that raised

    def reset_timings(self) -> None:
        for key in self.timings:
            self.timings[key] = 0.0

    @property
    def input_size(self) -> Tuple[int, int]:
        """(width, height) of one network input."""
        return self.input_spec.width, self.input_spec.height

    def infer_tensor(self, tensor: np.ndarray) -> List[np.ndarray]:
        """Run the model on `tensor`; its time is added to `timings["infer"]`."""
        self.stage = "infer"
        t1 = clock()
        feed = self._feed
        feed[self.input_spec.name] = tensor  # the same array every call lets a backend keep its binding
        outputs = self.infer(feed)
        self.inferences += 1
        self.timings["infer"] += (clock() - t1) * 1000.0
        return outputs

    def run(self, tensor: np.ndarray, transforms: Sequence[Placement], n: int) -> List[Detections]:
        """Infer `tensor` (a full batch, or `n` rows of a dynamic one) and decode its first `n` items."""
        outputs = self.infer_tensor(tensor)
        t2 = clock()
        self.stage = "decode"
        if n < len(tensor) or n < self.batch:
            outputs = [np.asarray(o)[:n] for o in outputs]
        results = self.decoder(outputs, transforms)
        t3 = clock()
        self.stage = ""
        self.timings["decode"] += (t3 - t2) * 1000.0
        return results

    def __call__(self, images: List[np.ndarray]) -> List[Detections]:
        results: List[Detections] = []
        pre = self.preprocessor
        for start in range(0, len(images), self.batch):
            chunk = images[start : start + self.batch]
            n = len(chunk)
            self.stage = "preprocess"
            t0 = clock()
            transforms = [pre.fill(img, i) for i, img in enumerate(chunk)]
            rows = n if self.dynamic_batch else self.batch
            self.timings["preprocess"] += (clock() - t0) * 1000.0
            tensor = pre.tensor if rows == self.batch else pre.tensor[:rows]
            results.extend(self.run(tensor, transforms, n))
        return results


class PreparedInput:
    """One preallocated network input of the preprocess stage: the tensor of one frame, its
    Placement and the time preprocessing took. The pipeline keeps one per frame buffer and
    fills it on the capture thread; `spec` tells a detector whether it fits its model."""

    __slots__ = ("spec", "preprocessor", "transform", "ms", "ready")

    def __init__(self, spec: InputSpec) -> None:
        self.spec = spec
        self.preprocessor = Preprocessor(spec, batch=1)
        self.transform: Optional[Placement] = None
        self.ms = 0.0
        self.ready = False

    @property
    def tensor(self) -> np.ndarray:
        return self.preprocessor.tensor

    def fill(self, frame: np.ndarray) -> None:
        self.ready = False
        t0 = clock()
        self.transform = self.preprocessor.fill(frame, 0)
        self.ms = (clock() - t0) * 1000.0
        self.ready = True

    def into_row(self, preprocessor: Preprocessor, row: int) -> None:
        """This input into row `row` of `preprocessor`'s tensor (a batch detector's)."""
        preprocessor.tensor[row] = self.tensor[0]

    def batch_of_one(self, preprocessor: Preprocessor) -> np.ndarray:
        """This input as a batch of one for the backend: its own tensor, no copy."""
        return self.tensor


class PreparedPlanes:
    """A network input prepared ahead in a quarter of a PreparedInput's memory, for a detector
    that copies each frame into a row of its own batch tensor anyway: the frame resized into
    (3, H, W) uint8 planes in the network's colour order, its Placement and the time that took.
    The conversion to the network's type (and mean and scale) happens in that copy
    (:meth:`into_row`), which costs what copying a float32 row would. The resize scratch is not
    its own: `fill` takes the preprocessor of the thread that fills it (one per stream, shared
    by its frame buffers' planes)."""

    __slots__ = ("spec", "planes", "transform", "ms", "ready")

    def __init__(self, spec: InputSpec) -> None:
        self.spec = spec
        self.planes = np.empty((3, spec.height, spec.width), np.uint8)
        self.transform: Optional[Placement] = None
        self.ms = 0.0
        self.ready = False

    def fill(self, frame: np.ndarray, scratch: Preprocessor) -> None:
        """`frame` into the planes, resized in `scratch` (a Preprocessor of the same spec)."""
        self.ready = False
        t0 = clock()
        self.transform = scratch.fill_planes(frame, self.planes)
        self.ms = (clock() - t0) * 1000.0
        self.ready = True

    def into_row(self, preprocessor: Preprocessor, row: int) -> None:
        preprocessor.write_row(self.planes, row)

    def batch_of_one(self, preprocessor: Preprocessor) -> np.ndarray:
        """This input as a batch of one for the backend: converted into the first row of
        `preprocessor`'s tensor, which is returned."""
        preprocessor.write_row(self.planes, 0)
        return preprocessor.tensor[:1]


class Detector:
    """A per-frame detection strategy: a Frame -> FrameDetections in frame pixels.

    `detect` returns the detections with its stage latencies (ms, keys from
    edge_sdk.runtime.types.STAGES: preprocess, infer, decode, merge) and its report (`info`, it
    ends up in FrameResult.info). Every detector is called the same way: what the pipeline made
    for the frame ahead (a prepared network input, the device address of its pixels) travels
    with the Frame, and a detector uses what fits it. `prepared_spec` is the network input a
    frame can be prepared into ahead of `detect` on the CPU (None: the detector preprocesses its
    own inputs, on the GPU or per crop).
    """

    mode = ""
    backend: Optional[Backend] = None
    prepared_spec: Optional[InputSpec] = None
    # "cpu": preprocessing is host work the pipeline may run on another thread; "gpu": it is
    # enqueued on the inference stream by the detector itself (edge_sdk.cuda's GpuPreprocessor)
    preprocess_device = "cpu"
    # True: `infer_stage` and `decode_stage` split `detect` in two halves that may run on two
    # threads (the pipeline's infer thread runs the first one frame ahead)
    splits = False

    @property
    def stage(self) -> str:
        """The stage running now (preprocess, infer, decode, merge): after an exception left
        `detect`, the one that raised it."""
        return "detect"

    def detect(self, frame: Frame) -> FrameDetections:
        raise NotImplementedError

    @property
    def thresholds(self) -> Dict[str, float]:
        return {}

    def check_thresholds(self, changes: Mapping[str, Any]) -> Dict[str, float]:
        """`changes` validated (keys of THRESHOLDS, values in [0, 1]); ConfigError otherwise."""
        out: Dict[str, float] = {}
        for key, value in changes.items():
            if key not in THRESHOLDS:
                raise ConfigError(f"unknown threshold {key!r}; known: {', '.join(THRESHOLDS)}")
            out[key] = check_threshold(key, value)
        return out

    def set_thresholds(self, **changes: Any) -> Dict[str, float]:
        """Change `score_threshold` and/or `nms_iou`; returns the values now in force."""
        raise NotImplementedError

    def describe(self) -> Dict[str, Any]:
        """What runs, for logs: the mode, where it preprocesses ("cpu" or "gpu") and the
        thresholds in force; a detector adds what it knows (the GPU one: its preprocessor)."""
        return {"mode": self.mode, "preprocess": self.preprocess_device, "thresholds": self.thresholds}

    def close(self) -> None:
        """Free what the detector holds on its backend (a GPU preprocessor's buffers); before the
        model is closed. Nothing for the CPU detectors."""


class DecoderDetector(Detector):
    """A detector whose thresholds are its decoder's (`self.decoder`): one pass, one decoder."""

    decoder: Any = None

    @property
    def thresholds(self) -> Dict[str, float]:
        return {key: float(getattr(self.decoder, key)) for key in THRESHOLDS if hasattr(self.decoder, key)}

    def set_thresholds(self, **changes: Any) -> Dict[str, float]:
        values = self.check_thresholds(changes)
        missing = [key for key in values if not hasattr(self.decoder, key)]
        if missing:
            raise ConfigError(f"this model's decoder has no {', '.join(missing)} to set")
        for key, value in values.items():
            setattr(self.decoder, key, value)
        return self.thresholds
