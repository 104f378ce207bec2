"""Fake pycuda (`pycuda`, `pycuda.driver`, `pycuda.compiler`) for tests.

They prove edge_sdk.cuda._pycuda's logic, not CUDA's behaviour. Members follow pycuda
2022.x-2026.1 (inducer/pycuda): `src/wrapper/wrap_cudadrv.cpp` (init, Device,
Device.retain_primary_context, Context.push/pop/get_current, mem_alloc, pagelocked_empty,
HostAllocation.get_device_pointer, Stream, Event, module_from_buffer, memcpy_*_async,
get_version, get_driver_version, device_attribute, host_alloc_flags), `pycuda/driver.py`
(Error, MemoryError, CompileError, Function.prepare / prepared_async_call) and
`pycuda/compiler.py` (compile, get_nvcc_version). Released pycuda has no CUDA graph API, so
neither has this fake. `pycuda.autoinit` (a context of its own) and `pycuda.autoprimaryctx`
(which pushes the context on the importing thread for good) cannot be imported: the SDK uses
neither.

Contexts follow `src/cpp/cuda.hpp`. Each thread has its own context stack. When a thread ends
with a context still on its stack, pycuda's `~context_stack` prints "PyCUDA ERROR: The context
stack was not empty upon module cleanup" and calls abort(): the fake records the thread in
`aborts()` (a test fixture fails on it). `Context.pop()` (static) on an empty stack raises
`LogicError("context::pop failed: ... cannot pop non-current context")`. A driver call on a
thread where no context is current fails with `LogicError("... invalid device context")`.
Objects remember the context they were made in (`context_dependent`); when one is freed or
collected (`DeviceAllocation.free`, a Stream's or Event's destructor), pycuda's
`scoped_context_activation` pushes that context where it is not current, but only on the
thread that made the context object: elsewhere it raises "cannot activate out-of-thread
context", and pycuda warns "leaked out-of-thread ... object" and leaks it (`state.leaks`).
Events take pycuda's `flags` (`event_flags.BLOCKING_SYNC`); `Event.synchronize` on one without
it spins a CPU core (`state.spin_waits`). Without nvcc (`FakePycudaDevice(nvcc=False)`),
`get_nvcc_version` and `compile` raise pytools' `ExecError`, an OSError, as pycuda's do when
they cannot run nvcc.
"""
from __future__ import annotations

import ctypes
import re
import struct
import sys
import threading
import types
import warnings
from typing import Any, Callable, List, Optional

import numpy as np


class Error(Exception):
    pass


class LogicError(Error):
    pass


class MemoryError(Error):  # noqa: A001 - pycuda's own name
    pass


class ExecError(OSError):
    """pytools.prefork.ExecError: pycuda runs nvcc through it."""


class CompileError(Error):
    def __init__(self, msg: str, command_line: List[str], stdout: Optional[str] = None, stderr: Optional[str] = None) -> None:
        super().__init__(msg)
        self.msg, self.command_line, self.stdout, self.stderr = msg, command_line, stdout, stderr

    def __str__(self) -> str:
        return f"{self.msg}\n[command: {' '.join(self.command_line)}]\n[stderr:\n{self.stderr}]"


class FakePycudaDevice:
    def __init__(self, name: str = "Xavier", cc=(7, 2), integrated: bool = True, memory: int = 8 << 30,
                 driver: int = 11040, built=(11, 4, 0), count: int = 1, compile_error: str = "", nvcc: bool = True,
                 refuse_images: bool = False) -> None:
        self.name, self.cc, self.integrated, self.memory = name, cc, integrated, memory
        self.driver, self.built, self.count, self.compile_error = driver, built, count, compile_error
        self.nvcc, self.refuse_images = nvcc, refuse_images


def install(monkeypatch: Any, device: FakePycudaDevice, launcher: Optional[Callable[..., None]] = None) -> types.SimpleNamespace:
    # copies: every memcpy_htod_async as (dest, source address, nbytes, stream)
    state = types.SimpleNamespace(used=0, blocks={}, pushes=[], compiles=[], launches=[], calls=[], copies=[],
                                  leaks=0, spin_waits=0, retains=0, destroyed=[])
    drv = types.ModuleType("pycuda.driver")
    drv.Error, drv.LogicError, drv.MemoryError, drv.CompileError = Error, LogicError, MemoryError, CompileError
    stacks: dict = {}  # thread -> its context stack (pycuda's thread_specific_ptr<context_stack>)
    stacks_lock = threading.Lock()

    def _stack() -> List[Any]:
        thread = threading.current_thread()
        with stacks_lock:
            return stacks.setdefault(thread, [])

    def aborts() -> List[str]:
        """Threads that ended with a context on their stack: pycuda would have aborted the process."""
        with stacks_lock:
            return [t.name for t, stack in stacks.items() if stack and not t.is_alive()]

    def _need_context(what: str) -> Any:
        stack = _stack()
        if not stack:
            raise LogicError(f"{what} failed: invalid device context")
        return stack[-1]

    def _can_clean_up(obj: Any) -> bool:
        """scoped_context_activation(obj's context): current already, or pushable on the thread
        that made the context object; else pycuda warns and leaks the object."""
        stack = _stack()
        ward = obj.ward
        if (stack and stack[-1] == ward) or threading.current_thread() is ward.thread:
            return True
        warnings.warn(f"leaked out-of-thread {type(obj).__name__} object", UserWarning, stacklevel=3)
        state.leaks += 1
        return False

    def _alloc(nbytes: int) -> Any:
        _need_context("cuMemAlloc")
        if state.used + nbytes > device.memory:
            raise MemoryError("cuMemAlloc failed: out of memory")
        block = (ctypes.c_uint8 * max(1, nbytes))()
        state.used += nbytes
        state.blocks[ctypes.addressof(block)] = block
        return block

    class DeviceAllocation:
        def __init__(self, nbytes: int) -> None:
            self.ward = _need_context("cuMemAlloc")
            self.block = _alloc(nbytes)
            self.nbytes = nbytes

        def __int__(self) -> int:
            return ctypes.addressof(self.block)

        def free(self) -> None:
            if not _can_clean_up(self):
                return
            state.blocks.pop(ctypes.addressof(self.block))
            state.used -= self.nbytes

    class HostAllocation(DeviceAllocation):
        def __init__(self, nbytes: int, flags: int) -> None:
            super().__init__(nbytes)
            self.flags = flags

        def get_device_pointer(self) -> int:
            if not self.flags & drv.host_alloc_flags.DEVICEMAP:
                raise LogicError("cuMemHostGetDevicePointer failed: invalid value")
            return int(self)

    class _HostArray(np.ndarray):
        pass

    def pagelocked_empty(shape, dtype, order="C", mem_flags=0):
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        alloc = HostAllocation(nbytes, mem_flags)
        raw = np.frombuffer(alloc.block, dtype=np.uint8, count=nbytes)
        array = raw.view(dtype).reshape(shape).view(_HostArray)
        array.base_allocation = alloc
        return array

    # pycuda's page-locked arrays have their HostAllocation as `.base`; numpy's `base` is
    # read-only, so the fake's array subclass answers `base` with the allocation.
    _HostArray.base = property(lambda self: self.base_allocation)  # type: ignore[assignment]

    class Context:
        """A context object: `handle` is the CUcontext, `thread` the thread that made the object."""

        def __init__(self, handle: int) -> None:
            self.handle, self.thread = handle, threading.current_thread()

        def __eq__(self, other: object) -> Any:
            if not isinstance(other, Context):
                return NotImplemented  # Boost.Python's binary operators, on a mismatched argument
            return self.handle == other.handle

        def __ne__(self, other: object) -> Any:
            if not isinstance(other, Context):
                return NotImplemented
            return self.handle != other.handle

        __hash__ = None  # type: ignore[assignment]

        def push(self) -> None:
            state.pushes.append(threading.get_ident())
            _stack().append(self)

        @staticmethod
        def pop() -> None:
            stack = _stack()
            if not stack:
                raise LogicError("context::pop failed: invalid device context - cannot pop non-current context")
            stack.pop()

        @staticmethod
        def get_current() -> Optional["Context"]:
            stack = _stack()
            return stack[-1] if stack else None

    class Device:
        def __init__(self, ordinal: int) -> None:
            self.ordinal = ordinal

        @staticmethod
        def count() -> int:
            return device.count

        def name(self) -> str:
            return device.name

        def compute_capability(self):
            return device.cc

        def total_memory(self) -> int:
            return device.memory

        def get_attribute(self, attr: int) -> int:
            return int(device.integrated) if attr == drv.device_attribute.INTEGRATED else 1

        def retain_primary_context(self) -> Context:
            state.retains += 1
            return Context(0x5000 + self.ordinal)  # a new object on the same CUcontext, as pycuda's

    class _Collected:
        """A stream or event: destroyed when the object goes (scoped activation, see the docstring)."""

        def __del__(self) -> None:
            if getattr(self, "ward", None) is not None and _can_clean_up(self):
                state.destroyed.append(type(self).__name__)

    class Stream(_Collected):
        def __init__(self, flags: int = 0) -> None:
            self.ward = _need_context("cuStreamCreate")
            self.handle = id(self)

        def synchronize(self) -> None:
            _need_context("cuStreamSynchronize")
            state.calls.append("Stream.synchronize")

        def wait_for_event(self, event: Any) -> None:
            _need_context("cuStreamWaitEvent")
            state.calls.append("Stream.wait_for_event")

    class Event(_Collected):
        def __init__(self, flags: int = 0) -> None:
            self.ward = _need_context("cuEventCreate")
            self.flags = flags

        def record(self, stream: Any = None) -> "Event":
            _need_context("cuEventRecord")
            state.calls.append("Event.record")
            return self

        def synchronize(self) -> "Event":
            _need_context("cuEventSynchronize")
            if not self.flags & drv.event_flags.BLOCKING_SYNC:
                state.spin_waits += 1
            state.calls.append("Event.synchronize")
            return self

        def time_since(self, other: Any) -> float:
            return 2.5

    class Function:
        def __init__(self, name: str, arity: int) -> None:
            self.name, self.arity, self.arg_format = name, arity, None

        def prepare(self, arg_types: Any) -> "Function":
            self.arg_format = "".join(arg_types)
            return self

        def prepared_async_call(self, grid, block, stream, *args):
            assert self.arg_format is not None, "prepare() first"
            assert len(self.arg_format) == len(args) == self.arity, (self.arg_format, args)
            _need_context("cuLaunchKernel")
            state.launches.append(self.name)
            # Pack as pycuda does (struct), then hand the shim a kernelParams array.
            values = [ctypes.create_string_buffer(struct.pack(c, a), 8) for c, a in zip(self.arg_format, args)]
            array = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
            assert launcher is not None
            launcher(self.name, tuple(grid), tuple(block), ctypes.addressof(array))

    class Module:
        def __init__(self, image: bytes) -> None:
            _need_context("cuModuleLoadData")
            if device.refuse_images:  # a CUBIN for another GPU or driver, or a damaged one
                raise LogicError("cuModuleLoadData failed: device kernel image is invalid")
            self.image = image

        def get_function(self, name: str) -> Function:
            match = re.search(rb"void\s+" + re.escape(name.encode()) + rb"\s*\(([^)]*)\)", self.image)
            if match is None:
                raise LogicError(f"cuModuleGetFunction failed: named symbol not found ({name})")
            return Function(name, match.group(1).count(b",") + 1)

    def memcpy_htod_async(dest, src, stream=None):
        _need_context("cuMemcpyHtoDAsync")
        state.copies.append((int(dest), src.ctypes.data, src.nbytes, None if stream is None else stream.handle))  # the handle: a record keeps no stream alive
        ctypes.memmove(int(dest), src.ctypes.data, src.nbytes)

    def memcpy_dtoh_async(dest, src, stream=None):
        _need_context("cuMemcpyDtoHAsync")
        ctypes.memmove(dest.ctypes.data, int(src), dest.nbytes)

    drv.init = lambda flags=0: None
    drv.Device, drv.Context, drv.Stream, drv.Event = Device, Context, Stream, Event
    drv.mem_alloc = DeviceAllocation
    drv.pagelocked_empty = pagelocked_empty
    drv.memcpy_htod_async, drv.memcpy_dtoh_async = memcpy_htod_async, memcpy_dtoh_async
    drv.module_from_buffer = Module
    drv.get_driver_version = lambda: device.driver
    drv.get_version = lambda: device.built
    drv.device_attribute = types.SimpleNamespace(INTEGRATED=18, CAN_MAP_HOST_MEMORY=19)
    drv.host_alloc_flags = types.SimpleNamespace(PORTABLE=1, DEVICEMAP=2, WRITECOMBINED=4)
    drv.event_flags = types.SimpleNamespace(DEFAULT=0, BLOCKING_SYNC=1, DISABLE_TIMING=2, INTERPROCESS=4)

    compiler = types.ModuleType("pycuda.compiler")

    def compile(source, nvcc="nvcc", options=None, keep=False, no_extern_c=False, arch=None, code=None,
                cache_dir=None, include_dirs=None, target="cubin"):
        state.compiles.append(dict(nvcc=nvcc, options=list(options or []), no_extern_c=no_extern_c, arch=arch,
                                   include_dirs=list(include_dirs or []), cache_dir=cache_dir))
        if not device.nvcc:  # compile_plain turns the ExecError of running nvcc into this OSError
            raise OSError(f"{nvcc} was not found (is it on the PATH?) [error invoking '{nvcc} --cubin': "
                          f"[Errno 2] No such file or directory: '{nvcc}']")
        if device.compile_error:
            raise CompileError("nvcc compilation of kernel.cu failed", [nvcc, "--cubin"], stderr=device.compile_error)
        return source.encode()

    compiler.compile = compile
    def get_nvcc_version(nvcc):
        if not device.nvcc:
            raise ExecError(f"error invoking '{nvcc} --version': [Errno 2] No such file or directory: '{nvcc}'")
        return "Cuda compilation tools, release 11.4, V11.4.315"

    compiler.get_nvcc_version = get_nvcc_version

    package = types.ModuleType("pycuda")
    package.__path__ = []  # type: ignore[attr-defined]
    package.driver, package.compiler = drv, compiler
    for name, module in (("pycuda", package), ("pycuda.driver", drv), ("pycuda.compiler", compiler),
                         ("pycuda.autoinit", None), ("pycuda.autoprimaryctx", None)):
        monkeypatch.setitem(sys.modules, name, module)
    return types.SimpleNamespace(drv=drv, state=state, aborts=aborts)
