"""The runtime's detectors: Frame -> FrameDetections, one per mode, built from a registry.

    from edge_sdk.runtime.detectors import make_detector, register_detector
    detector = make_detector("full", model)

:mod:`.base` (the Detector interface, thresholds, BatchDetector, PreparedInput, the decoder
set-up), :mod:`.full` (mode full), :mod:`.gpu` (mode full, preprocessed on the inference
stream), :mod:`.strategy` (modes tiles and roi), :mod:`.factory` (the registry and make_detector).
"""
from edge_sdk.runtime.detectors.base import (THRESHOLDS, BatchDetector, DecoderDetector, Detector, PreparedInput,
                                             check_threshold, model_decoder)
from edge_sdk.runtime.detectors.factory import detector_modes, make_detector, register_detector
from edge_sdk.runtime.detectors.full import FullFrameDetector
from edge_sdk.runtime.detectors.gpu import GpuFullFrameDetector, make_gpu_detector
from edge_sdk.runtime.detectors.strategy import StrategyDetector

__all__ = ["THRESHOLDS", "BatchDetector", "DecoderDetector", "Detector", "FullFrameDetector", "GpuFullFrameDetector",
           "PreparedInput", "StrategyDetector", "check_threshold", "detector_modes", "make_detector",
           "make_gpu_detector", "model_decoder", "register_detector"]
