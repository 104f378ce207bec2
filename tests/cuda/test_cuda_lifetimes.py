"""What the CUDA layer creates it destroys, waits without spinning, and never frees during a
capture: against the fake cuda-python 11.8 (both layouts) and pycuda bindings, whose streams and
events live until destroyed, whose default events spin, whose frees invalidate a capture, and
whose pycuda contexts are per thread (tests/fakes)."""
from __future__ import annotations

import gc
import threading
import warnings

import numpy as np
import pytest

from edge_sdk.cuda import _cudapython, _pycuda
from edge_sdk.cuda.compiler import KernelCache
from edge_sdk.cuda.frames import MappedMemory, PinnedMemory
from edge_sdk.cuda.graph import FrameGraph
from edge_sdk.cuda.preprocess import GpuPreprocessor
from edge_sdk.preprocess import InputSpec, Preprocessor
from fakes import fake_cuda_python, fake_pycuda

SPEC = InputSpec(shape=[1, 3, 48, 80], mean=[104, 117, 123], scale=[1 / 58, 1 / 57, 1 / 59])


@pytest.fixture
def cudapython(cuda_python_fake):
    def make(integrated: bool = True):
        fb = cuda_python_fake(fake_cuda_python.FakeDevice(integrated=integrated))
        return fb, _cudapython.open_device()

    return make


@pytest.fixture
def pycuda(monkeypatch, kernel_shim):
    shim = kernel_shim("preprocess.cu")

    def make(integrated: bool = True):
        return fake_pycuda.install(monkeypatch, fake_pycuda.FakePycudaDevice(integrated=integrated), shim.launch)

    return make


def noise(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


# -- streams and events are destroyed -----------------------------------------------------------
@pytest.mark.parametrize("integrated", [True, False], ids=["integrated", "discrete"])
def test_preprocessor_cycles_destroy_every_stream_and_event(cudapython, tmp_path, integrated: bool) -> None:
    fb, api = cudapython(integrated)
    cache = KernelCache(tmp_path)
    for i in range(5):
        pre = GpuPreprocessor(SPEC, api, cache=cache)
        pre.fill(noise(50, 70, i))
        pre.download()
        pre.close()
        pre.close()  # a second close destroys nothing twice (the fake would return an error)
    assert len(fb.state.streams) == 5 and len(fb.state.events) == 5
    assert (fb.state.live_streams(), fb.state.live_events()) == (0, 0)
    assert fb.state.calls.count("cudaStreamDestroy") == 5 and fb.state.calls.count("cudaEventDestroy") == 5


def test_a_stream_given_to_the_preprocessor_stays_the_callers(cudapython, tmp_path) -> None:
    fb, api = cudapython()
    stream = api.create_stream()
    pre = GpuPreprocessor(SPEC, api, cache=KernelCache(tmp_path), stream=stream)
    pre.close()
    assert fb.state.live_streams() == 1 and fb.state.live_events() == 0
    api.destroy_stream(stream)
    assert fb.state.live_streams() == 0


# -- waits block, they do not spin --------------------------------------------------------------
def test_cuda_python_waits_on_blocking_sync_events(cudapython, tmp_path) -> None:
    fb, api = cudapython()
    pre = GpuPreprocessor(SPEC, api, cache=KernelCache(tmp_path), batch=2)
    for i in range(3):
        frame = noise(40, 60, i)
        pre.fill_rois(frame, [(0, 0, 30, 20), (10, 5, 60, 40)])  # waits for the previous frame's event
    assert fb.state.calls.count("cudaEventSynchronize") >= 2
    assert fb.state.spin_waits == 0
    assert all(e.flags & fb.rt.cudaEventBlockingSync for e in fb.state.events)
    pre.close()


def test_pycuda_waits_on_blocking_sync_events(pycuda, tmp_path) -> None:
    fp = pycuda()
    api = _pycuda.open_device()
    event, stream = api.create_event(), api.create_stream()
    api.record(event, stream)
    api.event_synchronize(event)
    assert "Event.synchronize" in fp.state.calls and fp.state.spin_waits == 0


# -- no frees while a stream captures -----------------------------------------------------------
def _capture_while(api, during) -> tuple:
    """Capture a graph on one thread while `during()` runs on another; (graph or error, thread result)."""
    stream = api.create_stream()
    graph = FrameGraph(api, stream)
    entered, freed = threading.Event(), threading.Event()
    out: dict = {}

    def work() -> None:  # the capture is under way between begin and end
        entered.set()
        assert freed.wait(10), "the freeing thread did not finish"

    def capture() -> None:
        try:
            graph.run("key", work)
            out["graph"] = graph.captures
        except Exception as exc:  # reported by the test below
            out["graph"] = exc

    def free() -> None:
        assert entered.wait(10)
        try:
            during()
            out["free"] = "ok"
        except Exception as exc:
            out["free"] = exc
        finally:
            freed.set()

    threads = [threading.Thread(target=capture), threading.Thread(target=free)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return out["graph"], out["free"]


def test_a_free_during_a_capture_waits_for_its_end(cudapython) -> None:
    fb, api = cudapython()
    host = api.alloc_host((64,), np.uint8)
    device = api.alloc_device(64)
    captured, freed = _capture_while(api, lambda: (api.free_host(host), api.free_device(device)))
    assert captured == 1 and freed == "ok"  # the capture was not invalidated, nothing raised
    assert "cudaFreeHost" in fb.state.calls and host.ptr not in fb.state.blocks and device.ptr not in fb.state.blocks
    assert fb.state.calls.index("cudaFreeHost") > fb.state.calls.index("cudaStreamEndCapture")
    assert api.deferred_frees == 2 and api.pending_frees == 0


def test_a_frame_ring_finalizer_during_a_capture_frees_after_it(cudapython) -> None:
    """The capture ring lets go of a mapped frame buffer while the inference thread captures:
    the page-locked memory goes when its last array is collected, on whatever thread that is."""
    fb, api = cudapython()
    memory = MappedMemory(api)
    holder = {"buffer": memory.allocate((8, 12, 3))}
    ptr = holder["buffer"].host.ptr

    def drop() -> None:
        memory.release(holder.pop("buffer"))
        gc.collect()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an exception in the finalizer would surface as a warning
        captured, freed = _capture_while(api, drop)
    assert captured == 1 and freed == "ok"
    assert memory.freed == 1 and ptr not in fb.state.blocks


def test_pinned_frame_memory_released_during_a_capture(cudapython) -> None:
    fb, api = cudapython(integrated=False)
    memory = PinnedMemory(api)
    buffer = memory.allocate((8, 12, 3))
    dev = buffer.device.ptr
    captured, freed = _capture_while(api, lambda: memory.release(buffer))
    assert captured == 1 and freed == "ok" and dev not in fb.state.blocks


def test_a_free_through_another_cuda_object_during_a_capture_waits_too(cudapython) -> None:
    """The previous model's frame ring frees through the CUDA object that model opened, not the
    one now capturing: the capture is the process's (the driver's), so that free waits as well,
    on another thread and on the capturing thread itself."""
    fb, api = cudapython(integrated=False)
    previous = _cudapython.open_device()  # as a second from_bundle/activate would open it
    assert previous is not api
    old_ring = PinnedMemory(previous)
    buffers = [old_ring.allocate((8, 12, 3)) for _ in range(2)]
    device_ptrs = [b.device.ptr for b in buffers]
    captured, freed = _capture_while(api, lambda: old_ring.release(buffers[0]))
    assert captured == 1 and freed == "ok" and device_ptrs[0] not in fb.state.blocks

    stream = api.create_stream()
    graph = FrameGraph(api, stream)
    graph.run("key", lambda: old_ring.release(buffers[1]))  # freed by the capturing thread mid-capture
    assert graph.captures == 1 and device_ptrs[1] not in fb.state.blocks
    assert fb.state.calls.count("cudaStreamEndCapture") == 2 and previous.pending_frees == api.pending_frees == 0
    assert previous.deferred_frees == 4  # each buffer's device and pinned host memory
    graph.invalidate()
    api.destroy_stream(stream)


# -- pycuda: a context per thread -----------------------------------------------------------------
def test_pycuda_opened_and_run_on_another_thread_leaves_its_stack_empty(pycuda, tmp_path) -> None:
    """The pipeline opens CUDA and runs on a thread that ends: each call pushes the context and
    pops it again, so the thread ends with an empty pycuda context stack (else pycuda aborts)."""
    fp = pycuda(integrated=False)
    out: dict = {}

    def worker() -> None:
        try:
            api = _pycuda.open_device()
            pre = GpuPreprocessor(SPEC, api, cache=KernelCache(tmp_path))
            frame = noise(30, 50)
            pre.fill(frame)
            out["tensor"] = pre.download().copy()
            out["expected"] = Preprocessor(SPEC)(frame)[0].copy()
            pre.close()
        except Exception as exc:
            out["error"] = exc

    t = threading.Thread(target=worker)
    t.start()
    t.join(20)
    assert "error" not in out, out.get("error")
    np.testing.assert_array_equal(out["tensor"], out["expected"])
    assert set(fp.state.pushes) == {t.ident} and fp.aborts() == [] and fp.state.leaks == 0


def test_pycuda_frees_on_a_thread_that_holds_the_context(pycuda) -> None:
    fp = pycuda()
    api = _pycuda.open_device()
    host, device = api.alloc_host((32,), np.uint8), api.alloc_device(32)
    used = fp.state.used

    def free() -> None:
        api.free_host(host)
        api.free_device(device)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pycuda's "leaked out-of-thread" warning fails the test
        t = threading.Thread(target=free)
        t.start()
        t.join(10)
    assert fp.state.leaks == 0 and fp.state.used == used - 64


def test_a_finalizer_run_inside_a_locked_section_does_not_deadlock(cudapython) -> None:
    """The collector runs a frame buffer's finalizer on whatever thread allocates next, which may
    hold the CUDA layer's or the frame memory's lock at that moment."""
    fb, api = cudapython()
    memory = MappedMemory(api)
    buffer = memory.allocate((8, 12, 3))
    ptr = buffer.host.ptr
    frames = [buffer.array]  # a frame a caller still holds after the ring let go of its buffer
    memory.release(buffer)
    del buffer
    done = threading.Event()

    def collect_while_locked() -> None:
        with api._lock, memory._lock:
            frames.clear()  # the last array goes: the finalizer frees the page-locked memory here
            gc.collect()
        done.set()

    t = threading.Thread(target=collect_while_locked, daemon=True)
    t.start()
    assert done.wait(10), "the finalizer deadlocked on a lock its thread held"
    assert memory.freed == 1 and ptr not in fb.state.blocks


# -- whole 16-byte blocks ---------------------------------------------------------------------------
@pytest.mark.parametrize("integrated", [True, False], ids=["integrated", "discrete"])
def test_every_buffer_a_frame_lies_in_is_whole_16_byte_blocks(cudapython, tmp_path, integrated: bool) -> None:
    """The kernel reads frames with aligned 16-byte loads: a 37x23 frame (2553 bytes) staged, and
    the frame rings' buffers, are allocated in whole blocks, so its last load stays inside the
    allocation (what compute-sanitizer's memcheck checks on the device)."""
    fb, api = cudapython(integrated)
    before = set(fb.state.blocks)
    pre = GpuPreprocessor(SPEC, api, cache=KernelCache(tmp_path))
    frame = noise(23, 37)
    pre.fill(frame)
    np.testing.assert_array_equal(pre.download(), Preprocessor(SPEC)(frame)[0])
    ring = (MappedMemory if integrated else PinnedMemory)(api)
    buffer = ring.allocate((23, 37, 3))
    sizes = [len(block) for ptr, block in fb.state.blocks.items() if ptr not in before]
    assert frame.nbytes == 2553 and 2553 not in sizes, sizes  # no frame-sized buffer that ends mid-block
    assert sizes.count(2560) >= 2  # 2553 bytes in whole blocks: the staging and the ring's frame
    ring.release(buffer)
    pre.close()
