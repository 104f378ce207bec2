"""One columnar detection type, in the spirit of supervision's `Detections`.

Coordinates are always `xyxy` float32 in the pixel space of the frame they refer to.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Union

import numpy as np

LABEL = "label"  # data key of the class names (N,) str, set by a decoder given labels
TRACK_ID = "track_id"  # data key of the track ids (N,) int64 set by the tracker; -1: in no confirmed track
# data keys of points (N, P, 2) as (x, y) in the boxes' pixel space: CenterFace's landmarks, a pose
# head's keypoints. Whatever moves the boxes moves these.
POINT_KEYS = ("landmarks", "keypoints")


@dataclass
class Detections:
    """N detections: `xyxy (N, 4) float32`, `confidence (N,) float32`, `class_id (N,) int32`.

    `data` holds extra per-detection arrays of length N (e.g. `landmarks (N, 5, 2)`, `label (N,)`);
    `metadata` holds free-form information about the whole set.
    """

    xyxy: np.ndarray
    confidence: np.ndarray
    class_id: np.ndarray
    data: Dict[str, np.ndarray] = field(default_factory=dict)
    metadata: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.xyxy = np.asarray(self.xyxy, dtype=np.float32).reshape(-1, 4)
        n = len(self.xyxy)
        self.confidence = np.asarray(self.confidence, dtype=np.float32).reshape(-1)
        self.class_id = np.asarray(self.class_id, dtype=np.int32).reshape(-1)
        if len(self.confidence) != n or len(self.class_id) != n:
            raise ValueError(
                f"Detections fields disagree in length: xyxy {n}, confidence {len(self.confidence)}, "
                f"class_id {len(self.class_id)}"
            )
        for key, value in self.data.items():
            value = np.asarray(value)
            if len(value) != n:
                raise ValueError(f"Detections.data[{key!r}] has length {len(value)}, expected {n}")
            self.data[key] = value

    @classmethod
    def empty(cls) -> "Detections":
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32))

    def __len__(self) -> int:
        return len(self.xyxy)

    def __getitem__(self, index: Union[np.ndarray, slice, List[int], int]) -> "Detections":
        if isinstance(index, (int, np.integer)):
            index = [int(index)]
        return Detections(
            self.xyxy[index],
            self.confidence[index],
            self.class_id[index],
            {k: v[index] for k, v in self.data.items()},
            dict(self.metadata),
        )

    @property
    def area(self) -> np.ndarray:
        return box_area(self.xyxy)

    @classmethod
    def merge(cls, items: Iterable["Detections"]) -> "Detections":
        items = [d for d in items if d is not None]
        if not items:
            return cls.empty()
        keys = set(items[0].data)
        for d in items[1:]:
            if set(d.data) != keys and len(d):
                keys &= set(d.data)
        nonempty = [d for d in items if len(d)] or items[:1]
        return cls(
            np.concatenate([d.xyxy for d in nonempty]),
            np.concatenate([d.confidence for d in nonempty]),
            np.concatenate([d.class_id for d in nonempty]),
            {k: np.concatenate([d.data[k] for d in nonempty]) for k in keys if all(k in d.data for d in nonempty)},
            dict(items[0].metadata),
        )

    def to_records(self, ndigits: int = 2) -> List[Dict[str, Any]]:
        """JSON-ready list: [{"xyxy": [...], "score": s, "class_id": c, "label": name, "track_id": t}, ...];
        "label" where `data["label"]` names the class (the decoder's labels), else left out;
        "track_id" where the tracker ran (`data["track_id"]`, -1: in no confirmed track)."""
        labels = self.data.get(LABEL)
        tracks = self.data.get(TRACK_ID)
        records = []
        for i, (box, s, c) in enumerate(zip(self.xyxy, self.confidence, self.class_id)):
            record: Dict[str, Any] = {"xyxy": [round(float(v), ndigits) for v in box], "score": round(float(s), 4),
                                      "class_id": int(c)}
            if labels is not None and labels[i]:
                record["label"] = str(labels[i])
            if tracks is not None:
                record["track_id"] = int(tracks[i])
            records.append(record)
        return records

    def tracked(self) -> "Detections":
        """The detections that have a confirmed track (`data["track_id"] >= 0`); none without
        track ids (tracking off)."""
        ids = self.data.get(TRACK_ID)
        return self[ids >= 0] if ids is not None else self[np.zeros(0, np.int64)]

    def label(self, i: int) -> str:
        """The class name of detection `i`, or "" when the decoder has no name for it."""
        labels = self.data.get(LABEL)
        return str(labels[i]) if labels is not None else ""


def box_area(xyxy: np.ndarray) -> np.ndarray:
    xyxy = np.asarray(xyxy, dtype=np.float32).reshape(-1, 4)
    return np.clip(xyxy[:, 2] - xyxy[:, 0], 0, None) * np.clip(xyxy[:, 3] - xyxy[:, 1], 0, None)


def box_iou(a: np.ndarray, b: np.ndarray, over: str = "union") -> np.ndarray:
    """Pairwise IoU (`over="union"`) or IoS (`over="smaller"`) between boxes a (N,4) and b (M,4)."""
    a = np.asarray(a, dtype=np.float32).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float32).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = np.clip(rb - lt, 0, None)
    inter = wh[..., 0] * wh[..., 1]
    area_a = box_area(a)[:, None]
    area_b = box_area(b)[None, :]
    if over == "union":
        denom = area_a + area_b - inter
    elif over == "smaller":
        denom = np.minimum(area_a, area_b)
    else:
        raise ValueError(f"over must be 'union' or 'smaller', not {over!r}")
    return np.where(denom > 0, inter / np.maximum(denom, 1e-12), 0.0).astype(np.float32)


def match_detections(pred: Detections, ref: Detections, iou: float = 0.5, class_aware: bool = True) -> Dict[str, float]:
    """Greedy one-to-one matching of `pred` against `ref` at an IoU threshold.

    Returns true positives, false positives, false negatives, precision, recall and f1 of
    `pred` measured against `ref` (treated as the truth). Two empty sets agree perfectly, and so
    do two identical boxes, even without an area (a box clipped flat at the frame's edge, whose
    IoU with itself is 0 / 0).
    """
    n_pred, n_ref = len(pred), len(ref)
    tp = 0
    if n_pred and n_ref:
        ious = box_iou(pred.xyxy, ref.xyxy)
        same = np.all(pred.xyxy[:, None, :] == ref.xyxy[None, :, :], axis=-1)
        ious = np.where(same, 1.0, ious)
        if class_aware:
            ious = np.where(pred.class_id[:, None] == ref.class_id[None, :], ious, 0.0)
        taken = np.zeros(n_ref, dtype=bool)
        for i in np.argsort(-pred.confidence, kind="stable"):
            row = np.where(taken, -1.0, ious[i])
            j = int(np.argmax(row))
            if row[j] >= iou:
                taken[j] = True
                tp += 1
    fp, fn = n_pred - tp, n_ref - tp
    precision = tp / n_pred if n_pred else (1.0 if n_ref == 0 else 0.0)
    recall = tp / n_ref if n_ref else (1.0 if n_pred == 0 else 0.0)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"tp": tp, "fp": fp, "fn": fn, "precision": precision, "recall": recall, "f1": f1}

