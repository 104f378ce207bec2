"""Fixtures of the CUDA tests; the host shim (`kernel_shim`) is the plugin tests/kernel_shim.py."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from edge_sdk.cuda.compiler import KernelCache
from kernel_shim import ShimLibrary


@pytest.fixture
def fake_gpu(kernel_shim: Callable[[str], ShimLibrary], tmp_path: Path) -> Callable[..., object]:
    """`fake_gpu(props=..., graphs=..., memory_limit=...)` -> (FakeHostCuda, KernelCache) running
    the package's kernels through the host shim."""
    from fakes.fake_cuda_host import XAVIER_NX, FakeHostCuda

    shim = kernel_shim("preprocess.cu")

    def make(props=XAVIER_NX, graphs: bool = True, memory_limit: int = 4 << 30):
        api = FakeHostCuda(shim.launch, props=props, graphs=graphs, memory_limit=memory_limit)
        return api, KernelCache(directory=tmp_path / "kernels")

    return make


@pytest.fixture(autouse=True)
def _fresh_kernel_memory_cache():
    """Compiled images are cached per process; each test starts without them."""
    from edge_sdk.cuda.compiler import clear_memory_cache

    clear_memory_cache()
    yield
    clear_memory_cache()


@pytest.fixture(params=("bindings", "legacy"))
def cuda_python_fake(request, monkeypatch, kernel_shim):
    """cuda_python_fake(device) -> the fake cuda-python 11.8 (tests/fakes/fake_cuda_python.py) in
    each layout: `cuda.bindings.*`, and 11.8.2's `cuda.cudart` / `cuda.cuda` / `cuda.nvrtc`,
    what resolves on JetPack 5. Compiling returns the source (the real NVRTC path is tested in
    test_nvrtc_compile.py); launches run through the host shim."""
    from edge_sdk.cuda import _cudapython
    from fakes import fake_cuda_python

    assert request.param in fake_cuda_python.LAYOUTS
    shim = kernel_shim("preprocess.cu")
    monkeypatch.setattr(_cudapython, "nvrtc_compile", lambda source, *a, **k: source.encode())
    monkeypatch.setattr(_cudapython, "_nvrtc_module", None)  # the fake's nvrtc module, not a real one loaded earlier
    monkeypatch.setattr(_cudapython, "_nvrtc_loaded", None)

    def make(device):
        return fake_cuda_python.install(monkeypatch, device, shim.launch, layout=request.param)

    return make
