"""FakeHostCuda: edge_sdk's CUDA interface (edge_sdk.cuda.CudaApi) on the CPU, for tests.

It is a fake of *our* interface, not of a binding: "device" memory is host memory, and kernels
run through the host shim (tests/cuda/host_shim.h), so the very .cu source executes with the
very argument packing the GPU path uses. What it keeps of CUDA's semantics, because the code
under test relies on them:

* stream order: copies, launches and event records are queued per stream and run only when
  the stream (or an event recorded on it) is synchronized, in the order they were queued;
  an async copy reads its source when it runs, not when it was queued;
* kernel parameters are copied when a launch is queued or captured (cuLaunchKernel does), so
  later changes to a KernelArgs do not reach work already queued;
* stream capture: between begin_capture and end_capture work is recorded, not run (CUDA
  graphs: cudaStreamBeginCapture); a graph launch queues the recorded work again;
* memory limits: allocations past `memory_limit` raise the CudaError the implementations
  raise for cudaErrorMemoryAllocation;
* handles: streams and events live until destroyed (`live_streams`, `live_events`); destroying
  one twice is an error, as an invalid handle is to CUDA;
* waits: `event_synchronize` on an event created without blocking sync counts a spinning wait
  (`spin_waits`);
* frees are implicitly synchronizing: freeing memory while any stream captures is an error
  (CUDA invalidates the capture), and any stream means any in the process: a capture belongs
  to the device's context, not to one FakeHostCuda object (`CAPTURING`, shared by all).
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from edge_sdk.cuda import CudaApi, DeviceBuffer, DeviceProperties, HostBuffer, Kernel, KernelArgs

Launcher = Callable[[str, Sequence[int], Sequence[int], int], None]

CAPTURING: set = set()  # the streams capturing now, of every FakeHostCuda in the process

XAVIER_NX = DeviceProperties(name="Xavier NX (fake)", sm=(7, 2), integrated=True, can_map_host_memory=True,
                             total_memory=8 << 30, driver_version=11040, bindings_version=11040)
DISCRETE = DeviceProperties(name="Discrete GPU (fake)", sm=(8, 6), integrated=False, can_map_host_memory=True,
                            total_memory=24 << 30, driver_version=12020, bindings_version=11080)


class FakeStream:
    def __init__(self, name: str) -> None:
        self.name = name
        self.queue: List[Tuple[str, Callable[[], None]]] = []
        self.capture: Optional[List[Tuple[str, Callable[[], None]]]] = None


class FakeEvent:
    def __init__(self, blocking_sync: bool = True) -> None:
        self.done = True
        self.stream: Optional[FakeStream] = None
        self.blocking_sync = blocking_sync
        self.destroyed = False


class FakeGraph:
    def __init__(self, ops: List[Tuple[str, Callable[[], None]]]) -> None:
        self.ops = ops
        self.destroyed = False


class FakeHostCuda(CudaApi):
    name = "fake-host"

    def __init__(self, launcher: Launcher, props: DeviceProperties = XAVIER_NX, graphs: bool = True,
                 memory_limit: int = 4 << 30) -> None:
        super().__init__(props)
        self.supports_graphs = graphs
        self.launcher = launcher
        self.memory_limit = memory_limit
        self.used = 0
        self._blocks: Dict[int, Any] = {}
        self.executed: List[str] = []  # every op run, in order: "htod:<n>", "launch:<kernel>", ...
        self.compiles = 0
        self.compiler_archs: Optional[Sequence[int]] = None  # architectures the compiler knows (None: all)
        self.streams = 0  # streams created
        self.events = 0  # events created
        self.destroyed_streams = 0
        self.destroyed_events = 0
        self.spin_waits = 0
        self._live_streams: set = set()

    @property
    def live_streams(self) -> int:
        return self.streams - self.destroyed_streams

    @property
    def live_events(self) -> int:
        return self.events - self.destroyed_events

    def _check_not_capturing(self, what: str) -> None:
        from edge_sdk.errors import CudaError

        if CAPTURING:
            raise CudaError(f"{what} failed: cudaErrorStreamCaptureUnsupported (900): an implicitly synchronizing call "
                            "while a stream captures (the capture is invalidated)")

    # memory
    def _block(self, nbytes: int) -> Tuple[int, Any]:
        from edge_sdk.errors import CudaError

        if self.used + nbytes > self.memory_limit:
            raise CudaError(f"out of GPU memory: cudaMalloc of {nbytes / (1 << 20):.1f} MiB failed (cudaErrorMemoryAllocation); "
                            "lower the batch or input size or stop other GPU programs")
        block = (ctypes.c_uint8 * max(1, nbytes))()
        address = ctypes.addressof(block)
        self._blocks[address] = block
        self.used += nbytes
        return address, block

    def alloc_device(self, nbytes: int) -> DeviceBuffer:
        address, _ = self._block(nbytes)
        return DeviceBuffer(address, nbytes, address)

    def _free_device(self, handle: Any) -> None:
        self._check_not_capturing("cudaFree")
        block = self._blocks.pop(handle)
        self.used -= len(block)

    def _alloc_host(self, nbytes: int, mapped: bool) -> Tuple[int, Optional[int], Any]:
        address, _ = self._block(nbytes)
        return address, (address if mapped else None), address

    def _free_host(self, handle: Any) -> None:
        self._check_not_capturing("cudaFreeHost")
        block = self._blocks.pop(handle)
        self.used -= len(block)

    # streams and events
    def create_stream(self) -> FakeStream:
        self.streams += 1
        stream = FakeStream(f"stream{self.streams}")
        self._live_streams.add(id(stream))
        return stream

    def destroy_stream(self, stream: FakeStream) -> None:
        assert id(stream) in self._live_streams, "cudaStreamDestroy of a stream destroyed already"
        self._live_streams.discard(id(stream))
        self.destroyed_streams += 1

    def create_event(self, blocking_sync: bool = True) -> FakeEvent:
        self.events += 1
        return FakeEvent(blocking_sync)

    def destroy_event(self, event: FakeEvent) -> None:
        assert not event.destroyed, "cudaEventDestroy of an event destroyed already"
        event.destroyed = True
        self.destroyed_events += 1

    def _queue(self, stream: FakeStream, name: str, op: Callable[[], None]) -> None:
        if stream.capture is not None:
            stream.capture.append((name, op))
        else:
            stream.queue.append((name, op))

    def record(self, event: FakeEvent, stream: FakeStream) -> None:
        event.done = False
        event.stream = stream

        def mark() -> None:
            event.done = True

        self._queue(stream, "record", mark)

    def wait_event(self, stream: FakeStream, event: FakeEvent) -> None:
        other = event.stream

        def wait() -> None:
            if other is not None and not event.done:
                self._drain(other, until=event)

        self._queue(stream, "wait", wait)

    def _drain(self, stream: FakeStream, until: Optional[FakeEvent] = None) -> None:
        while stream.queue:
            name, op = stream.queue.pop(0)
            op()
            if name != "record":
                self.executed.append(name)
            if until is not None and until.done:
                return

    def event_synchronize(self, event: FakeEvent) -> None:
        if not event.blocking_sync:
            self.spin_waits += 1
        if not event.done and event.stream is not None:
            self._drain(event.stream, until=event)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return 0.0

    def synchronize(self, stream: FakeStream) -> None:
        assert stream.capture is None, "synchronizing a capturing stream is illegal in CUDA"
        self._drain(stream)

    def copy_htod(self, dst: DeviceBuffer, src: HostBuffer, nbytes: int, stream: FakeStream) -> None:
        assert nbytes <= dst.nbytes and nbytes <= src.nbytes, (nbytes, dst.nbytes, src.nbytes)
        self._queue(stream, f"htod:{nbytes}", lambda: ctypes.memmove(dst.ptr, src.ptr, nbytes))

    def copy_dtoh(self, dst: HostBuffer, src_ptr: int, nbytes: int, stream: FakeStream) -> None:
        assert nbytes <= dst.nbytes
        self._queue(stream, f"dtoh:{nbytes}", lambda: ctypes.memmove(dst.ptr, src_ptr, nbytes))

    # kernels
    @property
    def compiler_id(self) -> str:
        return "fake-host-shim"

    def compile(self, source: str, filename: str, arch: str, include_dirs: Sequence[str]) -> bytes:
        from edge_sdk.errors import KernelArchitectureError

        if self.compiler_archs is not None and int(arch.split("_")[-1]) not in self.compiler_archs:
            raise KernelArchitectureError(f"{self.properties.name} ({arch}) is newer than the fake compiler knows")
        self.compiles += 1
        return source.encode()

    def load_module(self, image: bytes) -> Any:
        return image

    def get_function(self, module: Any, name: str) -> Any:
        assert f"void {name}(" in module.decode(), f"no kernel {name} in the module"
        return name

    def launch(self, kernel: Kernel, grid: Tuple[int, int, int], block: Tuple[int, int, int], args: KernelArgs,
               stream: FakeStream) -> None:
        snapshot = KernelArgs([type(v)(v.value) for v in args.values])  # cuLaunchKernel copies the values

        def run() -> None:
            self.launcher(kernel.handle, grid, block, snapshot.address)

        self._queue(stream, f"launch:{kernel.name}", run)

    # graphs
    def begin_capture(self, stream: FakeStream) -> None:
        assert self.supports_graphs
        assert stream.capture is None, "already capturing"
        self._capture_started()
        stream.capture = []
        CAPTURING.add(id(stream))

    def end_capture(self, stream: FakeStream) -> FakeGraph:
        assert stream.capture is not None, "not capturing"
        graph = FakeGraph(stream.capture)
        stream.capture = None
        CAPTURING.discard(id(stream))
        self._capture_ended()
        return graph

    def launch_graph(self, graph: FakeGraph, stream: FakeStream) -> None:
        assert not graph.destroyed
        for name, op in graph.ops:
            self._queue(stream, name, op)

    def destroy_graph(self, graph: FakeGraph) -> None:
        graph.destroyed = True
