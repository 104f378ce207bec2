"""The CUDA layer: one small interface, two implementations, chosen by what imports or by config.

What the rest of the SDK needs from CUDA, and nothing more: device memory; page-locked host
buffers, mapped (with the device pointer the GPU reads them through) or only pinned; streams
and events; async copies; kernels compiled at run time for the device's SM and launched; CUDA
graph capture and replay; and the device's properties (SM, integrated or not, memory).

| implementation | module | kernels compiled by | CUDA graphs |
|---|---|---|---|
| `cuda-python` | :mod:`edge_sdk.cuda._cudapython` | NVRTC (no toolkit needed) | yes |
| `pycuda` | :mod:`edge_sdk.cuda._pycuda` | nvcc, as `SourceModule` does | no: the work is re-issued per frame |

The interface is :mod:`edge_sdk.cuda.api`; this package only hands its names on. Each binding
is imported only inside its own module, so ``import edge_sdk.cuda`` works on a machine without
CUDA and loads neither. :func:`open_cuda` picks one:

- ``"auto"``: cuda-python if it imports, else pycuda; ``None`` when neither finds a usable
  GPU, and the caller keeps the CPU path.
- ``"cuda-python"`` / ``"pycuda"``: that one, or a typed error naming the cause and the fix
  (:class:`~edge_sdk.errors.MissingDependencyError`, :class:`~edge_sdk.errors.CudaError`).

Host memory the GPU writes and the CPU reads once (:func:`frame_memory_for`, the TensorRT
backend's outputs): mapped page-locked memory on an integrated GPU (``cudaDevAttrIntegrated``:
a Jetson, CPU and GPU share DRAM), pinned memory and a copy on a discrete one. Camera frames,
which a kernel reads with overlapping loads, are a measured choice of their own
(:mod:`edge_sdk.cuda.frames`, :mod:`edge_sdk.cuda.measure`).
"""
from __future__ import annotations

from edge_sdk.cuda.api import (
    CHOICES,
    IMPLEMENTATIONS,
    KERNEL_DIR,
    MAPPED,
    PINNED,
    TARGET_CUDA_MAJOR,
    CudaApi,
    DeviceBuffer,
    DeviceProperties,
    DeviceTensor,
    HostBuffer,
    Kernel,
    KernelArgs,
    frame_memory_for,
    installed,
    open_cuda,
    require_cuda,
    version_text,
)

__all__ = [
    "CHOICES",
    "CudaApi",
    "DeviceBuffer",
    "DeviceProperties",
    "DeviceTensor",
    "HostBuffer",
    "IMPLEMENTATIONS",
    "KERNEL_DIR",
    "Kernel",
    "KernelArgs",
    "MAPPED",
    "PINNED",
    "TARGET_CUDA_MAJOR",
    "frame_memory_for",
    "installed",
    "open_cuda",
    "require_cuda",
    "version_text",
]
