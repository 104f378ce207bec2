"""Plugging the strategies into the runtime's pipeline (`--mode tiles|roi`).

    detector = strategy_detector("roi", backend, bundle.decoder, bundle.inputs[0], RoiConfig())
    Pipeline(config, detector=detector)

The bundle's decoder threshold stays the output threshold; the decoder itself is built with
the lower proposal threshold the ROI scheduler needs for its coarse pass.
"""
from __future__ import annotations

import time
from typing import Any, Dict, Mapping, Optional

import numpy as np

from edge_sdk.detections import Detections
from edge_sdk.preprocess import InputSpec
from edge_sdk.roi.detector import BatchDetector
from edge_sdk.roi.strategies import RoiConfig, make_strategy
from edge_sdk.runtime.pipeline import Detector


class StrategyDetector(Detector):
    """The pipeline's per-frame `Detector` around a strategy and its batch detector.

    Stage latencies: preprocess, infer and decode summed over every model input of the frame;
    merge is the rest (region planning, packing, mapping back, merging, tracking). The
    strategy's report goes into FrameResult.info.
    """

    def __init__(self, strategy: Any, batch_detector: BatchDetector, backend: Any = None) -> None:
        self.strategy = strategy
        self.batch_detector = batch_detector
        self.backend = backend  # whoever swaps this detector out retires the backend

    def detect(self, frame: np.ndarray, latency: Dict[str, float], info: Dict[str, Any]) -> Detections:
        self.batch_detector.reset_timings()
        t0 = time.perf_counter()
        result = self.strategy(frame)
        total = (time.perf_counter() - t0) * 1000.0
        stages = self.batch_detector.timings
        latency.update(stages)
        latency["merge"] = max(0.0, total - sum(stages.values()))
        info.update(result.info)
        return result.detections


def strategy_detector(
    mode: str,
    backend: Any,
    decoder_spec: Mapping[str, Any],
    input_spec: InputSpec,
    config: Optional[RoiConfig] = None,
) -> StrategyDetector:
    """A pipeline Detector for `mode` ("full", "tiles", "roi") over an active backend."""
    from edge_sdk.decoders import make_decoder

    spec = dict(decoder_spec)
    config = config or RoiConfig()
    output_threshold = float(spec.get("score_threshold", config.score_threshold))
    proposal = min(config.proposal_threshold, output_threshold)
    config = RoiConfig.from_dict(dict(config.to_dict(), score_threshold=output_threshold, proposal_threshold=proposal))
    spec["score_threshold"] = proposal if mode == "roi" else output_threshold
    detect = BatchDetector(backend.infer, input_spec, make_decoder(spec, input_spec))
    return StrategyDetector(make_strategy(mode, detect, config=config), detect, backend)
