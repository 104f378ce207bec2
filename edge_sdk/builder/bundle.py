"""Writing a bundle: every file into a temporary folder, checksums into the manifest, the
manifest loaded back with :class:`edge_sdk.manifest.Bundle`, and only then the folder moved
into place. A failure at any point leaves no partial bundle behind."""
from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np

from edge_sdk.errors import BundleError, ConfigError
from edge_sdk.fsutil import AtomicDirectory, clean_stale, is_mount_point, sha256_file
from edge_sdk.validate import non_finite
from edge_sdk.manifest import (
    CALIB_CACHE,
    CALIB_DIR,
    MANIFEST,
    MANIFEST_MAX_BYTES,
    SCHEMA_VERSION,
    VARIANT_FILES,
    Bundle,
    file_entries,
    parse_manifest,
)

RANGES = "ranges.json"


def check_output_dir(out: Path) -> None:
    """Fail fast (before any long work) when `out` cannot become a bundle folder, and remove
    what interrupted builds into `out` left beside it (see :func:`edge_sdk.fsutil.clean_stale`).

    An existing folder is replaced only when it is empty or recognisably a bundle (see
    :func:`foreign_content`), so that `--out` never deletes other files. The folder must be
    swappable: not a mount point or a symbolic link, its parent writable.
    """
    out = Path(out)
    if out.is_symlink():
        raise ConfigError(f"--out {out} is a symbolic link; pass the folder it points to ({os.path.realpath(out)}) instead")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; choose a folder path for the bundle")
    if out.is_dir():
        if is_mount_point(out):
            raise ConfigError(f"--out {out} is a mount point, which cannot be replaced as a whole; use a folder inside it (e.g. --out {out / 'bundle'})")
        foreign = foreign_content(out)
        if foreign is not None:
            raise ConfigError(
                f"--out {out} is not a bundle folder ({foreign}); a build replaces the whole folder, so nothing was "
                "touched. Choose an empty or new folder, or move those files away"
            )
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
    if out.is_dir() and any(out.iterdir()) and not os.access(out, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot replace --out {out}: its old files cannot be removed (no write permission); choose another --out")
    clean_stale(out)


def foreign_content(folder: Path) -> Optional[str]:
    """None when `folder` is empty or recognisably a bundle: a `manifest.json` the runtime's reader
    accepts (schema, `files`) and nothing but the files it lists and their folders. Otherwise a
    short reason that names what is in the way (the walk stops at the first few)."""
    with os.scandir(folder) as it:
        if next(it, None) is None:
            return None
    manifest = folder / MANIFEST
    if manifest.is_symlink() or not manifest.is_file():
        return f"no {MANIFEST}"
    try:
        with open(manifest, "rb") as f:
            # a bundle whose other fields this version refuses is still a bundle: it may be replaced
            listed = set(file_entries(parse_manifest(f.read(MANIFEST_MAX_BYTES + 1), str(manifest), fields=False),
                                      str(manifest)))
    except (OSError, BundleError) as exc:
        reason = str(exc)
        reason = reason[: -len("; rebuild the bundle")] if reason.endswith("; rebuild the bundle") else reason
        return f"its {MANIFEST} is not an edge-sdk bundle manifest: {reason}"
    folders = {p.as_posix() for rel in listed for p in PurePosixPath(rel).parents}
    others = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath, name)
            rel = path.relative_to(folder).as_posix()
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                others.append(rel)
            elif path.is_dir() and rel not in folders:
                others.append(rel + "/")
            elif path.is_file() and rel not in listed and rel != MANIFEST:
                others.append(rel)
        if len(others) > 3:
            break
    if not others:
        return None
    shown = ", ".join(others[:3]) + (" and more" if len(others) > 3 else "")
    return f"it holds {shown}, which its {MANIFEST} does not list"


CALIB_KEY = "tensor"  # the array's name inside each calib/NNNN.npz


def encode_calib_tensor(array: np.ndarray) -> np.ndarray:
    """The smallest dtype that holds `array` exactly: uint8 when every value is an integer in
    0..255 (raw pixels: mean 0, scale 1), else float16 when that rounds nothing, else float32.
    Casting the result back to float32 rebuilds `array` bit for bit."""
    array = np.ascontiguousarray(array)
    if array.dtype != np.float32:
        array = array.astype(np.float32)
    if array.size and float(array.min()) >= 0.0 and float(array.max()) <= 255.0:
        small = array.astype(np.uint8)
        if np.array_equal(small.astype(np.float32), array):
            return small
    half = array.astype(np.float16)
    if np.array_equal(half.astype(np.float32), array):
        return half
    return array


def _npz_bytes(array: np.ndarray) -> bytes:
    """Deflate-compressed `.npz` bytes holding `encode_calib_tensor(array)` under CALIB_KEY."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **{CALIB_KEY: encode_calib_tensor(array)})
    return buf.getvalue()


def calib_tensor_format(tensors: Sequence[np.ndarray], spec: Any) -> Dict[str, Any]:
    """What the manifest says about calib/*.npz: how to turn the stored arrays back into the
    float32 network input (a plain cast: values are stored after (pixel - mean) * scale)."""
    dtypes = sorted({str(encode_calib_tensor(t).dtype) for t in tensors}, key=["uint8", "float16", "float32"].index)
    return {
        "count": len(tensors),
        "format": f"npz (deflate), array {CALIB_KEY!r}, one (1, C, H, W) sample per file",
        "dtype": dtypes[-1] if dtypes else None,
        "dtypes": dtypes,
        "values": "network input, (pixel - mean) * scale already applied; cast to float32 to rebuild it exactly",
        "mean": list(spec.mean),
        "scale": list(spec.scale),
    }


def write_bundle(
    out: Path,
    manifest: Mapping[str, Any],
    models: Mapping[str, Any],
    texts: Optional[Mapping[str, str]] = None,
    calib_tensors: Sequence[np.ndarray] = (),
    blobs: Optional[Mapping[str, bytes]] = None,
) -> Bundle:
    """Write `models` ({variant: ModelProto}), text files, binary files (`blobs`: bundle-relative
    path → bytes) and calibration tensors (as calib/NNNN.npz, see :func:`encode_calib_tensor`)
    plus the manifest (with `files` checksums added) atomically into `out`; returns the loaded Bundle."""
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
        for rel, data in (blobs or {}).items():
            (tmp / rel).write_bytes(data)
        if len(calib_tensors):
            (tmp / CALIB_DIR).mkdir()
            for i, tensor in enumerate(calib_tensors):
                (tmp / CALIB_DIR / f"{i:04d}.npz").write_bytes(_npz_bytes(tensor))
        files: Dict[str, Dict[str, Any]] = {}
        for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
            rel = path.relative_to(tmp).as_posix()
            if rel != MANIFEST:
                files[rel] = {"sha256": sha256_file(path), "size": path.stat().st_size}
        full = dict(manifest)
        full["schema_version"] = SCHEMA_VERSION  # the `files` format written here is this schema's
        full["files"] = files
        for key, value in non_finite(full):  # JSON has no NaN: the runtime would refuse the bundle
            raise BundleError(
                f"the manifest would hold {key} = {value!r}, which JSON cannot carry; the model gave non-finite "
                "outputs on the calibration or gate images (check it with ONNX Runtime) and nothing was written"
            )
        (tmp / MANIFEST).write_text(json.dumps(full, indent=2, allow_nan=False) + "\n")
        Bundle.load(tmp)  # the runtime's own reader must accept it before it is published
    return Bundle.load(out)


def file_sizes(bundle: Bundle) -> Dict[str, int]:
    return {rel: (bundle.root / rel).stat().st_size for rel in bundle.files}
