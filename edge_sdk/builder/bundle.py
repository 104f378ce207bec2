"""Writing a bundle: every file into a temporary folder, checksums into the manifest, the
manifest loaded back with :class:`edge_sdk.manifest.Bundle`, and only then the folder moved
into place. A failure at any point leaves no partial bundle behind."""
from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np

from edge_sdk.errors import BundleError, ConfigError
from edge_sdk.fsutil import AtomicDirectory, sha256_file
from edge_sdk.manifest import MANIFEST, SCHEMA_VERSION, VARIANT_FILES, Bundle

CALIB_DIR = "calib"
CALIB_CACHE = "calib.cache"
RANGES = "ranges.json"


def check_output_dir(out: Path) -> None:
    """Fail fast (before any long work) when `out` cannot become a bundle folder.

    An existing folder is replaced only when it is empty or already a bundle, so that a
    mistyped `--out` never wipes unrelated files.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; choose a folder path for the bundle")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise ConfigError(f"--out {out} exists and is not a bundle (no {MANIFEST}); choose an empty or new folder")
    ancestor = out.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"cannot create --out {out}: {ancestor} is not a folder")
    try:
        probe = tempfile.mkdtemp(prefix=".edge-sdk-probe-", dir=str(ancestor))
        os.rmdir(probe)
    except OSError as exc:
        raise ConfigError(f"cannot write the bundle to {out}: {ancestor} is not writable ({exc.strerror}); choose another --out") from exc


def _npy_bytes(array: np.ndarray) -> bytes:
    """`.npy` bytes; float16 when that is exact (e.g. raw 0..255 pixels), halving the size."""
    array = np.ascontiguousarray(array)
    if array.dtype == np.float32:
        half = array.astype(np.float16)
        if np.array_equal(half.astype(np.float32), array):
            array = half
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def write_bundle(
    out: Path,
    manifest: Mapping[str, Any],
    models: Mapping[str, Any],
    texts: Optional[Mapping[str, str]] = None,
    calib_tensors: Sequence[np.ndarray] = (),
) -> Bundle:
    """Write `models` ({variant: ModelProto}), text files and calibration tensors plus the
    manifest (with `files` checksums added) atomically into `out`; returns the loaded Bundle."""
    check_output_dir(out)
    unknown = set(models) - set(VARIANT_FILES)
    if unknown:
        raise BundleError(f"unknown model variants {sorted(unknown)}; expected {', '.join(VARIANT_FILES)}")
    with AtomicDirectory(out) as tmp:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # a normal folder, not mkdtemp's private 0700
        for variant, model in models.items():
            (tmp / VARIANT_FILES[variant]).write_bytes(model.SerializeToString())
        for rel, text in (texts or {}).items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        if len(calib_tensors):
            (tmp / CALIB_DIR).mkdir()
            for i, tensor in enumerate(calib_tensors):
                (tmp / CALIB_DIR / f"{i:04d}.npy").write_bytes(_npy_bytes(tensor))
        files: Dict[str, str] = {}
        for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
            rel = path.relative_to(tmp).as_posix()
            if rel != MANIFEST:
                files[rel] = sha256_file(path)
        full = dict(manifest)
        full.setdefault("schema_version", SCHEMA_VERSION)
        full["files"] = files
        (tmp / MANIFEST).write_text(json.dumps(full, indent=2) + "\n")
        Bundle.load(tmp)  # the runtime's own reader must accept it before it is published
    return Bundle.load(out)


def file_sizes(bundle: Bundle) -> Dict[str, int]:
    return {rel: (bundle.root / rel).stat().st_size for rel in (bundle.manifest.get("files") or {})}
