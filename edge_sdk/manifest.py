"""The bundle manifest: what the builder wrote and what the runtime needs to run it.

Nothing in a bundle is trusted until :meth:`Bundle.load` has checked it:

* `manifest.json` is JSON of bounded size and depth without NaN or infinities
  (:func:`edge_sdk.validate.loads_untrusted`), and a JSON object with an integer `schema_version`;
* `files` lists every file the runtime reads — each model variant, `calib.cache`, everything
  under `calib/` — with its sha256 (and, from schema 2 on, its size); every entry is a plain
  relative path that stays inside the bundle folder, symbolic links included;
* with `verify` (the default) each listed file is there, has its size and its sha256, and no
  model or calibration file lies in the folder unlisted;
* `input_stats`, where present (statistics of the calibration images, :mod:`edge_sdk.input_stats`), has
  the layout and ranges the drift monitor needs;
* every other field the runtime reads has its type, range and size, and agrees with the others
  (the decoder built for the input, its output names among the outputs):
  :mod:`edge_sdk.manifest_check`, one entry per field.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any, Dict, List, NamedTuple, Optional

from edge_sdk.errors import BundleError, ConfigError
from edge_sdk.fsutil import PathLike, sha256_file
from edge_sdk.input_stats import InputStats
from edge_sdk.manifest_check import check_fields
from edge_sdk.precision import PRECISIONS
from edge_sdk.preprocess import InputSpec
from edge_sdk.validate import UntrustedInput, loads_untrusted

SCHEMA_VERSION = 2  # 2: `files` entries are {"sha256", "size"}; 1: plain sha256 strings (still read)
MANIFEST = "manifest.json"
MANIFEST_MAX_BYTES = 8 * 1024 * 1024

# The file of each model variant, in edge_sdk.precision.PRECISIONS order (fp32, fp16, int8).
VARIANT_FILES: Dict[str, str] = dict(zip(PRECISIONS, ("model.onnx", "model.fp16.onnx", "model.int8.qdq.onnx")))
CALIB_CACHE = "calib.cache"
CALIB_DIR = "calib"
# The gate images' network inputs and FP32's outputs on them, which `edge-sdk verify` compares an
# engine with (written by edge_sdk.builder.reference, read by edge_sdk.verify).
REFERENCE = "reference.npz"

# Manifest fields the bundle hash leaves out: how the content is written, and how the build went.
HASH_LEAVES_OUT = ("files", "schema_version", "builder", "preprocess_probe", "provenance")
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_GATE_METRICS = ("f1_vs_fp32", "cosine")  # what builder.evaluate.gate measures


class FileEntry(NamedTuple):
    """One `files` entry: the file's sha256 and, where the manifest gives it, its size in bytes."""

    sha256: str
    size: Optional[int]


def parse_manifest(raw: bytes, origin: str, fields: bool = True) -> Dict[str, Any]:
    """The manifest as a dict, its schema version, `files` and (with `fields`) every other field
    checked (no file is read). BundleError naming `origin` for anything else."""
    try:
        manifest = loads_untrusted(raw, MANIFEST_MAX_BYTES, what=origin)
    except UntrustedInput as exc:
        raise BundleError(f"{exc}; rebuild the bundle") from None
    if not isinstance(manifest, dict):
        raise BundleError(f"{origin} holds a JSON {type(manifest).__name__}, not an object; rebuild the bundle")
    version = manifest.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise BundleError(f"{origin} has no integer schema_version; rebuild the bundle")
    if version > SCHEMA_VERSION:
        raise BundleError(
            f"{origin} has schema_version {version}, newer than this runtime understands ({SCHEMA_VERSION}); "
            "upgrade edge-sdk on the device"
        )
    file_entries(manifest, origin)
    if manifest.get("input_stats") is not None:
        InputStats.from_dict(manifest["input_stats"], origin, BundleError)
    if fields:
        check_fields(manifest, origin)
    return manifest


def file_entries(manifest: Dict[str, Any], origin: str) -> Dict[str, FileEntry]:
    """`files` as {relative path: FileEntry}: a non-empty object that lists a model, whose keys are
    safe relative paths and whose values are a sha256 or {"sha256", "size"}. BundleError otherwise."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise BundleError(
            f"{origin} lists no files: a bundle's manifest must give the sha256 of every model and calibration "
            "file, or nothing in it can be verified; rebuild the bundle"
        )
    entries: Dict[str, FileEntry] = {}
    for rel, value in files.items():
        _check_rel(rel, origin)
        if isinstance(value, str):
            entry = FileEntry(value, None)
        elif isinstance(value, dict) and set(value) == {"sha256", "size"}:
            size = value["size"]
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise BundleError(f"{origin}: files.{rel}.size must be a byte count, got {size!r}; rebuild the bundle")
            entry = FileEntry(value["sha256"], size)
        else:
            raise BundleError(f"{origin}: files.{rel} must be {{\"sha256\": …, \"size\": …}}, got {value!r:.80}; rebuild the bundle")
        if not isinstance(entry.sha256, str) or not _SHA256.match(entry.sha256):
            raise BundleError(f"{origin}: files.{rel} has no valid sha256 (64 lowercase hex digits); rebuild the bundle")
        entries[rel] = entry
    if not any(rel in entries for rel in VARIANT_FILES.values()):
        raise BundleError(
            f"{origin} lists no model file ({', '.join(VARIANT_FILES.values())}) in `files`; rebuild the bundle"
        )
    variants = manifest.get("variants")
    if variants is not None and (not isinstance(variants, list) or not all(isinstance(v, str) for v in variants)):
        raise BundleError(f"{origin}: variants must be a list of variant names, got {variants!r:.80}; rebuild the bundle")
    precision = manifest.get("precision")
    if precision is not None and not isinstance(precision, str):
        raise BundleError(f"{origin}: precision must be a variant name, got {precision!r:.80}; rebuild the bundle")
    named = [VARIANT_FILES[v] for v in variants or [] if v in VARIANT_FILES]
    if precision in VARIANT_FILES:
        named.append(VARIANT_FILES[precision])
    unlisted = sorted({f for f in named if f not in entries})
    if unlisted:
        raise BundleError(f"{origin} names {', '.join(unlisted)} (variants/precision) but `files` does not list it; rebuild the bundle")
    tensors = (manifest.get("calibration") or {}).get("tensors") if isinstance(manifest.get("calibration"), dict) else None
    count = tensors.get("count") if isinstance(tensors, dict) else None
    listed = sum(1 for rel in entries if rel.startswith(CALIB_DIR + "/"))
    if isinstance(count, int) and not isinstance(count, bool) and count != listed:
        raise BundleError(f"{origin} announces {count} calibration tensors but `files` lists {listed} under {CALIB_DIR}/; rebuild the bundle")
    return entries


def input_specs(manifest: Dict[str, Any], origin: str) -> List[InputSpec]:
    """`inputs` as InputSpecs; BundleError naming the entry and the problem otherwise."""
    entries = manifest.get("inputs", [])
    if not isinstance(entries, list) or not all(isinstance(d, dict) for d in entries):
        raise BundleError(f"{origin}: inputs must be a list of objects; rebuild the bundle")
    specs = []
    for k, entry in enumerate(entries):
        try:
            specs.append(InputSpec.from_dict(entry))
        except (ConfigError, TypeError, ValueError) as exc:
            raise BundleError(f"{origin}: inputs[{k}] is not a valid input ({exc}); rebuild the bundle") from None
    return specs


def _check_rel(rel: Any, origin: str) -> None:
    """A `files` key is a plain relative POSIX path: no absolute path, drive, `..`, `.`, empty part
    or backslash, and not the manifest itself."""
    if not isinstance(rel, str) or not rel or "\x00" in rel or "\\" in rel:
        raise BundleError(f"{origin}: files entry {rel!r} is not a relative path inside the bundle; rebuild the bundle")
    parts = rel.split("/")
    if rel.startswith("/") or PurePosixPath(rel).is_absolute() or ":" in parts[0] or any(p in ("", ".", "..") for p in parts):
        raise BundleError(
            f"{origin}: files entry {rel!r} points outside the bundle (absolute path or `..`); "
            "a bundle lists only its own files. Rebuild the bundle"
        )
    if rel == MANIFEST:
        raise BundleError(f"{origin}: files entry {rel!r} is the manifest itself, which cannot hold its own checksum; rebuild the bundle")


class Bundle:
    """A built bundle on disk: a folder with `manifest.json` and the files it lists."""

    def __init__(self, root: PathLike, manifest: Dict[str, Any]) -> None:
        self.root = Path(root)
        self.manifest = manifest

    @classmethod
    def load(cls, root: PathLike, verify: bool = True) -> "Bundle":
        """Read and check the manifest (always) and the files (with `verify`); BundleError naming
        the problem otherwise."""
        root = Path(root)
        path = root / MANIFEST
        if not path.is_file():
            raise BundleError(f"{root} is not a bundle: {MANIFEST} is missing. Build one with `edge-sdk build --out {root}`")
        try:
            with open(path, "rb") as f:
                raw = f.read(MANIFEST_MAX_BYTES + 1)
        except OSError as exc:
            raise BundleError(f"cannot read {path} ({exc.strerror or exc}); check the bundle folder's permissions") from exc
        bundle = cls(root, parse_manifest(raw, str(path)))
        if verify:
            bundle.verify()
        return bundle

    @property
    def files(self) -> Dict[str, FileEntry]:
        return file_entries(self.manifest, str(self.root / MANIFEST))

    def verify(self) -> None:
        """Every listed file inside the folder, with its size and sha256; every file the runtime
        reads listed. BundleError naming the file and the fix otherwise."""
        files = self.files
        real_root = os.path.realpath(self.root)
        for rel, entry in files.items():
            path = self.root / rel
            real = os.path.realpath(path)
            if os.path.commonpath([real_root, real]) != real_root:
                raise BundleError(
                    f"bundle file {path} leads outside the bundle (to {real}, through a symbolic link); "
                    "a bundle holds its files itself. Copy the whole bundle folder again"
                )
            if not path.is_file():
                raise BundleError(f"bundle file {path} is missing; copy the whole bundle folder again")
            size = path.stat().st_size
            if entry.size is not None and size != entry.size:
                raise BundleError(
                    f"bundle file {path} has {size} bytes, the manifest says {entry.size}; the copy is corrupt or the "
                    "file was replaced. Copy the whole bundle folder again"
                )
            actual = sha256_file(path)
            if actual != entry.sha256:
                raise BundleError(
                    f"bundle file {path} fails its sha256 check (expected {entry.sha256[:12]}…, got {actual[:12]}…); "
                    "the copy is corrupt or the file was replaced. Copy the whole bundle folder again"
                )
        unlisted = [rel for rel in self._runtime_files() if rel not in files]
        if unlisted:
            shown = ", ".join(unlisted[:3]) + (f" and {len(unlisted) - 3} more" if len(unlisted) > 3 else "")
            raise BundleError(
                f"bundle {self.root} holds {shown}, which its manifest does not list: the runtime would read it "
                "unverified. Remove it, or rebuild the bundle"
            )

    def _runtime_files(self) -> List[str]:
        """Relative paths of what lies in the folder under the names the runtime and the engine
        builder read: the model variants, `calib.cache`, `reference.npz` and everything under `calib/`."""
        found = [f for f in VARIANT_FILES.values() if os.path.lexists(self.root / f)]
        for name in (CALIB_CACHE, REFERENCE):
            if os.path.lexists(self.root / name):
                found.append(name)
        calib = self.root / CALIB_DIR
        if calib.is_dir():
            for dirpath, dirnames, filenames in os.walk(calib, followlinks=False):
                for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
                    found.append(Path(dirpath, name).relative_to(self.root).as_posix())
        elif os.path.lexists(calib):
            found.append(CALIB_DIR)
        return found

    @property
    def inputs(self) -> List[InputSpec]:
        return input_specs(self.manifest, str(self.root / MANIFEST))

    @cached_property
    def input_stats(self) -> Optional[InputStats]:
        """Statistics of the calibration images (the drift monitor's reference), or None when the
        build recorded none (an FP32 build reads no images; bundles from before they were recorded)."""
        data = self.manifest.get("input_stats")
        return None if data is None else InputStats.from_dict(data, str(self.root / MANIFEST), BundleError)

    @property
    def decoder(self) -> Dict[str, Any]:
        return dict(self.manifest.get("decoder") or {})

    @property
    def hash(self) -> str:
        """A short identity of the bundle's content: sha256 over the canonical JSON (sorted keys,
        no spaces) of its files' digests and of everything else its manifest says — thresholds,
        mean and scale, fallback layers, calibration — so that a changed manifest is another
        bundle. `schema_version` and the files' sizes are left out: they say how the same content
        is written (a schema 1 bundle and its schema 2 rewrite share engines), and so are the
        records of how the build went (`builder`, with its duration; the probe's report, with its
        own; `provenance`), which no runtime reads: a rebuild of the same model with the same
        settings keeps its hash and its compiled engines. The engine cache, the device's precision
        report and telemetry's bundle_hash key on it."""
        files = self.files
        said = {k: v for k, v in self.manifest.items() if k not in HASH_LEAVES_OUT}
        canonical = json.dumps({"files": {rel: files[rel].sha256 for rel in files}, "manifest": said},
                               sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def variants(self) -> List[str]:
        """The model variants the bundle lists and holds."""
        files = self.files
        return [v for v, f in VARIANT_FILES.items() if f in files and (self.root / f).is_file()]

    def model_path(self, variant: str = "fp32") -> Path:
        if variant not in VARIANT_FILES:
            raise BundleError(f"unknown precision {variant!r}; choose one of {', '.join(VARIANT_FILES)}")
        path = self.root / VARIANT_FILES[variant]
        if VARIANT_FILES[variant] not in self.files or not path.is_file():
            raise BundleError(
                f"bundle {self.root} has no {variant} variant ({VARIANT_FILES[variant]}); "
                f"it has: {', '.join(self.variants()) or 'none'}. Rebuild with --precision {variant}"
            )
        return path

    @property
    def gated_precision(self) -> Optional[str]:
        """The variant the builder chose for the device (manifest `precision`): INT8 when it passed
        the accuracy gate, else FP16, or what `--precision` asked for. None when the manifest names
        none or a variant the bundle does not hold."""
        choice = self.manifest.get("precision")
        return choice if isinstance(choice, str) and choice in self.variants() else None

    def accuracy_note(self, variant: str) -> str:
        """What the manifest says of a variant's accuracy against FP32, for humans:
        "f1_vs_fp32 0.9815 >= 0.97 on the gate images" (the gate's verdict where there was one),
        "f1_vs_fp32 1.0000" otherwise; "" when it records nothing usable."""
        accuracy = self.manifest.get("accuracy")
        entry = accuracy.get(variant) if isinstance(accuracy, dict) else None
        if not isinstance(entry, dict):
            return ""
        gate = entry.get("gate")
        if isinstance(gate, dict) and gate.get("metric") in _GATE_METRICS and isinstance(gate.get("passed"), bool) \
                and _is_number(gate.get("value")) and _is_number(gate.get("threshold")):
            sign = ">=" if gate["passed"] else "<"
            return f"{gate['metric']} {gate['value']:.4f} {sign} {gate['threshold']:g} on the gate images"
        for metric in _GATE_METRICS:
            if _is_number(entry.get(metric)):
                return f"{metric} {entry[metric]:.4f}"
        return ""

    def get(self, key: str, default: Optional[Any] = None) -> Any:
        return self.manifest.get(key, default)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
