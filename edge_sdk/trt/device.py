"""Which NVIDIA GPU is in this machine: name and compute capability (SM), without TensorRT.

Probes, in order, each answering "don't know" (None) rather than failing:

1. cuda-python's runtime (`cudaGetDeviceProperties`), if installed;
2. pycuda's driver API, if installed;
3. `nvidia-smi --query-gpu=compute_cap,name --format=csv,noheader` (desktop and server GPUs);
4. a Jetson's `/proc/device-tree/model` or `/etc/nv_tegra_release` (JetPack has no nvidia-smi).

`detect_gpu()` returns None when no probe finds a GPU.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Tuple

from edge_sdk import _imports
from edge_sdk.errors import MissingDependencyError


@dataclass(frozen=True)
class GpuInfo:
    name: str
    sm: str  # compute capability "major.minor", e.g. "7.2"
    source: str  # which probe answered

    @property
    def sm_tag(self) -> str:
        """`sm72` for 7.2: the form used in file names."""
        return "sm" + self.sm.replace(".", "")

    def to_dict(self) -> dict:
        return {"name": self.name, "sm": self.sm, "source": self.source}

    @classmethod
    def of_cuda(cls, api: Any) -> "GpuInfo":
        """The GPU a CudaApi (edge_sdk.cuda) runs on, as its properties give it."""
        props = api.properties
        return cls(name=props.name, sm=f"{props.sm[0]}.{props.sm[1]}", source=api.name)


# Jetson modules by the words in /proc/device-tree/model -> compute capability.
# Order matters: the first match wins ("Orin" before the older names).
JETSON_SM: Tuple[Tuple[str, str], ...] = (
    ("orin", "8.7"),
    ("xavier", "7.2"),
    ("tx2", "6.2"),
    ("tx1", "5.3"),
    ("nano", "5.3"),
)

# /etc/nv_tegra_release "# R35 (release), REVISION: 3.1, ..." -> the L4T major only says the
# JetPack generation, not the module; used when the device tree is not readable (containers).
_TEGRA_RELEASE = re.compile(r"#\s*R(\d+)")


def sm_from_jetson_model(model: str) -> Optional[str]:
    low = model.lower()
    for word, sm in JETSON_SM:
        if word in low:
            return sm
    return None


def parse_nvidia_smi(text: str) -> Optional[GpuInfo]:
    """Parse `compute_cap,name` CSV lines; the first GPU wins (engines are built for GPU 0)."""
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",", 1)]
        if len(parts) == 2 and re.fullmatch(r"\d+\.\d+", parts[0]):
            return GpuInfo(name=parts[1], sm=parts[0], source="nvidia-smi")
    return None


def probe_nvidia_smi(
    run: Optional[Callable[[Sequence[str], float], str]] = None,
    timeout_s: float = 10.0,
) -> Optional[GpuInfo]:
    if run is None:
        if shutil.which("nvidia-smi") is None:
            return None
        run = _run_command
    try:
        out = run(["nvidia-smi", "--query-gpu=compute_cap,name", "--format=csv,noheader"], timeout_s)
    except (OSError, subprocess.SubprocessError):
        # A driver that does not answer (or a GPU-less container with the binary) is "no GPU here".
        return None
    return parse_nvidia_smi(out)


def _run_command(cmd: Sequence[str], timeout_s: float) -> str:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s, check=True).stdout


def probe_jetson(root: Path = Path("/")) -> Optional[GpuInfo]:
    model_file = root / "proc/device-tree/model"
    if model_file.is_file():
        model = model_file.read_bytes().rstrip(b"\x00").decode("utf-8", "replace").strip()
        sm = sm_from_jetson_model(model)
        if sm is not None:
            return GpuInfo(name=model, sm=sm, source=str(model_file))
    release = root / "etc/nv_tegra_release"
    if release.is_file():
        m = _TEGRA_RELEASE.search(release.read_text(errors="replace"))
        if m:
            # L4T R35 runs on Xavier and Orin; R36 on Orin only; R32 on Nano/TX/Xavier.
            major = int(m.group(1))
            if major >= 36:
                return GpuInfo(name=f"Jetson (L4T R{major})", sm="8.7", source=str(release))
    return None


def probe_cuda_python() -> Optional[GpuInfo]:
    cudart = _cudart_or_none()
    if cudart is None:
        return None
    try:
        # Without a driver (no libcuda.so.1) the bindings raise instead of returning an error code.
        err, count = cudart.cudaGetDeviceCount()
    except RuntimeError:
        return None
    if err != cudart.cudaError_t.cudaSuccess or count < 1:
        return None
    err, prop = cudart.cudaGetDeviceProperties(0)
    if err != cudart.cudaError_t.cudaSuccess:
        return None
    name = prop.name.split(b"\x00", 1)[0].decode() if isinstance(prop.name, bytes) else str(prop.name)
    return GpuInfo(name=name, sm=f"{prop.major}.{prop.minor}", source="cuda-python")


def _cudart_or_none():
    for module in ("cuda.bindings.runtime", "cuda.cudart"):
        if _imports.available(module):
            return _imports.require(module)
    return None


def probe_pycuda() -> Optional[GpuInfo]:
    try:
        drv = _imports.require("pycuda.driver")
    except MissingDependencyError:
        return None
    try:
        drv.init()
        if drv.Device.count() < 1:
            return None
        dev = drv.Device(0)
        major, minor = dev.compute_capability()
        return GpuInfo(name=dev.name(), sm=f"{major}.{minor}", source="pycuda")
    except drv.Error:
        # cuInit fails on a machine without a driver or GPU: pycuda has nothing to tell.
        return None


DEFAULT_PROBES: Tuple[Callable[[], Optional[GpuInfo]], ...] = (
    probe_cuda_python,
    probe_pycuda,
    probe_nvidia_smi,
    probe_jetson,
)


def detect_gpu(probes: Optional[Sequence[Callable[[], Optional[GpuInfo]]]] = None) -> Optional[GpuInfo]:
    """The local GPU (device 0), or None when there is none."""
    for probe in DEFAULT_PROBES if probes is None else probes:
        info = probe()
        if info is not None:
            return info
    return None
