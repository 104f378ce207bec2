"""Tracks with ids that stay with an object: ByteTrack's association over a Kalman motion model.

    tracker = ByteTracker(TrackingConfig(), fps=30)
    ids = tracker.update(detections)            # (N,) int64: the track of each detection, -1: none

Per frame (ByteTrack, Zhang et al. 2022):
1. Every confirmed track, tracked or lost, is moved one frame ahead by its Kalman filter (a lost
   one with its height velocity zeroed); a tentative one, seen once, has no velocity yet.
2. High-score detections (score >= `high_score`) are matched to those tracks by IoU weighted by the
   detection's score, at most `match_cost` apart (cost = 1 - IoU x score).
3. Low-score detections (`low_score` <= score < `high_score`: a box the detector is less sure of,
   often an occluded object) are matched by plain IoU to the tracked tracks still unmatched
   (cost < `low_match_cost`); the tracked tracks left over become lost.
4. Tentative tracks (seen once) are matched to the high-score detections left (cost <
   `tentative_match_cost`); one not matched is dropped.
5. A high-score detection still unmatched, at or above `new_track_score`, starts a tentative track;
   in the first frame a track is confirmed at once, later on its second hit.
6. A track lost for more than `buffer` frames ends. Ids count up from 1 and are never reused in one
   tracker; a track gets its id when it is confirmed.

Detections of different classes never match one track. A stream's tracker is its own:
:class:`StreamTrackers` keeps one per stream id.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from edge_sdk.config_schema import check_fields, key
from edge_sdk.detections import TRACK_ID, Detections, box_iou
from edge_sdk.errors import ConfigError
from edge_sdk.tracking.assignment import assign
from edge_sdk.tracking.kalman import KalmanFilter, xyah_to_xyxy, xyxy_to_xyah

NO_TRACK = -1
TRACKED, LOST = 0, 1


@dataclass
class TrackingConfig:
    """[tracking]: ByteTrack's thresholds and its lost-track buffer."""

    enabled: bool = True  # a track id on every detection (-1: in no confirmed track yet); false: no tracking
    high_score: float = key(0.5, low=0, high=1)  # detections at or above it are matched first and may start tracks
    low_score: float = key(0.1, low=0, high=1)  # detections below high_score but at or above this are matched second; below, ignored
    new_track_score: float = key(0.6, low=0, high=1)  # an unmatched detection at or above it starts a track
    match_cost: float = key(0.8, low=0, high=1)  # first stage: largest 1 - IoU x score of a match
    low_match_cost: float = key(0.5, low=0, high=1)  # second stage: largest 1 - IoU of a match
    tentative_match_cost: float = key(0.7, low=0, high=1)  # a track seen once: largest 1 - IoU x score of its second hit
    buffer_frames: int = key(30, low=0, high=100000)  # frames a lost track is kept for, waiting to be found again
    buffer_s: Optional[float] = key(None, low=0, high=3600)  # the same in seconds at the stream's fps (wins over buffer_frames when the fps is known)

    def validate(self, origin: str = "config") -> "TrackingConfig":
        check_fields(self, origin, "tracking")
        if self.low_score > self.high_score:
            raise ConfigError(f"{origin}: tracking.low_score ({self.low_score}) is above tracking.high_score "
                              f"({self.high_score}): set it lower")
        return self

    def starts_track(self, scores: np.ndarray) -> np.ndarray:
        """Which detections of these scores start a track where no track takes them: the
        high-score ones at or above `new_track_score`; a tracker keeps nothing of the others."""
        scores = np.asarray(scores)
        return (scores >= self.high_score) & (scores >= self.new_track_score)

    def buffer(self, fps: Optional[float] = None) -> int:
        """The lost-track buffer in frames: `buffer_s` at `fps` where both are known."""
        if self.buffer_s is not None and fps:
            return int(math.ceil(self.buffer_s * fps))
        return self.buffer_frames


class _Track:
    __slots__ = ("id", "mean", "cov", "score", "class_id", "state", "confirmed", "last_frame")

    def __init__(self, mean: np.ndarray, cov: np.ndarray, score: float, class_id: int, frame: int) -> None:
        self.id = NO_TRACK
        self.mean, self.cov = mean, cov
        self.score, self.class_id = score, class_id
        self.state = TRACKED
        self.confirmed = False
        self.last_frame = frame


class ByteTracker:
    """One stream's tracks. `fps`: the stream's rate, for `buffer_s`."""

    def __init__(self, config: Optional[TrackingConfig] = None, fps: Optional[float] = None) -> None:
        self.config = (config or TrackingConfig()).validate()
        self.max_lost = self.config.buffer(fps)
        self.kalman = KalmanFilter()
        self.frame = 0
        self.tracks: List[_Track] = []  # tracked (confirmed or tentative) and lost, in order of creation
        self._next_id = 1

    @property
    def active_ids(self) -> List[int]:
        """Ids of the confirmed tracks followed in the last frame."""
        return [t.id for t in self.tracks if t.confirmed and t.state == TRACKED]

    @property
    def lost_ids(self) -> List[int]:
        return [t.id for t in self.tracks if t.state == LOST]

    def update(self, detections: Detections) -> np.ndarray:
        """The track id of each detection of this frame (-1: none), the tracks moved on."""
        cfg = self.config
        self.frame += 1
        n = len(detections)
        ids = np.full(n, NO_TRACK, np.int64)
        scores = detections.confidence.astype(np.float64)
        high = np.nonzero(scores >= cfg.high_score)[0]
        low = np.nonzero((scores >= cfg.low_score) & (scores < cfg.high_score))[0]
        self._predict()
        pool = [t for t in self.tracks if t.confirmed]
        tentative = [t for t in self.tracks if not t.confirmed]

        matched, free_tracks, free_high = self._match(pool, detections, high, cfg.match_cost, fuse=True)
        self._apply(matched, detections, ids)
        still = [t for t in free_tracks if t.state == TRACKED]
        matched, unmatched, _ = self._match(still, detections, low, cfg.low_match_cost, fuse=False)
        self._apply(matched, detections, ids)
        for track in unmatched:
            track.state = LOST
        matched, dropped, free_high = self._match(tentative, detections, free_high, cfg.tentative_match_cost, fuse=True)
        self._apply(matched, detections, ids)
        gone = {id(t) for t in dropped}
        for track in self.tracks:
            if track.state == LOST and self.frame - track.last_frame > self.max_lost:
                gone.add(id(track))
        self.tracks = [t for t in self.tracks if id(t) not in gone]
        for i in free_high:
            if not cfg.starts_track(scores[i]):
                continue
            mean, cov = self.kalman.initiate(xyxy_to_xyah(detections.xyxy[i])[0])
            track = _Track(mean, cov, float(scores[i]), int(detections.class_id[i]), self.frame)
            self.tracks.append(track)
            if self.frame == 1:
                self._confirm(track)
                ids[i] = track.id
        return ids

    def predicted(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Where each track is looked for in the next frame, as `update` will look for it: boxes
        (N, 4) float32 xyxy (a confirmed track moved on by its Kalman filter, a lost one with its
        height velocity zeroed; a tentative one where it was seen), the score each was last seen
        with (N,) float32, the frames since then (N,) int64 (0: found in the last frame) and the
        ids (N,) int64 (-1: tentative, seen once). Every track kept, tracked or lost within the
        buffer, in order of creation; nothing changes."""
        if not self.tracks:
            return (np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64),
                    np.zeros(0, np.int64))
        mean = np.stack([t.mean for t in self.tracks])
        moving = np.array([t.confirmed for t in self.tracks])
        if moving.any():
            mean[moving] = self._moved([t for t in self.tracks if t.confirmed])[0]
        boxes = xyah_to_xyxy(mean[:, :4]).astype(np.float32)
        scores = np.array([t.score for t in self.tracks], np.float32)
        unseen = np.array([self.frame - t.last_frame for t in self.tracks], np.int64)
        return boxes, scores, unseen, np.array([t.id for t in self.tracks], np.int64)

    # -- the steps
    def _moved(self, tracks: List[_Track]) -> Tuple[np.ndarray, np.ndarray]:
        """Means (N, 8) and covariances (N, 8, 8) of confirmed `tracks` one frame ahead (a lost
        one with its height velocity zeroed); the tracks keep theirs."""
        mean = np.stack([t.mean for t in tracks])
        cov = np.stack([t.cov for t in tracks])
        mean[[t.state != TRACKED for t in tracks], 7] = 0.0
        return self.kalman.predict(mean, cov)

    def _predict(self) -> None:
        moving = [t for t in self.tracks if t.confirmed]
        if not moving:
            return
        mean, cov = self._moved(moving)
        for k, track in enumerate(moving):
            track.mean, track.cov = mean[k], cov[k]

    def _match(self, tracks: List[_Track], detections: Detections, which: np.ndarray, limit: float, fuse: bool):
        """(matched (track, detection index) pairs, tracks left, detection indices left)."""
        if not tracks or not len(which):
            return [], list(tracks), which
        boxes = xyah_to_xyxy(np.stack([t.mean[:4] for t in tracks]))
        iou = box_iou(boxes, detections.xyxy[which]).astype(np.float64)
        if fuse:
            iou = iou * detections.confidence[which][None, :]
        same = np.array([t.class_id for t in tracks])[:, None] == detections.class_id[which][None, :]
        cost = np.where(same, 1.0 - iou, 1.0)
        pairs, free_rows, free_cols = assign(cost, limit)
        matched = [(tracks[r], int(which[c])) for r, c in pairs]
        return matched, [tracks[r] for r in free_rows], which[free_cols]

    def _apply(self, matched, detections: Detections, ids: np.ndarray) -> None:
        if not matched:
            return
        which = [i for _, i in matched]
        mean, cov = self.kalman.update(np.stack([t.mean for t, _ in matched]), np.stack([t.cov for t, _ in matched]),
                                       xyxy_to_xyah(detections.xyxy[which]))
        for k, (track, i) in enumerate(matched):
            track.mean, track.cov = mean[k], cov[k]
            track.score = float(detections.confidence[i])
            track.state = TRACKED
            track.last_frame = self.frame
            if not track.confirmed:
                self._confirm(track)
            ids[i] = track.id

    def _confirm(self, track: _Track) -> None:
        track.confirmed = True
        track.id = self._next_id
        self._next_id += 1


class StreamTrackers:
    """One ByteTracker per stream id, made at the stream's first frame.

    `apply(stream, detections)` returns the detections with `data["track_id"]` set (a new
    Detections sharing the arrays: the one passed in may be the prediction cache's). `fps`:
    {stream id: its rate} for `buffer_s`.

    A detector may follow the stream's tracker itself (mode roi: the ROI scheduler proposes
    regions from its tracks and updates it with the frame's detections, the tracker given on
    the Frame, :attr:`edge_sdk.runtime.frame.Frame.tracker`): detections that come with their
    track ids already were tracked by it, and `apply` passes them on as they are, so each
    stream's one tracker moves once per frame."""

    def __init__(self, config: Optional[TrackingConfig] = None, fps: Optional[Dict[str, float]] = None) -> None:
        self.config = (config or TrackingConfig()).validate()
        self.fps = dict(fps or {})
        self.trackers: Dict[str, ByteTracker] = {}

    def tracker(self, stream: str) -> ByteTracker:
        found = self.trackers.get(stream)
        if found is None:
            found = self.trackers[stream] = ByteTracker(self.config, self.fps.get(stream) or None)
        return found

    def apply(self, stream: str, detections: Detections) -> Detections:
        if TRACK_ID in detections.data:  # tracked by the detector, with this stream's tracker
            return detections
        ids = self.tracker(stream).update(detections)
        return Detections(detections.xyxy, detections.confidence, detections.class_id,
                          dict(detections.data, **{TRACK_ID: ids}), dict(detections.metadata))
