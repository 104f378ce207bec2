"""What every decoder shares: spec parsing, output checks, top-k, NMS and the mapping to frame pixels."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.decoders.nms import nms
from edge_sdk.detections import LABEL, Detections
from edge_sdk.errors import BackendError, ConfigError
from edge_sdk.labels import check_labels
from edge_sdk.geometry import Placement, move_detections
from edge_sdk.preprocess import InputSpec

COMMON_KEYS = (
    "type",
    "score_threshold",
    "nms_iou",
    "class_agnostic",
    "max_detections",
    "pre_nms_topk",
    "num_classes",
    "output_names",
    "labels",
)


# A frame's detections go out in one `detections` message, whose schema holds at most 4,096 boxes
# (schemas/detections.json): more than that is a message every reader refuses. Candidates into
# NMS are bounded too (its cost grows with their square): a decoder spec of null or more kept
# 6,400 boxes a frame at 0.05 fps.
MAX_DETECTIONS = 4096
MAX_PRE_NMS_TOPK = 10000


class Decoder:
    """Turns a batch of raw model outputs into one :class:`Detections` per image, in frame pixels.

    Subclasses set `type_name`, `extra_keys` and the defaults, check the outputs in
    `check_outputs`, and turn item `i` of the batch into candidates in `candidates`. The base
    class does the rest (top-k, NMS, mapping back to the frame). A decoder holds only its
    configuration and constants derived from the input size, never state from a previous call.
    """

    type_name = ""
    extra_keys: Tuple[str, ...] = ()
    default_score_threshold = 0.25
    default_nms_iou = 0.45
    default_class_agnostic = False
    default_max_detections = 300
    default_pre_nms_topk: Optional[int] = 1000

    def __init__(self, spec: Mapping[str, Any], input_spec: InputSpec) -> None:
        self.spec = dict(spec)
        self.input_spec = input_spec
        allowed = set(COMMON_KEYS) | set(self.extra_keys)
        unknown = sorted(set(self.spec) - allowed)
        if unknown:
            raise ConfigError(
                f"decoder {self.type_name!r} does not know the key(s) {unknown}; known keys: {sorted(allowed)}"
            )
        self.score_threshold = spec_float(self.spec, "score_threshold", self.default_score_threshold, 0.0, 1.0)
        self.nms_iou = spec_float(self.spec, "nms_iou", self.default_nms_iou, 0.0, 1.0)
        self.class_agnostic = spec_bool(self.spec, "class_agnostic", self.default_class_agnostic)
        self.max_detections = spec_int(self.spec, "max_detections", self.default_max_detections, 1, hi=MAX_DETECTIONS)
        # null: no cut of the decoder's own, but never more candidates into NMS than MAX_PRE_NMS_TOPK
        self.pre_nms_topk = spec_int(self.spec, "pre_nms_topk", self.default_pre_nms_topk, 1, allow_none=True,
                                     hi=MAX_PRE_NMS_TOPK)
        self.num_classes = spec_int(self.spec, "num_classes", None, 1, allow_none=True)
        names = self.spec.get("output_names")
        if names is not None and (not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names)):
            raise ConfigError(f"decoder.output_names must be a list of output names, got {names!r}")
        self.output_names: Optional[List[str]] = list(names) if names is not None else None
        labels = self.spec.get("labels")
        self.labels: Optional[List[str]] = None if labels is None else check_labels(labels, "decoder.labels")
        if self.labels is not None:
            if self.num_classes is None:
                self.num_classes = len(self.labels)  # the model's outputs are checked against it
            elif self.num_classes != len(self.labels):
                raise ConfigError(
                    f"decoder.labels names {len(self.labels)} classes but decoder.num_classes is {self.num_classes}; "
                    "give one name per class the model outputs"
                )
            # class id -> name; ids the names do not cover get "" (no label)
            self._label_of = np.array(self.labels + [""])

    # -- what subclasses provide ---------------------------------------------------------------
    def check_outputs(self, outputs: List[np.ndarray]) -> None:
        raise NotImplementedError

    def candidates(
        self, outputs: List[np.ndarray], i: int
    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, Dict[str, np.ndarray]]:
        """Boxes (K,4) xyxy in network-input pixels, scores (K,), class ids (K,), extra data.

        Only candidates above the score threshold are returned. Extra data arrays may hold
        points in network-input pixels under the keys of POINT_KEYS (shape (K, P, 2)), which
        are mapped to frame pixels with the boxes.
        """
        raise NotImplementedError

    # -- the shared part -------------------------------------------------------------------------
    def batched(self, outputs: List[np.ndarray]) -> List[int]:
        """The outputs whose first dimension is the batch (all, unless a decoder says otherwise)."""
        return list(range(len(outputs)))

    def __call__(self, outputs: Sequence[np.ndarray], transforms: Sequence[Placement]) -> List[Detections]:
        arrays = [np.asarray(o) for o in outputs]
        self.check_outputs(arrays)
        batched = self.batched(arrays)
        n = arrays[batched[0]].shape[0]
        for k in batched:
            a = arrays[k]
            if a.shape[0] != n:
                raise BackendError(
                    f"{self.type_name} decoder: output {self._name(k)} has batch {a.shape[0]}, output "
                    f"{self._name(batched[0])} has batch {n}; all outputs must share the leading batch dimension"
                )
        if len(transforms) != n:
            raise BackendError(
                f"{self.type_name} decoder: got {len(transforms)} transform(s) for a batch of {n}; "
                "pass one Placement per batch item"
            )
        return [self._decode_item(arrays, i, transforms[i]) for i in range(n)]

    def _decode_item(self, outputs: List[np.ndarray], i: int, transform: Placement) -> Detections:
        boxes, scores, class_id, data = self.candidates(outputs, i)
        topk = MAX_PRE_NMS_TOPK if self.pre_nms_topk is None else self.pre_nms_topk
        if len(scores) > topk:
            top = np.argpartition(-scores, topk - 1)[:topk]
            boxes, scores, class_id = boxes[top], scores[top], class_id[top]
            data = {k: v[top] for k, v in data.items()}
        keep = nms(boxes, scores, self.nms_iou, None if self.class_agnostic else class_id, self.max_detections)
        out = {k: v[keep] for k, v in data.items()}
        if self.labels is not None:
            ids = class_id[keep]
            out[LABEL] = self._label_of[np.where((ids >= 0) & (ids < len(self.labels)), ids, len(self.labels))]
        return move_detections(Detections(boxes[keep], scores[keep], class_id[keep], out), transform, clip=True)

    def _name(self, k: int) -> str:
        if self.output_names is not None and k < len(self.output_names):
            return f"{k} ({self.output_names[k]!r})"
        return str(k)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"


# -- helpers shared by the decoders --------------------------------------------------------------
def cxcywh_to_xyxy(cx: np.ndarray, cy: np.ndarray, w: np.ndarray, h: np.ndarray) -> np.ndarray:
    x1 = cx - w * 0.5
    y1 = cy - h * 0.5
    return np.stack([x1, y1, x1 + w, y1 + h], axis=1).astype(np.float32, copy=False)


def empty_candidates() -> Tuple[np.ndarray, np.ndarray, np.ndarray, Dict[str, np.ndarray]]:
    return np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32), {}


def check_count(decoder: Decoder, outputs: List[np.ndarray], expected: Sequence[int], what: str) -> None:
    if len(outputs) not in expected:
        shapes = [tuple(o.shape) for o in outputs]
        raise BackendError(
            f"{decoder.type_name} decoder expects {what}; the model gave {len(outputs)} output(s) with shapes "
            f"{shapes}. Check decoder.type in the manifest or the model export"
        )


def check_ndim(decoder: Decoder, outputs: List[np.ndarray], k: int, ndim: int, what: str) -> None:
    if outputs[k].ndim != ndim:
        raise BackendError(
            f"{decoder.type_name} decoder: output {decoder._name(k)} should be {what}, got shape "
            f"{tuple(outputs[k].shape)}. Check decoder.type in the manifest or the model export"
        )


def spec_float(spec: Mapping[str, Any], key: str, default: Optional[float], lo: float, hi: float) -> float:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= float(value) <= hi:
        raise ConfigError(f"decoder.{key} must be a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def spec_int(
    spec: Mapping[str, Any], key: str, default: Optional[int], lo: int, allow_none: bool = False,
    hi: Optional[int] = None,
) -> Optional[int]:
    value = spec.get(key, default)
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < lo \
            or (hi is not None and int(value) > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ConfigError(f"decoder.{key} must be an integer {bound}{' or null' if allow_none else ''}, got {value!r}")
    return int(value)


def spec_bool(spec: Mapping[str, Any], key: str, default: bool) -> bool:
    value = spec.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"decoder.{key} must be true or false, got {value!r}")
    return value


def spec_choice(spec: Mapping[str, Any], key: str, default: str, choices: Sequence[str]) -> str:
    value = spec.get(key, default)
    if value not in choices:
        raise ConfigError(f"decoder.{key} must be one of {list(choices)}, got {value!r}")
    return str(value)


def spec_roles(spec: Mapping[str, Any], key: str, default: Sequence[str], required: Sequence[str], optional: Sequence[str] = ()) -> List[str]:
    """A list naming the role of each model output, in model output order."""
    value = spec.get(key, list(default))
    known = set(required) | set(optional)
    if (
        not isinstance(value, (list, tuple))
        or not all(isinstance(v, str) for v in value)
        or len(set(value)) != len(value)
        or not set(required) <= set(value)
        or not set(value) <= known
    ):
        raise ConfigError(
            f"decoder.{key} must list the role of each model output in order, using each of {list(required)}"
            f"{' and optionally ' + str(list(optional)) if optional else ''} once; got {value!r}"
        )
    return list(value)
