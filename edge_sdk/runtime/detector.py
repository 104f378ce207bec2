"""Detectors: preprocess -> infer -> decode, for a batch of images or one frame per call.

    detector = make_detector("roi", model, RoiConfig(sweep_tiles=2))
    detections = detector.detect(frame, latency, info)     # BGR frame -> boxes in frame pixels
    detector.set_thresholds(score_threshold=0.4)           # in every mode

- :class:`BatchDetector` is the one place that runs a model: it fills the preprocessor's batch
  slots, runs the backend once per batch and decodes. As a callable
  ``detect(images) -> List[Detections]`` it is the callback the strategies of
  :mod:`edge_sdk.roi.strategies` take (supervision's callback style).
- :class:`FullFrameDetector` is mode ``full``: a batch of one, the whole frame. Its input can
  be prepared elsewhere (:class:`PreparedInput`, filled by the pipeline's preprocess stage on
  another thread) so that inference never waits for preprocessing.
- :class:`StrategyDetector` is modes ``tiles`` and ``roi``: a strategy around a BatchDetector.
- :func:`~edge_sdk.runtime.factory.make_detector` builds the one for a mode from a loaded
  :class:`~edge_sdk.runtime.model.Model`; every detector's decoder is set up by :func:`model_decoder`.

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
from edge_sdk.roi.config import RoiConfig

InferFn = Callable[[Dict[str, np.ndarray]], List[np.ndarray]]
DecodeFn = Callable[[Sequence[np.ndarray], Sequence[Placement]], List[Detections]]
THRESHOLDS = ("score_threshold", "nms_iou")

clock = time.perf_counter


def check_threshold(key: str, value: Any) -> float:
    """A threshold in [0, 1] as a float; ConfigError naming `key` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ConfigError(f"{key} must be a number in [0, 1], got {value!r}")
    return float(value)


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


class Detector:
    """A per-frame detection strategy: BGR frame -> Detections in frame pixels.

    `detect` adds its stage latencies (ms) to `latency` (keys from
    edge_sdk.runtime.types.STAGES: preprocess, infer, decode, merge) and may add a report to
    `info` (it ends up in FrameResult.info). `prepared_spec` is the network input a frame can
    be prepared into ahead of `detect` on the CPU (None: the detector preprocesses its own
    inputs, on the GPU or per crop).
    """

    mode = ""
    backend: Any = None
    prepared_spec: Optional[InputSpec] = None
    # "cpu": preprocessing is host work the pipeline may run on another thread; "gpu": it is
    # enqueued on the inference stream by the detector itself (edge_sdk.cuda's GpuPreprocessor)
    preprocess_device = "cpu"

    @property
    def stage(self) -> str:
        """The stage running now (preprocess, infer, decode, merge): after an exception left
        `detect`, the one that raised it."""
        return "detect"

    def detect(self, frame: np.ndarray, latency: Dict[str, float], info: Dict[str, Any],
               prepared: Optional[PreparedInput] = None) -> Detections:
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


class FullFrameDetector(DecoderDetector):
    """Mode ``full``: the whole frame, letterboxed into the network input, one inference, decode,
    no merge. A batch of one of :class:`BatchDetector`.

    A frame prepared elsewhere (a :class:`PreparedInput` of the same input spec) is inferred as
    it is; otherwise it is preprocessed here into the detector's own tensor. Either way the
    steady state allocates no frame-sized array.
    """

    mode = "full"

    def __init__(self, backend: Any, decoder: DecodeFn, input_spec: InputSpec) -> None:
        self.backend = backend
        self.decoder = decoder
        self.input_spec = input_spec
        self.prepared_spec = input_spec
        self.batch = BatchDetector(self._infer, input_spec, decoder, batch=1)
        self._checked = False

    def _infer(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        if not self._checked:
            names = getattr(self.backend, "input_names", None)
            if names and self.input_spec.name not in names:
                raise ConfigError(
                    f"the bundle's input {self.input_spec.name!r} is not an input of the model (its inputs: {names}); rebuild the bundle"
                )
            self._checked = True
        return self.backend.infer(feed)  # type: ignore[no-any-return]

    def detect(self, frame: np.ndarray, latency: Dict[str, float], info: Dict[str, Any],
               prepared: Optional[PreparedInput] = None) -> Detections:
        outputs, transform = self.infer_stage(frame, latency, prepared)
        self.batch.stage = "decode"
        detections = self.decode_stage(outputs, transform, latency)
        self.batch.stage = ""
        return detections

    def infer_stage(self, frame: np.ndarray, latency: Dict[str, float],
                    prepared: Optional[PreparedInput] = None) -> Tuple[List[np.ndarray], Placement]:
        """The first half of `detect`: preprocess (unless `prepared` holds this frame's input)
        and infer. Returns the backend's outputs (its buffers: valid until its next run) and
        the frame's Placement, for :meth:`decode_stage`, which may run on another thread."""
        batch = self.batch
        if prepared is not None and prepared.ready and prepared.spec == self.input_spec:
            tensor, transform = prepared.tensor, prepared.transform
            preprocess_ms = prepared.ms
        else:
            batch.stage = "preprocess"
            t0 = clock()
            transform = batch.preprocessor.fill(frame, 0)
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


class StrategyDetector(Detector):
    """Modes ``tiles`` and ``roi``: a strategy of :mod:`edge_sdk.roi.strategies` around a
    BatchDetector.

    Stage latencies: preprocess, infer and decode summed over every model input of the frame;
    merge is the rest (region planning, packing, mapping back, merging, tracking). The
    strategy's report goes into FrameResult.info.
    """

    def __init__(self, mode: str, backend: Any, decoder: Any, input_spec: InputSpec,
                 config: RoiConfig, score_threshold: float) -> None:
        from edge_sdk.roi.strategies import make_strategy

        self.mode = mode
        self.backend = backend
        self.decoder = decoder
        self.input_spec = input_spec
        self.proposal_limit = config.proposal_threshold  # the configured proposal threshold
        self.config = RoiConfig.from_dict(config.to_dict())  # this detector's own copy
        self.batch_detector = BatchDetector(backend.infer, input_spec, decoder)
        self._apply_score(check_threshold("score_threshold", score_threshold))
        self.strategy = make_strategy(mode, self.batch_detector, config=self.config)

    def _apply_score(self, score: float) -> None:
        cfg = self.config
        cfg.score_threshold = score
        cfg.proposal_threshold = min(self.proposal_limit, score)
        # the roi coarse pass needs candidates below the output threshold
        self.decoder.score_threshold = cfg.proposal_threshold if self.mode == "roi" else score

    def detect(self, frame: np.ndarray, latency: Dict[str, float], info: Dict[str, Any],
               prepared: Optional[PreparedInput] = None) -> Detections:
        self.batch_detector.reset_timings()
        t0 = clock()
        result = self.strategy(frame)
        total = (clock() - t0) * 1000.0
        stages = self.batch_detector.timings
        latency.update(stages)
        latency["merge"] = max(0.0, total - sum(stages.values()))
        info.update(result.info)
        return result.detections

    @property
    def stage(self) -> str:
        return self.batch_detector.stage or "merge"

    @property
    def thresholds(self) -> Dict[str, float]:
        out = {"score_threshold": float(self.config.score_threshold)}
        if hasattr(self.decoder, "nms_iou"):
            out["nms_iou"] = float(self.decoder.nms_iou)
        return out

    def set_thresholds(self, **changes: Any) -> Dict[str, float]:
        values = self.check_thresholds(changes)
        if "nms_iou" in values and not hasattr(self.decoder, "nms_iou"):
            raise ConfigError("this model's decoder has no nms_iou to set")
        if "score_threshold" in values:
            self._apply_score(values["score_threshold"])
        if "nms_iou" in values:
            self.decoder.nms_iou = values["nms_iou"]
        return self.thresholds
