"""The capture ring's frame memory: slot buffers come from the allocator once per slot and frame
size, are released on a size change and at stop, carry the allocator's device pointer, and the
decoder writes straight into them. Page-locked memory is FakeHostCuda's (tests/fakes), whose
`used` counts the bytes it has handed out and not yet had back."""
from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any, List, Optional, Tuple

import numpy as np
import pytest

from edge_sdk.cuda.frames import FrameMemory, HostMemory, MappedMemory, PinnedMemory, frame_memory
from edge_sdk.errors import SourceError
from edge_sdk.runtime.capture import Capture
from edge_sdk.runtime.sources import Source, open_source
from fakes.fake_cuda_host import DISCRETE, XAVIER_NX, FakeHostCuda
from runtime_factories import ListSource, scene


def no_kernels(*args: Any) -> None:
    raise AssertionError("no kernel runs in these tests")


def fake_gpu(props=XAVIER_NX) -> FakeHostCuda:
    return FakeHostCuda(no_kernels, props=props)


def colour_frames(count: int, width: int, height: int, seed: int = 0) -> List[np.ndarray]:
    """Frames with every channel different: a blue/green gradient, red noise, a moving square."""
    rng = np.random.default_rng(seed)
    frames = []
    for i in range(count):
        f = np.empty((height, width, 3), np.uint8)
        f[:, :, 0] = (np.arange(width) * 255 // max(1, width - 1))[None, :]
        f[:, :, 1] = (np.arange(height) * 255 // max(1, height - 1))[:, None]
        f[:, :, 2] = rng.integers(0, 256, (height, width), dtype=np.uint8)
        x, y = (7 * i) % (width - 12), (5 * i) % (height - 12)
        f[y:y + 12, x:x + 12] = (255, 0, 128)
        frames.append(f)
    return frames


def write_colour_video(path: Path, frames: List[np.ndarray], fps: float = 10.0) -> Path:
    import cv2

    h, w = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (w, h))
    assert writer.isOpened()
    for f in frames:
        writer.write(f)
    writer.release()
    return path


def decoded(path: Path) -> List[np.ndarray]:
    """The oracle: the file decoded by OpenCV directly, each frame in an array of its own."""
    import cv2

    cap = cv2.VideoCapture(str(path))
    out = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        out.append(frame)
    cap.release()
    return out


def run(capture: Capture) -> List[Tuple[int, np.ndarray, Optional[int]]]:
    """(slot id, a copy of the frame, the slot's device pointer) of every frame, to the end."""
    got = []
    capture.start()
    try:
        while True:
            slot = capture.get(timeout=10)
            if slot is None:
                return got
            got.append((slot.slot_id, slot.frame.copy(), slot.device_ptr))
            capture.release(slot)
    finally:
        capture.stop()


# -- allocation, release, device pointers ------------------------------------------------------
class RecordingMapped(MappedMemory):
    """Mapped memory that records the shape of every allocation."""

    def __init__(self, api: FakeHostCuda) -> None:
        super().__init__(api)
        self.shapes: List[Tuple[int, ...]] = []

    def allocate(self, shape):  # type: ignore[override]
        self.shapes.append(tuple(shape))
        return super().allocate(shape)


SMALL, LARGE = (48, 64, 3), (80, 96, 3)


def test_buffers_once_per_slot_and_size_released_on_size_change_and_at_stop() -> None:
    api = fake_gpu()
    memory = RecordingMapped(api)
    frames = [scene(i, 64, 48) for i in range(15)] + [scene(i, 96, 80) for i in range(15, 30)]
    capture = Capture(ListSource(frames), pool_size=3, memory=memory).start()
    got = []
    try:
        while True:
            slot = capture.get(timeout=10)
            if slot is None:
                break
            got.append(int(slot.frame[0, 0, 0]))
            # the slot's device pointer is the mapping the CUDA layer registered for this buffer
            assert slot.device_ptr is not None and slot.device_ptr == api.device_pointer_of(slot.frame)
            capture.release(slot)
        assert got == list(range(30))
        # the first frame sizes every slot; a size change resizes the slots free at that moment
        # and the others as they come back: at most once per slot and size, not per frame
        assert memory.shapes[:3] == [SMALL] * 3
        large = memory.shapes.count(LARGE)
        assert memory.shapes[3:] == [LARGE] * large and 1 <= large <= 3
        # each large buffer replaced a small one, released at once
        assert memory.releases == memory.freed == large
        assert api.used == large * 96 * 80 * 3 + (3 - large) * 64 * 48 * 3
    finally:
        capture.stop()
    assert api.used == 0 and memory.live == [] and memory.freed == memory.allocations
    assert all(s.buffer is None and s.device_ptr is None and s.allocation is None for s in capture.pool)


def test_host_memory_slots_have_no_device_pointer() -> None:
    got = run(Capture(ListSource([scene(i) for i in range(5)])))
    assert [int(f[0, 0, 0]) for _, f, _ in got] == list(range(5))
    assert {ptr for _, _, ptr in got} == {None}


def test_pinned_slots_point_at_device_buffers_that_upload_fills() -> None:
    api = fake_gpu(DISCRETE)
    memory = PinnedMemory(api)
    frames = colour_frames(6, 70, 45)
    capture = Capture(ListSource(frames), pool_size=3, memory=memory).start()
    stream = api.create_stream()
    try:
        for i in range(6):
            slot = capture.get(timeout=10)
            host_ptr = slot.frame.__array_interface__["data"][0]
            assert slot.device_ptr is not None and slot.device_ptr != host_ptr
            assert capture.upload(slot, stream) == slot.device_ptr
            api.synchronize(stream)  # the copy has run: the slot may be given back
            on_device = np.frombuffer(ctypes.string_at(slot.device_ptr, frames[i].nbytes), np.uint8)
            np.testing.assert_array_equal(on_device.reshape(frames[i].shape), frames[i])
            capture.release(slot)
        assert api.executed == [f"htod:{70 * 45 * 3}"] * 6  # one copy per frame, nothing else
    finally:
        capture.stop()
    assert api.used == 0


def test_upload_of_a_host_slot_is_none_and_of_an_empty_slot_an_error() -> None:
    capture = Capture(ListSource([scene(0)])).start()
    try:
        slot = capture.get(timeout=10)
        assert capture.upload(slot, stream=None) is None
        capture.release(slot)
    finally:
        capture.stop()
    with pytest.raises(SourceError, match="holds no frame"):
        capture.upload(capture.pool[0], stream=None)


def test_a_frame_held_after_stop_stays_readable_and_is_freed_when_dropped() -> None:
    api = fake_gpu()
    memory = MappedMemory(api)
    frames = colour_frames(4, 40, 30)
    capture = Capture(ListSource(frames), pool_size=3, memory=memory).start()
    slot = capture.get(timeout=10)
    kept = slot.frame
    capture.release(slot)
    capture.stop()
    assert memory.live == [] and memory.releases == memory.allocations
    np.testing.assert_array_equal(kept, frames[0])  # still the frame, not freed memory
    assert api.used == kept.nbytes
    del kept
    assert api.used == 0 and memory.freed == memory.allocations


class BlockingCamera(Source):
    """A live source whose second read blocks until `gate` is set (a driver that hangs)."""

    live = True

    def __init__(self) -> None:
        self.name = "blocking://camera"
        self.gate = threading.Event()
        self.reads = 0

    def read(self, out: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
        self.reads += 1
        if self.reads > 1:
            self.gate.wait(10)
        return scene(self.reads, 32, 24)


def test_buffers_of_a_thread_that_did_not_stop_stay_allocated() -> None:
    api = fake_gpu()
    memory = MappedMemory(api)
    camera = BlockingCamera()
    capture = Capture(camera, pool_size=3, memory=memory)
    capture.STOP_WAIT_S = 0.05
    capture.start()
    thread = capture._thread
    assert thread is not None
    slot = capture.get(timeout=10)
    capture.release(slot)
    capture.stop()  # the thread is stuck in read(): it would write into a freed buffer
    assert thread.is_alive()
    assert memory.releases == 0 and api.used == memory.allocations * 24 * 32 * 3 > 0
    camera.gate.set()
    thread.join(10)
    assert not thread.is_alive()


# -- decoding straight into the slot ---------------------------------------------------------
@pytest.mark.parametrize("kind", ["host", "mapped"])
def test_a_video_file_decodes_straight_into_the_buffer(tmp_path: Path, kind: str) -> None:
    path = write_colour_video(tmp_path / "clip.avi", colour_frames(5, 130, 98))
    expected = decoded(path)
    memory: FrameMemory = HostMemory() if kind == "host" else MappedMemory(fake_gpu())
    buf = memory.allocate(expected[0].shape)
    src = open_source(str(path))
    with src:
        for want in expected:
            frame = src.read(buf.array)
            assert frame is not None and np.shares_memory(frame, buf.array)
            np.testing.assert_array_equal(buf.array, want)
        assert src.read(buf.array) is None
    memory.release(buf)


def test_the_synthetic_source_renders_straight_into_the_buffer() -> None:
    memory = MappedMemory(fake_gpu())
    buf = memory.allocate((97, 161, 3))
    src = open_source("synthetic://faces?width=161&height=97&count=2&frames=3&seed=3&min_size=16&max_size=24")
    with src:
        for _ in range(3):
            frame = src.read(buf.array)
            assert frame is not None and np.shares_memory(frame, buf.array)
    memory.release(buf)


def test_a_folder_image_is_decoded_into_an_array_of_its_own(tmp_path: Path) -> None:
    import cv2

    image = colour_frames(1, 50, 40)[0]
    cv2.imwrite(str(tmp_path / "a.png"), image)
    memory = MappedMemory(fake_gpu())
    buf = memory.allocate(image.shape)
    src = open_source(str(tmp_path))
    with src:
        frame = src.read(buf.array)
    # OpenCV's Python imdecode has no output argument: the capture thread copies this frame
    assert frame is not None and not np.shares_memory(frame, buf.array)
    np.testing.assert_array_equal(frame, image)
    memory.release(buf)


class RecordingSource:
    """Wraps a source's read: records whether each frame came back in the buffer passed in."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.in_place: List[bool] = []
        inner = source.read

        def read(out: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
            frame = inner(out)
            if frame is not None and out is not None:
                self.in_place.append(np.shares_memory(frame, out))
            return frame

        source.read = read  # type: ignore[method-assign]


@pytest.mark.parametrize("kind", ["host", "mapped"])
def test_capture_of_a_video_decodes_into_its_slots_and_delivers_the_decoder_s_frames(tmp_path: Path, kind: str) -> None:
    path = write_colour_video(tmp_path / "clip.avi", colour_frames(24, 130, 98, seed=5))
    expected = decoded(path)
    assert len(expected) == 24
    api = fake_gpu()
    memory: FrameMemory = HostMemory() if kind == "host" else MappedMemory(api)
    source = open_source(str(path))
    recorder = RecordingSource(source)
    got = run(Capture(source, pool_size=4, memory=memory))
    assert len(got) == 24
    for (_, frame, _), want in zip(got, expected):
        np.testing.assert_array_equal(frame, want)
    # the first frame is read before any slot has a buffer; it sizes all four, and every
    # later frame is decoded straight into its slot
    assert len(recorder.in_place) == 23 and all(recorder.in_place)
    assert memory.allocations == 4
    if kind == "mapped":
        assert api.used == 0


@pytest.mark.parametrize("kind", ["host", "mapped"])
def test_grey_bgra_and_resized_frames_are_converted_into_the_slots(kind: str) -> None:
    colour = colour_frames(4, 37, 29, seed=2)
    grey = colour[1][:, :, 2].copy()
    bgra = np.dstack([colour[2], np.full((29, 37), 99, np.uint8)])
    bigger = colour_frames(1, 53, 41, seed=9)[0]
    frames = [colour[0], grey, bgra, bigger, colour[3]]
    expected = [colour[0], np.repeat(grey[:, :, None], 3, axis=2), colour[2], bigger, colour[3]]
    memory: FrameMemory = HostMemory() if kind == "host" else MappedMemory(fake_gpu())
    got = run(Capture(ListSource(frames), pool_size=3, memory=memory))
    assert len(got) == len(expected)
    for (_, frame, _), want in zip(got, expected):
        np.testing.assert_array_equal(frame, want)


# -- which path runs ---------------------------------------------------------------------------
@pytest.mark.parametrize("props,path", [(XAVIER_NX, "pinned + async copy (integrated GPU)"),
                                        (DISCRETE, "pinned + async copy (discrete GPU)")])
def test_describe_says_which_path_runs_and_why(props, path: str) -> None:
    capture = Capture(ListSource([scene(0)]), memory=frame_memory("auto", cuda=fake_gpu(props)))
    described = capture.describe()["frame_memory"]
    assert described["path"] == path and described["kind"] == path.split(" ")[0]
    assert described["reason"].startswith("auto: ") and described["device"] == props.name
    plain = Capture(ListSource([scene(0)])).describe()["frame_memory"]
    assert plain["path"] == "host" and plain["device"] is None
