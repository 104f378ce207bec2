"""Every .cu of the package compiles with NVRTC 11.8 (JetPack 5's compiler family) for Xavier
(compute_72 / sm_72) and Orin (compute_87 / sm_87), on a machine without a GPU, with only its
own folder and the CUDA runtime headers on the include path.

Needs `cuda-python>=11.8,<12`, `nvidia-cuda-nvrtc-cu11==11.8.*` and
`nvidia-cuda-runtime-cu11==11.8.*` (the CI installs them). Where they are missing the tests
skip, unless EDGE_SDK_REQUIRE_CUDA_TESTS=1 (set by .ci/run), where they fail.
"""
from __future__ import annotations

import os
import re

import pytest

from edge_sdk.cuda import KERNEL_DIR
from edge_sdk.errors import CudaError, MissingDependencyError

KERNELS = sorted(KERNEL_DIR.glob("*.cu"))
ARCHS = ["compute_72", "compute_87", "sm_72", "sm_87"]
ENTRY = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(')


@pytest.fixture(scope="module")
def nvrtc():
    from edge_sdk.cuda import _cudapython

    try:
        version = _cudapython.nvrtc_version()
        headers = _cudapython.cuda_include_dirs()
        if not headers:
            raise CudaError("cuda_fp16.h not found: install nvidia-cuda-runtime-cu11==11.8.*")
    except (MissingDependencyError, CudaError) as exc:
        if os.environ.get("EDGE_SDK_REQUIRE_CUDA_TESTS") == "1":
            raise
        pytest.skip(f"NVRTC 11.8 is not installed here: {exc}")
    return _cudapython, version


def test_there_are_kernels() -> None:
    assert [p.name for p in KERNELS] == ["preprocess.cu"]


def test_nvrtc_is_the_cuda_11_family(nvrtc) -> None:
    _, version = nvrtc
    assert version[0] == 11, f"NVRTC {version}: the targets' JetPack 5 is CUDA 11"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("path", KERNELS, ids=lambda p: p.name)
def test_kernel_compiles_for_the_targets(nvrtc, path, arch) -> None:
    module, _ = nvrtc
    source = path.read_text()
    image, log = module.nvrtc_compile_with_log(source, path.name, arch, [str(path.parent)])
    assert "warning" not in log.lower(), log
    entries = ENTRY.findall(source)
    assert entries
    if arch.startswith("sm_"):
        assert image[:4] == b"\x7fELF"  # a CUBIN: loads without JIT on a driver of the same major
        for name in entries:
            assert name.encode() in image
    else:
        ptx = image.decode("ascii", "replace")
        assert f".target sm_{arch[-2:]}" in ptx
        for name in entries:
            assert f".entry {name}(" in ptx


def test_a_compile_leaves_the_threads_locale_as_it_was(nvrtc) -> None:
    """NVRTC switches the compiling thread to the "C" locale: after a compile the daemon's own
    text files and subprocesses would be read and written as ASCII."""
    import locale

    module, _ = nvrtc
    path = KERNELS[0]
    before = locale.getpreferredencoding(False)
    module.nvrtc_compile(path.read_text(), path.name, ARCHS[0], [str(path.parent)])
    assert locale.getpreferredencoding(False) == before


def test_compile_error_shows_nvrtc_log(nvrtc) -> None:
    module, _ = nvrtc
    broken = 'extern "C" __global__ void k(float* out) { out[threadIdx.x] = undefined_name; }\n'
    with pytest.raises(CudaError) as info:
        module.nvrtc_compile(broken, "broken.cu", "sm_72")
    text = str(info.value)
    assert "broken.cu" in text and "sm_72" in text and "NVRTC 11." in text
    assert 'identifier "undefined_name" is undefined' in text


def test_frames_are_read_with_16_byte_loads(nvrtc) -> None:
    """The compiled code itself: every global load of the frame is a 16-byte vector load through
    the read-only path (ld.global.nc.v4.u32), none a byte load (ld.global[.nc].u8), which on a
    Jetson's uncached page-locked memory would each go to DRAM."""
    module, _ = nvrtc
    path = KERNEL_DIR / "preprocess.cu"
    ptx = module.nvrtc_compile(path.read_text(), path.name, "compute_72", [str(path.parent)]).decode("ascii", "replace")
    loads = re.findall(r"\bld\.global(?:\.nc)?(?:\.v\d)?\.[us]\d+", ptx)
    assert "ld.global.nc.v4.u32" in loads
    assert [x for x in loads if x.endswith((".u8", ".s8"))] == []
