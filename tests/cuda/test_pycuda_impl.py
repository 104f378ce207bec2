"""edge_sdk.cuda._pycuda against a fake pycuda (tests/fakes/fake_pycuda.py)."""
from __future__ import annotations

import sys
import threading
import warnings

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
    installed = []

    def make(device: fake.FakePycudaDevice):
        installed.append(fake.install(monkeypatch, device, shim.launch))
        return installed[-1]

    yield make
    for fp in installed:
        assert fp.aborts() == [], "a thread ended with the context on its pycuda stack: pycuda aborts the process there"


def test_the_primary_context_is_retained_and_never_left_pushed(pycuda) -> None:
    """Neither `pycuda.autoinit` (a context of its own) nor `pycuda.autoprimaryctx` (pushed for
    good on the importing thread) is imported: the fake refuses both imports."""
    fp = pycuda(fake.FakePycudaDevice())
    api = _pycuda.open_device()
    assert fp.state.retains == 1 and api.context.handle == fp.drv.Device(0).retain_primary_context().handle
    assert api.properties.sm == (7, 2) and api.properties.integrated
    assert api.supports_graphs is False and api.compiler_id == "nvcc-11.4"
    stream = api.create_stream()
    api.synchronize(stream)
    assert fp.drv.Context.get_current() is None  # pushed for each call and popped again
    api.destroy_stream(stream)


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
    pre.close()
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


@pytest.mark.parametrize("what", ["calls", "allocates and frees", "makes and destroys a stream and an event"])
def test_a_thread_that_used_cuda_ends_with_an_empty_context_stack(pycuda, what) -> None:
    """pycuda aborts the process when a thread ends with a context on its stack (the capture
    thread, model-reload, model-retire and model-shadow all end): the fixture fails on it."""
    fp = pycuda(fake.FakePycudaDevice())
    api = _pycuda.open_device()
    stream = api.create_stream()
    errors: list = []

    def work() -> None:
        try:
            if what == "calls":
                api.synchronize(stream)
                api.synchronize(stream)
            elif what == "allocates and frees":
                api.free_device(api.alloc_device(64))
                api.free_host(api.alloc_host((16,), np.uint8, mapped=True))
            else:
                own, event = api.create_stream(), api.create_event()
                api.record(event, own)
                api.event_synchronize(event)
                api.destroy_event(event)
                api.destroy_stream(own)
        except Exception as exc:  # the test thread reports it
            errors.append(exc)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pycuda's "leaked out-of-thread" warning fails the test
        t = threading.Thread(target=work, name=f"worker that {what}")
        t.start()
        t.join(10)
    assert not t.is_alive() and errors == []
    assert fp.aborts() == [] and fp.state.leaks == 0 and fp.state.used == 0
    assert t.ident in fp.state.pushes
    if what.startswith("makes"):
        assert sorted(fp.state.destroyed) == ["Event", "Stream"]  # destroyed at once, with the context pushed


def test_the_fake_records_the_abort_of_a_thread_that_keeps_the_context(monkeypatch) -> None:
    """The fake's rule itself: a thread that pushes and does not pop is what pycuda aborts on."""
    fp = fake.install(monkeypatch, fake.FakePycudaDevice())
    context = fp.drv.Device(0).retain_primary_context()
    t = threading.Thread(target=context.push, name="keeps it")
    t.start()
    t.join(10)
    assert fp.aborts() == ["keeps it"]
    with pytest.raises(fp.drv.LogicError, match="cannot pop non-current context"):
        fp.drv.Context.pop()


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
