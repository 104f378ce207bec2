"""KernelCache: compiled once per key, in memory and on disk; damaged files are not trusted."""
from __future__ import annotations

import shutil

import pytest

from edge_sdk.cuda import KERNEL_DIR
from edge_sdk.cuda.compiler import MAGIC, KernelCache, clear_memory_cache
from fakes.fake_cuda_host import DISCRETE, XAVIER_NX, FakeHostCuda

NAMES = ["preprocess_frame", "preprocess_rois"]


def api(props=XAVIER_NX) -> FakeHostCuda:
    return FakeHostCuda(lambda *a: None, props=props)


def test_memory_then_disk_then_compile(tmp_path) -> None:
    a = api()
    cache = KernelCache(tmp_path)
    kernels = cache.kernels(a, "preprocess.cu", NAMES)
    assert sorted(kernels) == NAMES and a.compiles == 1
    cache.kernels(a, "preprocess.cu", NAMES)  # same context: the loaded module
    assert a.compiles == 1
    b = api()
    cache.kernels(b, "preprocess.cu", NAMES)  # another context, same process: the image in memory
    assert b.compiles == 0
    clear_memory_cache()  # a new process
    c = api()
    fresh = KernelCache(tmp_path)
    fresh.kernels(c, "preprocess.cu", NAMES)
    assert c.compiles == 0 and fresh.disk_hits == 1
    (path,) = tmp_path.iterdir()
    assert path.name.startswith("preprocess-sm_72-fake-host-shim-") and path.read_bytes().startswith(MAGIC)


def test_key_changes_with_arch_and_source(tmp_path) -> None:
    cache = KernelCache(tmp_path)
    assert cache.key(api(XAVIER_NX), "preprocess.cu") != cache.key(api(DISCRETE), "preprocess.cu")
    folder = tmp_path / "kernels"
    shutil.copytree(KERNEL_DIR, folder)
    copy = KernelCache(tmp_path / "cache", kernel_dir=folder)
    before = copy.key(api(), "preprocess.cu")
    (folder / "extra.cuh").write_text("// a header next to the kernel can be included\n")
    assert copy.key(api(), "preprocess.cu") != before


@pytest.mark.parametrize("damage", ["truncate", "foreign", "flip"])
def test_damaged_cache_file_is_recompiled(tmp_path, damage) -> None:
    KernelCache(tmp_path).kernels(api(), "preprocess.cu", NAMES)
    (path,) = tmp_path.iterdir()
    data = path.read_bytes()
    damaged = {"truncate": data[: len(data) - 10], "foreign": b"\x7fELF" + data[4:],
               "flip": data[:-1] + bytes([data[-1] ^ 1])}[damage]
    path.write_bytes(damaged)
    clear_memory_cache()
    a = api()
    KernelCache(tmp_path).kernels(a, "preprocess.cu", NAMES)
    assert a.compiles == 1
    assert path.read_bytes() == data  # rewritten whole


def test_disk_cache_can_be_off(tmp_path) -> None:
    KernelCache(tmp_path, disk=False).kernels(api(), "preprocess.cu", NAMES)
    assert list(tmp_path.iterdir()) == []
