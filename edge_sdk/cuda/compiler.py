"""Kernels compiled at run time for the device's SM, and cached.

In memory per process (the compiled image per key, the loaded module per CUDA instance) and
on disk per user (default ``$EDGE_SDK_KERNEL_CACHE`` or ``~/.cache/edge-sdk/kernels``), keyed
by the sha256 of the kernel source and every header of its folder, the architecture and the
compiler with its version (`nvrtc-11.8`, or nvcc's version for pycuda). Files are written
atomically and checked when read: a truncated or foreign file is compiled again, never loaded.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Dict, Optional, Sequence

from edge_sdk.cuda.api import KERNEL_DIR, CudaApi, Kernel
from edge_sdk.errors import CudaError, KernelUnavailableError
from edge_sdk.fsutil import atomic_write_bytes

log = logging.getLogger(__name__)

MAGIC = b"EDGE-SDK-KERNEL 1\n"
HEADER_SUFFIXES = (".cuh", ".h")

_images: Dict[str, bytes] = {}  # key -> compiled image, for the whole process
_images_lock = threading.Lock()


def default_cache_dir() -> Path:
    env = os.environ.get("EDGE_SDK_KERNEL_CACHE")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("edge-sdk")) / "kernels"


def source_digest(path: Path) -> str:
    """sha256 of a kernel source and the headers next to it (what it can include)."""
    h = hashlib.sha256()
    files = [path] + sorted(p for p in path.parent.iterdir() if p.suffix in HEADER_SUFFIXES)
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


class KernelCache:
    """`kernels(api, "preprocess.cu", names)` -> {name: Kernel}, compiling only on a miss."""

    def __init__(self, directory: Optional[Path] = None, disk: bool = True, kernel_dir: Path = KERNEL_DIR) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.disk = disk
        self.kernel_dir = Path(kernel_dir)
        self.compiled = 0  # compilations this cache ran (tests and describe())
        self.disk_hits = 0

    def key(self, api: CudaApi, filename: str) -> str:
        digest = source_digest(self.kernel_dir / filename)
        parts = [digest, api.properties.arch, api.compiler_id, api.name]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()

    def path_for(self, api: CudaApi, filename: str, key: str) -> Path:
        stem = Path(filename).stem
        return self.directory / f"{stem}-{api.properties.arch}-{api.compiler_id}-{key[:16]}.bin"

    def image(self, api: CudaApi, filename: str) -> bytes:
        key = self.key(api, filename)
        with _images_lock:
            cached = _images.get(key)
        if cached is not None:
            return cached
        path = self.path_for(api, filename, key)
        image = self._read(path, key) if self.disk else None
        if image is None:
            source = (self.kernel_dir / filename).read_text()
            image = api.compile(source, filename, api.properties.arch, [str(self.kernel_dir)])
            self.compiled += 1
            if self.disk:
                self._write(path, key, image)
        else:
            self.disk_hits += 1
        with _images_lock:
            _images[key] = image
        return image

    def kernels(self, api: CudaApi, filename: str, names: Sequence[str]) -> Dict[str, Kernel]:
        """The kernels `names` of `filename`, compiled (or read from the cache) and loaded.
        Whatever stops that (the compiler cannot run or rejects the source, the driver refuses
        the image) is a KernelUnavailableError naming it: the caller then works without them."""
        try:
            return self._kernels(api, filename, names)
        except KernelUnavailableError:
            raise
        except (CudaError, OSError) as exc:
            raise KernelUnavailableError(f"the kernels of {filename} cannot be compiled or loaded with {api.name}: "
                                         f"{exc}") from exc

    def _kernels(self, api: CudaApi, filename: str, names: Sequence[str]) -> Dict[str, Kernel]:
        key = self.key(api, filename)
        with api._lock:
            module = api._modules.get(key)
        if module is None:
            image = self.image(api, filename)
            try:
                module = api.load_module(image)
            except CudaError:
                # A cached image the driver refuses (another driver, a damaged file) is
                # dropped and compiled once more; a second refusal is the real error.
                self.forget(api, filename)
                image = self.image(api, filename)
                module = api.load_module(image)
            with api._lock:
                api._modules[key] = module
        return {n: Kernel(n, api.get_function(module, n), module) for n in names}

    def forget(self, api: CudaApi, filename: str) -> None:
        key = self.key(api, filename)
        with _images_lock:
            _images.pop(key, None)
        path = self.path_for(api, filename, key)
        if path.exists():
            path.unlink()

    @staticmethod
    def _read(path: Path, key: str) -> Optional[bytes]:
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if not data.startswith(MAGIC):
            return None
        header_end = data.find(b"\n", len(MAGIC))
        if header_end < 0:
            return None
        try:
            header = json.loads(data[len(MAGIC):header_end].decode())
        except (UnicodeDecodeError, ValueError):
            return None
        payload = data[header_end + 1:]
        if not isinstance(header, dict) or header.get("key") != key:
            return None
        if header.get("sha256") != hashlib.sha256(payload).hexdigest() or not payload:
            return None
        return payload

    @staticmethod
    def _write(path: Path, key: str, image: bytes) -> None:
        header = json.dumps({"key": key, "sha256": hashlib.sha256(image).hexdigest()}).encode()
        try:
            atomic_write_bytes(path, MAGIC + header + b"\n" + image)
        except OSError as exc:
            # A read-only cache folder costs one compile per process, nothing else.
            log.warning("kernel cache %s is not writable (%s); kernels are compiled again by each process", path.parent, exc)


def clear_memory_cache() -> None:
    """Forget every compiled image of this process (tests)."""
    with _images_lock:
        _images.clear()
