"""Modes ``tiles`` and ``roi``: a strategy of :mod:`edge_sdk.roi.strategies` around a BatchDetector.

    detector = StrategyDetector("roi", model.backend, model_decoder(model), model.input_spec, RoiConfig(),
                                score_threshold=0.5)
    found = detector.detect(frame)    # found.info: the strategy's report (regions, candidates, images)
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from edge_sdk.errors import ConfigError
from edge_sdk.preprocess import InputSpec
from edge_sdk.roi.config import RoiConfig
from edge_sdk.runtime.backends.base import Backend
from edge_sdk.runtime.detectors.base import BatchDetector, Detector, check_threshold, clock
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.types import TRACK, FrameDetections


class StrategyDetector(Detector):
    """Modes ``tiles`` and ``roi``: a strategy of :mod:`edge_sdk.roi.strategies` around a
    BatchDetector.

    `batch` and `dynamic_batch`: how many model inputs one backend call takes (default: the
    bundle input's batch) and whether the last call is cut to size (BatchDetector's).

    Stage latencies: preprocess, infer and decode summed over every model input of the frame;
    track the update of the stream's tracker, where the strategy follows it (mode roi, with the
    tracker the Frame carries: the detections come with their track ids); merge is the rest
    (region planning, packing, mapping back, merging). The strategy's report goes into
    FrameResult.info.
    """

    def __init__(self, mode: str, backend: Backend, decoder: Any, input_spec: InputSpec,
                 config: RoiConfig, score_threshold: float, batch: Optional[int] = None,
                 dynamic_batch: bool = False) -> None:
        from edge_sdk.roi.strategies import make_strategy

        self.mode = mode
        self.backend = backend
        self.decoder = decoder
        self.input_spec = input_spec
        self.proposal_limit = config.proposal_threshold  # the configured proposal threshold
        self.config = RoiConfig.from_dict(config.to_dict())  # this detector's own copy
        self.batch_detector = BatchDetector(backend.infer, input_spec, decoder, batch=batch, dynamic_batch=dynamic_batch)
        self._apply_score(check_threshold("score_threshold", score_threshold))
        self.strategy = make_strategy(mode, self.batch_detector, config=self.config)

    def _apply_score(self, score: float) -> None:
        cfg = self.config
        cfg.score_threshold = score
        cfg.proposal_threshold = min(self.proposal_limit, score)
        # the roi coarse pass needs candidates below the output threshold
        self.decoder.score_threshold = cfg.proposal_threshold if self.mode == "roi" else score

    def detect(self, frame: Frame) -> FrameDetections:
        self.batch_detector.reset_timings()
        t0 = clock()
        if getattr(self.strategy, "follows_tracks", False):  # a registered strategy may not say
            result = self.strategy(frame.image, tracker=frame.tracker)
        else:
            result = self.strategy(frame.image)
        total = (clock() - t0) * 1000.0
        latency = dict(self.batch_detector.timings)
        if result.track_ms is not None:
            latency[TRACK] = result.track_ms
        latency["merge"] = max(0.0, total - sum(latency.values()))
        return FrameDetections(result.detections, latency, dict(result.info))

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
