"""make_decoder(): the one dispatch point, and its validation of the spec."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.decoders import CENTERFACE_DEFAULT, DECODERS, Decoder, known_types, make_decoder
from edge_sdk.errors import ConfigError
from edge_sdk.preprocess import InputSpec

SPEC = InputSpec(name="input.1", shape=[1, 3, 384, 640])


@pytest.mark.parametrize("kind", sorted(DECODERS))
def test_every_type_builds_with_defaults(kind: str) -> None:
    decoder = make_decoder({"type": kind}, SPEC)
    assert isinstance(decoder, Decoder)
    assert 0.0 < decoder.score_threshold < 1.0 and 0.0 < decoder.nms_iou <= 1.0  # end2end: 1.0, the model's NMS only


def test_known_types() -> None:
    assert known_types() == ["centerface", "end2end", "ssd", "yolo11", "yolov5", "yolov8", "yolox"]


def test_centerface_defaults_match_the_reference_decode() -> None:
    decoder = make_decoder(CENTERFACE_DEFAULT, SPEC)
    assert (decoder.score_threshold, decoder.nms_iou, decoder.max_detections) == (0.5, 0.3, 300)


def test_input_spec_may_be_a_manifest_dict() -> None:
    decoder = make_decoder({"type": "CenterFace"}, SPEC.to_dict())
    assert decoder.input_spec == SPEC


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"type": "retinanet"}, r"unknown decoder type 'retinanet'; known types: centerface, end2end, ssd, yolo11"),
        ({}, r"unknown decoder type None"),
        ("centerface", r"must be a mapping"),
        ({"type": "centerface", "treshold": 0.5}, r"does not know the key\(s\) \['treshold'\]"),
        ({"type": "yolov8", "local_max": True}, r"does not know the key\(s\) \['local_max'\]"),
        ({"type": "centerface", "score_threshold": 1.5}, r"decoder.score_threshold must be a number in \[0.0, 1.0\]"),
        ({"type": "centerface", "score_threshold": "0.5"}, r"decoder.score_threshold"),
        ({"type": "centerface", "nms_iou": True}, r"decoder.nms_iou"),
        ({"type": "yolov5", "max_detections": 0}, r"decoder.max_detections must be an integer in \[1, 4096\]"),
        ({"type": "yolov5", "pre_nms_topk": 2.5}, r"decoder.pre_nms_topk must be an integer in \[1, 10000\] or null"),
        ({"type": "yolov5", "num_classes": -1}, r"decoder.num_classes"),
        ({"type": "yolov5", "class_agnostic": "yes"}, r"decoder.class_agnostic must be true or false"),
        ({"type": "centerface", "outputs": ["heatmap", "scale"]}, r"decoder.outputs must list the role"),
        ({"type": "centerface", "outputs": ["heatmap", "scale", "offset", "scale"]}, r"decoder.outputs"),
        ({"type": "centerface", "output_names": "537"}, r"decoder.output_names must be a list"),
    ],
)
def test_bad_specs_name_the_key(spec, message) -> None:
    with pytest.raises(ConfigError, match=message):
        make_decoder(spec, SPEC)


def test_output_names_appear_in_errors() -> None:
    from edge_sdk.errors import BackendError

    decoder = make_decoder(dict(CENTERFACE_DEFAULT, output_names=["537", "538", "539", "540"]), SPEC)
    bad = [np.zeros((1, 1, 10, 10), np.float32)] + [np.zeros((1, c, 96, 160), np.float32) for c in (2, 2, 10)]
    with pytest.raises(BackendError, match=r"output 0 \('537'\) \(heatmap\)"):
        decoder(bad, [None])
