"""The build's images: the calibration folder listed, split by name into three disjoint parts (see
:class:`ImageSplit`) and run through the runtime's own Preprocessor.

Calibration images set the INT8 ranges and rank layers by sensitivity; search images score the
FP32-fallback search (aiming at `min_f1 + search_margin`); gate images are seen only by the final
accuracy gate, so the gate's f1_vs_fp32 in the manifest and the build's table is measured on
images nothing was tuned on. An FP32 build reads no images (the preprocessing probe aside).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.builder.progress import BuildProgress
from edge_sdk.builder.project import BuildConfig
from edge_sdk.errors import CalibrationError, SourceError
from edge_sdk.geometry import Placement
from edge_sdk.preprocess import InputSpec, Preprocessor, load_image

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


def default_calib_dir() -> Path:
    """The repository's calibration images (`calibrate/images`), used when --calib is not given."""
    import edge_sdk

    return Path(edge_sdk.__file__).resolve().parents[1] / "calibrate" / "images"


def list_images(folder: Path) -> List[Path]:
    """The images in `folder` (by suffix, not recursive), sorted by name; at least one."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CalibrationError(f"calibration folder {folder} does not exist or is not a folder; pass a folder of images with --calib")
    images = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not images:
        raise CalibrationError(
            f"calibration folder {folder} has no images ({', '.join(IMAGE_SUFFIXES)}); "
            "put representative images of the deployment scene there, or pass another folder with --calib"
        )
    return images


@dataclass
class ImageSplit:
    """The calibration folder in three disjoint parts, fixed by the images' names alone.

    In name order, image i with stride k: ``i % k == 0`` → gate (the accuracy gate reports on
    these, nothing else sees them), ``i % k == k // 2`` → search (the FP32-fallback search scores
    on these), every other image → calibration (ranges and the layer ranking). Without a search
    its images join the calibration part.
    """

    calibration: List[Path]
    search: List[Path]
    gate: List[Path]
    stride: int

    def describe(self) -> str:
        search = f", i % {self.stride} == {self.stride // 2} → search" if self.search else ""
        return f"image i in name order: i % {self.stride} == 0 → gate{search}, the rest → calibration"


def split_images(images: Sequence[Path], fraction: float, minimum_holdout: int, minimum_calib: int,
                 max_calib: Optional[int] = None, search: bool = True) -> ImageSplit:
    """Deterministic split of `images` (sorted by name here) into calibration / search / gate.

    The stride is k = round(1 / fraction), so `fraction` of the images go to the gate and as many
    to the search; k shrinks (to no less than 3, or 2 without a search) when that leaves fewer
    than `minimum_holdout` gate images. `max_calib` caps the calibration part.
    """
    images = sorted(images, key=lambda p: Path(p).name)
    n = len(images)
    parts = 3 if search else 2
    need = minimum_calib + minimum_holdout * (parts - 1)
    if n < need:
        raise CalibrationError(_too_few(n, minimum_calib, minimum_holdout, search))
    k = max(parts, int(round(1.0 / fraction))) if fraction > 0 else parts
    if -(-n // k) < minimum_holdout:
        k = max(parts, n // minimum_holdout)
    gate = [p for i, p in enumerate(images) if i % k == 0]
    held = [p for i, p in enumerate(images) if search and i % k == k // 2]
    calib = [p for i, p in enumerate(images) if i % k != 0 and not (search and i % k == k // 2)]
    if len(calib) < minimum_calib or len(gate) < minimum_holdout or (search and len(held) < minimum_holdout):
        raise CalibrationError(_too_few(n, minimum_calib, minimum_holdout, search))
    if max_calib is not None:
        calib = calib[:max_calib]
    return ImageSplit(calib, held, gate, k)


def _too_few(n: int, calib: int, holdout: int, search: bool) -> str:
    parts = f"{calib} to calibrate, " + (f"{holdout} for the FP32-fallback search, " if search else "") + f"{holdout} for the accuracy gate"
    need = calib + holdout * (2 if search else 1)
    return f"too few calibration images: {n}; need at least {need} ({parts}). Add images to the --calib folder"


def preprocess_images(paths: Sequence[Path], spec: InputSpec, advance: Callable[[int], None]) -> Tuple[List[np.ndarray], List[Placement]]:
    """Each image through the runtime's own Preprocessor; returns owned (1,3,H,W) copies."""
    pre = Preprocessor(spec, batch=1)
    tensors, transforms = [], []
    for path in paths:
        try:
            frame = load_image(str(path))
        except SourceError as exc:
            raise CalibrationError(f"{exc}; remove it from the calibration folder") from exc
        tensor, transform = pre(frame)
        tensors.append(tensor.copy())
        transforms.append(transform)
        advance(1)
    return tensors, transforms


@dataclass
class BuildImages:
    """A build's images, split and preprocessed (see :func:`load_images`)."""

    folder: Path
    split: ImageSplit
    gate: List[np.ndarray]
    gate_transforms: List[Placement]
    # Only an INT8 build preprocesses these; without a search the search part is empty.
    calibration: List[np.ndarray] = field(default_factory=list)
    search: List[np.ndarray] = field(default_factory=list)
    search_transforms: List[Placement] = field(default_factory=list)


def load_images(config: BuildConfig, spec: InputSpec, progress: BuildProgress) -> Optional[BuildImages]:
    """The calibration folder (--calib, else :func:`default_calib_dir`) split and preprocessed for
    `spec`; None in an FP32 build. A folder with too few images, or an image that cannot be read,
    fails with a :class:`~edge_sdk.errors.CalibrationError` that names the fix."""
    if config.precision == "fp32":
        return None
    folder = Path(config.calib) if config.calib is not None else default_calib_dir()
    if config.calib is None and not folder.is_dir():
        raise CalibrationError(f"the default calibration images ({folder}) are missing; pass a folder of images with --calib")
    searching = config.needs_int8 and config.int8_fallback == "auto"
    split = split_images(list_images(folder), config.holdout_fraction, config.min_holdout,
                         config.min_calib_images, config.max_calib_images, search=searching)
    # an FP16 build preprocesses the gate images only: the bar counts what is done
    total = len(split.gate) + (len(split.calibration) + len(split.search) if config.needs_int8 else 0)
    with progress.task("preprocess", total) as advance:
        gate, gate_transforms = preprocess_images(split.gate, spec, advance)
        images = BuildImages(folder, split, gate, gate_transforms)
        if config.needs_int8:
            images.calibration, _ = preprocess_images(split.calibration, spec, advance)
            images.search, images.search_transforms = preprocess_images(split.search, spec, advance)
    searched = f", {len(split.search)} for the FP32-fallback search" if split.search else ""
    progress.info(f"images: {len(split.calibration)} for calibration{searched}, {len(split.gate)} held back for the "
                  f"accuracy gate ({folder})")
    return images


def probe_images(config: BuildConfig, images: Optional[BuildImages]) -> List[Path]:
    """The images the preprocessing probe may use: the search part, or the calibration part when
    the build has no search, or the calibration folder in an FP32 build; never gate images."""
    if images is not None:
        return images.split.search or images.split.calibration
    folder = Path(config.calib) if config.calib is not None else default_calib_dir()
    return list_images(folder) if config.calib is not None or folder.is_dir() else []
