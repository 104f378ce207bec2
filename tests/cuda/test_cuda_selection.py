"""Choosing the implementation: `auto` falls back to the CPU path, an explicit choice fails loudly."""
from __future__ import annotations

import ctypes.util
import importlib.util

import pytest

from edge_sdk.cuda import CHOICES, MAPPED, PINNED, frame_memory_for, open_cuda, require_cuda
from edge_sdk.errors import ConfigError, CudaError, MissingDependencyError
from fakes.fake_cuda_host import DISCRETE, XAVIER_NX


class Loader:
    """Stands in for importing an implementation: an object, or the error it raises."""

    def __init__(self, **results) -> None:
        self.results = results
        self.asked = []

    def __call__(self, name):
        self.asked.append(name)
        result = self.results[name]
        if isinstance(result, Exception):
            raise result
        return result


NO_DRIVER = CudaError("no NVIDIA driver")
NOT_INSTALLED = MissingDependencyError("pycuda", "pycuda")


def test_auto_prefers_cuda_python() -> None:
    loader = Loader(**{"cuda-python": "cp", "pycuda": "pc"})
    assert open_cuda("auto", loader) == "cp" and loader.asked == ["cuda-python"]


def test_auto_falls_back_to_pycuda_then_to_none() -> None:
    assert open_cuda("auto", Loader(**{"cuda-python": NO_DRIVER, "pycuda": "pc"})) == "pc"
    assert open_cuda("auto", Loader(**{"cuda-python": NO_DRIVER, "pycuda": NOT_INSTALLED})) is None


@pytest.mark.parametrize("choice,error", [("cuda-python", NO_DRIVER), ("pycuda", NOT_INSTALLED)])
def test_explicit_choice_fails_loudly(choice, error) -> None:
    loader = Loader(**{"cuda-python": "cp", "pycuda": "pc", choice: error})
    with pytest.raises(type(error)):
        open_cuda(choice, loader)
    assert loader.asked == [choice]


def test_unknown_choice_and_require() -> None:
    with pytest.raises(ConfigError, match="cuda must be one of auto, cuda-python, pycuda"):
        open_cuda("cupy")
    with pytest.raises(CudaError, match=r'no usable NVIDIA GPU.*edge-sdk\[cuda\].*CPU path'):
        require_cuda("auto", Loader(**{"cuda-python": NO_DRIVER, "pycuda": NO_DRIVER}))
    assert CHOICES == ("auto", "cuda-python", "pycuda")


def test_integrated_maps_frames_discrete_pins_them() -> None:
    assert frame_memory_for(XAVIER_NX) == MAPPED
    assert frame_memory_for(DISCRETE) == PINNED


@pytest.mark.skipif(bool(ctypes.util.find_library("cuda")), reason="this machine has an NVIDIA driver")
def test_real_auto_on_a_machine_without_gpu_keeps_the_cpu_path() -> None:
    assert open_cuda("auto") is None
    if importlib.util.find_spec("pycuda") is None:
        with pytest.raises(MissingDependencyError, match=r"edge-sdk\[pycuda\]"):
            open_cuda("pycuda")
