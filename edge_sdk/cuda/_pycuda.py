"""The CUDA layer on pycuda (what JetPack 5 images use); the only module that imports it.

The context is the device's primary context (`Device.retain_primary_context()`, never
`pycuda.autoinit`, which creates a context of its own): TensorRT and ONNX Runtime use the
primary context, so buffers and streams are shared with them.

pycuda keeps a context stack per thread, and when a thread ends with a context still on its
stack, pycuda prints "The context stack was not empty upon module cleanup" and calls `abort()`
(`~context_stack` in pycuda's cuda.hpp): the capture thread, a model reload or a finished
`detect` would kill the process. So no thread keeps the context: every call here pushes it
where it is not current and pops it again when the call returns, as pycuda's own
`scoped_context_activation` does (this is also why `pycuda.autoprimaryctx` is not imported: it
pushes the context on the importing thread for good). Streams and events are handed out in a
holder, and `destroy_stream` / `destroy_event` drop the pycuda object while the context is
pushed, so pycuda destroys it at once instead of leaking it with "leaked out-of-thread" when the
last reference goes on a thread without the context.

Differences from cuda-python that callers see:
- kernels are compiled by nvcc, exactly as `pycuda.compiler.SourceModule` does (its
  `compile()` then `module_from_buffer()`), so the CUDA toolkit must be installed (JetPack
  has it in /usr/local/cuda/bin; the runtime image does not, and the preprocessing then runs on
  the CPU); the CUBIN is cached by our KernelCache, keyed by nvcc's version;
- released pycuda has no CUDA graph API (`supports_graphs` is False): FrameGraph re-issues
  the per-frame work eagerly;
- a launch packs its arguments with `struct` (`prepared_async_call`) on every call.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import shutil
from typing import Any, Iterator, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.cuda.api import CudaApi, DeviceBuffer, DeviceProperties, HostBuffer, Kernel, KernelArgs
from edge_sdk.errors import CudaError, MissingDependencyError, KernelUnavailableError

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


class _Held:
    """A pycuda stream or event (`raw`), released by destroy_stream / destroy_event with the
    context pushed. `handle` and int() give the CUstream (TensorRT, __cuda_array_interface__)."""

    __slots__ = ("raw",)

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    @property
    def handle(self) -> int:
        return int(self.raw.handle)

    def __int__(self) -> int:
        return self.handle


class PyCuda(CudaApi):
    name = "pycuda"
    supports_graphs = False

    def __init__(self, props: DeviceProperties, drv: Any, context: Any, compiler: Any, nvcc: str) -> None:
        super().__init__(props)
        self.drv = drv
        self.context = context
        self.compiler = compiler
        self.nvcc = nvcc
        self._nvcc_version: Optional[str] = None
        self._prepared: dict = {}
        self.pushes = 0  # calls that had to push the context (and popped it again)

    @contextlib.contextmanager
    def _active(self) -> Iterator[None]:
        """The primary context current in this thread for the block, and this thread's pycuda
        context stack as it was afterwards: pushed here only where it is not current already."""
        current = self.drv.Context.get_current()
        if current is not None and current == self.context:
            yield
            return
        try:
            self.context.push()
        except self.drv.Error as exc:
            raise CudaError(f"cannot make the CUDA context current in this thread: {exc}") from exc
        self.pushes += 1
        try:
            yield
        finally:
            self.drv.Context.pop()

    def _call(self, what: str, fn: Any, *args: Any, nbytes: int = 0, **kwargs: Any) -> Any:
        with self._active():
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
        return _Held(self._call("Stream", self.drv.Stream))

    def destroy_stream(self, stream: Any) -> None:
        """pycuda destroys a stream when its object goes: that happens here, with the context
        pushed (on a thread without it pycuda would leak the stream)."""
        with self._active():
            stream.raw = None

    def create_event(self, blocking_sync: bool = True) -> Any:
        flags = self.drv.event_flags.BLOCKING_SYNC if blocking_sync else 0
        return _Held(self._call("Event", self.drv.Event, flags))

    def destroy_event(self, event: Any) -> None:
        with self._active():
            event.raw = None

    def record(self, event: Any, stream: Any) -> None:
        self._call("Event.record", event.raw.record, stream.raw)

    def wait_event(self, stream: Any, event: Any) -> None:
        self._call("Stream.wait_for_event", stream.raw.wait_for_event, event.raw)

    def event_synchronize(self, event: Any) -> None:
        self._call("Event.synchronize", event.raw.synchronize)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(self._call("Event.time_since", end.raw.time_since, start.raw))

    def synchronize(self, stream: Any) -> None:
        self._call("Stream.synchronize", stream.raw.synchronize)

    def copy_htod(self, dst: DeviceBuffer, src: HostBuffer, nbytes: int, stream: Any) -> None:
        # pycuda copies from a buffer object: the page-locked array's first `nbytes` bytes.
        view = src.array.reshape(-1).view(np.uint8)[:nbytes]
        self._call("memcpy_htod_async", self.drv.memcpy_htod_async, dst.ptr, view, stream.raw)

    def copy_dtoh(self, dst: HostBuffer, src_ptr: int, nbytes: int, stream: Any) -> None:
        view = dst.array.reshape(-1).view(np.uint8)[:nbytes]
        self._call("memcpy_dtoh_async", self.drv.memcpy_dtoh_async, view, src_ptr, stream.raw)

    # -- kernels -----------------------------------------------------------------------------
    def _no_nvcc(self, exc: OSError) -> KernelUnavailableError:
        return KernelUnavailableError(
            f"nvcc cannot be run ({exc}): pycuda compiles kernels with the CUDA toolkit's nvcc, which this system or "
            "image does not have. Install it (JetPack: sudo apt install cuda-nvcc-11-4; it lands in /usr/local/cuda/bin, "
            "put that on PATH), build the image with RUNTIME_IMAGE set to the devel image, or use cuda-python with "
            "NVRTC (cuda = \"cuda-python\")")

    @property
    def compiler_id(self) -> str:
        if self._nvcc_version is None:
            try:  # pytools' ExecError (an OSError) when nvcc is not there
                text = self.compiler.get_nvcc_version(self.nvcc)
            except OSError as exc:
                raise self._no_nvcc(exc) from exc
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
        except OSError as exc:  # compile_plain: "nvcc was not found (is it on the PATH?)"
            raise self._no_nvcc(exc) from exc

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
        self._call(f"launch {kernel.name}", kernel.handle.prepared_async_call, grid, block, stream.raw, *args.plain())


def open_device(device: int = 0) -> PyCuda:
    """pycuda on GPU `device`, in its primary context (retained, pushed only for each call)."""
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
    compiler = importlib.import_module("pycuda.compiler")
    dev = drv.Device(device)
    try:
        context = dev.retain_primary_context()  # retained, not pushed: see the module docstring
    except drv.Error as exc:
        raise CudaError(f"cannot retain the primary CUDA context of device {device} ({exc}); check the driver") from exc
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
    return PyCuda(props, drv, context, compiler, nvcc)
