"""The CUDA layer on pycuda (what JetPack 5 images use); the only module that imports it.

The context is the device's primary context, retained by `pycuda.autoprimaryctx` (never
`pycuda.autoinit`, which creates a context of its own): TensorRT and ONNX Runtime use the
primary context, so buffers and streams are shared with them. pycuda pushes that context on
the thread that first imports `autoprimaryctx` only, and its contexts are per thread: every call
here first makes the context current in the calling thread (pushing it where it is not), and
frees run through the same path, so memory is freed on a thread that holds the context (pycuda
leaks, with a warning, an allocation collected on a thread without it).

Differences from cuda-python that callers see:
- kernels are compiled by nvcc, exactly as `pycuda.compiler.SourceModule` does (its
  `compile()` then `module_from_buffer()`), so the CUDA toolkit must be installed (JetPack
  has it in /usr/local/cuda/bin); the CUBIN is cached by our KernelCache, keyed by nvcc's
  version;
- released pycuda has no CUDA graph API (`supports_graphs` is False): FrameGraph re-issues
  the per-frame work eagerly;
- a launch packs its arguments with `struct` (`prepared_async_call`) on every call.
"""
from __future__ import annotations

import importlib
import importlib.util
import shutil
import threading
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.cuda.api import CudaApi, DeviceBuffer, DeviceProperties, HostBuffer, Kernel, KernelArgs
from edge_sdk.errors import CudaError, MissingDependencyError

NVCC_OPTIONS = ["--fmad=false", "-std=c++14"]


def _driver() -> Any:
    try:
        return importlib.import_module("pycuda.driver")
    except ImportError as exc:
        if importlib.util.find_spec("pycuda") is None:
            raise MissingDependencyError("pycuda", "pycuda", "on a Jetson: pip install pycuda (builds against JetPack's CUDA)") from exc
        # Installed, but its extension cannot load libcuda: no driver on this machine.
        raise CudaError(f"pycuda is installed but cannot load the NVIDIA driver ({exc}); run on a machine with an NVIDIA "
                        "GPU and driver, or use the CPU path") from exc


class PyCuda(CudaApi):
    name = "pycuda"
    supports_graphs = False

    def __init__(self, props: DeviceProperties, drv: Any, context: Any, compiler: Any, nvcc: str) -> None:
        super().__init__(props)
        self.drv = drv
        self.context = context
        self.compiler = compiler
        self.nvcc = nvcc
        self._thread = threading.local()
        self._nvcc_version: Optional[str] = None
        self._prepared: dict = {}
        self.pushes = 0  # threads this instance pushed the context on

    def _current(self) -> None:
        """Make the primary context current in the calling thread, once per thread. pycuda's
        contexts are per thread: `autoprimaryctx` pushed it on the thread that first imported it,
        which need not be this one (nor the one that opened this instance)."""
        if getattr(self._thread, "ready", False):
            return
        if self.drv.Context.get_current() != self.context:
            self.context.push()
            self.pushes += 1
        self._thread.ready = True

    def _call(self, what: str, fn: Any, *args: Any, nbytes: int = 0, **kwargs: Any) -> Any:
        self._current()
        try:
            return fn(*args, **kwargs)
        except self.drv.MemoryError as exc:
            size = f" of {nbytes / (1 << 20):.1f} MiB" if nbytes else ""
            raise CudaError(f"out of GPU memory: {what}{size} failed ({exc}); lower the batch or input size or stop "
                            "other GPU programs (on a Jetson GPU memory is system RAM: check it with tegrastats)") from exc
        except self.drv.Error as exc:
            raise CudaError(f"{what} failed: {exc}") from exc

    # -- memory ------------------------------------------------------------------------------
    def alloc_device(self, nbytes: int) -> DeviceBuffer:
        alloc = self._call("mem_alloc", self.drv.mem_alloc, nbytes, nbytes=nbytes)
        return DeviceBuffer(int(alloc), nbytes, alloc)

    def _free_device(self, handle: Any) -> None:
        self._call("free", handle.free)

    def _alloc_host(self, nbytes: int, mapped: bool) -> Tuple[int, Optional[int], Any]:
        flags = self.drv.host_alloc_flags.DEVICEMAP if mapped else 0
        array = self._call("pagelocked_empty", self.drv.pagelocked_empty, (nbytes,), np.uint8, mem_flags=flags, nbytes=nbytes)
        device = int(self._call("get_device_pointer", array.base.get_device_pointer)) if mapped else None
        return int(array.ctypes.data), device, array

    def _free_host(self, handle: Any) -> None:
        self._call("free", handle.base.free)

    # -- streams, events, copies -------------------------------------------------------------
    def create_stream(self) -> Any:
        return self._call("Stream", self.drv.Stream)

    def destroy_stream(self, stream: Any) -> None:
        """pycuda destroys a stream when its object is collected; make sure this thread holds
        the context then (the caller drops its reference after this call)."""
        self._current()

    def create_event(self, blocking_sync: bool = True) -> Any:
        flags = self.drv.event_flags.BLOCKING_SYNC if blocking_sync else 0
        return self._call("Event", self.drv.Event, flags)

    def destroy_event(self, event: Any) -> None:
        self._current()

    def record(self, event: Any, stream: Any) -> None:
        self._call("Event.record", event.record, stream)

    def wait_event(self, stream: Any, event: Any) -> None:
        self._call("Stream.wait_for_event", stream.wait_for_event, event)

    def event_synchronize(self, event: Any) -> None:
        self._call("Event.synchronize", event.synchronize)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(self._call("Event.time_since", end.time_since, start))

    def synchronize(self, stream: Any) -> None:
        self._call("Stream.synchronize", stream.synchronize)

    def copy_htod(self, dst: DeviceBuffer, src: HostBuffer, nbytes: int, stream: Any) -> None:
        # pycuda copies from a buffer object: the page-locked array's first `nbytes` bytes.
        view = src.array.reshape(-1).view(np.uint8)[:nbytes]
        self._call("memcpy_htod_async", self.drv.memcpy_htod_async, dst.ptr, view, stream)

    def copy_dtoh(self, dst: HostBuffer, src_ptr: int, nbytes: int, stream: Any) -> None:
        view = dst.array.reshape(-1).view(np.uint8)[:nbytes]
        self._call("memcpy_dtoh_async", self.drv.memcpy_dtoh_async, view, src_ptr, stream)

    # -- kernels -----------------------------------------------------------------------------
    @property
    def compiler_id(self) -> str:
        if self._nvcc_version is None:
            text = self.compiler.get_nvcc_version(self.nvcc)
            release = [w for w in text.replace(",", " ").split() if w[:1].isdigit() and "." in w]
            self._nvcc_version = "nvcc-" + (release[0] if release else "unknown")
        return self._nvcc_version

    def compile(self, source: str, filename: str, arch: str, include_dirs: Sequence[str]) -> bytes:
        # SourceModule(source) is compile(...) followed by module_from_buffer(...); we keep the
        # CUBIN in between for our cache. no_extern_c: the source declares its own extern "C"
        # entry points and includes C++ headers (cuda_fp16.h) that must not be wrapped.
        try:
            return self.compiler.compile(source, nvcc=self.nvcc, options=list(NVCC_OPTIONS), no_extern_c=True, arch=arch,
                                         cache_dir=False, include_dirs=list(include_dirs))
        except self.drv.CompileError as exc:
            raise CudaError(f"kernel {filename} does not compile for {arch} with {self.compiler_id}:\n{exc}\n"
                            "fix the kernel source, or check that nvcc belongs to the CUDA of this JetPack") from exc

    def load_module(self, image: bytes) -> Any:
        return self._call("module_from_buffer", self.drv.module_from_buffer, image)

    def get_function(self, module: Any, name: str) -> Any:
        return self._call(f"get_function({name})", module.get_function, name)

    def launch(self, kernel: Kernel, grid: Tuple[int, int, int], block: Tuple[int, int, int], args: KernelArgs, stream: Any) -> None:
        fmt = args.struct_format()
        key = (id(kernel.handle), fmt)
        if key not in self._prepared:
            kernel.handle.prepare(fmt)
            self._prepared[key] = True
        self._call(f"launch {kernel.name}", kernel.handle.prepared_async_call, grid, block, stream, *args.plain())


def open_device(device: int = 0) -> PyCuda:
    """pycuda on GPU `device`, in its primary context (pycuda.autoprimaryctx)."""
    drv = _driver()
    try:
        drv.init()
        count = drv.Device.count()
    except drv.Error as exc:
        raise CudaError(f"the NVIDIA driver did not initialise ({exc}); check the driver (JetPack on a Jetson), or use the CPU path") from exc
    if count <= device:
        raise CudaError(f"no CUDA device {device} ({count} found); run on a machine with an NVIDIA GPU or use the CPU path")
    driver = int(drv.get_driver_version())
    built = drv.get_version()  # the CUDA version pycuda was built against, (major, minor, patch)
    bindings = int(built[0]) * 1000 + int(built[1]) * 10
    if driver < bindings:
        raise CudaError(
            f"the NVIDIA driver supports CUDA {driver // 1000}.{(driver % 1000) // 10}, older than the CUDA "
            f"{built[0]}.{built[1]} pycuda was built against; rebuild pycuda against the CUDA of this driver "
            "(pip install --no-binary pycuda pycuda, with /usr/local/cuda/bin on PATH) or update the driver"
        )
    primary = importlib.import_module("pycuda.autoprimaryctx")  # retains and pushes the primary context
    compiler = importlib.import_module("pycuda.compiler")
    dev = primary.device
    major, minor = dev.compute_capability()
    attr = drv.device_attribute
    props = DeviceProperties(
        name=str(dev.name()),
        sm=(int(major), int(minor)),
        integrated=bool(dev.get_attribute(attr.INTEGRATED)),
        can_map_host_memory=bool(dev.get_attribute(attr.CAN_MAP_HOST_MEMORY)),
        total_memory=int(dev.total_memory()),
        driver_version=driver,
        bindings_version=bindings,
    )
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    return PyCuda(props, drv, primary.context, compiler, nvcc)
