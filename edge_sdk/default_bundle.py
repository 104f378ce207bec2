"""The embedded default bundle: CenterFace, built once into the user cache and reused while current.

    root = ensure_default_bundle("auto", echo=print)      # ~/.cache/edge-sdk/bundles/default

`edge-sdk detect` and `edge-sdk run` use it when no bundle is given. Whether a cached bundle is
current is decided by what defines the default today (:func:`default_build_key`: the model
file, its input spec and decoder settings, the calibration images), recorded beside the bundle
folder when it is built. Building needs the host extra (onnx); the reuse check does not.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from edge_sdk.precision import AUTO

DEFAULT_BUNDLE_NAME = "default"


def build_record(root: Path) -> Path:
    """What the cached default bundle in `root` was built from (see default_build_key). It lies
    beside the bundle folder, not in it: a bundle folder holds only the files its manifest lists,
    or the next build refuses to replace it."""
    return root.parent / f"{root.name}.build.json"


def default_bundle_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("edge-sdk")) / "bundles" / DEFAULT_BUNDLE_NAME


def default_calibration_folder() -> Path:
    """The images `edge-sdk build` calibrates the default model on (a source checkout's calibrate/images)."""
    from edge_sdk.builder.pipeline import default_calib_dir

    return default_calib_dir()


def _calibration_digest(folder: Path) -> Optional[str]:
    """sha256 over the names and contents of the images in `folder`; None without the folder."""
    import hashlib

    from edge_sdk.fsutil import sha256_file

    if not folder.is_dir():
        return None
    h = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        h.update(f"{path.name}:{sha256_file(path)}\n".encode())
    return h.hexdigest()


def default_build_key() -> Dict[str, Any]:
    """What defines the default bundle: the model file, its input spec and decoder settings, and
    the calibration images (for the INT8 variant)."""
    from edge_sdk.builder.default_model import DEFAULT_MODEL

    return {
        "model_sha256": DEFAULT_MODEL.sha256,
        "input": DEFAULT_MODEL.input_spec.to_dict(),
        "decoder": dict(DEFAULT_MODEL.decoder),
        "calibration_images": _calibration_digest(default_calibration_folder()),
    }


def stale_reason(bundle: Any, key: Dict[str, Any]) -> Optional[str]:
    """Why a cached default bundle differs from what building the default now gives, or None."""
    import json

    from edge_sdk.errors import ConfigError
    from edge_sdk.preprocess import InputSpec

    if (bundle.get("model") or {}).get("source_sha256") != key["model_sha256"]:
        return "it was built from another model file"
    try:
        inputs = bundle.inputs
    except (ConfigError, TypeError):
        return "its input spec is not valid"
    expected = InputSpec.from_dict(key["input"])
    if len(inputs) != 1 or inputs[0] != expected:
        if len(inputs) != 1:
            return f"it has {len(inputs)} inputs, the default model 1"
        old, new = inputs[0].to_dict(), expected.to_dict()
        changed = ", ".join(f"{k} {old.get(k)} → {new[k]}" for k in new if old.get(k) != new[k])
        return f"its input spec differs from the default model's: {changed}"
    if bundle.decoder != key["decoder"]:
        return f"its decoder settings {bundle.decoder} differ from the default model's {key['decoder']}"
    if "int8" in bundle.variants() and key["calibration_images"] is not None:
        try:
            record = json.loads(build_record(bundle.root).read_text())
        except (OSError, ValueError):
            record = None
        if not isinstance(record, dict) or record.get("calibration_images") != key["calibration_images"]:
            return "its INT8 variant was calibrated on other images than today's default calibration set"
    return None


def ensure_default_bundle(precision: str, root: Optional[Path] = None, echo: Any = None) -> Path:
    """The embedded default bundle, built on first use into the user cache and reused after.

    A cached bundle is reused only while it is current: it passes its checks, has the requested
    precision (with "auto", any: auto picks among the variants the bundle holds), and was built
    from what defines the default today (model file, input spec, decoder settings, calibration
    images: :func:`default_build_key`); otherwise it is built again, with every variant unless
    fp32 alone was asked for.
    Building needs the host extra (onnx); without it the error says how to get a bundle.
    """
    from edge_sdk import _imports
    from edge_sdk.errors import BundleError
    from edge_sdk.fsutil import atomic_write_json
    from edge_sdk.manifest import Bundle

    root = Path(root) if root is not None else default_bundle_dir()
    key = default_build_key()
    reason = None
    if (root / "manifest.json").is_file():
        try:
            bundle = Bundle.load(root)
        except BundleError:
            bundle, reason = None, "it fails its checks"
        if bundle is not None:
            reason = stale_reason(bundle, key)
            if reason is None and (precision == AUTO or precision in bundle.variants()):
                return root
    if not _imports.available("onnx"):
        raise BundleError(
            "no --bundle given, and this machine cannot build the default bundle: the builder needs the host extra "
            "(pip install \"edge-sdk[host]\"). Or build one on a host with `edge-sdk build --out bundle`, "
            "copy the folder here and run `edge-sdk detect SOURCE --bundle bundle`"
        )
    from edge_sdk.builder.pipeline import build
    from edge_sdk.builder.project import BuildConfig

    if echo is not None:
        if reason is not None:
            echo(f"the cached default bundle in {root} is out of date ({reason}); building it again")
        echo(f"building the default bundle (CenterFace, {precision}) into {root}; later runs reuse it")
    build(BuildConfig(model=None, target="host", out=root, precision="fp32" if precision == "fp32" else "best"))
    try:
        atomic_write_json(build_record(root), key)
    except OSError as exc:
        raise BundleError(f"cannot write {build_record(root)} ({exc}); free space or fix permissions on {root.parent}") from exc
    return root
