"""Frame memory for the capture ring (edge_sdk.cuda.frames): the choice between host, mapped and
pinned memory, and what each kind allocates, frees and queues, against FakeHostCuda (our CUDA
interface on the CPU) and against the fake cuda-python 11.8 and pycuda bindings."""
from __future__ import annotations

import ctypes.util
from typing import Any

import numpy as np
import pytest

from edge_sdk.cuda import DeviceProperties, _cudapython, _pycuda
from edge_sdk.cuda.api import padded_size
from edge_sdk.cuda.frames import CHOICES, HostMemory, MappedMemory, PinnedMemory, frame_memory
from edge_sdk.errors import ConfigError, CudaError, MissingDependencyError
from fakes import fake_cuda_python, fake_pycuda
from fakes.fake_cuda_host import DISCRETE, XAVIER_NX, FakeHostCuda


def no_kernels(*args: Any) -> None:
    raise AssertionError("no kernel runs in these tests")


def fake_gpu(props: DeviceProperties = XAVIER_NX, memory_limit: int = 4 << 30) -> FakeHostCuda:
    return FakeHostCuda(no_kernels, props=props, memory_limit=memory_limit)


def tegra(sm=(7, 2), can_map: bool = True) -> DeviceProperties:
    return DeviceProperties(name=f"Tegra sm_{sm[0]}{sm[1]} (fake)", sm=sm, integrated=True, can_map_host_memory=can_map,
                            total_memory=4 << 30, driver_version=11040, bindings_version=11040)


class Loader:
    """Stands in for importing an implementation: an object, or the error it raises."""

    def __init__(self, **results: Any) -> None:
        self.results = results

    def __call__(self, name: str) -> Any:
        result = self.results[name]
        if isinstance(result, Exception):
            raise result
        return result


MEASURED_MAPPED = {"chosen": "mapped", "gpu_ms": {"mapped": 0.9, "pinned": 1.2}}  # device_report.json's field
NO_GPU = Loader(**{"cuda-python": CudaError("no NVIDIA driver: Failed to dlopen libcuda.so.1"),
                   "pycuda": MissingDependencyError("pycuda", "pycuda")})


# -- the chooser -------------------------------------------------------------------------------
@pytest.mark.parametrize("props,kind,path,why", [
    (XAVIER_NX, "pinned", "pinned + async copy (integrated GPU)", "not cached for the integrated GPU"),
    (DISCRETE, "pinned", "pinned + async copy (discrete GPU)", "would cross PCIe"),
    (tegra(can_map=False), "pinned", "pinned + async copy (integrated GPU)", "cannot map host memory"),
])
def test_auto_pins_until_measured(props, kind: str, path: str, why: str) -> None:
    memory = frame_memory("auto", cuda=fake_gpu(props))
    described = memory.describe()
    assert (memory.kind, described["path"], described["device"]) == (kind, path, props.name)
    assert described["reason"].startswith("auto: ") and why in described["reason"]


@pytest.mark.parametrize("sm,coherent", [((7, 2), True), ((8, 7), True), ((6, 2), False), ((5, 3), False)])
def test_the_reason_says_whether_the_tegra_is_io_coherent(sm, coherent: bool) -> None:
    reason = frame_memory("auto", cuda=fake_gpu(tegra(sm))).reason
    assert '"CUDA for Tegra"' in reason
    assert (" is I/O coherent" in reason) is coherent and ("is not I/O coherent" in reason) is not coherent


def test_auto_without_cuda_falls_back_to_host_memory_and_says_why() -> None:
    memory = frame_memory("auto", loader=NO_GPU)
    assert isinstance(memory, HostMemory) and memory.describe()["path"] == "host"
    assert "no CUDA device" in memory.reason and "Failed to dlopen libcuda.so.1" in memory.reason
    assert 'pip install "edge-sdk[pycuda]"' in memory.reason


@pytest.mark.parametrize("choice", ["mapped", "pinned"])
def test_explicit_gpu_memory_without_cuda_fails_loudly(choice: str) -> None:
    with pytest.raises(CudaError, match=rf"frame_memory={choice} needs a CUDA device, and none opened "
                                        r"\(cuda-python: no NVIDIA driver.*use frame_memory=auto.*edge-sdk\[cuda\]"):
        frame_memory(choice, loader=NO_GPU)


def test_auto_opens_the_first_implementation_that_works() -> None:
    api = fake_gpu(DISCRETE)
    loader = Loader(**{"cuda-python": CudaError("no NVIDIA driver"), "pycuda": api})
    memory = frame_memory("auto", loader=loader)
    assert isinstance(memory, PinnedMemory) and memory.api is api


def test_explicit_choices_with_a_device() -> None:
    assert frame_memory("host", cuda=fake_gpu()).describe()["reason"] == "frame_memory=host was asked for"
    mapped = frame_memory("mapped", cuda=fake_gpu(DISCRETE))
    assert mapped.describe()["path"] == "mapped (zero-copy, discrete GPU)" and "crosses PCIe" in mapped.reason
    pinned = frame_memory("pinned", cuda=fake_gpu())
    assert pinned.describe()["path"] == "pinned + async copy (integrated GPU)" and pinned.reason == "frame_memory=pinned was asked for"
    with pytest.raises(CudaError, match=r"cannot map host memory.*frame_memory=pinned or auto"):
        frame_memory("mapped", cuda=fake_gpu(tegra(can_map=False)))


def test_an_unknown_choice_names_the_valid_ones() -> None:
    assert CHOICES == ("auto", "host", "mapped", "pinned")
    with pytest.raises(ConfigError, match="frame_memory must be one of auto, host, mapped, pinned, got 'zero-copy'"):
        frame_memory("zero-copy")


@pytest.mark.skipif(bool(ctypes.util.find_library("cuda")), reason="this machine has an NVIDIA driver")
def test_real_auto_on_a_machine_without_gpu_is_host_memory() -> None:
    memory = frame_memory("auto")
    assert memory.kind == "host" and memory.reason.startswith("auto: no CUDA device (")


# -- the allocators, on our CUDA interface ------------------------------------------------------
def test_mapped_buffers_are_mapped_page_locked_memory_freed_once() -> None:
    api = fake_gpu()
    memory = MappedMemory(api)
    buf = memory.allocate((97, 131, 3))
    assert buf.array.shape == (97, 131, 3) and buf.array.dtype == np.uint8 and buf.array.flags.c_contiguous
    # the device pointer is the one the CUDA layer registered for this host memory
    assert buf.device_ptr is not None and buf.device_ptr == api.device_pointer_of(buf.array)
    assert api.used == padded_size(97 * 131 * 3)  # in whole 16-byte blocks
    assert memory.upload(buf, api.create_stream()) == buf.device_ptr  # no copy queued
    memory.release(buf)
    memory.release(buf)  # a second release frees nothing twice
    assert api.used == 0 and (memory.allocations, memory.releases, memory.freed) == (1, 1, 1)
    assert api.executed == []
    with pytest.raises(CudaError, match="was released"):
        memory.upload(buf, None)


def test_a_released_buffer_still_viewed_is_freed_with_its_last_view() -> None:
    api = fake_gpu()
    memory = MappedMemory(api)
    buf = memory.allocate((4, 5, 3))
    frame = buf.array
    frame[:] = 7
    memory.release(buf)
    assert memory.freed == 0 and api.used == padded_size(60) and int(frame.sum()) == 7 * 60
    view = frame[1:, 2:]
    del frame
    assert api.used == padded_size(60) and int(view.sum()) == 7 * 3 * 3 * 3
    del view
    assert api.used == 0 and memory.freed == 1


def test_pinned_upload_queues_one_copy_on_the_given_stream() -> None:
    api = fake_gpu(DISCRETE)
    memory = PinnedMemory(api)
    buf = memory.allocate((33, 65, 3))
    frame = np.random.default_rng(4).integers(0, 256, (33, 65, 3), dtype=np.uint8)
    buf.array[:] = frame
    host_address = buf.array.__array_interface__["data"][0]
    assert api.device_pointer_of(buf.array) is None  # pinned, not mapped
    assert buf.device_ptr is not None and buf.device_ptr != host_address
    other, stream = api.create_stream(), api.create_stream()
    assert memory.upload(buf, stream) == buf.device_ptr
    api.synchronize(other)
    assert api.executed == []  # queued on `stream`, not on another one, and not run yet
    back = api.alloc_host((33, 65, 3))
    api.copy_dtoh(back, buf.device_ptr, frame.nbytes, stream)  # work queued after the upload
    api.synchronize(stream)
    assert api.executed == [f"htod:{frame.nbytes}", f"dtoh:{frame.nbytes}"]
    np.testing.assert_array_equal(back.array, frame)
    api.free_host(back)
    memory.release(buf)
    assert api.used == 0
    with pytest.raises(CudaError, match="was released"):
        memory.upload(buf, stream)


def test_pinned_memory_out_of_device_memory_leaves_nothing_allocated() -> None:
    api = fake_gpu(DISCRETE, memory_limit=3 * 100 * 100)  # the host half fits, the device half does not
    memory = PinnedMemory(api)
    with pytest.raises(CudaError, match="out of GPU memory"):
        memory.allocate((100, 100, 3))
    assert api.used == 0 and memory.allocations == 0 and memory.live == []


def test_close_releases_every_buffer() -> None:
    api = fake_gpu(DISCRETE)
    memory = PinnedMemory(api)
    for _ in range(3):
        memory.allocate((10, 12, 3))
    assert memory.describe()["buffers"] == 3 and memory.describe()["bytes"] == 3 * 360
    memory.close()
    assert api.used == 0 and memory.describe()["buffers"] == 0


# -- the allocators, on the two bindings ---------------------------------------------------------
def test_cuda_python_mapped_frames_come_from_cudaHostAlloc_mapped(monkeypatch: pytest.MonkeyPatch) -> None:
    fb = fake_cuda_python.install(monkeypatch, fake_cuda_python.FakeDevice(integrated=True))
    memory = frame_memory("auto", cuda=_cudapython.open_device(), measured=MEASURED_MAPPED)
    assert memory.kind == "mapped" and memory.describe()["implementation"] == "cuda-python"
    buf = memory.allocate((48, 64, 3))
    host_address = buf.array.__array_interface__["data"][0]
    assert fb.state.flags[host_address] == fb.rt.cudaHostAllocMapped
    assert fb.state.calls[-2:] == ["cudaHostAlloc", "cudaHostGetDevicePointer"]
    assert buf.device_ptr == host_address  # the fake maps at the same address (unified addressing)
    stream = memory.api.create_stream()
    assert memory.upload(buf, stream) == buf.device_ptr and fb.state.copies == []
    memory.release(buf)
    assert fb.state.calls[-1] == "cudaFreeHost" and fb.state.used == 0


def test_cuda_python_pinned_frames_upload_with_cudaMemcpyAsync(monkeypatch: pytest.MonkeyPatch) -> None:
    fb = fake_cuda_python.install(monkeypatch, fake_cuda_python.FakeDevice(integrated=False))
    memory = frame_memory("auto", cuda=_cudapython.open_device())
    assert memory.kind == "pinned"
    buf = memory.allocate((48, 64, 3))
    host_address = buf.array.__array_interface__["data"][0]
    assert fb.state.flags[host_address] == fb.rt.cudaHostAllocDefault
    assert fb.state.calls[-2:] == ["cudaHostAlloc", "cudaMalloc"]
    buf.array[:] = 201
    stream = memory.api.create_stream()
    assert memory.upload(buf, stream) == buf.device_ptr
    kind = fb.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
    assert fb.state.copies == [(buf.device_ptr, host_address, 48 * 64 * 3, kind, stream)]
    assert ctypes.string_at(buf.device_ptr, 48 * 64 * 3) == b"\xc9" * (48 * 64 * 3)
    memory.release(buf)
    assert fb.state.calls[-2:] == ["cudaFree", "cudaFreeHost"] and fb.state.used == 0


@pytest.mark.parametrize("integrated", [True, False], ids=["integrated", "discrete"])
def test_pycuda_frames(monkeypatch: pytest.MonkeyPatch, integrated: bool) -> None:
    fp = fake_pycuda.install(monkeypatch, fake_pycuda.FakePycudaDevice(integrated=integrated))
    api = _pycuda.open_device()
    memory = frame_memory("auto", cuda=api, measured=MEASURED_MAPPED)
    assert memory.kind == ("mapped" if integrated else "pinned")  # a discrete GPU pins whatever was measured
    buf = memory.allocate((30, 41, 3))
    flags = buf.host.handle.base.flags  # pagelocked_empty's HostAllocation
    assert flags == (fp.drv.host_alloc_flags.DEVICEMAP if integrated else 0)
    host_address = buf.array.__array_interface__["data"][0]
    stream = api.create_stream()
    pointer = memory.upload(buf, stream)
    if integrated:
        assert pointer == host_address and fp.state.copies == []  # get_device_pointer: no copy
    else:
        assert pointer == buf.device_ptr != host_address
        assert fp.state.copies == [(buf.device_ptr, host_address, 30 * 41 * 3, stream.handle)]
    memory.release(buf)
    api.destroy_stream(stream)
    assert fp.state.used == 0 and fp.aborts() == []


@pytest.mark.parametrize("measured,kind", [
    ({"chosen": "mapped", "gpu_ms": {"mapped": 0.9, "pinned": 1.2}}, "mapped"),
    ({"chosen": "pinned", "gpu_ms": {"mapped": 1.9, "pinned": 1.2}}, "pinned"),
    (None, "pinned"),  # nothing measured yet: the documented default
    ({"chosen": "zero-copy"}, "pinned"),  # malformed: ignored
])
def test_auto_on_a_jetson_takes_what_was_measured_there(measured, kind: str) -> None:
    memory = frame_memory("auto", cuda=fake_gpu(XAVIER_NX), measured=measured)
    assert memory.kind == kind
    if kind == "mapped" or (measured or {}).get("chosen") == "pinned":
        assert "measured faster on this device by `edge-sdk engine`" in memory.reason and "1.2" in memory.reason
    else:
        assert "nothing was measured here yet" in memory.reason


def test_a_measurement_never_maps_a_device_that_cannot() -> None:
    memory = frame_memory("auto", cuda=fake_gpu(tegra(can_map=False)), measured=MEASURED_MAPPED)
    assert memory.kind == "pinned"
