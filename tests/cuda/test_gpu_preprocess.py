"""The preprocessing kernels' source, run on the CPU through the host shim, against the CPU
Preprocessor (edge_sdk.preprocess), through GpuPreprocessor and the fake CUDA of our interface.

Tolerance (stated in edge_sdk/cuda/preprocess.py): every element within |scale| of the CPU
value (one grey level; float16 adds one float16 rounding step), at most 0.1 % of the elements
different at all. The frames are random colour noise, so a resampling, channel-order, pitch or
slot mistake changes many elements by far more.
"""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.cuda import DeviceTensor
from edge_sdk.cuda.preprocess import GpuPreprocessor, RESIZE_AREA, RESIZE_AREA_GROW, RESIZE_LINEAR, resize_mode
from edge_sdk.errors import ConfigError, CudaError, SourceError
from edge_sdk.preprocess import InputSpec, Preprocessor
from fakes.fake_cuda_host import DISCRETE, XAVIER_NX

# ImageNet's statistics in BGR order: fractional means, so float16's two roundings (the CPU
# rounds (pixel - mean) to float16 before scaling) differ from one in about a quarter of values.
MEAN = [103.53, 116.28, 123.675]
SCALE = [1 / 57.375, 1 / 57.12, 1 / 58.395]


def noise(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def spec_for(net=(384, 640), batch=1, **kw) -> InputSpec:
    return InputSpec(shape=[batch, 3, net[0], net[1]], **kw)


def assert_matches_cpu(gpu: np.ndarray, cpu: np.ndarray, spec: InputSpec) -> None:
    assert gpu.shape == cpu.shape and gpu.dtype == cpu.dtype
    diff = np.abs(gpu.astype(np.float64) - cpu.astype(np.float64))
    step = max(abs(s) for s in spec.scale)
    if spec.dtype == "float16":
        step += float(np.abs(cpu.astype(np.float64)).max()) * 2.0 ** -10
    assert diff.max() <= step * (1 + 1e-6), f"max difference {diff.max()} > one grey level ({step})"
    assert np.mean(diff > 0) <= 1e-3, f"{np.mean(diff > 0):.4%} of the elements differ"


def cpu_result(frame: np.ndarray, spec: InputSpec) -> np.ndarray:
    return Preprocessor(spec)(frame)[0].copy()


FRAMES = [(1, 1), (3, 5), (641, 383), (333, 777), (1281, 201), (1920, 1080), (7, 1)]
OPTIONS = [
    dict(resize="letterbox", color="BGR", dtype="float32", interpolation="area"),
    dict(resize="letterbox", color="RGB", dtype="float16", mean=MEAN, scale=SCALE, pad_value=114, interpolation="linear"),
    dict(resize="stretch", color="RGB", dtype="float32", mean=MEAN, scale=SCALE, interpolation="area"),
    dict(resize="stretch", color="BGR", dtype="float16", pad_value=255, interpolation="linear"),
    # YOLOX's preprocessing: the image at the top left, padded right and bottom with 114
    dict(resize="letterbox", color="BGR", dtype="float32", pad_value=114, interpolation="linear", placement="top-left"),
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(str(o[k]) for k in ("resize", "color", "dtype", "interpolation"))
                         + ("-" + o["placement"] if "placement" in o else ""))
@pytest.mark.parametrize("size", FRAMES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_frame_kernel_matches_cpu(fake_gpu, size, options) -> None:
    api, cache = fake_gpu()
    spec = spec_for(**options)
    frame = noise(size[1], size[0], seed=size[0] * 7 + size[1])
    pre = GpuPreprocessor(spec, api, cache=cache)
    tensor, transform = pre(frame)
    assert isinstance(tensor, DeviceTensor) and tensor.shape == (1, 3, 384, 640)
    assert transform == Preprocessor(spec)(frame)[1]
    assert_matches_cpu(pre.download()[:1], cpu_result(frame, spec), spec)


@pytest.mark.parametrize("net", [(320, 320), (97, 131), (1, 1)])
def test_odd_network_sizes(fake_gpu, net) -> None:
    api, cache = fake_gpu()
    spec = spec_for(net, mean=MEAN, scale=SCALE, pad_value=7)
    frame = noise(243, 517, seed=3)
    pre = GpuPreprocessor(spec, api, cache=cache)
    pre.fill(frame)
    assert_matches_cpu(pre.download(), cpu_result(frame, spec), spec)


@pytest.mark.parametrize("resize", ["letterbox", "stretch"])
def test_8k_frame(fake_gpu, resize) -> None:
    api, cache = fake_gpu()
    spec = spec_for(resize=resize, dtype="float16", color="RGB", mean=MEAN, scale=SCALE)
    frame = noise(4320, 7680, seed=8)
    pre = GpuPreprocessor(spec, api, cache=cache)
    pre.fill(frame)
    assert_matches_cpu(pre.download(), cpu_result(frame, spec), spec)


def test_resize_modes_follow_the_cpu_choice() -> None:
    # interpolation "area": INTER_AREA when the width shrinks; OpenCV averages areas only when no axis grows.
    assert resize_mode(1920, 1080, 640, 360, "area") == RESIZE_AREA
    assert resize_mode(1280, 200, 640, 384, "area") == RESIZE_AREA_GROW
    assert resize_mode(320, 240, 640, 384, "area") == RESIZE_LINEAR
    assert resize_mode(640, 1000, 640, 384, "area") == RESIZE_LINEAR  # same width: INTER_LINEAR
    # "linear" (the default): INTER_LINEAR whatever the sizes
    assert resize_mode(1920, 1080, 640, 360) == RESIZE_LINEAR
    assert resize_mode(1920, 1080, 640, 360, "linear") == RESIZE_LINEAR


def _pitched_frame(api, h: int, w: int, pitch: int, mapped: bool, seed: int = 1):
    """A frame whose rows are `pitch` bytes apart (pitch > 3 * w) inside a page-locked buffer."""
    buf = api.alloc_host((h, pitch), np.uint8, mapped=mapped)
    buf.array[...] = np.random.default_rng(seed).integers(0, 256, buf.array.shape, dtype=np.uint8)
    frame = np.lib.stride_tricks.as_strided(buf.array, shape=(h, w, 3), strides=(pitch, 3, 1))
    return buf, frame


@pytest.mark.parametrize("pitch_pad", [3, 7, 64])
def test_mapped_frame_with_pitch_is_read_in_place(fake_gpu, pitch_pad) -> None:
    api, cache = fake_gpu(XAVIER_NX)
    h, w = 271, 485
    _, frame = _pitched_frame(api, h, w, 3 * w + pitch_pad, mapped=True)
    spec = spec_for(mean=MEAN, scale=SCALE)
    pre = GpuPreprocessor(spec, api, cache=cache, frame_memory="mapped")
    pre.fill(frame)
    assert pre.zero_copy_frames == 1 and pre.staged_frames == 0
    assert not any(op.startswith("htod") for op in api.executed)
    assert_matches_cpu(pre.download(), cpu_result(np.ascontiguousarray(frame), spec), spec)


def test_integrated_gpu_stages_plain_frames_in_mapped_memory_without_copies(fake_gpu) -> None:
    api, cache = fake_gpu(XAVIER_NX)
    pre = GpuPreprocessor(spec_for(), api, cache=cache, frame_memory="mapped")
    frame = noise(480, 640)
    pre.fill(frame)
    pre.download()
    assert pre.describe()["frame_memory"] == "mapped (zero-copy)"
    assert pre.staged_frames == 1 and pre.zero_copy_frames == 0
    assert [op for op in api.executed if op.startswith("htod")] == []


def test_by_default_an_integrated_gpu_copies_frames_to_device_memory(fake_gpu) -> None:
    """Until `edge-sdk engine` measured mapped faster on the device: pinned + one copy, and a
    mapped frame is not read in place (page-locked memory is not cached for the iGPU)."""
    api, cache = fake_gpu(XAVIER_NX)
    pre = GpuPreprocessor(spec_for(), api, cache=cache)
    _, mapped = _pitched_frame(api, 100, 100, 300, mapped=True)
    pre.fill(mapped)
    pre.download()
    assert pre.describe()["frame_memory"] == "pinned + one async copy"
    assert pre.zero_copy_frames == 0 and [op for op in api.executed if op.startswith("htod")] == ["htod:30000"]


def test_discrete_gpu_copies_each_frame_once_before_the_kernel(fake_gpu) -> None:
    api, cache = fake_gpu(DISCRETE)
    spec = spec_for(mean=MEAN, scale=SCALE)
    pre = GpuPreprocessor(spec, api, cache=cache)
    assert pre.describe()["frame_memory"] == "pinned + one async copy"
    frames = [noise(480, 640, seed=i) for i in range(3)]
    for frame in frames:
        pre.fill(frame)
        assert_matches_cpu(pre.download(), cpu_result(frame, spec), spec)
    work = [op for op in api.executed if not op.startswith("dtoh")]
    assert work == [f"htod:{480 * 640 * 3}", "launch:preprocess_frame"] * 3
    # A mapped frame on a discrete GPU would be read across PCIe: it is staged and copied too.
    _, mapped = _pitched_frame(api, 100, 100, 300, mapped=True)
    pre.fill(mapped)
    assert pre.zero_copy_frames == 0


@pytest.mark.parametrize("props", [XAVIER_NX, DISCRETE], ids=["integrated", "discrete"])
def test_graph_captured_once_and_replayed_with_each_frames_data(fake_gpu, props) -> None:
    api, cache = fake_gpu(props)
    spec = spec_for(dtype="float16", mean=MEAN, scale=SCALE)
    pre = GpuPreprocessor(spec, api, cache=cache)
    for i in range(5):
        frame = noise(360, 500, seed=10 + i)
        pre.fill(frame)
        assert_matches_cpu(pre.download(), cpu_result(frame, spec), spec)
    assert pre.graph.describe() == {"mode": "cuda-graph", "graphs": 1, "captures": 1, "replays": 4, "eager_runs": 0}
    frame = noise(200, 300, seed=99)  # a new size: a new plan, a new graph
    pre.fill(frame)
    assert_matches_cpu(pre.download(), cpu_result(frame, spec), spec)
    assert pre.graph.captures == 2


def test_staging_growth_drops_graphs_with_stale_pointers(fake_gpu) -> None:
    api, cache = fake_gpu(DISCRETE)
    spec = spec_for()
    pre = GpuPreprocessor(spec, api, cache=cache)
    pre.fill(noise(100, 100))
    graphs = list(pre.graph._graphs.values())
    big = noise(1000, 1000, seed=2)
    pre.fill(big)
    assert all(g.destroyed for g in graphs)
    assert_matches_cpu(pre.download(), cpu_result(big, spec), spec)


def test_without_graphs_the_work_runs_eagerly_with_the_same_result(fake_gpu) -> None:
    api, cache = fake_gpu(XAVIER_NX, graphs=False)  # pycuda has no graph API
    spec = spec_for(color="RGB")
    pre = GpuPreprocessor(spec, api, cache=cache)
    for i in range(3):
        frame = noise(300, 400, seed=i)
        pre.fill(frame)
        assert_matches_cpu(pre.download(), cpu_result(frame, spec), spec)
    assert pre.graph.describe()["mode"] == "eager" and pre.graph.eager_runs == 3


def test_work_is_queued_not_run_until_the_stream_is_waited_for(fake_gpu) -> None:
    api, cache = fake_gpu(DISCRETE)
    spec = spec_for(batch=2, mean=MEAN, scale=SCALE)
    pre = GpuPreprocessor(spec, api, cache=cache)
    a, b = noise(240, 320, seed=1), noise(240, 320, seed=2)
    pre.fill(a, 0)
    assert api.executed == []  # asynchronous: nothing ran yet
    pre.fill(b, 1)  # reuses the staging buffer: frame a's copy must have run first
    out = pre.download()
    cpu = Preprocessor(spec)
    cpu.fill(a, 0)
    cpu.fill(b, 1)
    assert_matches_cpu(out, cpu.tensor, spec)


REGIONS = [(0, 0, 1, 1), (5, 7, 300, 211), (0, 0, 641, 383), (600, 300, 641, 383), (17, 3, 20, 380)]


@pytest.mark.parametrize("props", [XAVIER_NX, DISCRETE], ids=["integrated", "discrete"])
@pytest.mark.parametrize("options", OPTIONS[:2], ids=["letterbox-fp32", "letterbox-rgb-fp16"])
def test_roi_batch_in_one_launch_matches_cpu_slots(fake_gpu, props, options) -> None:
    api, cache = fake_gpu(props)
    spec = spec_for(net=(96, 160), batch=len(REGIONS) + 1, **options)
    frame = noise(383, 641, seed=5)
    pre = GpuPreprocessor(spec, api, cache=cache)
    transforms = pre.fill_rois(frame, REGIONS, first=1)
    out = pre.download()
    assert [op for op in api.executed if op.startswith("launch")] == ["launch:preprocess_rois"]
    cpu = Preprocessor(spec)
    for i, (x0, y0, x1, y1) in enumerate(REGIONS):
        assert transforms[i] == cpu.fill(frame[y0:y1, x0:x1], i + 1)
    assert_matches_cpu(out[1:], cpu.tensor[1:], spec)


def test_roi_batch_replays_its_graph_with_new_regions(fake_gpu) -> None:
    api, cache = fake_gpu(DISCRETE)
    spec = spec_for(net=(64, 64), batch=2)
    pre = GpuPreprocessor(spec, api, cache=cache)
    frame = noise(200, 300, seed=4)
    for regions in ([(0, 0, 100, 100), (50, 60, 250, 190)], [(10, 10, 20, 30), (0, 0, 300, 200)]):
        pre.fill_rois(frame, regions)
        out = pre.download()
        cpu = Preprocessor(spec)
        for i, (x0, y0, x1, y1) in enumerate(regions):
            cpu.fill(frame[y0:y1, x0:x1], i)
        assert_matches_cpu(out, cpu.tensor, spec)
    assert (pre.graph.captures, pre.graph.replays) == (1, 1)


def test_a_varying_roi_count_replays_graphs_instead_of_recapturing(fake_gpu) -> None:
    """ROI counts 1..12 each need their own graph; cycling through them twice must capture each
    once (an 8-graph LRU would evict them in turn and capture on every frame)."""
    api, cache = fake_gpu(DISCRETE)
    pre = GpuPreprocessor(spec_for(net=(32, 32), batch=12), api, cache=cache)
    frame = noise(64, 96, seed=5)
    for _ in range(2):
        for n in range(1, 13):
            pre.fill_rois(frame, [(i, 0, i + 20, 30) for i in range(n)])
            pre.download()
    assert (pre.graph.captures, pre.graph.replays) == (12, 12)


BAD_FRAMES = {
    "grey": np.zeros((10, 10), np.uint8),
    "four channels": np.zeros((10, 10, 4), np.uint8),
    "float": np.zeros((10, 10, 3), np.float32),
    "empty": np.zeros((0, 10, 3), np.uint8),
    "not an array": [[1, 2, 3]],
}


@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
def test_frames_the_kernel_does_not_take_are_typed_errors(fake_gpu, name) -> None:
    api, cache = fake_gpu()
    pre = GpuPreprocessor(spec_for(), api, cache=cache)
    with pytest.raises(SourceError, match=r"shape|empty"):
        pre.fill(BAD_FRAMES[name])
    assert api.executed == []


def test_bad_regions_slots_and_pad(fake_gpu) -> None:
    api, cache = fake_gpu()
    pre = GpuPreprocessor(spec_for(batch=2), api, cache=cache)
    frame = noise(50, 60)
    with pytest.raises(SourceError, match="outside the 60x50 frame"):
        pre.fill_rois(frame, [(0, 0, 61, 10)])
    with pytest.raises(SourceError, match="empty"):
        pre.fill_rois(frame, [(5, 5, 5, 9)])
    with pytest.raises(IndexError):
        pre.fill_rois(frame, [(0, 0, 1, 1)] * 3)
    with pytest.raises(IndexError):
        pre.fill(frame, 2)
    with pytest.raises(ConfigError, match="pad_value"):
        GpuPreprocessor(spec_for(pad_value=300), api, cache=cache)


def test_out_of_memory_is_a_typed_error_naming_the_fix(fake_gpu) -> None:
    api, cache = fake_gpu(memory_limit=1 << 20)
    with pytest.raises(CudaError, match=r"out of GPU memory.*lower the batch or input size"):
        GpuPreprocessor(spec_for(batch=8), api, cache=cache)


def test_close_frees_every_buffer(fake_gpu) -> None:
    api, cache = fake_gpu(DISCRETE)
    pre = GpuPreprocessor(spec_for(), api, cache=cache)
    pre.fill(noise(100, 100))
    pre.download()
    pre.close()
    assert api.used == 0
    pre.close()  # again (an error path plus a finally): the fake raises on a double free
    assert api.used == 0


# -- odd sizes, odd pitches, unaligned frames: 16-byte loads, still bit-exact -------------------
def _frame_at(api, h: int, w: int, pitch: int, offset: int, seed: int):
    """A frame in a mapped buffer whose first byte is `offset` bytes past a 16-byte boundary."""
    buf = api.alloc_host((offset + h * pitch + 16,), np.uint8, mapped=True)
    buf.array[...] = np.random.default_rng(seed).integers(0, 256, buf.array.shape, dtype=np.uint8)
    frame = np.lib.stride_tricks.as_strided(buf.array[offset:], shape=(h, w, 3), strides=(pitch, 3, 1))
    assert (buf.ptr + offset) % 16 == offset % 16
    return frame


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(str(o[k]) for k in ("resize", "dtype", "interpolation")))
@pytest.mark.parametrize("h,w,pad,offset", [(5, 3, 1, 1), (97, 131, 2, 7), (383, 641, 5, 13), (1081, 1921, 1, 3),
                                            (2, 1, 0, 15)])
def test_odd_sizes_unaligned_frames_match_cpu_bit_for_bit(fake_gpu, kernel_shim, options, h, w, pad, offset) -> None:
    api, cache = fake_gpu(XAVIER_NX)
    frame = _frame_at(api, h, w, 3 * w + pad, offset, seed=h + w)
    spec = spec_for(**options)
    pre = GpuPreprocessor(spec, api, cache=cache, frame_memory="mapped")
    pre.fill(frame)
    out = pre.download()
    assert pre.zero_copy_frames == 1  # read in place, at its unaligned address
    np.testing.assert_array_equal(out, cpu_result(np.ascontiguousarray(frame), spec))
    shim = kernel_shim("preprocess.cu")
    assert shim.loads > 0 and shim.misaligned_loads == 0


@pytest.mark.parametrize("size,interpolation,per_pixel", [
    ((1080, 1920), "linear", 4),  # two rows of two taps: at most two 16-byte blocks a row
    ((1152, 1920), "area", 6),  # 3x3 area cells: three rows of 9 bytes, at most two blocks each
])
def test_loads_per_output_pixel(fake_gpu, kernel_shim, size, interpolation, per_pixel) -> None:
    """What the issue measured as ~54 byte loads per thread is a handful of 16-byte loads."""
    api, cache = fake_gpu(DISCRETE)
    spec = spec_for(resize="stretch", interpolation=interpolation)
    pre = GpuPreprocessor(spec, api, cache=cache)
    frame = noise(*size)
    pre.fill(frame)
    np.testing.assert_array_equal(pre.download(), cpu_result(frame, spec))
    shim = kernel_shim("preprocess.cu")
    assert 0 < shim.loads <= per_pixel * spec.width * spec.height and shim.misaligned_loads == 0
