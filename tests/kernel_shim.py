"""The host shim, a test plugin: every kernel source of the package compiled for the CPU with g++.

`kernel_shim(name)` gives a `ShimLibrary` for `edge_sdk/cuda/kernels/<name>`; its `launch`
takes what cuLaunchKernel takes (kernel name, grid, block, the address of the kernelParams
array) and runs the kernel over the whole grid on the CPU.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Dict, Sequence

import pytest

from edge_sdk.cuda import KERNEL_DIR

HERE = Path(__file__).parent / "cuda"  # host_shim.h and shim_include/
ENTRY = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(')


def kernel_names(source: str) -> list:
    return ENTRY.findall(source)


class ShimLibrary:
    def __init__(self, path: Path, names: Sequence[str]) -> None:
        self.path = path
        self.names = list(names)
        self._lib = ctypes.CDLL(str(path))
        self._launch = self._lib.shim_launch
        self._launch.restype = ctypes.c_int
        self._launch.argtypes = [ctypes.c_char_p] + [ctypes.c_uint] * 6 + [ctypes.c_void_p]
        for counter in (self._lib.shim_loads, self._lib.shim_misaligned_loads):
            counter.restype = ctypes.c_ulonglong
        self.loads = self.misaligned_loads = 0

    def launch(self, name: str, grid: Sequence[int], block: Sequence[int], params_address: int) -> None:
        rc = self._launch(name.encode(), *grid, *block, params_address)
        assert rc == 0, f"the shim has no kernel {name!r} (it has {self.names})"
        self.loads = int(self._lib.shim_loads())  # the last launch's 16-byte frame loads
        self.misaligned_loads = int(self._lib.shim_misaligned_loads())


def _harness(cu: Path, names: Sequence[str]) -> str:
    cases = "\n".join(
        f'    if (std::strcmp(name, "{n}") == 0) {{ shim_launch_packed({n}, grid, block, params); return 0; }}' for n in names
    )
    return (
        '#include "host_shim.h"\n'
        f'#include "{cu.name}"\n'
        'extern "C" int shim_launch(const char* name, unsigned gx, unsigned gy, unsigned gz,\n'
        "                           unsigned bx, unsigned by, unsigned bz, void** params)\n"
        "{\n"
        "    dim3 grid{gx, gy, gz}, block{bx, by, bz};\n"
        f"{cases}\n"
        "    return -1;\n"
        "}\n"
        'extern "C" unsigned long long shim_loads() { return shim_load_count; }\n'
        'extern "C" unsigned long long shim_misaligned_loads() { return shim_misaligned_count; }\n'
    )


@pytest.fixture(scope="session")
def kernel_shim(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], ShimLibrary]:
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        reason = "no C++ compiler (g++) to run the kernel source on the CPU"
        if os.environ.get("EDGE_SDK_REQUIRE_CUDA_TESTS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    out_dir = tmp_path_factory.mktemp("kernel_shim")
    built: Dict[str, ShimLibrary] = {}

    def build(name: str) -> ShimLibrary:
        if name in built:
            return built[name]
        cu = KERNEL_DIR / name
        names = kernel_names(cu.read_text())
        assert names, f"{cu} defines no extern \"C\" __global__ kernel"
        harness = _harness(cu, names)
        digest = hashlib.sha256((harness + cu.read_text() + (HERE / "host_shim.h").read_text()).encode()).hexdigest()[:16]
        src = out_dir / f"harness_{digest}.cpp"
        src.write_text(harness)
        lib = out_dir / f"shim_{digest}.so"
        cmd = [compiler, "-std=c++14", "-O2", "-ffp-contract=off", "-fPIC", "-shared", "-Wall", "-Werror",
               "-Wno-unused-function", f"-I{HERE}", f"-I{HERE / 'shim_include'}", f"-I{KERNEL_DIR}",
               str(src), "-o", str(lib)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, f"g++ could not compile {cu.name} with the host shim:\n{proc.stderr}"
        built[name] = ShimLibrary(lib, names)
        return built[name]

    return build
