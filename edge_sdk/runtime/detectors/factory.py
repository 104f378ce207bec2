"""The detector for a mode, over a loaded model: the one factory of the pipeline, hot reload and
the daemon's `set mode` command, and the registry of modes it builds from.

    detector = make_detector("roi", model, RoiConfig(sweep_tiles=2), {"score_threshold": 0.4})
    register_detector("mine", build_mine)      # build_mine(model, decoder, roi) -> Detector

Each mode has a builder and, optionally, a variant for a backend that runs on a CUDA stream
(its `capabilities().on_stream`; mode ``full`` has the GPU detector of :mod:`.gpu`). The
decoder is set up once, here, with :func:`~edge_sdk.runtime.detectors.base.model_decoder`, and
handed to the builder. A GPU variant that cannot run on this GPU (its kernels cannot be compiled
for it) falls back to the mode's builder, with one warning.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from edge_sdk.errors import ConfigError, KernelUnavailableError
from edge_sdk.roi.config import RoiConfig
from edge_sdk.runtime.detectors.base import Detector, model_decoder
from edge_sdk.runtime.detectors.full import FullFrameDetector
from edge_sdk.runtime.detectors.gpu import build_gpu
from edge_sdk.runtime.detectors.strategy import StrategyDetector

log = logging.getLogger(__name__)
_WARNED: set = set()

# builder(model, decoder, roi) -> Detector: `model` a loaded Model, `decoder` set up by
# model_decoder, `roi` the tiles/roi parameters (a RoiConfig)
Builder = Callable[[Any, Any, RoiConfig], Detector]


@dataclass(frozen=True)
class DetectorEntry:
    """A mode's builders: `build`, and `on_stream` for a backend on a CUDA stream (None: `build`
    serves every backend)."""

    build: Builder
    on_stream: Optional[Builder] = None


_REGISTRY: Dict[str, DetectorEntry] = {}


def register_detector(mode: str, build: Builder, on_stream: Optional[Builder] = None) -> None:
    """Make `mode` buildable by make_detector (replacing what it was). `on_stream`: the variant
    for a backend that runs on a CUDA stream."""
    if not mode or not isinstance(mode, str):
        raise ConfigError(f"a detector mode is a non-empty string, got {mode!r}")
    _REGISTRY[mode] = DetectorEntry(build, on_stream)


def detector_modes() -> Tuple[str, ...]:
    """The registered modes, in registration order."""
    return tuple(_REGISTRY)


def detector_entry(mode: str) -> DetectorEntry:
    """The builders of `mode`; ConfigError naming the registered modes otherwise."""
    entry = _REGISTRY.get(mode)
    if entry is None:
        raise ConfigError(f"mode must be one of {', '.join(_REGISTRY)}, got {mode!r}")
    return entry


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning(message)


def make_detector(mode: str, model: Any, roi: Optional[RoiConfig] = None,
                  thresholds: Optional[Mapping[str, Any]] = None) -> Detector:
    """The per-frame detector for a registered `mode` ("full", "tiles" or "roi", and any added
    with register_detector) over a loaded model; on a backend that runs on a CUDA stream, the
    mode's GPU variant where it has one (mode full: edge_sdk.runtime.detectors.gpu).

    `model` is a :class:`~edge_sdk.runtime.model.Model` (an activated backend, its input spec
    and decoder settings). `thresholds` (score_threshold, nms_iou) override the decoder
    settings of the bundle; `roi` holds the parameters of the tiles and roi modes (defaults
    when None).
    """
    entry = detector_entry(mode)
    roi = roi or RoiConfig()
    decoder = model_decoder(model, thresholds)
    if entry.on_stream is not None and model.backend.capabilities().on_stream:
        # a backend on a CUDA stream (TensorRT): preprocess on the GPU, on that stream
        try:
            return entry.on_stream(model, decoder, roi)
        except KernelUnavailableError as exc:  # no compiler, a header or a GPU it lacks: the CPU preprocesses
            _warn_once(f"GPU preprocessing is off, frames are preprocessed on the CPU: {exc}")
    return entry.build(model, decoder, roi)


def build_full(model: Any, decoder: Any, roi: RoiConfig) -> Detector:
    return FullFrameDetector(model.backend, decoder, model.input_spec)


def build_strategy(mode: str) -> Builder:
    """The builder of a mode of edge_sdk.roi.strategies ("tiles", "roi")."""

    def build(model: Any, decoder: Any, roi: RoiConfig) -> Detector:
        return StrategyDetector(mode, model.backend, decoder, model.input_spec, roi,
                                score_threshold=float(decoder.score_threshold))

    return build


register_detector("full", build_full, on_stream=build_gpu)
register_detector("tiles", build_strategy("tiles"))
register_detector("roi", build_strategy("roi"))
