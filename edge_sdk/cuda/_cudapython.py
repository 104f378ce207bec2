"""The CUDA layer on NVIDIA's cuda-python bindings; the only module that imports them.

Runtime API (`cudart`) for memory, streams, events, copies and graphs; driver API (`cuda`) to
load compiled kernels and launch them; NVRTC (`nvrtc`) to compile them at run time, which
needs no CUDA toolkit and no GPU. Kernels are compiled to CUBIN for the device's real SM, not
to PTX: a driver older than NVRTC cannot JIT newer PTX (CUDA_ERROR_UNSUPPORTED_PTX_VERSION),
while a CUBIN loads on any driver of the same major version. The bindings' major version must
match the driver's: 11.x for JetPack 5 (CUDA 11.4).

Which NVRTC: the pip wheel's (nvidia-cuda-nvrtc-cu11, 11.8) or the system's (JetPack's CUDA
11.4 in /usr/local/cuda/lib64). A CUBIN from an NVRTC newer than the driver's CUDA version
loads through minor-version compatibility, which on a Jetson comes only with the cuda-compat
upgrade package; so when the wheel's NVRTC is newer than `cudaDriverGetVersion` and a system
NVRTC no newer than the driver is present, the system one is loaded (:func:`choose_nvrtc`), and
`describe()["nvrtc"]` says which and why. The bindings dlopen NVRTC by its soname
(`libnvrtc.so.11.2` for every CUDA 11.2+), so the library loaded first, globally, is the one
they use. A GPU newer than the NVRTC's architecture list (NVRTC 11.8 stops at sm_90: sm_100,
sm_120) is a :class:`~edge_sdk.errors.KernelArchitectureError`, on which the runtime keeps
preprocessing on the CPU.

The bindings live in `cuda.bindings.*` from 11.8.6/12.x on and in `cuda.cudart`, `cuda.cuda`,
`cuda.nvrtc` up to 11.8.2 (what resolves on Python 3.8 aarch64, JetPack 5); both work.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from edge_sdk.cuda.api import CudaApi, DeviceBuffer, DeviceProperties, HostBuffer, Kernel, KernelArgs, version_text
from edge_sdk.errors import CudaError, KernelArchitectureError, MissingDependencyError

NVRTC_OPTIONS = ("--fmad=false", "--std=c++14")  # no FMA contraction: the host shim runs the same arithmetic
_INSTALL_HINT = 'pip install "edge-sdk[cuda]" (cuda-python 11.x for JetPack 5)'


def _module(new: str, old: str) -> Any:
    try:
        return importlib.import_module(new)
    except ImportError:
        pass
    try:
        return importlib.import_module(old)
    except ImportError as exc:
        raise MissingDependencyError("cuda-python", "cuda", "NVIDIA's CUDA bindings") from exc


@dataclass(frozen=True)
class NvrtcLibrary:
    """One NVRTC shared library found on this machine."""

    path: str
    version: Tuple[int, int]  # the CUDA version it belongs to (from libnvrtc-builtins.so.X.Y)
    source: str  # "pip wheel" or "system"

    @property
    def code(self) -> int:
        """CUDA's version encoding, as cudaDriverGetVersion's (11.8 -> 11080)."""
        return self.version[0] * 1000 + self.version[1] * 10

    def to_dict(self) -> Dict[str, Any]:
        return {"library": self.path, "version": f"{self.version[0]}.{self.version[1]}", "source": self.source}


_BUILTINS = re.compile(r"libnvrtc-builtins\.so\.(\d+)\.(\d+)")


def _library_in(folder: Path, source: str) -> Optional[NvrtcLibrary]:
    """The NVRTC in `folder`, its version read from the builtins library beside it."""
    try:
        libs = sorted(p for p in folder.glob("libnvrtc.so*") if "builtins" not in p.name)
        versions = sorted({(int(m.group(1)), int(m.group(2))) for m in map(_BUILTINS.match, (p.name for p in folder.iterdir())) if m})
    except OSError:
        return None
    if not libs or not versions:
        return None
    return NvrtcLibrary(str(libs[0]), versions[-1], source)


def nvrtc_candidates() -> List[NvrtcLibrary]:
    """NVRTC libraries on this machine: the nvidia-cuda-nvrtc-cu11 wheel's, then the system's
    ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda: JetPack's)."""
    found: List[NvrtcLibrary] = []
    try:
        import nvidia.cuda_nvrtc as wheel  # type: ignore[import-not-found]

        for folder in getattr(wheel, "__path__", []):
            lib = _library_in(Path(folder) / "lib", "pip wheel")
            if lib is not None:
                found.append(lib)
    except ImportError:
        pass
    folders = [Path(os.environ[v]) / "lib64" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    folders.append(Path("/usr/local/cuda/lib64"))
    seen = set()
    for folder in folders:
        lib = _library_in(folder, "system")
        if lib is not None and os.path.realpath(lib.path) not in seen:
            seen.add(os.path.realpath(lib.path))
            found.append(lib)
    return found


def choose_nvrtc(candidates: Sequence[NvrtcLibrary], driver_version: Optional[int]) -> Tuple[Optional[NvrtcLibrary], str]:
    """(the NVRTC to load, why) for a driver of CUDA version `driver_version` (None: unknown).

    The wheel's unless it is newer than the driver and a system NVRTC is not; with none found,
    None: the bindings' own search (LD_LIBRARY_PATH) decides."""
    wheel = [c for c in candidates if c.source == "pip wheel"]
    system = sorted((c for c in candidates if c.source == "system"), key=lambda c: c.code, reverse=True)
    if driver_version is None:
        pick = (wheel or system or [None])[0]
        return pick, "the driver's CUDA version is not known yet"
    driver = version_text(driver_version)
    fits = [c for c in system if c.code <= driver_version]
    if wheel and wheel[0].code <= driver_version:
        return wheel[0], f"the pip wheel's NVRTC is not newer than the driver's CUDA {driver}"
    if wheel and fits:
        return fits[0], (f"the pip wheel's NVRTC {version_text(wheel[0].code)} is newer than the driver's CUDA {driver} "
                         "(its kernels would need the cuda-compat upgrade package on a Jetson): the system's NVRTC")
    if wheel:
        return wheel[0], (f"the pip wheel's NVRTC {version_text(wheel[0].code)} is newer than the driver's CUDA {driver} "
                          "and no system NVRTC is (JetPack's is in /usr/local/cuda/lib64): kernels load only through "
                          "CUDA minor-version compatibility (cuda-compat on a Jetson)")
    if system:
        return (fits or system)[0], "no pip wheel NVRTC: the system's"
    return None, "no NVRTC library found in the wheel or the system folders: the bindings search LD_LIBRARY_PATH"


def _preload_nvrtc(library: Optional[NvrtcLibrary]) -> bool:
    """Load `library` globally so the bindings' dlopen of the soname finds it; older
    cuda-python 11.8 releases do not look inside the nvidia-cuda-nvrtc-cu11 wheel at all."""
    if library is None:
        return False
    try:
        ctypes.CDLL(library.path, mode=ctypes.RTLD_GLOBAL)
        return True
    except OSError:
        return False


_nvrtc_lock = threading.Lock()
_nvrtc_module: Optional[Any] = None
_nvrtc_loaded: Optional[Dict[str, Any]] = None  # the library chosen and why (describe())


def nvrtc(driver_version: Optional[int] = None) -> Any:
    """The NVRTC bindings, loading the library :func:`choose_nvrtc` picks for the driver the
    first time (once per process: the library then stays)."""
    global _nvrtc_module, _nvrtc_loaded
    with _nvrtc_lock:
        if _nvrtc_module is None:
            library, why = choose_nvrtc(nvrtc_candidates(), driver_version)
            loaded = _preload_nvrtc(library)
            _nvrtc_module = _module("cuda.bindings.nvrtc", "cuda.nvrtc")
            _nvrtc_loaded = dict(library.to_dict() if library is not None and loaded else {"library": None},
                                 reason=why if loaded or library is None else f"{library.path} did not load; {why}")
        return _nvrtc_module


def nvrtc_loaded() -> Optional[Dict[str, Any]]:
    """The NVRTC library this process loaded and why, or None before the first compile."""
    with _nvrtc_lock:
        return None if _nvrtc_loaded is None else dict(_nvrtc_loaded)


def nvrtc_supported_archs() -> List[int]:
    """The real architectures NVRTC compiles for (nvrtcGetSupportedArchs: 72 for sm_72, ...)."""
    nv = nvrtc()
    err, archs = nv.nvrtcGetSupportedArchs()
    if err != nv.nvrtcResult.NVRTC_SUCCESS:
        raise CudaError(f"NVRTC could not list its architectures ({err})")
    return [int(a) for a in archs]


def nvrtc_version() -> Tuple[int, int]:
    nv = nvrtc()
    try:
        err, major, minor = nv.nvrtcVersion()
    except RuntimeError as exc:  # the bindings could not dlopen libnvrtc
        raise CudaError(f"NVRTC cannot be loaded ({exc}); install it: pip install \"nvidia-cuda-nvrtc-cu11==11.8.*\" "
                        "or use the CUDA toolkit's libnvrtc (JetPack: /usr/local/cuda/lib64)") from exc
    return int(major), int(minor)


_HEADER_VERSION = re.compile(rb"^\s*#\s*define\s+CUDA_VERSION\s+(\d+)", re.MULTILINE)


def header_version(folder: Path) -> Optional[Tuple[int, int]]:
    """The CUDA release of the headers in `folder` (cuda.h's CUDA_VERSION: 11040 -> (11, 4)), or
    None where cuda.h is missing or says none. Read bounded: the define is near the top."""
    try:
        with open(folder / "cuda.h", "rb") as f:
            head = f.read(256 * 1024)
    except OSError:
        return None
    m = _HEADER_VERSION.search(head)
    if m is None:
        return None
    code = int(m.group(1))
    return code // 1000, (code % 1000) // 10


def cuda_include_dirs(version: Optional[Tuple[int, int]] = None) -> List[str]:
    """Where `cuda_fp16.h` is: the nvidia-cuda-runtime-cu11 wheel, $CUDA_HOME, /usr/local/cuda.

    With `version`, NVRTC's (major, minor): headers of that CUDA release first, else the newest
    older one, never newer. A newer release's headers use what the older compiler lacks (the
    11.8 wheel's cuda_fp16.hpp under JetPack 5's NVRTC 11.4); none fitting: [] (the compile then
    says cuda_fp16.h is missing, and the CPU preprocesses)."""
    found = [c for c in _header_candidates() if (c / "cuda_fp16.h").is_file()]
    if version is None:
        return [str(found[0])] if found else []
    versions = [(header_version(c), c) for c in found]
    exact = [c for v, c in versions if v == tuple(version)]
    if exact:
        return [str(exact[0])]
    older = sorted(((v, c) for v, c in versions if v is not None and v < tuple(version)), key=lambda vc: vc[0])
    return [str(older[-1][1])] if older else []


def _header_candidates() -> List[Path]:
    candidates: List[Path] = []
    try:
        import nvidia.cuda_runtime as wheel  # type: ignore[import-not-found]

        candidates += [Path(p) / "include" for p in getattr(wheel, "__path__", [])]
    except ImportError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    return candidates


def nvrtc_compile(source: str, filename: str, arch: str, include_dirs: Sequence[str] = (),
                  options: Sequence[str] = NVRTC_OPTIONS) -> bytes:
    """Compile CUDA C++ with NVRTC: CUBIN for `sm_XY`, PTX for `compute_XY`. No GPU needed.
    A failure raises CudaError with NVRTC's log."""
    return nvrtc_compile_with_log(source, filename, arch, include_dirs, options)[0]


class _ThreadLocale:
    """Keeps the calling thread's C locale across NVRTC calls. NVRTC (11.8 at least) switches the
    thread it compiles on to the "C" locale with uselocale() and leaves it there, so afterwards
    Python on that thread takes ASCII for the locale encoding: every open() and text-mode
    subprocess without an explicit encoding then fails on the first non-ASCII character
    (measured: UTF-8 -> ANSI_X3.4-1968 after one compile). glibc's uselocale() saves and restores
    it; where it is missing, nothing is done."""

    def __init__(self) -> None:
        self._uselocale = None
        try:
            libc = ctypes.CDLL(None)
            fn = libc.uselocale
        except (OSError, AttributeError):
            return
        fn.restype, fn.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
        self._uselocale = fn

    def __enter__(self) -> "_ThreadLocale":
        self._saved = self._uselocale(None) if self._uselocale is not None else None  # (locale_t)0: query only
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._uselocale is not None and self._saved is not None:
            self._uselocale(self._saved)


def nvrtc_compile_with_log(source: str, filename: str, arch: str, include_dirs: Sequence[str] = (),
                           options: Sequence[str] = NVRTC_OPTIONS) -> Tuple[bytes, str]:
    """nvrtc_compile, also returning NVRTC's log (its warnings) on success."""
    with _ThreadLocale():
        return _nvrtc_compile_with_log(source, filename, arch, include_dirs, options)


def _nvrtc_compile_with_log(source: str, filename: str, arch: str, include_dirs: Sequence[str],
                            options: Sequence[str]) -> Tuple[bytes, str]:
    nv = nvrtc()
    ok = nv.nvrtcResult.NVRTC_SUCCESS
    err, prog = nv.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    if err != ok:
        raise CudaError(f"NVRTC could not create a program for {filename}: {err}")
    try:
        opts = [f"--gpu-architecture={arch}".encode()] + [o.encode() for o in options]
        opts += [f"-I{d}".encode() for d in list(include_dirs) + cuda_include_dirs(nvrtc_version())]
        (err,) = nv.nvrtcCompileProgram(prog, len(opts), opts)
        log = _program_log(nv, prog)
        if err != ok:
            major, minor = nvrtc_version()
            raise CudaError(
                f"kernel {filename} does not compile for {arch} with NVRTC {major}.{minor} ({err}):\n{log}\n"
                "fix the kernel source, or clear the kernel cache if the source is a stale copy"
            )
        if arch.startswith("sm_"):
            err, size = nv.nvrtcGetCUBINSize(prog)
            image = b" " * size
            (err,) = nv.nvrtcGetCUBIN(prog, image)
        else:
            err, size = nv.nvrtcGetPTXSize(prog)
            image = b" " * size
            (err,) = nv.nvrtcGetPTX(prog, image)
        if err != ok:
            raise CudaError(f"NVRTC compiled {filename} but returned no image ({err})")
        return bytes(image), log
    finally:
        nv.nvrtcDestroyProgram(prog)


def _program_log(nv: Any, prog: Any) -> str:
    err, size = nv.nvrtcGetProgramLogSize(prog)
    if err != nv.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    log = b" " * size
    nv.nvrtcGetProgramLog(prog, log)
    return log.rstrip(b"\x00 ").decode("utf-8", "replace")


class CudaPython(CudaApi):
    name = "cuda-python"
    supports_graphs = True

    def __init__(self, props: DeviceProperties, rt: Any, drv: Any) -> None:
        super().__init__(props)
        self.rt = rt
        self.drv = drv
        self._thread = threading.local()
        self._compiler_id: Optional[str] = None

    def _current(self) -> None:
        """Driver-API calls need the primary context current in this thread; a runtime call
        makes it so (once per thread)."""
        if not getattr(self._thread, "ready", False):
            _checked(self.rt.cudaSetDevice(0), "cudaSetDevice(0)")
            self._thread.ready = True

    # -- memory ------------------------------------------------------------------------------
    def alloc_device(self, nbytes: int) -> DeviceBuffer:
        ptr = _checked(self.rt.cudaMalloc(nbytes), "cudaMalloc", nbytes)
        return DeviceBuffer(int(ptr), nbytes, ptr)

    def _free_device(self, handle: Any) -> None:
        _checked(self.rt.cudaFree(handle), "cudaFree")

    def _alloc_host(self, nbytes: int, mapped: bool) -> Tuple[int, Optional[int], Any]:
        flags = self.rt.cudaHostAllocMapped if mapped else self.rt.cudaHostAllocDefault
        ptr = _checked(self.rt.cudaHostAlloc(nbytes, flags), "cudaHostAlloc", nbytes)
        device = None
        if mapped:
            device = int(_checked(self.rt.cudaHostGetDevicePointer(ptr, 0), "cudaHostGetDevicePointer"))
        return int(ptr), device, ptr

    def _free_host(self, handle: Any) -> None:
        _checked(self.rt.cudaFreeHost(handle), "cudaFreeHost")

    # -- streams, events, copies -------------------------------------------------------------
    def create_stream(self) -> Any:
        return _checked(self.rt.cudaStreamCreateWithFlags(self.rt.cudaStreamNonBlocking), "cudaStreamCreateWithFlags")

    def destroy_stream(self, stream: Any) -> None:
        _checked(self.rt.cudaStreamDestroy(stream), "cudaStreamDestroy")

    def create_event(self, blocking_sync: bool = True) -> Any:
        flags = self.rt.cudaEventBlockingSync if blocking_sync else self.rt.cudaEventDefault
        return _checked(self.rt.cudaEventCreateWithFlags(flags), "cudaEventCreateWithFlags")

    def destroy_event(self, event: Any) -> None:
        _checked(self.rt.cudaEventDestroy(event), "cudaEventDestroy")

    def record(self, event: Any, stream: Any) -> None:
        _checked(self.rt.cudaEventRecord(event, stream), "cudaEventRecord")

    def wait_event(self, stream: Any, event: Any) -> None:
        _checked(self.rt.cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent")

    def event_synchronize(self, event: Any) -> None:
        _checked(self.rt.cudaEventSynchronize(event), "cudaEventSynchronize")

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(_checked(self.rt.cudaEventElapsedTime(start, end), "cudaEventElapsedTime"))

    def synchronize(self, stream: Any) -> None:
        _checked(self.rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")

    def copy_htod(self, dst: DeviceBuffer, src: HostBuffer, nbytes: int, stream: Any) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        _checked(self.rt.cudaMemcpyAsync(dst.ptr, src.ptr, nbytes, kind, stream), "cudaMemcpyAsync (host to device)")

    def copy_dtoh(self, dst: HostBuffer, src_ptr: int, nbytes: int, stream: Any) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        _checked(self.rt.cudaMemcpyAsync(dst.ptr, src_ptr, nbytes, kind, stream), "cudaMemcpyAsync (device to host)")

    # -- kernels -----------------------------------------------------------------------------
    @property
    def compiler_id(self) -> str:
        if self._compiler_id is None:
            nvrtc(self.properties.driver_version)
            major, minor = nvrtc_version()
            self._compiler_id = f"nvrtc-{major}.{minor}"
        return self._compiler_id

    def compile(self, source: str, filename: str, arch: str, include_dirs: Sequence[str]) -> bytes:
        nvrtc(self.properties.driver_version)
        wanted = int(arch.split("_")[-1])
        supported = nvrtc_supported_archs()
        if wanted not in supported:
            raise KernelArchitectureError(
                f"{self.properties.name} ({arch}) is newer than {self.compiler_id} knows (its architectures stop at "
                f"sm_{max(supported)}): the GPU kernels cannot be compiled for it; install cuda-python and NVRTC of a "
                "CUDA version that supports this GPU")
        return nvrtc_compile(source, filename, arch, include_dirs)

    def describe(self) -> Dict[str, Any]:
        out = super().describe()
        loaded = nvrtc_loaded()
        if loaded is None:  # nothing compiled yet: what would be loaded
            library, why = choose_nvrtc(nvrtc_candidates(), self.properties.driver_version)
            loaded = dict(library.to_dict() if library is not None else {"library": None}, reason=why, loaded=False)
        out["nvrtc"] = loaded
        return out

    def load_module(self, image: bytes) -> Any:
        self._current()
        return _checked(self.drv.cuModuleLoadData(image), "cuModuleLoadData")

    def get_function(self, module: Any, name: str) -> Any:
        return _checked(self.drv.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")

    def launch(self, kernel: Kernel, grid: Tuple[int, int, int], block: Tuple[int, int, int], args: KernelArgs, stream: Any) -> None:
        self._current()
        _checked(
            self.drv.cuLaunchKernel(kernel.handle, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, stream, args.address, 0),
            f"cuLaunchKernel({kernel.name})",
        )

    # -- graphs ------------------------------------------------------------------------------
    def begin_capture(self, stream: Any) -> None:
        # Thread-local mode: other threads (TensorRT's, the capture thread) may keep calling
        # CUDA while this stream captures.
        mode = self.rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        self._capture_started()
        try:
            _checked(self.rt.cudaStreamBeginCapture(stream, mode), "cudaStreamBeginCapture")
        except CudaError:
            self._capture_ended()
            raise

    def end_capture(self, stream: Any) -> Any:
        try:
            graph = _checked(self.rt.cudaStreamEndCapture(stream), "cudaStreamEndCapture")
        finally:
            self._capture_ended()
        try:
            exe = _checked(self.rt.cudaGraphInstantiateWithFlags(graph, 0), "cudaGraphInstantiateWithFlags")
        except CudaError:
            self.rt.cudaGraphDestroy(graph)
            raise
        return (graph, exe)

    def launch_graph(self, graph: Any, stream: Any) -> None:
        _checked(self.rt.cudaGraphLaunch(graph[1], stream), "cudaGraphLaunch")

    def destroy_graph(self, graph: Any) -> None:
        _checked(self.rt.cudaGraphExecDestroy(graph[1]), "cudaGraphExecDestroy")
        _checked(self.rt.cudaGraphDestroy(graph[0]), "cudaGraphDestroy")


def _checked(result: Any, what: str, nbytes: int = 0) -> Any:
    """Unpack a binding's (error, values...) tuple; CudaError naming cause and fix on failure."""
    err, values = result[0], result[1:]
    if int(err) != 0:
        raise _error(err, what, nbytes)
    return values[0] if len(values) == 1 else (values or None)


_OOM = ("cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY")
_OLD_DRIVER = ("cudaErrorInsufficientDriver", "CUDA_ERROR_INSUFFICIENT_DRIVER")
_NO_DEVICE = ("cudaErrorNoDevice", "CUDA_ERROR_NO_DEVICE")
_BAD_IMAGE = ("CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_INVALID_IMAGE",
              "CUDA_ERROR_INVALID_PTX")


def _error(err: Any, what: str, nbytes: int = 0) -> CudaError:
    name = getattr(err, "name", str(err))
    if name in _OOM:
        size = f" of {nbytes / (1 << 20):.1f} MiB" if nbytes else ""
        return CudaError(
            f"out of GPU memory: {what}{size} failed ({name}); lower the batch or input size or stop other GPU "
            "programs (on a Jetson GPU memory is system RAM: check it with tegrastats)"
        )
    if name in _OLD_DRIVER:
        return CudaError(f"{what} failed: the NVIDIA driver is older than the CUDA bindings ({name}); "
                         "install cuda-python of the driver's CUDA major version (11.x on JetPack 5) or update the driver")
    if name in _NO_DEVICE:
        return CudaError(f"{what} failed: no CUDA device ({name}); run on a machine with an NVIDIA GPU or use the CPU path")
    if name in _BAD_IMAGE:
        return CudaError(f"{what} failed: the driver cannot load the compiled kernel ({name}); clear the kernel "
                         "cache, and check that cuda-python's major version matches the driver's")
    return CudaError(f"{what} failed: {name} ({int(err)})")


def open_device(device: int = 0) -> CudaPython:
    """cuda-python on GPU `device`, with its primary context (the one TensorRT uses)."""
    rt = _module("cuda.bindings.runtime", "cuda.cudart")
    drv = _module("cuda.bindings.driver", "cuda.cuda")
    try:
        err, driver = rt.cudaDriverGetVersion()
    except RuntimeError as exc:  # the bindings dlopen libcuda.so.1 on first use
        raise CudaError(f"no NVIDIA driver: {exc}; run on a machine with an NVIDIA GPU and driver "
                        "(JetPack on a Jetson), or use the CPU path (cuda = \"auto\")") from exc
    err2, bindings = rt.cudaRuntimeGetVersion()
    if int(err) != 0 or int(driver) == 0:
        raise CudaError("no NVIDIA driver is installed (cudaDriverGetVersion); install it, or use the CPU path")
    if int(driver) // 1000 < int(bindings) // 1000:
        raise CudaError(
            f"the NVIDIA driver supports CUDA {version_text(int(driver))}, older than the CUDA "
            f"{version_text(int(bindings))} of these cuda-python bindings; install "
            f"\"cuda-python>={int(driver) // 1000}.0,<{int(driver) // 1000 + 1}\" or update the driver"
        )
    count = _checked(rt.cudaGetDeviceCount(), "cudaGetDeviceCount")
    if int(count) <= device:
        raise CudaError(f"no CUDA device {device} ({int(count)} found); run on a machine with an NVIDIA GPU or use the CPU path")
    _checked(rt.cudaSetDevice(device), f"cudaSetDevice({device})")
    _checked(rt.cudaFree(0), "creating the primary context (cudaFree(0))")
    prop = _checked(rt.cudaGetDeviceProperties(device), "cudaGetDeviceProperties")
    integrated = _checked(
        rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrIntegrated, device), "cudaDeviceGetAttribute(Integrated)"
    )
    name = prop.name
    if isinstance(name, bytes):
        name = name.split(b"\x00", 1)[0].decode("utf-8", "replace")
    props = DeviceProperties(
        name=str(name),
        sm=(int(prop.major), int(prop.minor)),
        integrated=bool(integrated),
        can_map_host_memory=bool(prop.canMapHostMemory),
        total_memory=int(prop.totalGlobalMem),
        driver_version=int(driver),
        bindings_version=int(bindings),
    )
    api = CudaPython(props, rt, drv)
    api._thread.ready = True
    return api
