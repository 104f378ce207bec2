"""The launch plan of the GPU preprocessor (edge_sdk/cuda/preprocess.py) on configurations the
default spec never builds: non-square networks both ways round, every resize mode and placement
with both interpolations, ROI crops wide, tall and tiny in one launch at an offset slot. Oracles:
the CPU Preprocessor on each crop (the kernels run through the host shim), the documented rule
for OpenCV's resampling choice, and a grid that covers the network input exactly."""
from __future__ import annotations

from typing import List, Tuple

import numpy as np
import pytest

from edge_sdk.cuda.preprocess import (
    BLOCK,
    MAX_PLANS,
    RESIZE_AREA,
    RESIZE_AREA_GROW,
    RESIZE_LINEAR,
    GpuPreprocessor,
    _kernel_ready,
    plan_slot,
    resize_mode,
)
from edge_sdk.preprocess import InputSpec, Preprocessor, plan_transform
from fakes.fake_cuda_host import DISCRETE, XAVIER_NX

from test_gpu_preprocess import MEAN, SCALE, assert_matches_cpu, noise

MODES = [("letterbox", "center"), ("letterbox", "top-left"), ("stretch", "center")]
REGIONS: List[Tuple[int, int, int, int]] = [
    (0, 0, 300, 40),      # wide
    (10, 5, 30, 200),     # tall
    (299, 199, 300, 200),  # one pixel, at the far corner
    (0, 0, 300, 200),     # the whole frame
    (37, 11, 188, 93),
]


@pytest.mark.parametrize("net", [(96, 160), (160, 96)], ids=["wide-net", "tall-net"])
@pytest.mark.parametrize("resize,placement", MODES)
@pytest.mark.parametrize("interpolation", ["linear", "area"])
def test_roi_slots_on_non_square_networks_match_the_cpu_in_every_mode(fake_gpu, net, resize, placement,
                                                                      interpolation) -> None:
    api, cache = fake_gpu(DISCRETE)
    spec = InputSpec(shape=[len(REGIONS) + 2, 3, net[0], net[1]], resize=resize, placement=placement,
                     interpolation=interpolation, color="RGB", mean=MEAN, scale=SCALE, pad_value=114)
    frame = noise(200, 300, seed=11)
    pre = GpuPreprocessor(spec, api, cache=cache)
    transforms = pre.fill_rois(frame, REGIONS, first=2)
    out = pre.download()
    cpu = Preprocessor(spec)
    for i, (x0, y0, x1, y1) in enumerate(REGIONS):
        assert transforms[i] == cpu.fill(frame[y0:y1, x0:x1], i + 2)
    assert_matches_cpu(out[2:], cpu.tensor[2:], spec)


@pytest.mark.parametrize("net", [(96, 160), (160, 96), (33, 65)])
@pytest.mark.parametrize("resize,placement", MODES)
def test_whole_frames_on_non_square_networks_match_the_cpu(fake_gpu, net, resize, placement) -> None:
    api, cache = fake_gpu(XAVIER_NX)
    spec = InputSpec(shape=[2, 3, net[0], net[1]], resize=resize, placement=placement, interpolation="area")
    pre = GpuPreprocessor(spec, api, cache=cache)
    for index, (h, w) in enumerate([(241, 97), (97, 241)]):  # a tall and a wide frame into slots 0 and 1
        frame = noise(h, w, seed=h)
        transform = pre.fill(frame, index)
        cpu = Preprocessor(spec)
        assert transform == cpu.fill(frame, index)
        assert_matches_cpu(pre.download()[index:index + 1], cpu.tensor[index:index + 1], spec)


@pytest.mark.parametrize("net", [(1, 1), (8, 32), (9, 33), (384, 640), (640, 384), (31, 1)])
def test_the_grid_covers_the_network_input_exactly(fake_gpu, net) -> None:
    api, cache = fake_gpu()
    pre = GpuPreprocessor(InputSpec(shape=[3, 3, net[0], net[1]]), api, cache=cache)
    for slots in (1, 3):
        gx, gy, gz = pre._grid(slots)
        assert gz == slots
        assert (gx - 1) * BLOCK[0] < net[1] <= gx * BLOCK[0]
        assert (gy - 1) * BLOCK[1] < net[0] <= gy * BLOCK[1]


@pytest.mark.parametrize("src,dst", [((1920, 1080), (640, 360)), ((640, 360), (640, 360)), ((641, 360), (640, 360)),
                                     ((641, 359), (640, 360)), ((640, 361), (639, 360)), ((100, 100), (200, 50)),
                                     ((200, 50), (100, 100)), ((1, 1), (1, 1))])
def test_the_resampling_follows_opencvs_choice(src, dst) -> None:
    """"area": INTER_AREA only when the width shrinks; a true area average only when no axis grows."""
    (sw, sh), (dw, dh) = src, dst
    expected = RESIZE_LINEAR if dw >= sw else (RESIZE_AREA if dh <= sh else RESIZE_AREA_GROW)
    assert resize_mode(sw, sh, dw, dh, "area") == expected
    assert resize_mode(sw, sh, dw, dh, "linear") == RESIZE_LINEAR


@pytest.mark.parametrize("resize,placement", MODES)
@pytest.mark.parametrize("crop", [(0, 0, 640, 360), (5, 7, 33, 200), (100, 3, 400, 20)])
def test_a_slot_is_the_crop_and_where_its_letterbox_places_it(crop, resize, placement) -> None:
    spec = InputSpec(shape=[1, 3, 96, 160], resize=resize, placement=placement, interpolation="area")
    transform, slot = plan_slot(crop, spec)
    expected, region = plan_transform(crop[2], crop[3], 160, 96, resize, placement)
    assert transform == expected
    assert slot[:4] == crop and slot[4:8] == region
    assert slot[8] == resize_mode(crop[2], crop[3], region[2], region[3], "area")


def test_plans_are_kept_up_to_their_bound_and_then_started_over(fake_gpu) -> None:
    api, cache = fake_gpu(DISCRETE)
    pre = GpuPreprocessor(InputSpec(shape=[1, 3, 8, 8]), api, cache=cache, use_graphs=False)
    widths = list(range(MAX_PLANS + 2, 0, -1))  # the largest first: the staging buffer never grows
    counts = []
    for w in widths:
        pre.fill(noise(4, w, seed=w))
        counts.append(len(pre._plans))
    assert counts[:MAX_PLANS] == list(range(1, MAX_PLANS + 1)) and counts[MAX_PLANS:] == [1, 2]
    # and a frame still comes out right after the plans were dropped
    assert_matches_cpu(pre.download(), Preprocessor(pre.spec)(noise(4, 1, seed=1))[0], pre.spec)


def test_a_frame_is_read_in_place_only_with_packed_pixels_and_rows_at_least_a_row_apart() -> None:
    base = np.zeros((4, 10, 3), np.uint8)
    assert _kernel_ready(base) and _kernel_ready(np.zeros((4, 10, 4), np.uint8)[:, :, :3]) is False
    assert _kernel_ready(np.zeros((4, 12, 3), np.uint8)[:, :10])  # pitch 36 >= 30
    overlapping = np.lib.stride_tricks.as_strided(base, shape=(4, 10, 3), strides=(29, 3, 1))
    assert not _kernel_ready(overlapping)
    exact = np.lib.stride_tricks.as_strided(base, shape=(4, 10, 3), strides=(30, 3, 1))
    assert _kernel_ready(exact)
    assert not _kernel_ready(base[:, :, ::-1])


@pytest.mark.parametrize("factor", [2, 3, 4])
@pytest.mark.parametrize("net", [(96, 160), (160, 96)], ids=["wide-net", "tall-net"])
def test_whole_number_shrinks_take_the_area_shortcut_and_match_the_cpu(fake_gpu, net, factor) -> None:
    """A frame exactly 2x, 3x or 4x the network input: OpenCV averages whole blocks (its 2x2 case
    rounds halves up); random pixels make a quarter of the 2x2 sums end in a half."""
    api, cache = fake_gpu()
    spec = InputSpec(shape=[1, 3, net[0], net[1]], interpolation="area")
    frame = noise(net[0] * factor, net[1] * factor, seed=factor)
    pre = GpuPreprocessor(spec, api, cache=cache)
    pre.fill(frame)
    cpu = Preprocessor(spec)(frame)[0]
    out = pre.download()
    assert_matches_cpu(out, cpu, spec)
    assert np.mean(out != cpu) <= 1e-3


def test_slots_and_regions_at_their_edges(fake_gpu) -> None:
    from edge_sdk.errors import SourceError

    api, cache = fake_gpu()
    pre = GpuPreprocessor(InputSpec(shape=[3, 3, 16, 24]), api, cache=cache)
    frame = noise(50, 60)
    pre.fill(frame, 2)  # the last slot
    for index in (3, -1):
        with pytest.raises(IndexError):
            pre.fill(frame, index)
    pre.fill_rois(frame, [(0, 0, 60, 50)], first=2)  # flush with the frame, into the last slot
    pre.fill_rois(frame, [(0, 0, 1, 1)] * 3)          # exactly the batch
    assert pre.fill_rois(frame, []) == []
    with pytest.raises(IndexError):
        pre.fill_rois(frame, [(0, 0, 1, 1)] * 2, first=2)
    with pytest.raises(IndexError):
        pre.fill_rois(frame, [(0, 0, 1, 1)], first=-1)
    for bad in [(0, 0, 60, 51), (-1, 0, 10, 10), (0, -1, 10, 10), (10, 10, 9, 20), (10, 10, 20, 10)]:
        with pytest.raises(SourceError):
            pre.fill_rois(frame, [bad])


@pytest.mark.parametrize("props,asked,staged_bytes", [(XAVIER_NX, "mapped", 0), (XAVIER_NX, "pinned", 1),
                                                      (DISCRETE, "mapped", 0), (DISCRETE, None, 1)])
def test_a_staged_frame_is_copied_once_exactly_when_not_mapped(fake_gpu, props, asked, staged_bytes) -> None:
    """Pinned staging copies the frame's h * w * 3 bytes before the kernel; mapped staging copies
    nothing; the default is pinned."""
    api, cache = fake_gpu(props)
    pre = GpuPreprocessor(InputSpec(shape=[1, 3, 16, 24]), api, cache=cache, frame_memory=asked, use_graphs=False)
    frame = noise(37, 53)
    pre.fill(frame)
    out = pre.download()
    copies = [op for op in api.executed if op.startswith("htod")]
    assert copies == [f"htod:{37 * 53 * 3}"] * staged_bytes
    assert pre.frame_memory == ("mapped" if staged_bytes == 0 else "pinned")
    assert_matches_cpu(out, Preprocessor(pre.spec)(frame)[0], pre.spec)


@pytest.mark.parametrize("net", [(96, 160), (160, 96)], ids=["wide-net", "tall-net"])
def test_a_frame_already_on_the_device_is_read_there_with_its_row_pitch(fake_gpu, net) -> None:
    """device_ptr=: the pixels were copied to the device earlier on the same stream; nothing is
    staged, and the kernel reads rows `frame.strides[0]` bytes apart."""
    api, cache = fake_gpu(DISCRETE)
    spec = InputSpec(shape=[1, 3, net[0], net[1]], resize="letterbox", placement="top-left")
    pre = GpuPreprocessor(spec, api, cache=cache)
    host = api.alloc_host((120, 90, 3), np.uint8)
    host.array[...] = noise(120, 90, seed=9)
    device = api.alloc_device(host.nbytes)
    api.copy_htod(device, host, host.nbytes, pre.stream)
    transform = pre.fill(host.array, 0, device_ptr=device.ptr)
    out = pre.download()
    cpu = Preprocessor(spec)
    assert transform == cpu.fill(host.array, 0)
    assert_matches_cpu(out, cpu.tensor, spec)
    assert pre.device_frames == 1 and pre.staged_frames == 0
