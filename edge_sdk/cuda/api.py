"""The CUDA layer's interface and what it hands out: the `CudaApi` both implementations
(`_cudapython`, `_pycuda`) subclass, the device's properties, host and device buffers, device
tensors, kernel arguments, and the choice of implementation (`open_cuda`, `require_cuda`). The
package's face, :mod:`edge_sdk.cuda`, hands these names on; the modules of the package import
them from here.
"""
from __future__ import annotations

import abc
import ctypes
import importlib
import importlib.util
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.errors import ConfigError, CudaError, MissingDependencyError

KERNEL_DIR = Path(__file__).parent / "kernels"

IMPLEMENTATIONS = ("cuda-python", "pycuda")
CHOICES = ("auto",) + IMPLEMENTATIONS
_MODULES = {"cuda-python": "edge_sdk.cuda._cudapython", "pycuda": "edge_sdk.cuda._pycuda"}

# The CUDA major version of the targets: JetPack 5 (Xavier NX, Orin on L4T R35) ships CUDA 11.4.
# cuda-python's major version must match the driver's (the `cuda` extra pins 11.x).
TARGET_CUDA_MAJOR = 11

MAPPED = "mapped"
PINNED = "pinned"

# The preprocess kernel reads frame bytes with aligned 16-byte loads (kernels/preprocess.cu): every
# buffer a frame lies in is allocated in whole 16-byte blocks, so the last block a thread loads is
# inside the allocation (compute-sanitizer's memcheck stays clean for any frame size).
LOAD_BLOCK = 16


def padded_size(nbytes: int) -> int:
    """`nbytes` (at least 1) rounded up to whole LOAD_BLOCK blocks: what a frame buffer allocates."""
    return -(-max(int(nbytes), 1) // LOAD_BLOCK) * LOAD_BLOCK


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    sm: Tuple[int, int]  # compute capability (major, minor)
    integrated: bool  # cudaDevAttrIntegrated: shares DRAM with the CPU (a Jetson)
    can_map_host_memory: bool  # cudaDevAttrCanMapHostMemory
    total_memory: int  # bytes
    driver_version: int  # e.g. 11040 for CUDA 11.4
    bindings_version: int  # the CUDA version the bindings were built for, same encoding

    @property
    def arch(self) -> str:
        """`sm_72`: the real architecture kernels are compiled for."""
        return f"sm_{self.sm[0]}{self.sm[1]}"

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "sm": f"{self.sm[0]}.{self.sm[1]}",
            "integrated": self.integrated,
            "can_map_host_memory": self.can_map_host_memory,
            "total_memory_mb": round(self.total_memory / (1 << 20)),
            "driver": version_text(self.driver_version),
            "bindings": version_text(self.bindings_version),
        }


def version_text(code: int) -> str:
    """11040 -> '11.4' (CUDA's version encoding: 1000 * major + 10 * minor)."""
    return f"{code // 1000}.{(code % 1000) // 10}"


def frame_memory_for(props: DeviceProperties) -> str:
    """`mapped` (zero-copy) on an integrated GPU that can map host memory, else `pinned`: for
    buffers the GPU writes once and the CPU reads (outputs). Frames: edge_sdk.cuda.frames.

    NVIDIA's "CUDA for Tegra" application note (section "I/O Coherency") is what makes
    mapped frames pay on Xavier and later: pinned host memory stays cached on the CPU and the
    GPU snoops the CPU's caches, so a frame the CPU decoded into a mapped buffer is read by a
    kernel with no copy and no cache maintenance. The coherency is one way: results the GPU
    writes are read back only after the stream is synchronized.
    """
    return MAPPED if props.integrated and props.can_map_host_memory else PINNED


class HostBuffer:
    """Page-locked host memory seen as a numpy array; `device_ptr` is set when it is mapped."""

    def __init__(self, array: np.ndarray, device_ptr: Optional[int], handle: Any = None) -> None:
        self.array = array
        self.ptr = int(array.ctypes.data)
        self.nbytes = int(array.nbytes)
        self.device_ptr = device_ptr
        self.handle = handle  # what the implementation needs to free it

    @property
    def mapped(self) -> bool:
        return self.device_ptr is not None


class DeviceBuffer:
    """`nbytes` of device memory at `ptr`."""

    def __init__(self, ptr: int, nbytes: int, handle: Any = None) -> None:
        self.ptr = int(ptr)
        self.nbytes = int(nbytes)
        self.handle = handle


class DeviceTensor:
    """A typed view of device memory; `__cuda_array_interface__` lets CUDA libraries use it."""

    def __init__(self, buffer: DeviceBuffer, shape: Sequence[int], dtype: Any, offset: int = 0) -> None:
        self.buffer = buffer
        self.shape = tuple(int(v) for v in shape)
        self.dtype = np.dtype(dtype)
        self.offset = int(offset)
        self.nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
        if self.offset + self.nbytes > buffer.nbytes:
            raise ValueError(f"tensor of {self.nbytes} bytes at {self.offset} exceeds its buffer of {buffer.nbytes}")

    @property
    def ptr(self) -> int:
        return self.buffer.ptr + self.offset

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: Any) -> "DeviceTensor":
        """Leading-axis slices only (`t[:2]`, `t[1]`), which stay contiguous."""
        item = self.nbytes // self.shape[0]
        if isinstance(index, slice):
            start, stop, step = index.indices(self.shape[0])
            if step != 1:
                raise IndexError("device tensors take contiguous slices only")
            return DeviceTensor(self.buffer, (max(0, stop - start),) + self.shape[1:], self.dtype, self.offset + start * item)
        i = int(index)
        if not -self.shape[0] <= i < self.shape[0]:
            raise IndexError(f"index {i} out of range for {self.shape[0]} slots")
        i %= self.shape[0]
        return DeviceTensor(self.buffer, self.shape[1:], self.dtype, self.offset + i * item)

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 2, "strides": None}


class KernelArgs:
    """A kernel's parameters in the form cuLaunchKernel's `kernelParams` takes: an array of
    pointers to the values. The values are ctypes objects (`c_void_p`, `c_int`, `c_float`, ...)
    whose types must match the kernel's signature; update them in place (`args.values[i].value
    = v`) and the array stays valid, so a launch repeated per frame packs nothing."""

    def __init__(self, values: Sequence[Any]) -> None:
        self.values: List[Any] = list(values)
        for v in self.values:
            if not isinstance(v, (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_float, ctypes.c_int64, ctypes.c_uint64)):
                raise TypeError(f"kernel arguments must be ctypes scalars, got {type(v).__name__}")
        self.pointers = (ctypes.c_void_p * max(1, len(self.values)))(*[ctypes.addressof(v) for v in self.values])

    @property
    def address(self) -> int:
        return ctypes.addressof(self.pointers)

    def struct_format(self) -> str:
        """The values as a `struct` format (pycuda's prepared calls): 'P', 'i', 'I', 'f', 'q', 'Q'."""
        codes = {ctypes.c_void_p: "P", ctypes.c_int: "i", ctypes.c_uint: "I", ctypes.c_float: "f",
                 ctypes.c_int64: "q", ctypes.c_uint64: "Q"}
        return "".join(codes[type(v)] for v in self.values)

    def plain(self) -> List[Any]:
        return [0 if v.value is None else v.value for v in self.values]


class Kernel:
    """A loaded kernel function: `handle` is the implementation's function object."""

    def __init__(self, name: str, handle: Any, module: Any) -> None:
        self.name = name
        self.handle = handle
        self.module = module


class _Captures:
    """The graph captures under way in the process, and the frees that wait for them.

    cudaFree and cudaFreeHost synchronize implicitly, which is invalid while a stream captures
    and invalidates the capture (CUDA programming guide, "Prohibited and unhandled operations").
    A capture belongs to the process's CUDA context, not to one of our CudaApi objects: the
    buffers of a model opened before a reload (its frame ring, freed by a finalizer on any
    thread at any time) go through the object that model opened, while the new one captures. So
    the count and the waiting frees are kept once per process; a free is done once no capture
    runs. The lock is held through a free, so a capture cannot begin while one is under way;
    reentrant, as a finalizer may free on a thread that holds it already."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._count = 0
        self._deferred: List[Tuple[Any, Any]] = []  # (free function, handle)

    def free(self, free: Any, handle: Any) -> bool:
        """Free `handle` now, or keep it for the end of the last capture: True when kept."""
        with self._lock:
            if self._count:
                self._deferred.append((free, handle))
                return True
            self._drain()
            free(handle)
            return False

    def started(self) -> None:
        with self._lock:
            self._count += 1

    def ended(self) -> None:
        with self._lock:
            self._count = max(0, self._count - 1)
            if not self._count:
                self._drain()

    def pending(self) -> int:
        with self._lock:
            return len(self._deferred)

    def _drain(self) -> None:
        while self._deferred:
            free, handle = self._deferred.pop(0)
            free(handle)


_CAPTURES = _Captures()


class CudaApi(abc.ABC):
    """The interface both implementations provide. Objects it returns (streams, events,
    graphs) are the implementation's own handles: pass them back to the same instance."""

    name = "abstract"
    supports_graphs = False

    def __init__(self, props: DeviceProperties) -> None:
        self.properties = props
        self._mapped: List[HostBuffer] = []
        self._modules: Dict[str, Any] = {}  # compiled-image key -> loaded module (per context)
        # Reentrant: a frame buffer's finalizer frees through free_host, and the collector may run
        # it on a thread that holds this lock already (any allocation inside a locked section).
        self._lock = threading.RLock()
        self.deferred_frees = 0  # frees of this object that waited for a capture to end (describe(), tests)

    # -- memory ------------------------------------------------------------------------------
    @abc.abstractmethod
    def alloc_device(self, nbytes: int) -> DeviceBuffer:
        """Device memory; CudaError naming the size when the GPU is out of memory."""

    @abc.abstractmethod
    def _alloc_host(self, nbytes: int, mapped: bool) -> Tuple[int, Optional[int], Any]:
        """(host address, device address or None, handle) of page-locked memory."""

    @abc.abstractmethod
    def _free_device(self, handle: Any) -> None: ...

    @abc.abstractmethod
    def _free_host(self, handle: Any) -> None: ...

    def free_device(self, buffer: DeviceBuffer) -> None:
        """Free device memory now, or as soon as no stream captures (see _free)."""
        self._free(self._free_device, buffer.handle)

    def alloc_host(self, shape: Sequence[int], dtype: Any = np.uint8, mapped: bool = False) -> HostBuffer:
        """Page-locked host memory as an array; `mapped=True` also maps it into the device's
        address space (`device_ptr`)."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        if mapped and not self.properties.can_map_host_memory:
            raise CudaError(f"{self.properties.name} cannot map host memory; allocate pinned memory (mapped=False) instead")
        host, device, handle = self._alloc_host(padded_size(nbytes), mapped)  # whole blocks: see LOAD_BLOCK
        raw = (ctypes.c_uint8 * max(nbytes, 1)).from_address(host)
        array = np.frombuffer(raw, dtype=np.uint8, count=nbytes).view(dtype).reshape(tuple(shape))
        buf = HostBuffer(array, device, handle)
        if mapped:
            with self._lock:
                self._mapped.append(buf)
        return buf

    def free_host(self, buffer: HostBuffer) -> None:
        with self._lock:
            self._mapped = [b for b in self._mapped if b is not buffer]
        self._free(self._free_host, buffer.handle)

    def _free(self, free: Any, handle: Any) -> None:
        """Free now when no stream of the process captures, else defer to the end of the last
        capture (see _Captures)."""
        if _CAPTURES.free(free, handle):
            self.deferred_frees += 1

    def _capture_started(self) -> None:
        """Implementations call this before cudaStreamBeginCapture; frees from now on wait."""
        _CAPTURES.started()

    def _capture_ended(self) -> None:
        """...and this after cudaStreamEndCapture (whatever it returned): with no capture left,
        the frees that waited are done here, on this thread."""
        _CAPTURES.ended()

    @property
    def pending_frees(self) -> int:
        """Frees of the process waiting for a capture to end."""
        return _CAPTURES.pending()

    def device_pointer_of(self, array: np.ndarray) -> Optional[int]:
        """The device address of `array`'s first byte when it lies in a mapped buffer of ours
        (a view of `HostBuffer.array`), else None. No driver call: mapped buffers map
        linearly, so the offset in the host buffer is the offset in the device mapping."""
        address = int(array.__array_interface__["data"][0])
        with self._lock:
            for buf in self._mapped:
                if buf.ptr <= address < buf.ptr + buf.nbytes:
                    span = _byte_span(array)
                    if address + span <= buf.ptr + buf.nbytes:
                        assert buf.device_ptr is not None
                        return buf.device_ptr + (address - buf.ptr)
        return None

    # -- streams, events, copies -------------------------------------------------------------
    @abc.abstractmethod
    def create_stream(self) -> Any: ...

    @abc.abstractmethod
    def destroy_stream(self, stream: Any) -> None:
        """cudaStreamDestroy: handles of the bindings are not freed by garbage collection."""

    @abc.abstractmethod
    def create_event(self, blocking_sync: bool = True) -> Any:
        """An event; `blocking_sync` (cudaEventBlockingSync) makes `event_synchronize` sleep
        until the event completes instead of spinning a CPU core, which on a Jetson the capture
        and the decoder need (the wake-up costs tens of microseconds, against the milliseconds of
        a frame's work)."""

    @abc.abstractmethod
    def destroy_event(self, event: Any) -> None: ...

    @abc.abstractmethod
    def record(self, event: Any, stream: Any) -> None: ...

    @abc.abstractmethod
    def wait_event(self, stream: Any, event: Any) -> None:
        """Work queued on `stream` after this waits for `event`."""

    @abc.abstractmethod
    def event_synchronize(self, event: Any) -> None: ...

    @abc.abstractmethod
    def elapsed_ms(self, start: Any, end: Any) -> float: ...

    @abc.abstractmethod
    def synchronize(self, stream: Any) -> None: ...

    @abc.abstractmethod
    def copy_htod(self, dst: DeviceBuffer, src: HostBuffer, nbytes: int, stream: Any) -> None:
        """Async copy of the first `nbytes` of `src` to `dst` on `stream`."""

    @abc.abstractmethod
    def copy_dtoh(self, dst: HostBuffer, src_ptr: int, nbytes: int, stream: Any) -> None:
        """Async copy of `nbytes` at device address `src_ptr` into the start of `dst`."""

    # -- kernels -----------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def compiler_id(self) -> str:
        """Names the compiler and its version (part of the kernel cache key)."""

    @abc.abstractmethod
    def compile(self, source: str, filename: str, arch: str, include_dirs: Sequence[str]) -> bytes:
        """Source -> loadable image (cubin) for `arch` ('sm_72'); CudaError with the log."""

    @abc.abstractmethod
    def load_module(self, image: bytes) -> Any: ...

    @abc.abstractmethod
    def get_function(self, module: Any, name: str) -> Any: ...

    @abc.abstractmethod
    def launch(self, kernel: Kernel, grid: Tuple[int, int, int], block: Tuple[int, int, int], args: KernelArgs, stream: Any) -> None: ...

    # -- graphs (only where supports_graphs) -------------------------------------------------
    def begin_capture(self, stream: Any) -> None:
        raise CudaError(f"{self.name} has no CUDA graph API; the work is issued eagerly instead")

    def end_capture(self, stream: Any) -> Any:
        raise CudaError(f"{self.name} has no CUDA graph API")

    def launch_graph(self, graph: Any, stream: Any) -> None:
        raise CudaError(f"{self.name} has no CUDA graph API")

    def destroy_graph(self, graph: Any) -> None:
        raise CudaError(f"{self.name} has no CUDA graph API")

    def describe(self) -> Dict[str, Any]:
        return {
            "implementation": self.name,
            "device": self.properties.to_dict(),
            "frame_memory": frame_memory_for(self.properties),
            "cuda_graphs": self.supports_graphs,
        }


def _byte_span(array: np.ndarray) -> int:
    """Bytes from an array's first element to one past its last (non-negative strides)."""
    if array.size == 0:
        return 0
    return int(sum((n - 1) * s for n, s in zip(array.shape, array.strides))) + array.itemsize


def _load_implementation(name: str) -> CudaApi:
    module = importlib.import_module(_MODULES[name])
    return module.open_device()


def installed(name: str) -> bool:
    """True when the binding of implementation `name` can be found (not imported)."""
    top = "cuda" if name == "cuda-python" else "pycuda"
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def open_cuda(choice: str = "auto", loader: Any = None) -> Optional[CudaApi]:
    """The CUDA implementation for a configuration value (see the module docstring).

    `auto` returns None when no implementation finds a GPU (the CPU path stays in use); an
    explicit choice raises MissingDependencyError or CudaError. `loader(name)` replaces the
    import of an implementation (tests).
    """
    if choice not in CHOICES:
        raise ConfigError(f"cuda must be one of {', '.join(CHOICES)}, got {choice!r}")
    load = loader or _load_implementation
    if choice != "auto":
        return load(choice)
    for name in IMPLEMENTATIONS:
        if loader is None and not installed(name):
            continue
        try:
            return load(name)
        except (MissingDependencyError, CudaError):
            continue
    return None


def require_cuda(choice: str = "auto", loader: Any = None) -> CudaApi:
    """Like open_cuda, but `auto` without a usable GPU is an error too."""
    api = open_cuda(choice, loader)
    if api is None:
        raise CudaError(
            "no usable NVIDIA GPU: neither cuda-python nor pycuda found a device and driver; "
            'install one (pip install "edge-sdk[cuda]") on a machine with a GPU, or use the CPU path'
        )
    return api
