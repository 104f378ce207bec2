"""The ROI scheduler looks where the stream's tracker expects its tracks: the oracle is the scene
(an object moving at a constant speed), not the tracker's arithmetic. The tracker is the one the
pipeline gives (its ids in the result) or the scheduler's own (no ids); lost tracks keep regions
for `track_ttl` frames while the tracker keeps them longer; at most `max_tracks` get regions."""
from __future__ import annotations

from typing import List, Sequence

import numpy as np
import pytest

from edge_sdk.detections import TRACK_ID, Detections
from edge_sdk.roi.strategies import RoiConfig, RoiScheduler, make_strategy
from edge_sdk.tracking.tracker import ByteTracker, TrackingConfig

FRAME = np.zeros((360, 640, 3), np.uint8)


def nothing(images: List[np.ndarray]) -> List[Detections]:
    return [Detections.empty() for _ in images]


def scheduler(detect=nothing, **config) -> RoiScheduler:
    config = dict(dict(sweep_tiles=0, motion=False, roi_margin=0.0, roi_min_size=1), **config)
    return RoiScheduler(detect, input_size=(64, 48), config=RoiConfig(**config))


def box_at(cx: float, cy: float, w: float = 40.0, h: float = 32.0) -> List[float]:
    return [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]


def dets(boxes: Sequence[Sequence[float]], scores: Sequence[float] = ()) -> Detections:
    boxes = np.array(boxes, np.float32).reshape(-1, 4)
    return Detections(boxes, np.array(scores or [0.9] * len(boxes), np.float32), np.zeros(len(boxes)))


def centres(info) -> List[List[float]]:
    return [[(x0 + x1) / 2, (y0 + y1) / 2] for x0, y0, x1, y1 in info["rois"]]


def test_a_lost_track_keeps_its_region_where_the_object_goes_for_track_ttl_frames() -> None:
    tracker = ByteTracker(TrackingConfig(buffer_frames=30))
    for f in range(10):  # found moving 4 px right and 2 px up a frame
        tracker.update(dets([box_at(200 + 4 * f, 200 - 2 * f)]))
    sched = scheduler(track_ttl=3)
    for k in range(6):  # the model finds nothing from frame 10 on; the object moves on
        out = sched(FRAME, tracker=tracker)
        if k <= 3:  # unseen for k frames
            assert out.info["roi_sources"] == {"track": 1} and out.info["tracks"] == 1
            np.testing.assert_allclose(centres(out.info), [[200 + 4 * (10 + k), 200 - 2 * (10 + k)]], atol=2.0)
        else:
            assert out.info["rois"] == [] and out.info["tracks"] == 0
        assert tracker.frame == 11 + k  # moved once a frame, by the scheduler
    assert tracker.lost_ids == [1]  # still in the tracker's buffer: found again, it keeps its id
    assert tracker.update(dets([box_at(200 + 4 * 16, 200 - 2 * 16)])).tolist() == [1]


def test_with_the_streams_tracker_the_detections_carry_its_ids() -> None:
    def one_face(images: List[np.ndarray]) -> List[Detections]:  # in the coarse pass (the frame fits the input)
        return [dets([[10, 8, 30, 28]])] + [Detections.empty() for _ in images[1:]]

    tracker = ByteTracker()
    frame = np.zeros((48, 64, 3), np.uint8)
    given = scheduler(one_face)
    for f in range(3):
        out = given(frame, tracker=tracker)
        assert out.detections.data[TRACK_ID].tolist() == [1] and out.track_ms is not None and out.track_ms >= 0
    assert tracker.frame == 3 and given.tracker is tracker
    own = scheduler(one_face)
    out = own(frame)
    assert TRACK_ID not in out.detections.data and out.track_ms is None
    assert own.tracker is not tracker and own.tracker.frame == 1  # its own tracker follows the object
    assert own(frame).info["roi_sources"] == {"track": 1}


def test_at_most_max_tracks_get_regions_the_most_recently_seen_then_the_most_confident() -> None:
    tracker = ByteTracker(TrackingConfig(buffer_frames=30))
    old = [box_at(40, 40), box_at(140, 40)]
    tracker.update(dets(old, [0.95, 0.9]))
    new = [box_at(40, 200), box_at(140, 200), box_at(240, 200)]
    for _ in range(2):  # confirmed on their second hit; the first two are lost
        tracker.update(dets(new, [0.6, 0.8, 0.7]))
    out = scheduler(max_tracks=2, track_ttl=10)(FRAME, tracker=tracker)
    # the recent ones, the most confident first, however confident the older
    np.testing.assert_allclose(centres(out.info), [[140, 200], [240, 200]], atol=1.0)
    assert out.info["tracks"] == 2


def test_what_the_tracker_keeps_no_track_of_gets_a_region_in_the_next_frame() -> None:
    """A face found at 0.55 (above the output threshold, below tracking.new_track_score 0.6)
    starts no track; the scheduler still looks there in the next frame, and only then."""
    calls = []

    def once(images: List[np.ndarray]) -> List[Detections]:  # in the first coarse pass only
        calls.append(len(calls))
        return [dets([[10, 8, 30, 28]], [0.55]) if len(calls) == 1 else Detections.empty()] + \
            [Detections.empty() for _ in images[1:]]

    tracker = ByteTracker()
    sched = scheduler(once)
    frame = np.zeros((48, 64, 3), np.uint8)
    first = sched(frame, tracker=tracker)
    assert first.detections.data[TRACK_ID].tolist() == [-1] and tracker.tracks == []
    assert sched(frame, tracker=tracker).info["rois"] == [[10, 8, 30, 28]]
    assert sched(frame, tracker=tracker).info["rois"] == []


def test_every_strategy_says_whether_it_follows_tracks() -> None:
    assert [make_strategy(mode, nothing, (64, 48)).follows_tracks for mode in ("full", "tiles", "roi")] == [False, False, True]


def test_a_new_clip_forgets_the_schedulers_own_tracks_but_not_a_streams_tracker() -> None:
    tracker = ByteTracker()
    tracker.update(dets([box_at(100, 100)]))
    sched = scheduler()
    sched.tracker.update(dets([box_at(300, 100)]))
    sched.reset()
    assert sched.tracker.tracks == [] and len(tracker.tracks) == 1
    assert sched(FRAME, tracker=tracker).info["roi_sources"] == {"track": 1}
