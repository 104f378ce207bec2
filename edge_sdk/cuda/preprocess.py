"""The preprocess stage on the GPU: :class:`GpuPreprocessor` keeps the contract of
:class:`edge_sdk.preprocess.Preprocessor` (`fill(frame, index) -> Placement`,
`__call__(frame) -> (tensor, Placement)`, `tensor` holding the batch), with the tensor in
device memory, on the stream the backend runs on.

The kernels (`kernels/preprocess.cu`) resample as the CPU Preprocessor's cv2.resize does,
including OpenCV's fixed-point bilinear arithmetic and its area-filter weights, and round to
whole grey levels as its uint8 canvas does; float16 is rounded twice, as numpy does.

Tolerance against the CPU Preprocessor: every element within ``|scale[c]|`` of it (one grey
level after normalization, plus one float16 rounding step for float16), and at most 0.1 % of
the elements different at all. Measured on the tests' random colour frames (odd sizes, pitched
rows, 1x1, 8K, every option, ROI batches): no element differs. The allowance is for OpenCV
builds whose SIMD paths round an exact half differently (its 2x2 area shortcut rounds halves up,
its generic path to even); the kernel is compiled with --fmad=false so the GPU computes what
the host-shim tests run.
"""
from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.cuda.api import MAPPED, PINNED, CudaApi, DeviceTensor, HostBuffer, KernelArgs, padded_size
from edge_sdk.cuda.compiler import KernelCache
from edge_sdk.cuda.graph import FrameGraph
from edge_sdk.errors import ConfigError, SourceError
from edge_sdk.geometry import Placement
from edge_sdk.preprocess import InputSpec, plan_transform

KERNEL_FILE = "preprocess.cu"

# Resampling modes of the kernels (RESIZE_* in preprocess.cu).
RESIZE_LINEAR = 0
RESIZE_AREA = 1
RESIZE_AREA_GROW = 2

# struct Slot in preprocess.cu: crop x, y, w, h; placement rx, ry, rw, rh; mode.
SLOT_FIELDS = ("x", "y", "w", "h", "rx", "ry", "rw", "rh", "mode")
SLOT_DTYPE = np.dtype([(f, np.int32) for f in SLOT_FIELDS])

BLOCK = (32, 8, 1)
MAX_PLANS = 64  # plans (and their CUDA graphs) kept before starting over


def resize_mode(src_w: int, src_h: int, dst_w: int, dst_h: int, interpolation: str = "linear") -> int:
    """How the CPU Preprocessor resamples a (src_w, src_h) image to (dst_w, dst_h) for an
    input spec's `interpolation`.

    "linear": INTER_LINEAR. "area": cv2.resize is asked for INTER_AREA when the width shrinks,
    else INTER_LINEAR; OpenCV runs a true area average only when neither axis grows, and
    INTER_AREA with a growing axis is its bilinear variant.
    """
    if interpolation == "area" and dst_w < src_w:
        return RESIZE_AREA if dst_h <= src_h else RESIZE_AREA_GROW
    return RESIZE_LINEAR


def plan_slot(crop: Tuple[int, int, int, int], spec: InputSpec) -> Tuple[Placement, Tuple[int, ...]]:
    """Placement and Slot values for one crop (x, y, w, h) of a frame, as Preprocessor.fill
    would place `frame[y:y + h, x:x + w]`."""
    x, y, w, h = crop
    transform, (rx, ry, rw, rh) = plan_transform(w, h, spec.width, spec.height, spec.resize, spec.placement)
    return transform, (x, y, w, h, rx, ry, rw, rh, resize_mode(w, h, rw, rh, spec.interpolation))


def check_frame(frame: Any) -> None:
    if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        shape = getattr(frame, "shape", None)
        dtype = getattr(frame, "dtype", None)
        raise SourceError(
            f"the GPU preprocessor takes BGR uint8 frames of shape (H, W, 3), got shape {shape} dtype {dtype}; "
            "convert first (cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR) for grey frames, "
            "frame.astype(numpy.uint8) for other types)"
        )
    if frame.shape[0] < 1 or frame.shape[1] < 1:
        raise SourceError(f"the frame is empty (shape {frame.shape}); check the video source")


def _kernel_ready(frame: np.ndarray) -> bool:
    """True when the kernel can read `frame` in place: pixels packed (3 bytes, 1 per channel),
    rows any positive pitch."""
    s = frame.strides
    return s[2] == 1 and s[1] == 3 and s[0] >= 3 * frame.shape[1]


class _Plan:
    """Everything one launch needs, built once per (frame geometry, source, slot) and reused."""

    def __init__(self, transforms: List[Placement], args: KernelArgs, grid: Tuple[int, int, int], kernel: Any,
                 copy_bytes: int, slot_bytes: int) -> None:
        self.transforms = transforms
        self.args = args
        self.grid = grid
        self.kernel = kernel
        self.copy_bytes = copy_bytes  # frame bytes to copy host -> device first (pinned path)
        self.slot_bytes = slot_bytes  # ROI slot table bytes to copy first (pinned path)


class GpuPreprocessor:
    """BGR uint8 frames -> the network input tensor in device memory, on `stream`.

    `fill(frame, index)` and `fill_rois(frame, regions)` only queue work: the tensor is ready
    for whatever runs next on `stream` (the backend), and `download()` waits for it. Frames
    that lie in a mapped buffer from `api.alloc_host(..., mapped=True)` are read in place (no
    copy) when the preprocessor's `frame_memory` is mapped; a frame already in device memory is
    read there when its address is given (`device_ptr=`, e.g. what the capture ring's
    `upload(slot, stream)` returns for pinned memory, queued on this same stream); other frames
    are copied once into a page-locked staging buffer (mapped, or pinned plus one async copy to
    device memory, as `frame_memory` says).
    """

    def __init__(self, spec: InputSpec, api: CudaApi, batch: Optional[int] = None, stream: Any = None,
                 cache: Optional[KernelCache] = None, use_graphs: bool = True, frame_memory: Optional[str] = None) -> None:
        """`frame_memory`: how frames that are not already on the device are staged, `mapped`
        (the kernel reads page-locked host memory in place) or `pinned` (one async copy to device
        memory first); default pinned, the documented default of edge_sdk.cuda.frames until
        `edge-sdk engine` has measured the two on the device (the runtime passes what it measured)."""
        if not 0 <= int(spec.pad_value) <= 255:
            raise ConfigError(f"input pad_value must be a grey level 0..255, got {spec.pad_value}")
        if frame_memory not in (None, MAPPED, PINNED):
            raise ConfigError(f"frame_memory must be {MAPPED!r} or {PINNED!r}, got {frame_memory!r}")
        # Kernels first: kernels that cannot be compiled or loaded (KernelUnavailableError) allocate nothing.
        kernels = (cache or KernelCache()).kernels(api, KERNEL_FILE, ("preprocess_frame", "preprocess_rois"))
        self._k_frame = kernels["preprocess_frame"]
        self._k_rois = kernels["preprocess_rois"]
        self.spec = spec
        self.api = api
        self.batch = int(batch or spec.batch)
        self._own_stream = stream is None  # destroyed by close() only when made here
        self.stream = stream if stream is not None else api.create_stream()
        if frame_memory == MAPPED and not api.properties.can_map_host_memory:
            frame_memory = PINNED
        self.frame_memory = frame_memory or PINNED
        self._mapped = self.frame_memory == MAPPED
        self._fp16 = spec.dtype == "float16"
        itemsize = 2 if self._fp16 else 4
        self._slot_elems = 3 * spec.height * spec.width
        self._out = api.alloc_device(self.batch * self._slot_elems * itemsize)
        self.tensor = DeviceTensor(self._out, (self.batch, 3, spec.height, spec.width), spec.dtype)
        # One graph per plan (frame size, buffer, ROI count): as many as plans are kept, so a ROI
        # count that varies from frame to frame replays its graphs instead of re-capturing them.
        self.graph = FrameGraph(api, self.stream, max_graphs=MAX_PLANS, enabled=use_graphs)
        self._done = api.create_event()
        self._pending = False
        self._staging: Optional[HostBuffer] = None
        self._staging_dev = None
        self._slots = api.alloc_host((self.batch, len(SLOT_FIELDS)), np.int32, mapped=self._mapped)
        self._slots_dev = None if self._mapped else api.alloc_device(self._slots.nbytes)
        self._host_out: Optional[HostBuffer] = None
        self._plans: Dict[Tuple[Any, ...], _Plan] = {}
        self._common = ([ctypes.c_int(1 if spec.color == "RGB" else 0), ctypes.c_int(1 if self._fp16 else 0),
                         ctypes.c_int(int(spec.pad_value))]
                        + [ctypes.c_float(v) for v in spec.mean] + [ctypes.c_float(v) for v in spec.scale])
        self.zero_copy_frames = 0
        self.staged_frames = 0
        self.device_frames = 0  # read from a device copy the caller made (device_ptr= of a pinned slot)

    # -- the Preprocessor contract -----------------------------------------------------------
    def __call__(self, frame: np.ndarray) -> Tuple[DeviceTensor, Placement]:
        transform = self.fill(frame, 0)
        return self.tensor[:1], transform

    def fill(self, frame: np.ndarray, index: int = 0, device_ptr: Optional[int] = None) -> Placement:
        """Queue `frame` -> slot `index`; returns the Placement (known before the GPU runs).
        `device_ptr`: the frame's pixels are at this device address already (same layout as
        `frame`), written by work queued earlier on this preprocessor's stream."""
        check_frame(frame)
        if not 0 <= index < self.batch:
            raise IndexError(f"slot {index} is outside the batch of {self.batch}")
        h, w = frame.shape[:2]
        src, pitch, staged = self._source(frame, device_ptr)
        key = ("frame", w, h, pitch, src, index, staged)
        plan = self._plans.get(key)
        if plan is None:
            transform, slot = plan_slot((0, 0, w, h), self.spec)
            x, y, cw, ch, rx, ry, rw, rh, mode = slot
            args = KernelArgs([ctypes.c_void_p(src), ctypes.c_int(w), ctypes.c_int(h), ctypes.c_int(pitch),
                               ctypes.c_void_p(self.tensor[index].ptr), ctypes.c_int(self.spec.width),
                               ctypes.c_int(self.spec.height), ctypes.c_int(rx), ctypes.c_int(ry), ctypes.c_int(rw),
                               ctypes.c_int(rh), ctypes.c_int(mode)] + self._common)
            plan = self._remember(key, _Plan([transform], args, self._grid(1), self._k_frame,
                                             pitch * h if staged and not self._mapped else 0, 0))
        self._run(key, plan)
        return plan.transforms[0]

    def fill_rois(self, frame: np.ndarray, regions: Sequence[Sequence[int]], first: int = 0,
                  device_ptr: Optional[int] = None) -> List[Placement]:
        """Queue crops `frame[y0:y1, x0:x1]` for each (x0, y0, x1, y1) -> slots first, first + 1, ...
        in one launch; each slot as `fill(frame[y0:y1, x0:x1], slot)` would make it. `device_ptr`
        as for :meth:`fill`."""
        check_frame(frame)
        n = len(regions)
        if n == 0:
            return []
        if first < 0 or first + n > self.batch:
            raise IndexError(f"{n} regions from slot {first} do not fit the batch of {self.batch}")
        h, w = frame.shape[:2]
        crops = []
        for r in regions:
            x0, y0, x1, y1 = (int(v) for v in r)
            if not (0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h):
                raise SourceError(f"region {tuple(r)} is empty or outside the {w}x{h} frame; clip regions to the frame")
            crops.append((x0, y0, x1 - x0, y1 - y0))
        self._wait()  # the slot table and the staging buffer are about to be rewritten
        src, pitch, staged = self._source(frame, device_ptr)
        transforms = []
        for i, crop in enumerate(crops):
            transform, slot = plan_slot(crop, self.spec)
            self._slots.array[i] = slot
            transforms.append(transform)
        key = ("rois", w, h, pitch, src, n, first, staged)
        plan = self._plans.get(key)
        if plan is None:
            slots_ptr = self._slots.device_ptr if self._mapped else self._slots_dev.ptr  # type: ignore[union-attr]
            args = KernelArgs([ctypes.c_void_p(src), ctypes.c_int(pitch), ctypes.c_void_p(slots_ptr), ctypes.c_int(n),
                               ctypes.c_void_p(self.tensor.ptr), ctypes.c_int(first), ctypes.c_int(self.spec.width),
                               ctypes.c_int(self.spec.height)] + self._common)
            plan = self._remember(key, _Plan([], args, self._grid(n), self._k_rois,
                                             pitch * h if staged and not self._mapped else 0,
                                             0 if self._mapped else n * SLOT_DTYPE.itemsize))
        self._run(key, plan)
        return transforms

    def download(self) -> np.ndarray:
        """Wait for the queued work and return the tensor as a host array (valid until the
        next download)."""
        if self._host_out is None:
            self._host_out = self.api.alloc_host(self.tensor.shape, self.spec.dtype)
        self.api.copy_dtoh(self._host_out, self.tensor.ptr, self.tensor.nbytes, self.stream)
        self.api.synchronize(self.stream)
        self._pending = False
        return self._host_out.array

    def describe(self) -> Dict[str, Any]:
        return {
            "implementation": self.api.name,
            "device": self.api.properties.name,
            "frame_memory": "mapped (zero-copy)" if self._mapped else "pinned + one async copy",
            "graphs": self.graph.describe(),
            "zero_copy_frames": self.zero_copy_frames,
            "staged_frames": self.staged_frames,
        }

    def close(self) -> None:
        """Free the device and page-locked buffers, the event and a stream made here (after the
        stream's work is done)."""
        if self._done is None:
            return
        self.api.synchronize(self.stream)
        self.graph.invalidate()
        self.api.destroy_event(self._done)
        self._done = None
        if self._own_stream:
            self.api.destroy_stream(self.stream)
        for buf in (self._staging, self._slots, self._host_out):
            if buf is not None:
                self.api.free_host(buf)
        for dev in (self._staging_dev, self._slots_dev, self._out):
            if dev is not None:
                self.api.free_device(dev)
        # A second close() must not free anything twice.
        self._staging = self._slots = self._host_out = None
        self._staging_dev = self._slots_dev = self._out = None

    # -- internals ---------------------------------------------------------------------------
    def _grid(self, slots: int) -> Tuple[int, int, int]:
        return (-(-self.spec.width // BLOCK[0]), -(-self.spec.height // BLOCK[1]), slots)

    def _remember(self, key: Tuple[Any, ...], plan: _Plan) -> _Plan:
        if len(self._plans) >= MAX_PLANS:  # frame sizes or ring buffers changing: start over
            self._plans.clear()
        self._plans[key] = plan
        return plan

    def _wait(self) -> None:
        if self._pending:
            self.api.event_synchronize(self._done)
            self._pending = False

    def _source(self, frame: np.ndarray, device_ptr: Optional[int] = None) -> Tuple[int, int, bool]:
        """(device address, row pitch, staged?) of the frame the kernel reads."""
        if device_ptr is not None:
            if not _kernel_ready(frame):
                raise SourceError("a frame given with device_ptr must have contiguous pixels in each row (the layout "
                                  "the device copy has); pass the capture buffer itself, not a view of it")
            if self._mapped and self.api.device_pointer_of(frame) == device_ptr:
                self.zero_copy_frames += 1  # the frame's own mapping: read where the decoder wrote it
            else:
                self.device_frames += 1
            return int(device_ptr), int(frame.strides[0]), False
        if self._mapped and _kernel_ready(frame):
            ptr = self.api.device_pointer_of(frame)
            if ptr is not None:
                self.zero_copy_frames += 1
                return ptr, int(frame.strides[0]), False
        h, w = frame.shape[:2]
        nbytes = h * w * 3
        self._wait()  # the previous frame may still be read from the staging buffer
        if self._staging is None or self._staging.nbytes < nbytes:
            self._grow_staging(nbytes)
        assert self._staging is not None
        np.copyto(self._staging.array[:nbytes].reshape(h, w, 3), frame)
        self.staged_frames += 1
        if self._mapped:
            assert self._staging.device_ptr is not None
            return self._staging.device_ptr, w * 3, True
        return self._staging_dev.ptr, w * 3, True  # type: ignore[union-attr]

    def _grow_staging(self, nbytes: int) -> None:
        self.graph.invalidate()
        self._plans.clear()
        if self._staging is not None:
            self.api.free_host(self._staging)
        if self._staging_dev is not None:
            self.api.free_device(self._staging_dev)
        self._staging = self.api.alloc_host((nbytes,), np.uint8, mapped=self._mapped)
        self._staging_dev = None if self._mapped else self.api.alloc_device(padded_size(nbytes))

    def _run(self, key: Tuple[Any, ...], plan: _Plan) -> None:
        def work() -> None:
            if plan.copy_bytes:
                self.api.copy_htod(self._staging_dev, self._staging, plan.copy_bytes, self.stream)  # type: ignore[arg-type]
            if plan.slot_bytes:
                self.api.copy_htod(self._slots_dev, self._slots, plan.slot_bytes, self.stream)  # type: ignore[arg-type]
            self.api.launch(plan.kernel, plan.grid, BLOCK, plan.args, self.stream)

        self.graph.run(key, work)
        self.api.record(self._done, self.stream)
        self._pending = True
