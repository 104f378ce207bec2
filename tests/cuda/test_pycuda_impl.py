"""edge_sdk.cuda._pycuda against a fake pycuda (tests/fakes/fake_pycuda.py)."""
from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from edge_sdk.cuda import _pycuda
from edge_sdk.cuda.compiler import KernelCache
from edge_sdk.cuda.preprocess import GpuPreprocessor
from edge_sdk.errors import CudaError, MissingDependencyError
from edge_sdk.preprocess import InputSpec, Preprocessor
from fakes import fake_pycuda as fake

SPEC = InputSpec(shape=[2, 3, 64, 96], color="RGB", mean=[10, 20, 30], scale=[0.5, 0.25, 2.0])


@pytest.fixture
def pycuda(monkeypatch, kernel_shim):
    shim = kernel_shim("preprocess.cu")

    def make(device: fake.FakePycudaDevice):
        return fake.install(monkeypatch, device, shim.launch)

    return make


def test_primary_context_never_autoinit(pycuda) -> None:
    fp = pycuda(fake.FakePycudaDevice())
    api = _pycuda.open_device()
    assert api.context is fp.primary.context
    assert "pycuda.autoinit" not in sys.modules
    assert api.properties.sm == (7, 2) and api.properties.integrated
    assert api.supports_graphs is False and api.compiler_id == "nvcc-11.4"


def test_preprocessor_runs_eagerly_and_matches_cpu(pycuda, tmp_path) -> None:
    fp = pycuda(fake.FakePycudaDevice(integrated=False))
    api = _pycuda.open_device()
    pre = GpuPreprocessor(SPEC, api, cache=KernelCache(tmp_path))
    frame = np.random.default_rng(1).integers(0, 256, (77, 131, 3), dtype=np.uint8)
    for slot in range(2):
        pre.fill(frame, slot)
    cpu = Preprocessor(SPEC)
    cpu.fill(frame, 0)
    cpu.fill(frame, 1)
    np.testing.assert_array_equal(pre.download(), cpu.tensor)
    assert fp.state.launches == ["preprocess_frame", "preprocess_frame"]
    assert pre.graph.describe()["mode"] == "eager"
    (options,) = fp.state.compiles
    assert options["no_extern_c"] is True and options["arch"] == "sm_72" and "--fmad=false" in options["options"]
    assert options["cache_dir"] is False  # our KernelCache keeps the CUBIN, not pycuda's


def test_mapped_host_memory_uses_devicemap(pycuda) -> None:
    pycuda(fake.FakePycudaDevice())
    api = _pycuda.open_device()
    mapped = api.alloc_host((8, 8, 3), np.uint8, mapped=True)
    assert mapped.device_ptr == mapped.ptr  # the fake maps at the same address
    with pytest.raises(CudaError):
        api._call("get_device_pointer", api.alloc_host((8,), np.uint8).handle.base.get_device_pointer)


def test_other_threads_push_the_primary_context_once(pycuda) -> None:
    fp = pycuda(fake.FakePycudaDevice())
    api = _pycuda.open_device()
    stream = api.create_stream()
    assert fp.state.pushes == []  # the opening thread has it current already

    def work() -> None:
        api.synchronize(stream)
        api.synchronize(stream)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert fp.state.pushes == [t.ident]


def test_compile_error_shows_nvcc_log(pycuda, tmp_path) -> None:
    pycuda(fake.FakePycudaDevice(compile_error='kernel.cu(3): error: identifier "x" is undefined'))
    api = _pycuda.open_device()
    with pytest.raises(CudaError, match=r'(?s)preprocess.cu does not compile for sm_72 with nvcc-11.4.*identifier "x" is undefined'):
        KernelCache(tmp_path).kernels(api, "preprocess.cu", ["preprocess_frame"])


def test_out_of_memory(pycuda) -> None:
    pycuda(fake.FakePycudaDevice(memory=1 << 20))
    api = _pycuda.open_device()
    with pytest.raises(CudaError, match=r"out of GPU memory: mem_alloc of 4.0 MiB"):
        api.alloc_device(4 << 20)


def test_driver_older_than_the_build(pycuda) -> None:
    pycuda(fake.FakePycudaDevice(driver=11020, built=(11, 4, 0)))
    with pytest.raises(CudaError, match=r"driver supports CUDA 11.2, older than the CUDA 11.4 pycuda was built against"):
        _pycuda.open_device()


def test_no_device(pycuda) -> None:
    pycuda(fake.FakePycudaDevice(count=0))
    with pytest.raises(CudaError, match="no CUDA device 0"):
        _pycuda.open_device()


def test_not_installed_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pycuda", None)  # import fails, as when it is not installed
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    monkeypatch.setattr(_pycuda.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingDependencyError, match=r'pip install "edge-sdk\[pycuda\]"'):
        _pycuda.open_device()
