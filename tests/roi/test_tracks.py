"""The ROI scheduler's tracks against a constant-velocity oracle written out here: the velocity is
the running mean 0.5 * old + 0.5 * (centre moved / frames since last seen), so a gap of frames
in which the object was not found does not inflate it; the predicted box moves by the velocity
times the frames since last seen; a detection joins a track at `track_iou` or more, each
detection one track; a track lives `track_ttl` frames unseen; at most `max_tracks` are kept,
the most recently seen, then the most confident."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.detections import Detections
from edge_sdk.roi.strategies import RoiConfig, RoiScheduler


def nothing(images: List[np.ndarray]) -> List[Detections]:
    return [Detections.empty() for _ in images]


def scheduler(**config) -> RoiScheduler:
    return RoiScheduler(nothing, input_size=(64, 48), config=RoiConfig(**config))


def dets(boxes: Sequence[Sequence[float]], scores: Optional[Sequence[float]] = None) -> Detections:
    boxes = np.array(boxes, np.float32).reshape(-1, 4)
    scores = np.full(len(boxes), 0.9, np.float32) if scores is None else np.array(scores, np.float32)
    return Detections(boxes, scores, np.zeros(len(boxes)))


def box_at(cx: float, cy: float, w: float = 80.0, h: float = 64.0) -> List[float]:
    return [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]


@settings(max_examples=80, deadline=None)
@given(vx=st.integers(-4, 4), vy=st.integers(-4, 4),
       seen=st.lists(st.booleans(), min_size=2, max_size=9))
def test_velocity_with_gaps_in_detection(vx: int, vy: int, seen: List[bool]) -> None:
    sched = scheduler(track_ttl=20, track_iou=0.05)
    velocity = None
    last: Optional[Tuple[int, np.ndarray]] = None
    for index, found in enumerate([True] + seen):  # the object is found on frame 0, then where `seen`
        centre = np.array([300.0 + vx * index, 200.0 + vy * index])
        sched._update_tracks(dets([box_at(*centre)]) if found else Detections.empty(), index)
        if found:
            if last is None:
                velocity = np.zeros(2)
            else:
                gap = index - last[0]
                velocity = 0.5 * velocity + 0.5 * (centre - last[1]) / gap
            last = (index, centre)
        assert len(sched._tracks) == 1
        track = sched._tracks[0]
        np.testing.assert_allclose(track.velocity, velocity, atol=1e-4)
        assert track.last_seen == last[0]
        ahead = index + 3
        predicted = np.array(box_at(*(last[1] + velocity * (ahead - last[0]))), np.float32)
        np.testing.assert_allclose(track.predict(ahead), predicted, atol=1e-3)


@pytest.mark.parametrize("iou,joins", [(0.25, True), (0.2501, False), (0.0, True)])
def test_a_detection_joins_a_track_at_track_iou_or_more(iou: float, joins: bool) -> None:
    sched = scheduler(track_iou=iou)
    sched._update_tracks(dets([[0, 0, 10, 10]]), 0)
    sched._update_tracks(dets([[0, 0, 10, 10 / 4]], [0.7]), 1)  # inside: IoU 0.25 exactly
    tracks = sorted(sched._tracks, key=lambda t: t.last_seen)
    if joins:
        assert len(tracks) == 1 and tracks[0].last_seen == 1 and tracks[0].score == pytest.approx(0.7)
        np.testing.assert_allclose(tracks[0].velocity, [0.0, 0.5 * (1.25 - 5.0)], atol=1e-6)
    else:
        assert len(tracks) == 2 and [t.last_seen for t in tracks] == [0, 1]


def test_each_detection_joins_one_track_the_best_matched_first() -> None:
    sched = scheduler(track_iou=0.1)
    sched._update_tracks(dets([[0, 0, 10, 10], [4, 0, 14, 10]], [0.9, 0.8]), 0)
    sched._update_tracks(dets([[1, 0, 11, 10]], [0.6]), 1)  # overlaps both; joins the closer (IoU 9/11)
    by_seen = sorted(sched._tracks, key=lambda t: (t.last_seen, t.box[0]))
    assert [(t.last_seen, float(t.box[0])) for t in by_seen] == [(0, 4.0), (1, 1.0)]
    assert len(sched._tracks) == 2


@pytest.mark.parametrize("ttl,unseen,kept", [(3, 3, True), (3, 4, False), (0, 0, True), (0, 1, False)])
def test_a_track_lives_track_ttl_frames_unseen(ttl: int, unseen: int, kept: bool) -> None:
    sched = scheduler(track_ttl=ttl)
    sched._update_tracks(dets([[0, 0, 10, 10]]), 0)
    for index in range(1, unseen + 1):
        sched._update_tracks(Detections.empty(), index)
    assert len(sched._tracks) == int(kept)


def test_at_most_max_tracks_the_most_recent_then_the_most_confident() -> None:
    sched = scheduler(max_tracks=3, track_ttl=10)
    sched._update_tracks(dets([[0, 0, 10, 10], [100, 0, 110, 10]], [0.95, 0.9]), 0)
    sched._update_tracks(dets([[200, 0, 210, 10], [300, 0, 310, 10], [400, 0, 410, 10]], [0.5, 0.7, 0.6]), 1)
    kept = sorted((t.last_seen, float(t.box[0])) for t in sched._tracks)
    assert kept == [(1, 200.0), (1, 300.0), (1, 400.0)]  # the three seen last, however confident the older
    sched._update_tracks(dets([[500, 0, 510, 10], [600, 0, 610, 10]], [0.2, 0.8]), 5)
    kept = sorted((t.last_seen, float(t.box[0])) for t in sched._tracks)
    assert kept == [(1, 300.0), (5, 500.0), (5, 600.0)]  # then, among equally recent, the most confident


def test_a_track_moves_its_region_by_the_velocity_across_a_gap() -> None:
    """Through the scheduler: the region examined for a track is around its predicted box."""
    sched = scheduler(track_ttl=10, sweep_tiles=0, motion=False, roi_margin=0.0, roi_min_size=1)
    frame = np.zeros((360, 640, 3), np.uint8)  # not square
    sched._update_tracks(dets([box_at(300, 200)]), 0)
    sched._update_tracks(dets([box_at(304, 198)]), 1)  # velocity (2, -1) per frame
    sched.frame_index = 4  # frames 2 and 3 found nothing
    out = sched(frame)
    assert out.info["roi_sources"] == {"track": 1}
    (x0, y0, x1, y1), = out.info["rois"]
    assert ((x0 + x1) / 2, (y0 + y1) / 2) == pytest.approx((304 + 2 * 3, 198 - 1 * 3), abs=1.0)
