"""edge_sdk.cuda._cudapython against fake cuda-python 11.8 bindings (tests/fakes/fake_cuda_python.py),
and against the real bindings where this machine has no driver."""
from __future__ import annotations

import ctypes.util
import os

import numpy as np
import pytest

from edge_sdk.cuda import MAPPED, PINNED, frame_memory_for
from edge_sdk.cuda import _cudapython
from edge_sdk.cuda.compiler import KernelCache
from edge_sdk.cuda.preprocess import GpuPreprocessor
from edge_sdk.errors import CudaError, MissingDependencyError
from edge_sdk.preprocess import InputSpec, Preprocessor
from fakes import fake_cuda_python as fake

SPEC = InputSpec(shape=[1, 3, 96, 160], mean=[104, 117, 123], scale=[1 / 58, 1 / 57, 1 / 59], dtype="float16")


@pytest.fixture
def bindings(cuda_python_fake):
    return cuda_python_fake


def test_each_layout_is_the_one_imported(bindings) -> None:
    fb = bindings(fake.FakeDevice())
    api = _cudapython.open_device()
    assert api.rt is fb.rt and api.drv is fb.drv


def test_xavier_properties_and_mapped_frames(bindings) -> None:
    bindings(fake.FakeDevice())
    api = _cudapython.open_device()
    props = api.properties
    assert (props.name, props.sm, props.integrated, props.arch) == ("Xavier", (7, 2), True, "sm_72")
    assert frame_memory_for(props) == MAPPED
    assert api.describe()["cuda_graphs"] is True


def test_mapped_buffer_has_a_device_pointer_pinned_does_not(bindings) -> None:
    fb = bindings(fake.FakeDevice())
    api = _cudapython.open_device()
    mapped = api.alloc_host((4, 6, 3), np.uint8, mapped=True)
    pinned = api.alloc_host((16,), np.float32)
    assert mapped.device_ptr is not None and pinned.device_ptr is None
    assert fb.state.flags[mapped.ptr] == fb.rt.cudaHostAllocMapped
    assert fb.state.flags[pinned.ptr] == fb.rt.cudaHostAllocDefault
    assert api.device_pointer_of(mapped.array[1:, 2:]) == mapped.device_ptr + 1 * 18 + 2 * 3
    assert api.device_pointer_of(pinned.array) is None
    assert api.device_pointer_of(np.zeros(3)) is None


@pytest.mark.parametrize("integrated", [True, False], ids=["integrated", "discrete"])
def test_preprocessor_end_to_end_with_a_captured_graph(bindings, tmp_path, integrated) -> None:
    fb = bindings(fake.FakeDevice(integrated=integrated))
    api = _cudapython.open_device()
    pre = GpuPreprocessor(SPEC, api, cache=KernelCache(tmp_path), frame_memory=MAPPED if integrated else None)
    rng = np.random.default_rng(0)
    for i in range(3):
        frame = rng.integers(0, 256, (121, 203, 3), dtype=np.uint8)
        pre.fill(frame)
        np.testing.assert_array_equal(pre.download(), Preprocessor(SPEC)(frame)[0])
    calls = fb.state.calls
    assert calls.count("cudaStreamBeginCapture") == 1 and calls.count("cudaGraphLaunch") == 3
    assert fb.state.capture_modes == [fake.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal]
    copies_in_graph = sum(1 for _ in fb.state.graphs[0]) - 1  # the graph: copies + one launch
    assert copies_in_graph == (0 if integrated else 1)
    assert frame_memory_for(api.properties) == (MAPPED if integrated else PINNED)


def test_no_driver_is_a_typed_error(bindings) -> None:
    bindings(fake.FakeDevice(driver=None))
    with pytest.raises(CudaError, match=r"no NVIDIA driver: Failed to dlopen libcuda.so.1.*use the CPU path"):
        _cudapython.open_device()


def test_driver_older_than_the_bindings(bindings) -> None:
    bindings(fake.FakeDevice(driver=10020, bindings=11080))
    with pytest.raises(CudaError, match=r"driver supports CUDA 10.2, older than the CUDA 11.8.*cuda-python>=10.0,<11"):
        _cudapython.open_device()


@pytest.mark.parametrize("error,words", [(35, "driver is older"), (100, "no CUDA device")])
def test_device_count_errors(bindings, error, words) -> None:
    bindings(fake.FakeDevice(count_error=error))
    with pytest.raises(CudaError, match=words):
        _cudapython.open_device()


def test_no_device(bindings) -> None:
    bindings(fake.FakeDevice(count=0))
    with pytest.raises(CudaError, match="no CUDA device 0"):
        _cudapython.open_device()


def test_out_of_memory_names_size_and_fix(bindings) -> None:
    bindings(fake.FakeDevice(memory=1 << 20))
    api = _cudapython.open_device()
    with pytest.raises(CudaError, match=r"out of GPU memory: cudaMalloc of 2.0 MiB failed .*lower the batch"):
        api.alloc_device(2 << 20)


def test_driver_refusing_the_image_recompiles_once_then_fails(bindings, tmp_path) -> None:
    fb = bindings(fake.FakeDevice(bad_image=222))
    api = _cudapython.open_device()
    cache = KernelCache(tmp_path)
    with pytest.raises(CudaError, match="CUDA_ERROR_UNSUPPORTED_PTX_VERSION.*clear the kernel cache"):
        cache.kernels(api, "preprocess.cu", ["preprocess_frame"])
    assert fb.state.loads == 2 and cache.compiled == 2


def test_real_bindings_without_a_driver_fail_loudly() -> None:
    """The real cuda-python, on a machine with no NVIDIA driver (this CI). Where the bindings are
    absent (a Jetson image without the cuda extra) it skips, unless EDGE_SDK_REQUIRE_CUDA_TESTS=1
    (.ci/run, with the nvrtc extra installed). `import cuda` alone proves nothing: tests/cuda is
    itself importable as a namespace package `cuda`."""
    try:
        _cudapython._module("cuda.bindings.runtime", "cuda.cudart")
    except MissingDependencyError as exc:
        if os.environ.get("EDGE_SDK_REQUIRE_CUDA_TESTS") == "1":
            raise
        pytest.skip(f"the real cuda-python bindings are not installed ({exc})")
    if ctypes.util.find_library("cuda"):
        pytest.skip("this machine has an NVIDIA driver")
    with pytest.raises(CudaError, match="no NVIDIA driver"):
        _cudapython.open_device()
