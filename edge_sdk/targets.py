"""Deployment targets. A target decides the TensorRT version the bundle is made for, the
calibration cache header, implicit vs explicit INT8, and what the device must do itself."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from edge_sdk.errors import TargetError


def trt_version_code(version: str) -> int:
    """The number TensorRT writes in a calibration cache header (`TRT-<code>-<algorithm>`).

    TensorRT 8.x: major*1000 + minor*100 + patch ('8.5.2.2' -> 8502). From TensorRT 10 on the
    major version takes two digits: major*10000 + minor*100 + patch ('10.3.0' -> 100300). A
    header with the other encoding is one TensorRT ignores, and it calibrates again.
    """
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]] + [0, 0, 0]
    major, minor, patch = parts[:3]
    return major * (10000 if major >= 10 else 1000) + minor * 100 + patch


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    sm: Optional[str]  # compute capability, e.g. "7.2"; None until detected (host)
    tensorrt: Optional[str]  # e.g. "8.5.2"
    jetpack: Optional[str]
    python: str
    cuda: Optional[str]
    dla_cores: int
    memory_gb: Optional[float]
    shared_memory: bool  # CPU and GPU share DRAM (zero-copy is real)
    quantization: str  # "implicit" (calibration cache + INT8 flag) or "explicit" (Q/DQ ONNX)
    aliases: List[str] = field(default_factory=list)

    @property
    def trt_major(self) -> Optional[int]:
        return int(self.tensorrt.split(".")[0]) if self.tensorrt else None

    @property
    def trt_version_code(self) -> Optional[int]:
        """TensorRT's own version number (see `trt_version_code`): 8.5.2 -> 8502, 10.3.0 -> 100300."""
        if not self.tensorrt:
            return None
        return trt_version_code(self.tensorrt)

    def calib_cache_header(self, algorithm: str = "EntropyCalibration2") -> str:
        code = self.trt_version_code
        if code is None:
            raise TargetError(f"target {self.name!r} has no TensorRT version; cannot write a calibration cache header")
        return f"TRT-{code}-{algorithm}"

    def to_dict(self) -> Dict[str, object]:
        return {
            "name": self.name,
            "sm": self.sm,
            "tensorrt": self.tensorrt,
            "jetpack": self.jetpack,
            "python": self.python,
            "cuda": self.cuda,
            "dla_cores": self.dla_cores,
            "memory_gb": self.memory_gb,
            "shared_memory": self.shared_memory,
            "quantization": self.quantization,
        }


TARGETS: Dict[str, Target] = {
    t.name: t
    for t in [
        Target("xavier-nx", "Jetson Xavier NX (Volta), JetPack 5.1", "7.2", "8.5.2", "5.1", "3.8", "11.4", 2, 8, True, "implicit", ["xaviernx", "nx"]),
        Target("orin-nano", "Jetson Orin Nano (Ampere), JetPack 6", "8.7", "10.3.0", "6.1", "3.10", "12.6", 0, 8, True, "explicit"),
        Target("orin-nx", "Jetson Orin NX (Ampere), JetPack 6", "8.7", "10.3.0", "6.1", "3.10", "12.6", 2, 16, True, "explicit"),
        Target("agx-orin", "Jetson AGX Orin (Ampere), JetPack 6", "8.7", "10.3.0", "6.1", "3.10", "12.6", 2, 64, True, "explicit", ["orin-agx"]),
        Target("host", "this machine's own GPU (detected at build time)", None, None, None, "3.8+", None, 0, None, False, "explicit"),
    ]
}


def get_target(name: str) -> Target:
    key = name.strip().lower()
    for target in TARGETS.values():
        if key == target.name or key in target.aliases:
            return target
    raise TargetError(f"unknown target {name!r}. Known targets: {', '.join(TARGETS)} (see `edge-sdk targets`)")
