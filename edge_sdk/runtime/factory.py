"""The detector for a mode, over a loaded model: the one factory of the pipeline, hot reload and
the daemon's `set mode` command.

    detector = make_detector("roi", model, RoiConfig(sweep_tiles=2), {"score_threshold": 0.4})

It is the only module that knows both the CPU detectors (:mod:`edge_sdk.runtime.detector`) and
the GPU one (:mod:`edge_sdk.runtime.gpu_detector`); both set their decoder up with
:func:`~edge_sdk.runtime.detector.model_decoder`.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping, Optional

from edge_sdk.errors import ConfigError, KernelArchitectureError
from edge_sdk.roi.config import MODES, RoiConfig
from edge_sdk.runtime.detector import Detector, FullFrameDetector, StrategyDetector, model_decoder

log = logging.getLogger(__name__)
_WARNED: set = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning(message)


def make_detector(mode: str, model: Any, roi: Optional[RoiConfig] = None,
                  thresholds: Optional[Mapping[str, Any]] = None) -> Detector:
    """The per-frame detector for `mode` ("full", "tiles" or "roi") over a loaded model; in mode
    full on a backend that runs on a CUDA stream, the GPU one (edge_sdk.runtime.gpu_detector).

    `model` is a :class:`~edge_sdk.runtime.model.Model` (an activated backend, its input spec
    and decoder settings). `thresholds` (score_threshold, nms_iou) override the decoder
    settings of the bundle; `roi` holds the parameters of the tiles and roi modes (defaults
    when None).
    """
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "full" and model.backend.capabilities().on_stream:
        # a backend on a CUDA stream (TensorRT): preprocess on the GPU, on that stream
        from edge_sdk.runtime.gpu_detector import make_gpu_detector

        try:
            return make_gpu_detector(model, thresholds=thresholds)
        except KernelArchitectureError as exc:  # a GPU newer than the kernel compiler: the CPU preprocesses
            _warn_once(f"GPU preprocessing is off, frames are preprocessed on the CPU: {exc}")
    decoder = model_decoder(model, thresholds)
    if mode == "full":
        return FullFrameDetector(model.backend, decoder, model.input_spec)
    return StrategyDetector(mode, model.backend, decoder, model.input_spec, roi or RoiConfig(),
                            score_threshold=float(decoder.score_threshold))
