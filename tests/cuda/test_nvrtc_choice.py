"""Which NVRTC compiles the kernels (the pip wheel's or the system's, against the driver's CUDA
version), what describe() says of it, and a GPU newer than NVRTC 11.8's architecture list: GPU
preprocessing gives way to the CPU preprocessor with one warning."""
from __future__ import annotations

import logging
from typing import List

import numpy as np
import pytest

from edge_sdk.cuda import DeviceProperties, _cudapython
from edge_sdk.cuda._cudapython import NvrtcLibrary, choose_nvrtc
from edge_sdk.cuda.compiler import KernelCache
from edge_sdk.cuda.preprocess import GpuPreprocessor
from edge_sdk.errors import KernelArchitectureError
from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime.detectors import factory as factory_mod
from edge_sdk.runtime.detectors.full import FullFrameDetector
from edge_sdk.runtime.detectors.factory import make_detector
from fakes import fake_cuda_python
from runtime_factories import stream_model

WHEEL = NvrtcLibrary("/venv/nvidia/cuda_nvrtc/lib/libnvrtc.so.11.2", (11, 8), "pip wheel")
JETPACK = NvrtcLibrary("/usr/local/cuda/lib64/libnvrtc.so.11.2", (11, 4), "system")
SPEC = InputSpec(name="input.1", shape=[1, 3, 32, 64], resize="letterbox")


@pytest.mark.parametrize("candidates,driver,chosen,words", [
    ([WHEEL, JETPACK], 11040, JETPACK, "newer than the driver's CUDA 11.4"),  # JetPack 5 with the wheel installed
    ([WHEEL, JETPACK], 11080, WHEEL, "not newer"),
    ([WHEEL, JETPACK], 12020, WHEEL, "not newer"),  # a discrete GPU's newer driver
    ([WHEEL], 11040, WHEEL, "cuda-compat"),  # nothing better: the wheel, and the reason says what it relies on
    ([JETPACK], 11040, JETPACK, "no pip wheel"),
    ([], 11040, None, "LD_LIBRARY_PATH"),
    ([WHEEL, JETPACK], None, WHEEL, "not known"),
])
def test_the_system_nvrtc_is_preferred_when_the_wheel_is_newer_than_the_driver(candidates, driver, chosen, words) -> None:
    library, why = choose_nvrtc(candidates, driver)
    assert library == chosen and words in why


def test_describe_says_which_nvrtc_and_why(cuda_python_fake, monkeypatch, tmp_path) -> None:
    cuda_python_fake(fake_cuda_python.FakeDevice(driver=11040, nvrtc=(11, 4)))
    loaded: List[NvrtcLibrary] = []
    monkeypatch.setattr(_cudapython, "nvrtc_candidates", lambda: [WHEEL, JETPACK])
    monkeypatch.setattr(_cudapython, "_preload_nvrtc", lambda library: loaded.append(library) or True)
    api = _cudapython.open_device()
    before = api.describe()["nvrtc"]
    assert (before["source"], before["version"], before["loaded"]) == ("system", "11.4", False)
    KernelCache(tmp_path).kernels(api, "preprocess.cu", ["preprocess_frame"])
    assert loaded == [JETPACK]
    after = api.describe()["nvrtc"]
    assert after["library"] == JETPACK.path and "newer than the driver's CUDA 11.4" in after["reason"]
    assert api.compiler_id == "nvrtc-11.4"


@pytest.mark.parametrize("sm", [(10, 0), (12, 0)])
def test_a_gpu_newer_than_nvrtc_11_8_is_a_typed_error_and_allocates_nothing(cuda_python_fake, tmp_path, sm) -> None:
    fb = cuda_python_fake(fake_cuda_python.FakeDevice(name=b"RTX", major=sm[0], minor=sm[1], integrated=False,
                                                      driver=12080, bindings=11080))
    api = _cudapython.open_device()
    with pytest.raises(KernelArchitectureError, match=rf"sm_{sm[0]}{sm[1]}\) is newer than nvrtc-11.8 knows .*sm_90"):
        GpuPreprocessor(SPEC, api, cache=KernelCache(tmp_path))
    assert fb.state.used == 0 and fb.state.live_streams() == 0


def test_sm_90_still_compiles(cuda_python_fake, tmp_path) -> None:
    cuda_python_fake(fake_cuda_python.FakeDevice(name=b"H200", major=9, minor=0, integrated=False, driver=12080))
    pre = GpuPreprocessor(SPEC, _cudapython.open_device(), cache=KernelCache(tmp_path))
    pre.close()


def test_the_detector_falls_back_to_the_cpu_preprocessor_with_one_warning(kernel_shim, monkeypatch, tmp_path,
                                                                          caplog) -> None:
    from fakes.fake_tensorrt_runtime import FakeRuntimeCuda

    new_gpu = DeviceProperties(name="RTX 50 (fake)", sm=(12, 0), integrated=False, can_map_host_memory=True,
                               total_memory=16 << 30, driver_version=12080, bindings_version=11080)
    cuda = FakeRuntimeCuda(kernel_shim("preprocess.cu").launch, props=new_gpu)
    cuda.compiler_archs = fake_cuda_python.NVRTC_11_8_ARCHS
    monkeypatch.setenv("EDGE_SDK_KERNEL_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setattr(factory_mod, "_WARNED", set())

    model = stream_model(cuda, SPEC, lambda x: [np.full((x.shape[0], 1, 8, 16), float(x.mean()), np.float32)] * 4)
    with caplog.at_level(logging.WARNING, logger="edge_sdk.runtime.detectors.factory"):
        first = make_detector("full", model)
        second = make_detector("full", model)
    assert isinstance(first, FullFrameDetector) and isinstance(second, FullFrameDetector)
    warnings = [r.getMessage() for r in caplog.records if "GPU preprocessing is off" in r.getMessage()]
    assert len(warnings) == 1 and "sm_120" in warnings[0] and "preprocessed on the CPU" in warnings[0]
    assert cuda.used == 0 and cuda.live_events == 0


def header_folder(root, name: str, code: int):
    """A CUDA include folder of release `code` (cuda.h's CUDA_VERSION), with a cuda_fp16.h."""
    folder = root / name
    folder.mkdir()
    (folder / "cuda.h").write_text(f"#ifndef __cuda_cuda_h__\n#define __cuda_cuda_h__\n#define CUDA_VERSION {code}\n#endif\n")
    (folder / "cuda_fp16.h").write_text("/* fp16 */\n")
    return folder


@pytest.mark.parametrize("nvrtc_version, chosen", [((11, 4), "jetpack"), ((11, 8), "wheel"), ((11, 6), "jetpack"),
                                                   ((11, 2), None)])
def test_the_headers_come_from_the_compiler_s_release(tmp_path, monkeypatch, nvrtc_version, chosen) -> None:
    """The 11.8 wheel's headers are found first, but JetPack 5's NVRTC 11.4 gets its own 11.4
    headers: a newer release's headers use what the older compiler lacks; never newer ones."""
    folders = {"wheel": header_folder(tmp_path, "wheel", 11080), "jetpack": header_folder(tmp_path, "jetpack", 11040)}
    monkeypatch.setattr(_cudapython, "_header_candidates", lambda: [folders["wheel"], folders["jetpack"]])
    got = _cudapython.cuda_include_dirs(nvrtc_version)
    assert got == ([str(folders[chosen])] if chosen else [])
    assert _cudapython.cuda_include_dirs() == [str(folders["wheel"])]  # no version: the first found
    assert _cudapython.header_version(folders["jetpack"]) == (11, 4)
    assert _cudapython.header_version(tmp_path) is None  # no cuda.h


def test_the_compile_passes_the_compiler_s_headers(monkeypatch, tmp_path) -> None:
    """What reaches nvrtcCompileProgram: -I of the headers of NVRTC's own release."""
    folders = [header_folder(tmp_path, "wheel", 11080), header_folder(tmp_path, "jetpack", 11040)]
    monkeypatch.setattr(_cudapython, "_header_candidates", lambda: folders)
    seen: List[bytes] = []

    class FakeNvrtc:  # the NVRTC calls a compile makes; the compile fails, its options recorded
        class nvrtcResult:
            NVRTC_SUCCESS = 0

        @staticmethod
        def nvrtcVersion():
            return 0, 11, 4

        @staticmethod
        def nvrtcCreateProgram(*_a):
            return 0, object()

        @staticmethod
        def nvrtcCompileProgram(_prog, _n, opts):
            seen.extend(opts)
            return (1,)

        @staticmethod
        def nvrtcGetProgramLogSize(_prog):
            return 0, 1

        @staticmethod
        def nvrtcGetProgramLog(_prog, _buf):
            return (0,)

        @staticmethod
        def nvrtcDestroyProgram(_prog):
            return (0,)

    monkeypatch.setattr(_cudapython, "nvrtc", lambda *_a: FakeNvrtc)
    with pytest.raises(Exception, match="does not compile for sm_72 with NVRTC 11.4"):
        _cudapython.nvrtc_compile("x", "k.cu", "sm_72")
    assert f"-I{folders[1]}".encode() in seen and f"-I{folders[0]}".encode() not in seen
