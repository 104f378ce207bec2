"""synthetic://faces: determinism, geometry of the ground truth, and a real detector's view of it."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.detections import match_detections
from edge_sdk.errors import SourceError
from edge_sdk.runtime.synthetic import MAX_OCCLUSION, SyntheticFaces

pytest.importorskip("cv2")


def small(**kw) -> SyntheticFaces:
    args = dict(width=320, height=240, count=6, seed=3, min_size=16, max_size=40)
    args.update(kw)
    return SyntheticFaces(**args)


@pytest.mark.parametrize("frame", [0, 1, 57, 10_000])
def test_a_seed_gives_the_same_video(frame: int) -> None:
    a, b, other = small(), small(), small(seed=4)
    np.testing.assert_array_equal(a.render(frame).copy(), b.render(frame))
    np.testing.assert_array_equal(a.ground_truth(frame).xyxy, b.ground_truth(frame).xyxy)
    assert not np.array_equal(a.render(frame), other.render(frame))


def test_random_access_matches_sequential_reads() -> None:
    seq, rand = small(frames=6), small()
    frames = [(f.copy(), g) for f, g in seq]
    assert len(frames) == 6
    for i in (5, 0, 3):
        np.testing.assert_array_equal(rand.render(i), frames[i][0])
        np.testing.assert_array_equal(rand.ground_truth(i).xyxy, frames[i][1].xyxy)
        assert frames[i][1].metadata["frame"] == i


def test_read_renders_into_one_reused_buffer_or_the_callers() -> None:
    src = small()
    first, _ = src.read()
    second, _ = src.read()
    assert first is second  # no per-frame frame allocation
    mine = np.zeros((240, 320, 3), np.uint8)
    out, _ = src.read(out=mine)
    assert out is mine and mine.any()
    with pytest.raises(SourceError, match=r"out must be a uint8 array of shape \(240, 320, 3\)"):
        src.read(out=np.zeros((10, 10, 3), np.uint8))


def test_a_finite_source_ends() -> None:
    src = small(frames=2)
    assert src.read() is not None and src.read() is not None
    assert src.read() is None and len(src) == 2
    with pytest.raises(TypeError):
        len(small())


def test_sizes_and_positions_stay_in_bounds_over_a_long_run() -> None:
    src = SyntheticFaces(width=640, height=360, count=12, seed=1, min_size=24, max_size=64)
    assert src.sizes.min() >= 24 and src.sizes.max() <= 64
    step = np.abs(src._velocity).max() + 1.0
    prev = src.positions(0)
    lo, hi = prev.copy(), prev.copy()
    for i in range(1, 3000):
        pos = src.positions(i)
        assert (pos >= 0).all() and (pos[:, 0] + src.sizes <= 640).all() and (pos[:, 1] + src.sizes <= 360).all()
        assert np.abs(pos - prev).max() <= step  # smooth: never jumps
        lo, hi = np.minimum(lo, pos), np.maximum(hi, pos)
        prev = pos
    span = np.stack([640 - src.sizes, 360 - src.sizes], axis=1)
    reached = (lo <= 1) | (hi >= span - 1)
    assert reached.any(axis=1).all()  # every face has bounced off some edge


def test_ground_truth_is_where_the_faces_are() -> None:
    src = SyntheticFaces(width=480, height=320, count=5, seed=11, min_size=30, max_size=60)
    for i in (0, 40, 90):
        frame = src.render(i).astype(np.int16)
        bg = src.background.astype(np.int16)
        changed = np.abs(frame - bg).max(axis=2) > 0
        pasted = np.zeros_like(changed)
        for x1, y1, x2, y2 in src.pasted_boxes(i).astype(int):
            pasted[y1:y2, x1:x2] = True
        assert not changed[~pasted].any()  # outside the faces: the background, untouched
        truth = src.ground_truth(i)
        assert len(truth) >= 1
        for x1, y1, x2, y2 in np.round(truth.xyxy).astype(int):
            assert 0 <= x1 < x2 <= 480 and 0 <= y1 < y2 <= 320
            assert np.abs(frame[y1:y2, x1:x2] - bg[y1:y2, x1:x2]).mean() > 10  # a face, not background


def test_faces_hidden_by_later_faces_leave_the_ground_truth() -> None:
    src = SyntheticFaces(width=160, height=120, count=30, seed=2, min_size=30, max_size=40)
    truth = src.ground_truth(0)
    assert 0 < len(truth) < 30
    boxes = src.pasted_boxes(0).astype(int)
    owner = np.full((120, 160), -1)
    for k, (x1, y1, x2, y2) in enumerate(boxes):  # paint in drawing order
        owner[y1:y2, x1:x2] = k
    for k in truth.data["track_id"]:
        x1, y1, x2, y2 = boxes[k]
        assert (owner[y1:y2, x1:x2] == k).mean() >= 1 - MAX_OCCLUSION


@pytest.mark.parametrize(
    "uri, expected",
    [
        ("synthetic://faces", dict(width=3840, height=2160, count=20, min_size=24, max_size=64)),
        ("synthetic://faces?width=640&height=360&fps=15&count=3&seed=9&min_size=20&max_size=30&frames=4&background=rocket",
         dict(width=640, height=360, fps=15.0, count=3, seed=9, min_size=20, max_size=30, frames=4, background_name="rocket")),
    ],
)
def test_from_uri(uri: str, expected) -> None:
    src = SyntheticFaces.from_uri(uri)
    for key, value in expected.items():
        assert getattr(src, key) == value


@pytest.mark.parametrize(
    "uri, message",
    [
        ("synthetic://cars", r"not a synthetic source URI"),
        ("file://faces", r"not a synthetic source URI"),
        ("synthetic://faces?colour=red", r"unknown parameter 'colour'.*known parameters: background, count"),
        ("synthetic://faces?width=big", r"width='big'.*is not a number"),
        ("synthetic://faces?width=100&height=100&max_size=120", r"max_size 120 does not fit in a 100x100 frame"),
        ("synthetic://faces?min_size=50&max_size=40", r"min_size <= max_size"),
        ("synthetic://faces?fps=0", r"fps must be positive"),
        ("synthetic://faces?background=beach", r"background must be one of \['coffee', 'rocket'\]"),
    ],
)
def test_bad_uris_say_what_to_fix(uri: str, message: str) -> None:
    with pytest.raises(SourceError, match=message):
        SyntheticFaces.from_uri(uri)


# -- what a real detector sees ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def detect(centerface_384x640_path):
    ort = pytest.importorskip("onnxruntime")
    from edge_sdk.decoders import CENTERFACE_DEFAULT, make_decoder
    from edge_sdk.preprocess import InputSpec, Preprocessor

    spec = InputSpec(name="input.1", shape=[1, 3, 384, 640])
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(centerface_384x640_path), options, providers=["CPUExecutionProvider"])
    pre, decoder = Preprocessor(spec), make_decoder(CENTERFACE_DEFAULT, spec)

    def run(frame):
        tensor, transform = pre(frame)
        return decoder(session.run(None, {"input.1": tensor}), [transform])[0]

    return run


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_centerface_finds_most_faces_of_30_px_and_more(detect, seed: int) -> None:
    src = SyntheticFaces(width=640, height=384, count=10, seed=seed, min_size=32, max_size=64)
    frame, truth = src.read()
    m = match_detections(detect(frame), truth, iou=0.5)
    assert m["recall"] >= 0.6 and m["precision"] >= 0.9, m


def test_small_faces_vanish_when_a_4k_frame_is_shrunk_to_the_network_input(detect) -> None:
    """The default 4K scene at 640 x 384: faces of 24-64 px become 4-11 px and are lost."""
    frame, truth = SyntheticFaces(seed=0).read()
    m = match_detections(detect(frame), truth, iou=0.5)
    assert len(truth) >= 15 and m["recall"] <= 0.2, m
