"""The bundle manifest: what the builder wrote and what the runtime needs to run it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from edge_sdk.errors import BundleError
from edge_sdk.fsutil import PathLike, sha256_file
from edge_sdk.preprocess import InputSpec

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"

VARIANT_FILES = {
    "fp32": "model.onnx",
    "fp16": "model.fp16.onnx",
    "int8": "model.int8.qdq.onnx",
}


class Bundle:
    """A built bundle on disk: a folder with `manifest.json` and the files it lists."""

    def __init__(self, root: PathLike, manifest: Dict[str, Any]) -> None:
        self.root = Path(root)
        self.manifest = manifest

    @classmethod
    def load(cls, root: PathLike, verify: bool = True) -> "Bundle":
        root = Path(root)
        path = root / MANIFEST
        if not path.is_file():
            raise BundleError(f"{root} is not a bundle: {MANIFEST} is missing. Build one with `edge-sdk build --out {root}`")
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise BundleError(f"{path} is not valid JSON ({exc}); rebuild the bundle") from exc
        version = manifest.get("schema_version")
        if not isinstance(version, int):
            raise BundleError(f"{path} has no integer schema_version; rebuild the bundle")
        if version > SCHEMA_VERSION:
            raise BundleError(
                f"{path} has schema_version {version}, newer than this runtime understands ({SCHEMA_VERSION}); "
                "upgrade edge-sdk on the device"
            )
        bundle = cls(root, manifest)
        if verify:
            bundle.verify()
        return bundle

    def verify(self) -> None:
        files = self.manifest.get("files") or {}
        for rel, digest in files.items():
            path = self.root / rel
            if not path.is_file():
                raise BundleError(f"bundle file {path} is missing; copy the whole bundle folder again")
            actual = sha256_file(path)
            if actual != digest:
                raise BundleError(f"bundle file {path} fails its sha256 check (expected {digest[:12]}…, got {actual[:12]}…); the copy is corrupt")

    @property
    def inputs(self) -> List[InputSpec]:
        return [InputSpec.from_dict(d) for d in self.manifest.get("inputs", [])]

    @property
    def decoder(self) -> Dict[str, Any]:
        return dict(self.manifest.get("decoder") or {})

    @property
    def hash(self) -> str:
        """A short identity of the bundle's content: sha256 over its file digests."""
        import hashlib

        files = self.manifest.get("files") or {}
        h = hashlib.sha256()
        for rel in sorted(files):
            h.update(f"{rel}:{files[rel]}\n".encode())
        return h.hexdigest()[:16]

    def variants(self) -> List[str]:
        return [v for v, f in VARIANT_FILES.items() if (self.root / f).is_file()]

    def model_path(self, variant: str = "fp32") -> Path:
        if variant not in VARIANT_FILES:
            raise BundleError(f"unknown precision {variant!r}; choose one of {', '.join(VARIANT_FILES)}")
        path = self.root / VARIANT_FILES[variant]
        if not path.is_file():
            raise BundleError(
                f"bundle {self.root} has no {variant} variant ({VARIANT_FILES[variant]}); "
                f"it has: {', '.join(self.variants()) or 'none'}. Rebuild with --precision {variant}"
            )
        return path

    def get(self, key: str, default: Optional[Any] = None) -> Any:
        return self.manifest.get(key, default)
