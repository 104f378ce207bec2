"""Objects carried from frame to frame with a constant velocity, for the ROI scheduler to look
where they will be."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

import numpy as np

from edge_sdk.detections import Detections, box_iou


@dataclass
class Track:
    box: np.ndarray  # float32 (4,) frame pixels, as last seen
    velocity: np.ndarray  # float32 (2,) pixels per frame
    last_seen: int
    score: float

    def predict(self, frame_index: int) -> np.ndarray:
        dt = frame_index - self.last_seen
        return self.box + np.tile(self.velocity * dt, 2)


def update_tracks(tracks: List[Track], det: Detections, index: int, iou: float, ttl: int, limit: int) -> List[Track]:
    """The tracks after frame `index` found `det`: a detection joins the track whose predicted
    box it overlaps most, at `iou` or more (each detection one track; the velocity is the
    running mean of the centre's motion per frame); the others start tracks; a track unseen
    for more than `ttl` frames ends; at most `limit` are kept, the most recently seen, then the
    most confident. `tracks` is updated in place and returned trimmed."""
    unmatched = np.ones(len(det), dtype=bool)
    if tracks and len(det):
        predicted = np.array([t.predict(index) for t in tracks], np.float32)
        ious = box_iou(predicted, det.xyxy)
        for ti in np.argsort(-ious.max(axis=1), kind="stable"):
            row = np.where(unmatched, ious[ti], -1.0)
            j = int(np.argmax(row))
            if row[j] < iou:
                continue
            t = tracks[ti]
            dt = max(1, index - t.last_seen)
            old_c = (t.box[:2] + t.box[2:]) / 2
            new_c = (det.xyxy[j, :2] + det.xyxy[j, 2:]) / 2
            t.velocity = (0.5 * t.velocity + 0.5 * (new_c - old_c) / dt).astype(np.float32)
            t.box = det.xyxy[j].copy()
            t.last_seen = index
            t.score = float(det.confidence[j])
            unmatched[j] = False
    for j in np.flatnonzero(unmatched):
        tracks.append(Track(det.xyxy[j].copy(), np.zeros(2, np.float32), index, float(det.confidence[j])))
    tracks = [t for t in tracks if index - t.last_seen <= ttl]
    if len(tracks) > limit:
        tracks = sorted(tracks, key=lambda t: (-t.last_seen, -t.score))[:limit]
    return tracks
