"""ByteTracker on hand-built scenes: the oracle is the scene itself (which object is which)."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.detections import Detections
from edge_sdk.errors import ConfigError
from edge_sdk.tracking.tracker import ByteTracker, StreamTrackers, TrackingConfig

Box = Tuple[float, float, float, float]


def dets(boxes: Sequence[Box], scores: Optional[Sequence[float]] = None, classes: Optional[Sequence[int]] = None) -> Detections:
    n = len(boxes)
    return Detections(np.array(boxes, np.float32).reshape(-1, 4), np.array(scores if scores is not None else [0.9] * n),
                      np.array(classes if classes is not None else [0] * n))


def box(cx: float, cy: float, w: float = 40, h: float = 40) -> Box:
    return (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)


def run(tracker: ByteTracker, frames: Sequence[Dict[str, Box]], scores: Optional[Dict[str, float]] = None) -> List[Dict[str, int]]:
    """Each frame's {object name: track id} (-1: none); objects given in a fixed order per frame."""
    out = []
    for objects in frames:
        names = sorted(objects)
        ids = tracker.update(dets([objects[k] for k in names], [(scores or {}).get(k, 0.9) for k in names]))
        out.append(dict(zip(names, ids.tolist())))
    return out


@pytest.mark.parametrize("w, h", [(40, 40), (24, 60), (60, 24)])
def test_two_objects_crossing_keep_their_ids(w: float, h: float) -> None:
    frames = [{"a": box(40 + 6 * f, 100, w, h), "b": box(280 - 6 * f, 104, w, h)} for f in range(40)]  # they meet at f = 20
    seen = run(ByteTracker(), frames)
    assert seen[0]["a"] != seen[0]["b"] and min(seen[0].values()) >= 1
    assert all(ids == seen[0] for ids in seen), [ids for ids in seen if ids != seen[0]][:3]


def test_an_object_occluded_for_k_frames_is_found_again_with_its_id() -> None:
    tracker = ByteTracker(TrackingConfig(buffer_frames=10))
    frames = [{"a": box(40 + 5 * f, 100)} for f in range(10)]
    frames += [{} for _ in range(8)]  # hidden, moving on
    frames += [{"a": box(40 + 5 * f, 100)} for f in range(18, 25)]
    seen = run(tracker, frames)
    assert {ids.get("a") for ids in seen if ids} == {1}


def test_a_track_lost_longer_than_the_buffer_ends_and_its_id_is_never_reused() -> None:
    tracker = ByteTracker(TrackingConfig(buffer_frames=5))
    seen = run(tracker, [{"a": box(100, 100)}] * 3)
    assert tracker.lost_ids == [] and tracker.active_ids == [1]
    run(tracker, [{}] * 5)
    assert tracker.lost_ids == [1]  # kept for the buffer: 5 frames
    run(tracker, [{}])
    assert tracker.tracks == []  # the sixth frame ends it
    back = run(tracker, [{"a": box(100, 100)}] * 3)
    assert [ids["a"] for ids in back] == [-1, 2, 2]  # a new track, confirmed on its second hit, a new id
    assert seen[0]["a"] == 1


def test_one_leaves_and_a_new_one_enters_with_a_new_id() -> None:
    frames = [{"a": box(300 + 20 * f, 100, 40, 40)} for f in range(5)]
    frames += [{"b": box(50, 300)} for _ in range(4)]
    seen = run(ByteTracker(), frames)
    assert [ids.get("a") for ids in seen[:5]] == [1] * 5
    assert [ids.get("b") for ids in seen[5:]] == [-1, 2, 2, 2]


def test_new_tracks_are_tentative_after_the_first_frame() -> None:
    tracker = ByteTracker()
    assert tracker.update(dets([box(50, 50)])).tolist() == [1]  # the first frame confirms at once
    assert tracker.update(dets([box(50, 50), box(300, 300)])).tolist() == [1, -1]
    assert tracker.update(dets([box(50, 50), box(300, 300)])).tolist() == [1, 2]


def test_a_tentative_track_missed_once_is_dropped() -> None:
    tracker = ByteTracker()
    tracker.update(dets([box(50, 50)]))
    tracker.update(dets([box(50, 50), box(300, 300)]))
    tracker.update(dets([box(50, 50)]))
    assert tracker.update(dets([box(50, 50), box(300, 300)])).tolist() == [1, -1]


def test_low_score_detections_keep_a_track_but_never_start_one() -> None:
    """The second stage: an object whose score drops (occlusion) keeps its track."""
    tracker = ByteTracker(TrackingConfig(buffer_frames=0))  # a track unmatched for one frame would end
    assert run(tracker, [{"a": box(100 + 4 * f, 100)} for f in range(3)])[-1] == {"a": 1}
    dim = run(tracker, [{"a": box(112 + 4 * f, 100)} for f in range(5)], scores={"a": 0.3})
    assert [ids["a"] for ids in dim] == [1] * 5
    fresh = ByteTracker()
    assert run(fresh, [{"x": box(100, 100)}] * 3, scores={"x": 0.3}) == [{"x": -1}] * 3
    assert fresh.tracks == []
    below = run(ByteTracker(TrackingConfig(buffer_frames=0)), [{"a": box(100, 100)}] * 2 + [{"a": box(100, 100)}],
                scores={"a": 0.05})
    assert below[-1] == {"a": -1}  # under low_score: ignored
    unsure = ByteTracker()
    run(unsure, [{"a": box(100, 100)}])
    assert run(unsure, [{"a": box(100, 100), "x": box(300, 300)}] * 3, scores={"x": 0.55})[-1] == {"a": 1, "x": -1}
    assert len(unsure.tracks) == 1  # high-score, but under new_track_score: matched first, never a track of its own


def test_classes_never_share_a_track() -> None:
    tracker = ByteTracker()
    assert tracker.update(dets([box(100, 100)], classes=[0])).tolist() == [1]
    assert tracker.update(dets([box(100, 100)], classes=[1])).tolist() == [-1]


def test_streams_have_their_own_tracks_and_the_input_is_left_as_it_was() -> None:
    trackers = StreamTrackers()
    found = dets([box(100, 100)])
    for _ in range(2):
        door = trackers.apply("door", found)
        yard = trackers.apply("yard", dets([box(100, 100), box(300, 300)]))
    assert door.data["track_id"].tolist() == [1] and door.data["track_id"].dtype == np.int64
    assert yard.data["track_id"].tolist() == [1, 2]
    assert "track_id" not in found.data  # the cache's detections stay untouched
    assert door.to_records()[0]["track_id"] == 1


def test_buffer_s_counts_at_the_streams_fps_and_a_detector_silent_for_10_s_ends_tracks_after_it() -> None:
    fps = 10.0
    cfg = TrackingConfig(buffer_s=2.0)
    assert cfg.buffer(fps) == 20 and cfg.buffer(None) == cfg.buffer_frames
    tracker = ByteTracker(cfg, fps=fps)
    run(tracker, [{"a": box(100, 100), "b": box(300, 300)}] * 3)
    kept = []
    for _ in range(int(10 * fps)):  # 10 s of frames without a box
        tracker.update(Detections.empty())
        kept.append(sorted(tracker.lost_ids))
    assert kept[:20] == [[1, 2]] * 20  # kept for the 2 s buffer
    assert kept[20:] == [[]] * 80 and tracker.tracks == []  # then ended
    assert run(tracker, [{"a": box(100, 100)}] * 2)[-1] == {"a": 3}


def test_config_is_checked() -> None:
    with pytest.raises(ConfigError, match="low_score"):
        TrackingConfig(low_score=0.6, high_score=0.5).validate()
    with pytest.raises(ConfigError, match="tracking.buffer_frames"):
        TrackingConfig(buffer_frames=-1).validate()


scene = st.lists(st.lists(st.tuples(st.floats(0, 600), st.floats(0, 400), st.floats(4, 120), st.floats(4, 120),
                                    st.floats(0, 1)), max_size=12), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(scene)
def test_ids_are_unique_in_a_frame_and_never_come_back_once_ended(frames) -> None:
    tracker = ByteTracker(TrackingConfig(buffer_frames=2))
    ended: set = set()
    alive_before: set = set()
    for objects in frames:
        found = dets([(x, y, x + w, y + h) for x, y, w, h, _ in objects], [s for *_, s in objects])
        ids = tracker.update(found)
        assert ids.shape == (len(objects),) and ids.dtype == np.int64
        given_ids = [i for i in ids.tolist() if i >= 0]
        assert len(given_ids) == len(set(given_ids))
        assert not set(given_ids) & ended
        alive = {t.id for t in tracker.tracks if t.id >= 0}
        ended |= alive_before - alive
        alive_before = alive


def test_a_lost_track_stops_growing_while_it_is_predicted() -> None:
    """ByteTrack zeroes a lost track's height velocity: an object that grew (came closer), hid for
    40 frames and shows again at the size it had is found again, not left behind by a prediction
    that kept growing."""
    tracker = ByteTracker(TrackingConfig(buffer_frames=60))
    for f in range(15):
        tracker.update(dets([box(200, 200, 40 + 4 * f, 40 + 4 * f)]))
    for _ in range(40):
        tracker.update(Detections.empty())
    assert tracker.update(dets([box(200, 200, 96, 96)])).tolist() == [1]


def test_predicted_is_where_an_object_moving_steadily_will_be_next() -> None:
    """The oracle is the scene: an object moving 6 px right and 2 px down a frame; after a few
    frames the tracker's prediction for the next frame is the object's next box."""
    tracker = ByteTracker()
    for f in range(12):
        tracker.update(dets([box(100 + 6 * f, 80 + 2 * f)]))
    boxes, scores, unseen, ids = tracker.predicted()
    np.testing.assert_allclose(boxes, [box(100 + 6 * 12, 80 + 2 * 12)], atol=1.0)
    assert scores.tolist() == pytest.approx([0.9]) and unseen.tolist() == [0] and ids.tolist() == [1]
    again = tracker.predicted()  # asking changes nothing
    np.testing.assert_array_equal(again[0], boxes)
    assert tracker.update(dets([box(100 + 6 * 12, 80 + 2 * 12)])).tolist() == [1]


def test_predicted_moves_a_lost_track_on_and_counts_the_frames_it_is_unseen() -> None:
    tracker = ByteTracker(TrackingConfig(buffer_frames=10))
    for f in range(12):
        tracker.update(dets([box(100 + 5 * f, 80)]))
    for k in range(1, 4):  # hidden, moving on
        tracker.update(dets([]))
        boxes, _, unseen, _ = tracker.predicted()
        assert unseen.tolist() == [k] and tracker.lost_ids == [1]
        np.testing.assert_allclose(boxes, [box(100 + 5 * (11 + k + 1), 80)], atol=1.5)


def test_predicted_holds_a_track_seen_once_where_it_was_and_nothing_for_no_tracks() -> None:
    tracker = ByteTracker()
    boxes, scores, unseen, ids = tracker.predicted()
    assert boxes.shape == (0, 4) and len(scores) == len(unseen) == len(ids) == 0
    tracker.update(dets([]))
    tracker.update(dets([box(50, 60)], [0.7]))  # after the first frame: tentative, no id yet
    assert tracker.active_ids == []
    boxes, scores, unseen, ids = tracker.predicted()
    np.testing.assert_allclose(boxes, [box(50, 60)], atol=1e-4)
    assert scores.tolist() == pytest.approx([0.7]) and unseen.tolist() == [0] and ids.tolist() == [-1]


def test_detections_tracked_by_the_detector_pass_through_the_streams_trackers() -> None:
    """Mode roi updates the stream's tracker itself: apply() must not move it a second time."""
    trackers = StreamTrackers()
    tracker = trackers.tracker("door")
    found = dets([box(50, 60)])
    found.data["track_id"] = tracker.update(found)
    out = trackers.apply("door", found)
    assert out is found and tracker.frame == 1
    assert trackers.apply("door", dets([box(50, 60)])).data["track_id"].tolist() == [1] and tracker.frame == 2


@pytest.mark.parametrize("score, starts", [(0.59, False), (0.6, True), (0.95, True)])
def test_an_unmatched_detection_starts_a_track_at_new_track_score_or_more(score: float, starts: bool) -> None:
    assert TrackingConfig().starts_track(np.array([score])).tolist() == [starts]
    tracker = ByteTracker()
    tracker.update(dets([]))
    tracker.update(dets([box(50, 60)], [score]))
    assert len(tracker.tracks) == int(starts)
