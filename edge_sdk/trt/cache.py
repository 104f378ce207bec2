"""Compiled engines cached on the machine that built them.

An engine is valid only for the GPU (SM), the TensorRT version and the bundle it was built
from, at the precision and DLA core it was built for: those five make the key, and the key
makes the file name. Each engine has a JSON sidecar with its size and sha256, written after
the engine (both atomically), so a partial or corrupt file is never used: a lookup that finds
an engine without a sidecar, or one whose size or digest differs, is a miss.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from edge_sdk.fsutil import PathLike, atomic_write_bytes, atomic_write_json, sha256_file

CACHE_ENV = "EDGE_SDK_ENGINE_CACHE"
_UNSAFE = re.compile(r"[^A-Za-z0-9.]+")


def default_cache_dir() -> Path:
    """`$EDGE_SDK_ENGINE_CACHE`, else the user cache dir (`~/.cache/edge-sdk/engines` on Linux)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("edge-sdk")) / "engines"


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("_") or "none"


@dataclass(frozen=True)
class EngineKey:
    """What an engine is tied to. Equal keys mean interchangeable engines."""

    bundle_hash: str
    tensorrt: str  # full TensorRT version, e.g. "8.5.2.2"
    sm: str  # compute capability, e.g. "7.2"
    precision: str  # one of edge_sdk.precision.BUILD_PRECISIONS
    dla_core: Optional[int] = None  # None: GPU only

    @property
    def stem(self) -> str:
        dla = "gpu" if self.dla_core is None else f"dla{int(self.dla_core)}"
        return "-".join(
            [
                _safe(self.bundle_hash),
                "trt" + _safe(self.tensorrt),
                "sm" + _safe(self.sm).replace(".", ""),
                _safe(self.precision),
                dla,
            ]
        )

    @property
    def filename(self) -> str:
        return self.stem + ".engine"

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


class EngineCache:
    """A folder of `<key>.engine` files, each with a `<key>.engine.json` sidecar."""

    def __init__(self, root: Optional[PathLike] = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_cache_dir()

    def path(self, key: EngineKey) -> Path:
        return self.root / key.filename

    def sidecar(self, key: EngineKey) -> Path:
        return self.root / (key.filename + ".json")

    def report_path(self, key: EngineKey) -> Path:
        """The layer report of the engine (`<key>.layers.json`): what each layer runs in, and where."""
        return self.root / (key.stem + ".layers.json")

    def info(self, key: EngineKey) -> Dict[str, Any]:
        """The `info` the engine was stored with ({} when unreadable)."""
        try:
            meta = json.loads(self.sidecar(key).read_text())
        except (OSError, ValueError):
            return {}
        info = meta.get("info") if isinstance(meta, dict) else None
        return info if isinstance(info, dict) else {}

    def read_report(self, key: EngineKey) -> Optional[Dict[str, Any]]:
        """The stored layer report, or None when missing or unreadable."""
        try:
            report = json.loads(self.report_path(key).read_text())
        except (OSError, ValueError):
            return None
        return report if isinstance(report, dict) else None

    def device_report_path(self, key: EngineKey) -> Path:
        """The on-device precision choice for the key's bundle, TensorRT, GPU and DLA core
        (`<key>.device_report.json`, the key's precision being "best"): see edge_sdk.trt.choice."""
        return self.root / (key.stem + ".device_report.json")

    def calib_cache_path(self, bundle_hash: str, tensorrt: str, sm: str) -> Path:
        """Where a calibration cache made on this device (by `--recalibrate`) is kept."""
        return self.root / f"{_safe(bundle_hash)}-trt{_safe(tensorrt)}-sm{_safe(sm).replace('.', '')}.calib.cache"

    def inspect(self, key: EngineKey) -> Tuple[Optional[Path], str]:
        """(engine path, "hit") for a usable entry, else (None, why it is not usable)."""
        engine, sidecar = self.path(key), self.sidecar(key)
        if not engine.is_file():
            return None, "not cached"
        if not sidecar.is_file():
            return None, f"{engine.name} has no sidecar (an interrupted write); rebuilding"
        try:
            meta = json.loads(sidecar.read_text())
        except (OSError, ValueError):
            return None, f"{sidecar.name} is unreadable; rebuilding"
        if not isinstance(meta, dict) or meta.get("key") != key.to_dict():
            return None, f"{sidecar.name} describes another engine; rebuilding"
        if engine.stat().st_size != meta.get("size"):
            return None, f"{engine.name} has the wrong size (partial or corrupt); rebuilding"
        if sha256_file(engine) != meta.get("sha256"):
            return None, f"{engine.name} fails its sha256 check (corrupt); rebuilding"
        return engine, "hit"

    def get(self, key: EngineKey) -> Optional[Path]:
        return self.inspect(key)[0]

    def put(
        self, key: EngineKey, data: bytes, info: Optional[Dict[str, Any]] = None, report: Optional[Dict[str, Any]] = None
    ) -> Path:
        """Store `data` under `key`: engine (and its layer report) first, then the sidecar that
        makes it valid."""
        import hashlib

        engine, sidecar = self.path(key), self.sidecar(key)
        if sidecar.exists():
            sidecar.unlink()  # the old sidecar must never vouch for the new bytes
        atomic_write_bytes(engine, data)
        if report is not None:
            atomic_write_json(self.report_path(key), report)
        elif self.report_path(key).exists():
            self.report_path(key).unlink()  # an old report describes other bytes
        meta: Dict[str, Any] = {
            "key": key.to_dict(),
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        if info:
            meta["info"] = info
        atomic_write_json(sidecar, meta)
        return engine
