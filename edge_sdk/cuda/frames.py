"""Frame memory for the capture ring: where decoded frames live, and how a kernel reaches them.

The capture thread allocates its slot buffers through a :class:`FrameMemory`, once per frame
size, and the decoder writes each frame straight into them (OpenCV's ``read(image=buf)``).
What happens next depends on the kind of memory:

| kind | slot buffer | the preprocess kernel reads the frame | `frame_memory("auto")` picks it |
|---|---|---|---|
| ``mapped`` | page-locked host memory mapped into the GPU's address space (``cudaHostAlloc(cudaHostAllocMapped)``; pycuda ``pagelocked_empty(mem_flags=DEVICEMAP)``) | in place, through the buffer's device pointer: no copy | on an integrated GPU where `edge-sdk engine` measured it faster |
| ``pinned`` | page-locked host memory, not mapped, plus one device buffer per slot | from the device buffer, after one async host-to-device copy per frame on the inference stream (:meth:`FrameMemory.upload`) | on a discrete GPU; on an integrated GPU until measured, or where measured faster |
| ``host`` | an ordinary numpy array | not at all: the CPU preprocessor reads it (or the GPU preprocessor stages a copy) | without a CUDA device |

On a Jetson the choice between mapped and pinned is measured, on the device, by `edge-sdk
engine` (:func:`edge_sdk.cuda.measure.measure_frame_memory`: GPU time per frame of each path,
the kernel included), and recorded in the engine cache's ``device_report.json``; ``auto`` then
takes the faster one. Until a measurement exists the default on an integrated GPU is pinned +
one copy, from the platform's documentation. NVIDIA's "CUDA for Tegra" application note
("Porting Considerations", "Memory Selection"): on Tegra page-locked (pinned and mapped) memory
is cached on the CPU from compute capability 7.2 on (the platform is then I/O coherent: the
GPU sees what the decoder just wrote, with no cache maintenance), but it is *not cached for the
integrated GPU*. A kernel reading a mapped frame therefore pays a DRAM access for every load,
and neighbouring output pixels load overlapping source bytes (bilinear taps, area cells), each
time from DRAM. One copy per frame streams the frame through the copy engine once (about twice
its size in DRAM traffic: 12 MB for a 1080p frame, ~0.2 ms at Xavier NX's 59.7 GB/s) into
device memory, which the GPU caches, and the kernel's overlapping reads hit its L2. The kernel
reads with 16-byte loads either way (kernels/preprocess.cu). Which is faster depends on the
frame size, the network input size and the clocks: hence the measurement. Older Tegra GPUs
(below 7.2: Nano, TX2) are not I/O coherent, and page-locked memory is not cached on their CPU
either, so the decoder's writes into it are slower too; the reason this module records says so.

The coherency is one way: the GPU's own caches are not snooped by the CPU. Frames flow CPU ->
GPU only, so nothing here reads back what the GPU wrote; results come back through the
stream's copies and synchronization as usual.

On a discrete GPU mapped memory stays in host RAM, and every kernel read of it crosses PCIe;
frames go to pinned memory instead and :meth:`FrameMemory.upload` moves each one to device
memory with one async copy on the stream the preprocess kernel and the inference run on.

A buffer in use by the GPU must not be rewritten: give a capture slot back (``release``)
only after the stream's work that reads it (the kernel for mapped memory, the copy for
pinned memory) has completed, e.g. after synchronizing on the inference outputs.

Page-locked memory is freed when the ring lets go of a buffer (`release`: a frame size change,
or the capture stopping) *and* no numpy array refers to it any more, so a frame a caller still
holds after the capture stopped stays readable instead of pointing into freed memory.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.cuda.api import (IMPLEMENTATIONS, MAPPED, PINNED, CudaApi, DeviceBuffer, HostBuffer, installed, open_cuda,
                               padded_size)
from edge_sdk.errors import ConfigError, CudaError, MissingDependencyError

HOST = "host"
KINDS = (HOST, MAPPED, PINNED)
CHOICES = ("auto",) + KINDS

IO_COHERENT_SM = (7, 2)  # "CUDA for Tegra", Memory Selection: compute capability >= 7.2 is I/O coherent


class FrameBuffer:
    """One slot's frame memory.

    `array`: the (H, W, 3) uint8 array the decoder writes. `device_ptr`: where a kernel reads
    the frame: the device mapping of `array` (mapped), the slot's device buffer, which holds
    the frame once :meth:`FrameMemory.upload` has run on the stream (pinned), or None (host).
    """

    __slots__ = ("array", "device_ptr", "host", "device")

    def __init__(self, array: np.ndarray, device_ptr: Optional[int], host: Optional[HostBuffer] = None,
                 device: Optional[DeviceBuffer] = None) -> None:
        self.array = array
        self.device_ptr = device_ptr
        self.host = host  # the page-locked allocation (mapped, pinned)
        self.device = device  # the device copy (pinned)

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)


class _Pages:
    """Owns a page-locked allocation seen as numpy arrays: every array made from it (and every
    view of those) keeps it alive through numpy's `base`, and a finalizer frees the memory
    once the last one is gone."""

    def __init__(self, host: HostBuffer, shape: Tuple[int, ...]) -> None:
        self.__array_interface__ = {"shape": shape, "typestr": "|u1", "data": (host.ptr, False), "version": 3}


class FrameMemory:
    """Allocates frame buffers of one kind; `describe()` says which path runs and why.

    This base class is the `host` kind: ordinary numpy arrays, no device pointer.
    """

    kind = HOST

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        self._live: Dict[int, FrameBuffer] = {}
        self._lock = threading.RLock()  # reentrant: the collector may run _free_pages inside a locked section
        self.allocations = 0  # buffers allocated
        self.releases = 0  # buffers the ring let go of
        self.freed = 0  # page-locked buffers actually freed (released and no array left)

    # -- what runs ---------------------------------------------------------------------------
    @property
    def label(self) -> str:
        return "host"

    @property
    def device_name(self) -> Optional[str]:
        return None

    def describe(self) -> Dict[str, Any]:
        with self._lock:
            live = list(self._live.values())
        return {
            "kind": self.kind,
            "path": self.label,
            "reason": self.reason,
            "device": self.device_name,
            "buffers": len(live),
            "bytes": sum(b.nbytes for b in live),
        }

    # -- buffers -----------------------------------------------------------------------------
    def allocate(self, shape: Sequence[int]) -> FrameBuffer:
        """A buffer for one uint8 frame of `shape` (H, W, 3); give it back with `release`."""
        dims = tuple(int(v) for v in shape)
        if any(v < 0 for v in dims):
            raise ValueError(f"a frame buffer cannot have a negative size, got {dims}")
        buffer = self._allocate(dims)
        with self._lock:
            self._live[id(buffer)] = buffer
            self.allocations += 1
        return buffer

    def release(self, buffer: FrameBuffer) -> None:
        """The ring no longer uses `buffer`. Releasing one twice (or one not ours) does nothing,
        so nothing is freed twice."""
        with self._lock:
            if self._live.pop(id(buffer), None) is None:
                return
            self.releases += 1
        self._release(buffer)

    def close(self) -> None:
        """Release every buffer still allocated."""
        for buffer in self.live:
            self.release(buffer)

    def upload(self, buffer: FrameBuffer, stream: Any) -> Optional[int]:
        """Make `buffer`'s frame readable by work queued next on `stream` and return the device
        address to read it from. Host memory has none: None (the GPU preprocessor stages it)."""
        return None

    @property
    def live(self) -> List[FrameBuffer]:
        with self._lock:
            return list(self._live.values())

    def _allocate(self, shape: Tuple[int, ...]) -> FrameBuffer:
        return FrameBuffer(np.empty(shape, np.uint8), None)

    def _release(self, buffer: FrameBuffer) -> None:
        buffer.device_ptr = None


class HostMemory(FrameMemory):
    """Ordinary numpy frames (the CPU path, and any machine without a CUDA device)."""


class _CudaFrameMemory(FrameMemory):
    def __init__(self, api: CudaApi, reason: str = "") -> None:
        super().__init__(reason)
        self.api = api

    @property
    def device_name(self) -> Optional[str]:
        return self.api.properties.name

    @property
    def _gpu(self) -> str:
        return "integrated GPU" if self.api.properties.integrated else "discrete GPU"

    def describe(self) -> Dict[str, Any]:
        out = super().describe()
        out["implementation"] = self.api.name
        return out

    def _page_locked(self, shape: Tuple[int, ...], mapped: bool) -> Tuple[HostBuffer, np.ndarray]:
        """Page-locked memory and the array the ring uses, which owns it (see _Pages)."""
        host = self.api.alloc_host(shape, np.uint8, mapped=mapped)
        pages = _Pages(host, shape)
        finalizer = weakref.finalize(pages, self._free_pages, host)
        finalizer.atexit = False  # at interpreter exit the process's memory goes anyway
        return host, np.asarray(pages)

    def _free_pages(self, host: HostBuffer) -> None:
        self.api.free_host(host)
        with self._lock:
            self.freed += 1

    def _release(self, buffer: FrameBuffer) -> None:
        # The page-locked memory goes once no array refers to it: drop the ring's references.
        buffer.host = None
        buffer.device_ptr = None
        buffer.array = _EMPTY


_EMPTY = np.empty((0, 0, 3), np.uint8)


class MappedMemory(_CudaFrameMemory):
    """Page-locked host memory mapped into the device's address space: kernels read the frame
    where the decoder wrote it (zero-copy). See the module docstring for why this pays on
    Xavier ("CUDA for Tegra", I/O Coherency)."""

    kind = MAPPED

    def __init__(self, api: CudaApi, reason: str = "") -> None:
        if not api.properties.can_map_host_memory:
            raise CudaError(f"{api.properties.name} cannot map host memory (cudaDevAttrCanMapHostMemory is 0); "
                            "use frame_memory=pinned or auto")
        super().__init__(api, reason)

    @property
    def label(self) -> str:
        return f"mapped (zero-copy, {self._gpu})"

    def _allocate(self, shape: Tuple[int, ...]) -> FrameBuffer:
        host, array = self._page_locked(shape, mapped=True)
        return FrameBuffer(array, host.device_ptr, host=host)

    def upload(self, buffer: FrameBuffer, stream: Any) -> Optional[int]:
        """No copy: the kernel reads the mapped buffer itself."""
        if buffer.host is None:
            raise CudaError(_FREED)
        return buffer.device_ptr


class PinnedMemory(_CudaFrameMemory):
    """Page-locked (not mapped) host memory plus one device buffer per slot; `upload` queues
    the one host-to-device copy per frame on the inference stream."""

    kind = PINNED

    @property
    def label(self) -> str:
        return f"pinned + async copy ({self._gpu})"

    def _allocate(self, shape: Tuple[int, ...]) -> FrameBuffer:
        host, array = self._page_locked(shape, mapped=False)
        try:
            device = self.api.alloc_device(padded_size(host.nbytes))  # the kernel loads whole 16-byte blocks
        except BaseException:
            del array  # the page-locked memory goes with its only array: nothing is left allocated
            raise
        return FrameBuffer(array, device.ptr, host=host, device=device)

    def _release(self, buffer: FrameBuffer) -> None:
        if buffer.device is not None:
            self.api.free_device(buffer.device)
        buffer.device = None
        super()._release(buffer)

    def upload(self, buffer: FrameBuffer, stream: Any) -> Optional[int]:
        """Queue the frame's async copy to the slot's device buffer on `stream`; work queued
        after it on the same stream (the preprocess kernel) sees the frame there."""
        if buffer.host is None or buffer.device is None:
            raise CudaError(_FREED)
        self.api.copy_htod(buffer.device, buffer.host, buffer.host.nbytes, stream)
        return buffer.device.ptr


_FREED = ("this frame buffer was released (the capture stopped or the frame size changed); upload the frame of a "
          "slot the capture has just delivered")


# -- the chooser -----------------------------------------------------------------------------
def measured_choice(measured: Any) -> Optional[str]:
    """`mapped` or `pinned` from a recorded measurement (device_report.json's "frame_memory":
    {"chosen": ..., "gpu_ms": {...}}), or None when there is none or it is malformed."""
    if not isinstance(measured, dict) or measured.get("chosen") not in (MAPPED, PINNED):
        return None
    return str(measured["chosen"])


def _measured_text(measured: Dict[str, Any]) -> str:
    times = measured.get("gpu_ms")
    if isinstance(times, dict):
        parts = [f"{k} {v:.3f} ms" for k, v in times.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if parts:
            return " (GPU time per frame: " + ", ".join(parts) + ")"
    return ""


def frame_memory(choice: str = "auto", cuda: Optional[CudaApi] = None,
                 loader: Optional[Callable[[str], CudaApi]] = None, measured: Any = None) -> FrameMemory:
    """The frame memory for a configuration value: ``auto``, ``host``, ``mapped`` or ``pinned``.

    `cuda` is the CUDA implementation the pipeline runs on; None opens one as
    ``open_cuda("auto")`` would (`loader` replaces the import of an implementation, for tests).

    - ``auto``: on an integrated GPU that can map host memory, the kind `measured` names (what
      `edge-sdk engine` measured on this device, see :func:`measured_choice`), else pinned + one
      copy (see the module docstring); pinned on a discrete GPU; host memory when no CUDA device
      opens (silently; `reason` says why).
    - ``host``: always ordinary memory.
    - ``mapped`` / ``pinned``: that kind, or a CudaError naming the fix when no CUDA device
      opens (or, for mapped, when the device cannot map host memory).
    """
    if choice not in CHOICES:
        raise ConfigError(f"frame_memory must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice == HOST:
        return HostMemory(reason="frame_memory=host was asked for")
    api, cause = (cuda, "") if cuda is not None else _open(loader)
    if api is None:
        if choice == "auto":
            return HostMemory(reason=f"auto: no CUDA device ({cause}); frames stay in ordinary host memory")
        raise CudaError(
            f"frame_memory={choice} needs a CUDA device, and none opened ({cause}); use frame_memory=auto (it falls back "
            f'to host memory) or host, or install the CUDA bindings (pip install "edge-sdk[cuda]") on a machine with '
            "an NVIDIA GPU and driver"
        )
    props = api.properties
    if choice == "auto":
        if props.integrated and props.can_map_host_memory:
            kind = measured_choice(measured)
            if kind is not None:
                why = (f"auto: {kind} was measured faster on this device by `edge-sdk engine`{_measured_text(measured)}; "
                       f"{_coherency(props)}")
                return (MappedMemory if kind == MAPPED else PinnedMemory)(api, reason=why)
            return PinnedMemory(api, reason=f"auto: {_integrated_reason(api)}")
        if props.integrated:
            return PinnedMemory(api, reason=f"auto: {props.name} cannot map host memory (cudaDevAttrCanMapHostMemory "
                                            "is 0), so frames are pinned and copied once per frame")
        return PinnedMemory(api, reason=f"auto: {props.name} is a discrete GPU: kernel reads of mapped host memory "
                                        "would cross PCIe on every access, so frames are pinned and copied to device "
                                        "memory once per frame")
    if choice == MAPPED:
        note = ("" if props.integrated else
                "; on a discrete GPU every kernel read of it crosses PCIe (auto would pick pinned + one copy)")
        return MappedMemory(api, reason=f"frame_memory=mapped was asked for{note}")
    return PinnedMemory(api, reason="frame_memory=pinned was asked for")


def _integrated_reason(api: CudaApi) -> str:
    props = api.properties
    return (f"{props.name} is an integrated GPU (cudaDevAttrIntegrated) sharing DRAM with the CPU, and nothing was "
            "measured here yet (`edge-sdk engine` measures mapped against pinned): pinned + one copy per frame, "
            'because page-locked memory is not cached for the integrated GPU (NVIDIA "CUDA for Tegra", Memory '
            "Selection), so a kernel reading a mapped frame goes to DRAM for every load, while the copied frame is "
            f"read from device memory the GPU caches; {_coherency(props)}")


def _coherency(props: Any) -> str:
    if tuple(props.sm) >= IO_COHERENT_SM:
        return (f"sm_{props.sm[0]}{props.sm[1]} is I/O coherent, so page-locked memory stays cached on the CPU "
                'and the GPU sees the decoder\'s writes without cache maintenance (NVIDIA "CUDA for Tegra", I/O Coherency)')
    return (f"sm_{props.sm[0]}{props.sm[1]} is not I/O coherent, so page-locked memory is not cached on "
            'the CPU and decoding into it is slower (NVIDIA "CUDA for Tegra", Memory Selection); '
            "frame_memory=host avoids that at the cost of one staged copy per frame")


def _open(loader: Optional[Callable[[str], CudaApi]]) -> Tuple[Optional[CudaApi], str]:
    """(api, "") for the first implementation that opens, else (None, why each did not)."""
    causes = []
    for name in IMPLEMENTATIONS:
        try:
            if loader is None and not installed(name):
                causes.append(f"{name} is not installed")
                continue
            api = open_cuda(name, loader)
        except (MissingDependencyError, CudaError) as exc:
            causes.append(f"{name}: {exc}")
            continue
        if api is not None:
            return api, ""
    return None, "; ".join(causes)

