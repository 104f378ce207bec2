"""Decoders: raw model outputs -> one :class:`~edge_sdk.detections.Detections` per image.

    decoder = make_decoder({"type": "centerface", "score_threshold": 0.5, "nms_iou": 0.3}, input_spec)
    detections = decoder(outputs, transforms)   # outputs in model order, batch first

Every decoder returns boxes in FRAME pixels (each batch item's Placement in the network input maps them back) and
shares the spec keys `score_threshold`, `nms_iou`, `class_agnostic`, `max_detections`,
`pre_nms_topk`, `num_classes`, `output_names` and `labels` (class names, index = class id: each
detection gets `data["label"]`); each type documents its own extra keys. Models that end in
NMS take the `end2end` decoder.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Type, Union

from edge_sdk.decoders._base import Decoder
from edge_sdk.decoders.centerface import CenterFaceDecoder
from edge_sdk.decoders.end2end import End2EndDecoder
from edge_sdk.decoders.nms import nms
from edge_sdk.decoders.ssd import SSDDecoder
from edge_sdk.decoders.yolo import YOLOv5Decoder, YOLOv8Decoder
from edge_sdk.decoders.yolox import YOLOXDecoder
from edge_sdk.errors import ConfigError
from edge_sdk.preprocess import InputSpec

DECODERS: Dict[str, Type[Decoder]] = {
    "centerface": CenterFaceDecoder,
    "yolov5": YOLOv5Decoder,
    "yolov8": YOLOv8Decoder,
    "yolo11": YOLOv8Decoder,
    "yolox": YOLOXDecoder,
    "ssd": SSDDecoder,
    "end2end": End2EndDecoder,
}

# The decoder the default model (CenterFace) ships with.
CENTERFACE_DEFAULT: Dict[str, Any] = {"type": "centerface", "score_threshold": 0.5, "nms_iou": 0.3}


def known_types() -> List[str]:
    return sorted(DECODERS)


def make_decoder(spec: Mapping[str, Any], input_spec: Union[InputSpec, Mapping[str, Any]]) -> Decoder:
    """Build the decoder a spec (a manifest's "decoder" entry) names, for this network input."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"decoder spec must be a mapping with a 'type' key, got {spec!r}")
    kind = spec.get("type")
    cls = DECODERS.get(str(kind).lower()) if isinstance(kind, str) else None
    if cls is None:
        raise ConfigError(f"unknown decoder type {kind!r}; known types: {', '.join(known_types())}")
    if not isinstance(input_spec, InputSpec):
        input_spec = InputSpec.from_dict(dict(input_spec))
    return cls(spec, input_spec)


__all__ = [
    "CENTERFACE_DEFAULT",
    "CenterFaceDecoder",
    "DECODERS",
    "Decoder",
    "End2EndDecoder",
    "SSDDecoder",
    "YOLOXDecoder",
    "YOLOv5Decoder",
    "YOLOv8Decoder",
    "known_types",
    "make_decoder",
    "nms",
]
