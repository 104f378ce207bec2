"""Fake cuda-python 11.8 modules for tests, in either layout of the real package: `cuda.cudart`,
`cuda.cuda`, `cuda.nvrtc` (11.8.2 and earlier: what resolves on Python 3.8 aarch64, JetPack 5)
or `cuda.bindings.runtime`, `.driver`, `.nvrtc` (later releases); `install(layout=...)`.

They prove edge_sdk.cuda._cudapython's logic, not CUDA's behaviour. Every member follows the
signature and return convention of cuda-python 11.8 (`cuda/cudart.pyx`, `cuda/cuda.pyx`,
generated from the CUDA 11.8 headers `cuda_runtime_api.h` and `cuda.h`): each call returns a
tuple whose first item is the error code (`cudaError_t` / `CUresult`), then the outputs.
Device memory is host memory; kernels named by `cuModuleGetFunction` run through the host shim
launcher given to `install()`; work is run when it is issued (one stream, in order), except
between cudaStreamBeginCapture and cudaStreamEndCapture, where it is recorded into the graph.
`calls` lists every call by name, in order; `copies` every cudaMemcpyAsync as
(dst, src, count, kind, stream).

As strict as the real API where the code under test could go wrong:
- streams and events are handles that garbage collection never frees: `live_streams` and
  `live_events` count those created and not destroyed; destroying one twice is
  cudaErrorInvalidResourceHandle;
- cudaEventSynchronize on an event created without cudaEventBlockingSync spins a CPU core
  (the default schedule on Tegra); `spin_waits` counts such waits;
- cudaFree and cudaFreeHost synchronize implicitly: called while any stream captures, on any
  thread, they fail (cudaErrorStreamCaptureUnsupported) and invalidate every capture under way,
  whose cudaStreamEndCapture then returns cudaErrorStreamCaptureInvalidated and no graph.
"""
from __future__ import annotations

import ctypes
import re
import sys
import types
from enum import IntEnum
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple


class cudaError_t(IntEnum):  # driver_types.h
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorInsufficientDriver = 35
    cudaErrorNoDevice = 100
    cudaErrorInvalidResourceHandle = 400
    cudaErrorStreamCaptureUnsupported = 900
    cudaErrorStreamCaptureInvalidated = 901


class CUresult(IntEnum):  # cuda.h
    CUDA_SUCCESS = 0
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222
    CUDA_ERROR_NOT_FOUND = 500


class cudaMemcpyKind(IntEnum):  # driver_types.h
    cudaMemcpyHostToHost = 0
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2


class cudaStreamCaptureMode(IntEnum):  # driver_types.h
    cudaStreamCaptureModeGlobal = 0
    cudaStreamCaptureModeThreadLocal = 1
    cudaStreamCaptureModeRelaxed = 2


class cudaDeviceAttr(IntEnum):  # driver_types.h
    cudaDevAttrIntegrated = 18
    cudaDevAttrCanMapHostMemory = 19


# nvrtcGetSupportedArchs of NVRTC 11.8 (the real library's answer): no sm_100, no sm_120.
NVRTC_11_8_ARCHS = (35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90)


class nvrtcResult(IntEnum):  # nvrtc.h
    NVRTC_SUCCESS = 0


class FakeDevice:
    def __init__(self, name: bytes = b"Xavier", major: int = 7, minor: int = 2, integrated: bool = True,
                 memory: int = 8 << 30, driver: Optional[int] = 11040, bindings: int = 11080, count: int = 1,
                 count_error: int = 0, bad_image: int = 0, nvrtc=(11, 8), nvrtc_archs=NVRTC_11_8_ARCHS) -> None:
        self.name, self.major, self.minor, self.integrated = name, major, minor, integrated
        self.memory, self.driver, self.bindings, self.count = memory, driver, bindings, count
        self.count_error = count_error  # cudaGetDeviceCount's error (35, 100) when not 0
        self.bad_image = bad_image  # CUresult cuModuleLoadData returns when not 0
        self.nvrtc, self.nvrtc_archs = tuple(nvrtc), list(nvrtc_archs)  # nvrtcVersion, nvrtcGetSupportedArchs


class _Stream:
    def __init__(self) -> None:
        self.capture: Optional[List[Callable[[], None]]] = None
        self.invalidated = False
        self.destroyed = False


class _Event:
    def __init__(self, flags: int) -> None:
        self.flags = flags
        self.destroyed = False


LAYOUTS = ("bindings", "legacy")  # cuda.bindings.* (11.8.6 on, 12.x) / cuda.cudart, cuda.cuda, cuda.nvrtc (<= 11.8.2)


def install(monkeypatch: Any, device: FakeDevice, launcher: Optional[Callable[..., None]] = None,
            layout: str = "bindings") -> types.SimpleNamespace:
    """Put the fake runtime and driver modules into sys.modules in `layout` (LAYOUTS; the other
    layout's names then fail to import); returns (rt, drv, state)."""
    assert layout in LAYOUTS, layout
    state = types.SimpleNamespace(calls=[], blocks={}, used=0, mapped=set(), flags={}, graphs=[], launches=[],
                                  capture_modes=[], loads=0, copies=[], streams=[], events=[], spin_waits=0,
                                  capturing=[])
    state.live_streams = lambda: sum(1 for x in state.streams if not x.destroyed)
    state.live_events = lambda: sum(1 for x in state.events if not x.destroyed)
    rt = types.ModuleType("cuda.bindings.runtime")
    drv = types.ModuleType("cuda.bindings.driver")
    ok = cudaError_t.cudaSuccess

    def api(module: types.ModuleType, fn: Callable[..., Any]) -> None:
        def wrapped(*args: Any) -> Any:
            state.calls.append(fn.__name__)
            return fn(*args)

        wrapped.__name__ = fn.__name__
        setattr(module, fn.__name__, wrapped)

    def issue(stream: Any, op: Callable[[], None]) -> None:
        if isinstance(stream, _Stream) and stream.capture is not None:
            stream.capture.append(op)
        else:
            op()

    # --- runtime: cuda_runtime_api.h ---------------------------------------------------------
    def cudaDriverGetVersion():
        if device.driver is None:
            raise RuntimeError("Failed to dlopen libcuda.so.1")  # what cuda-python raises without a driver
        return ok, device.driver

    def cudaRuntimeGetVersion():
        return ok, device.bindings

    def cudaGetDeviceCount():
        if device.count_error:
            return cudaError_t(device.count_error), 0
        return ok, device.count

    def cudaSetDevice(dev):
        return (ok,)

    def _implicit_sync() -> Any:
        """An implicitly synchronizing call: invalid while any stream captures."""
        if not state.capturing:
            return None
        for stream in state.capturing:
            stream.invalidated = True
        return (cudaError_t.cudaErrorStreamCaptureUnsupported,)

    def cudaFree(ptr):
        failed = _implicit_sync()
        if failed:
            return failed
        if ptr in (0, None):
            return (ok,)
        block = state.blocks.pop(int(ptr))
        state.used -= len(block)
        return (ok,)

    def cudaGetDeviceProperties(dev):
        prop = types.SimpleNamespace(name=device.name + b"\x00\x00", major=device.major, minor=device.minor,
                                     integrated=int(device.integrated), canMapHostMemory=1, totalGlobalMem=device.memory)
        return ok, prop

    def cudaDeviceGetAttribute(attr, dev):
        if attr == cudaDeviceAttr.cudaDevAttrIntegrated:
            return ok, int(device.integrated)
        return ok, 1

    def _alloc(nbytes: int) -> Optional[int]:
        if state.used + nbytes > device.memory:
            return None
        block = (ctypes.c_uint8 * max(1, nbytes))()
        state.blocks[ctypes.addressof(block)] = block
        state.used += nbytes
        return ctypes.addressof(block)

    def cudaMalloc(size):
        ptr = _alloc(size)
        return (cudaError_t.cudaErrorMemoryAllocation, 0) if ptr is None else (ok, ptr)

    def cudaHostAlloc(size, flags):
        ptr = _alloc(size)
        if ptr is None:
            return cudaError_t.cudaErrorMemoryAllocation, 0
        state.flags[ptr] = flags
        if flags & rt.cudaHostAllocMapped:
            state.mapped.add(ptr)
        return ok, ptr

    def cudaHostGetDevicePointer(pHost, flags):
        if int(pHost) not in state.mapped:
            return cudaError_t.cudaErrorInvalidValue, 0
        return ok, int(pHost)  # unified addressing: the same address

    def cudaFreeHost(ptr):
        failed = _implicit_sync()
        if failed:
            return failed
        state.mapped.discard(int(ptr))
        return cudaFree(ptr)

    def cudaStreamCreateWithFlags(flags):
        stream = _Stream()
        state.streams.append(stream)
        return ok, stream

    def _destroy(handle: Any) -> Any:
        if handle.destroyed:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        handle.destroyed = True
        return (ok,)

    def cudaStreamDestroy(stream):
        return _destroy(stream)

    def cudaEventCreate():
        return cudaEventCreateWithFlags(rt.cudaEventDefault)

    def cudaEventCreateWithFlags(flags):
        event = _Event(int(flags))
        state.events.append(event)
        return ok, event

    def cudaEventDestroy(event):
        return _destroy(event)

    def cudaEventRecord(event, stream):
        return (ok,)

    def cudaStreamWaitEvent(stream, event, flags):
        return (ok,)

    def cudaEventSynchronize(event):
        if event.destroyed:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        if not event.flags & rt.cudaEventBlockingSync:
            state.spin_waits += 1
        return (ok,)

    def cudaEventElapsedTime(start, end):
        return ok, 1.5

    def cudaStreamSynchronize(stream):
        return (ok,)

    def cudaMemcpyAsync(dst, src, count, kind, stream):
        state.copies.append((int(dst), int(src), count, kind, stream))
        issue(stream, lambda: ctypes.memmove(int(dst), int(src), count))
        return (ok,)

    def cudaStreamBeginCapture(stream, mode):
        state.capture_modes.append(mode)
        stream.capture = []
        stream.invalidated = False
        state.capturing.append(stream)
        return (ok,)

    def cudaStreamEndCapture(stream):
        graph, stream.capture = stream.capture, None
        state.capturing[:] = [x for x in state.capturing if x is not stream]
        if stream.invalidated:
            return cudaError_t.cudaErrorStreamCaptureInvalidated, None
        state.graphs.append(graph)
        return ok, graph

    def cudaGraphInstantiateWithFlags(graph, flags):
        return ok, ("exec", graph)

    def cudaGraphLaunch(graphExec, stream):
        for op in graphExec[1]:
            issue(stream, op)
        return (ok,)

    def cudaGraphExecDestroy(graphExec):
        return (ok,)

    def cudaGraphDestroy(graph):
        return (ok,)

    for fn in (cudaDriverGetVersion, cudaRuntimeGetVersion, cudaGetDeviceCount, cudaSetDevice, cudaFree,
               cudaGetDeviceProperties, cudaDeviceGetAttribute, cudaMalloc, cudaHostAlloc, cudaHostGetDevicePointer,
               cudaFreeHost, cudaStreamCreateWithFlags, cudaStreamDestroy, cudaEventCreate, cudaEventCreateWithFlags,
               cudaEventDestroy, cudaEventRecord, cudaStreamWaitEvent,
               cudaEventSynchronize, cudaEventElapsedTime, cudaStreamSynchronize, cudaMemcpyAsync, cudaStreamBeginCapture,
               cudaStreamEndCapture, cudaGraphInstantiateWithFlags, cudaGraphLaunch, cudaGraphExecDestroy, cudaGraphDestroy):
        api(rt, fn)
    rt.cudaError_t = cudaError_t
    rt.cudaMemcpyKind = cudaMemcpyKind
    rt.cudaStreamCaptureMode = cudaStreamCaptureMode
    rt.cudaDeviceAttr = cudaDeviceAttr
    rt.cudaHostAllocDefault = 0  # cuda_runtime_api.h
    rt.cudaHostAllocMapped = 2
    rt.cudaStreamNonBlocking = 1
    rt.cudaEventDefault = 0  # driver_types.h
    rt.cudaEventBlockingSync = 1
    rt.cudaEventDisableTiming = 2

    # --- driver: cuda.h -----------------------------------------------------------------------
    def cuModuleLoadData(image):
        state.loads += 1
        if device.bad_image:
            return CUresult(device.bad_image), None
        return CUresult.CUDA_SUCCESS, bytes(image)

    def cuModuleGetFunction(hmod, name):
        # The tests' "image" is the kernel source: the signature gives the parameter count.
        match = re.search(rb"void\s+" + re.escape(name) + rb"\s*\(([^)]*)\)", hmod)
        if match is None:
            return CUresult.CUDA_ERROR_NOT_FOUND, None
        launcher_arity[name.decode()] = match.group(1).count(b",") + 1
        return CUresult.CUDA_SUCCESS, name.decode()

    def cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, kernelParams, extra):
        # cuLaunchKernel copies the parameter values when called; so does this fake.
        state.launches.append(f)
        params = ctypes.cast(kernelParams, ctypes.POINTER(ctypes.c_void_p))
        count = launcher_arity.get(f, 0)
        saved = [ctypes.string_at(params[i], 8) for i in range(count)]
        copies = [ctypes.create_string_buffer(b, 8) for b in saved]
        array = (ctypes.c_void_p * max(1, count))(*[ctypes.addressof(c) for c in copies])

        def run() -> None:
            assert launcher is not None, "no kernel launcher given to the fake"
            launcher(f, (gx, gy, gz), (bx, by, bz), ctypes.addressof(array))
            run.keep = (copies, array)  # type: ignore[attr-defined]

        issue(stream, run)
        return (CUresult.CUDA_SUCCESS,)

    launcher_arity: Dict[str, int] = {}
    for fn in (cuModuleLoadData, cuModuleGetFunction, cuLaunchKernel):
        api(drv, fn)
    drv.CUresult = CUresult

    # --- nvrtc: nvrtc.h (only what the code asks before compiling; compiling is the real NVRTC's
    # job, tested in test_nvrtc_compile.py) ---------------------------------------------------
    nv = types.ModuleType("cuda.bindings.nvrtc")
    nv.nvrtcResult = nvrtcResult

    def nvrtcVersion():
        return nvrtcResult.NVRTC_SUCCESS, device.nvrtc[0], device.nvrtc[1]

    def nvrtcGetNumSupportedArchs():
        return nvrtcResult.NVRTC_SUCCESS, len(device.nvrtc_archs)

    def nvrtcGetSupportedArchs():
        return nvrtcResult.NVRTC_SUCCESS, list(device.nvrtc_archs)

    for fn in (nvrtcVersion, nvrtcGetNumSupportedArchs, nvrtcGetSupportedArchs):
        api(nv, fn)
    _install_layout(monkeypatch, layout, {"runtime": rt, "driver": drv, "nvrtc": nv})
    return types.SimpleNamespace(rt=rt, drv=drv, nvrtc=nv, state=state)


_LEGACY_NAMES = {"runtime": "cuda.cudart", "driver": "cuda.cuda", "nvrtc": "cuda.nvrtc"}


def _install_layout(monkeypatch: Any, layout: str, modules: Dict[str, types.ModuleType]) -> None:
    """`modules` ({"runtime": ..., "driver": ..., "nvrtc": ...}) under the names of `layout`;
    the same names of the other layout are made unimportable (None in sys.modules)."""
    package = sys.modules.get("cuda") if isinstance(sys.modules.get("cuda"), types.ModuleType) else None
    if package is None or not getattr(package, "_edge_sdk_fake", False):
        package = types.ModuleType("cuda")
        package.__path__ = []  # type: ignore[attr-defined]
        package._edge_sdk_fake = True  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "cuda", package)
    bindings = sys.modules.get("cuda.bindings")
    if layout == "bindings":
        if not isinstance(bindings, types.ModuleType) or not getattr(bindings, "_edge_sdk_fake", False):
            bindings = types.ModuleType("cuda.bindings")
            bindings.__path__ = []  # type: ignore[attr-defined]
            bindings._edge_sdk_fake = True  # type: ignore[attr-defined]
            monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
            monkeypatch.setattr(package, "bindings", bindings, raising=False)
        for kind, module in modules.items():
            monkeypatch.setattr(bindings, kind, module, raising=False)
            monkeypatch.setitem(sys.modules, f"cuda.bindings.{kind}", module)
            monkeypatch.setitem(sys.modules, _LEGACY_NAMES[kind], None)
    else:
        monkeypatch.setitem(sys.modules, "cuda.bindings", None)
        for kind, module in modules.items():
            monkeypatch.setitem(sys.modules, f"cuda.bindings.{kind}", None)
            monkeypatch.setitem(sys.modules, _LEGACY_NAMES[kind], module)
            monkeypatch.setattr(package, _LEGACY_NAMES[kind].split(".")[1], module, raising=False)
