"""The build's images: the deterministic three-way split by name, and the folder split and
preprocessed for each kind of build (which image lands in which part, told by its colour)."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterator, List

import cv2
import numpy as np
import pytest

from edge_sdk.builder import images as images_mod
from edge_sdk.builder.images import BuildImages, list_images, load_images, probe_images, split_images
from edge_sdk.builder.progress import BuildProgress
from edge_sdk.builder.project import BuildConfig
from edge_sdk.errors import CalibrationError
from edge_sdk.preprocess import InputSpec

pytestmark = pytest.mark.host


def names(n: int):
    return [Path(f"{i:03d}.jpg") for i in range(n)]


@pytest.mark.parametrize(
    "n, search, sizes",
    [
        # n images, with a search part?, (calibration, search, gate)
        (56, True, (28, 14, 14)),
        (48, True, (24, 12, 12)),
        (16, True, (8, 4, 4)),
        (17, True, (8, 4, 5)),
        (16, False, (12, 0, 4)),
        (12, False, (8, 0, 4)),
        (13, False, (9, 0, 4)),
    ],
)
def test_split_is_deterministic_and_disjoint(n: int, search: bool, sizes) -> None:
    s1 = split_images(names(n), 0.25, 4, 8, search=search)
    s2 = split_images(list(reversed(names(n))), 0.25, 4, 8, search=search)  # order given does not matter
    assert (s1.calibration, s1.search, s1.gate) == (s2.calibration, s2.search, s2.gate)
    assert (len(s1.calibration), len(s1.search), len(s1.gate)) == sizes
    parts = [set(s1.calibration), set(s1.search), set(s1.gate)]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    assert set.union(*parts) == set(names(n))
    k = s1.stride
    assert k == (3 if n == 12 else 4)  # 12 images: stride 3 keeps 4 for the gate
    assert s1.gate[0] == Path("000.jpg") and all(int(p.stem) % k == 0 for p in s1.gate)  # every k-th by name
    assert all(int(p.stem) % k == k // 2 for p in s1.search)


def test_split_shrinks_the_stride_to_keep_enough_gate_images() -> None:
    split = split_images(names(20), 0.1, 4, 8)
    assert split.stride == 5 and (len(split.calibration), len(split.search), len(split.gate)) == (12, 4, 4)
    assert split.describe() == "image i in name order: i % 5 == 0 → gate, i % 5 == 2 → search, the rest → calibration"


def test_split_caps_the_calibration_part() -> None:
    split = split_images(names(48), 0.25, 4, 8, max_calib=10)
    assert (len(split.calibration), len(split.search), len(split.gate)) == (10, 12, 12)


@pytest.mark.parametrize(
    "n, search, message",
    [
        (15, True, "too few calibration images: 15; need at least 16 \\(8 to calibrate, 4 for the FP32-fallback search, 4 for"),
        (11, False, "too few calibration images: 11; need at least 12 \\(8 to calibrate, 4 for the accuracy gate\\)"),
    ],
)
def test_too_few_images(n: int, search: bool, message: str) -> None:
    with pytest.raises(CalibrationError, match=message):
        split_images(names(n), 0.25, 4, 8, search=search)


def test_list_images_ignores_other_files(tmp_path: Path) -> None:
    for name in ("b.png", "a.JPG", "notes.txt", "c.jpeg"):
        (tmp_path / name).write_bytes(b"x")
    assert [p.name for p in list_images(tmp_path)] == ["a.JPG", "b.png", "c.jpeg"]


# --- the folder split and preprocessed -------------------------------------------------------

# BGR network input of 6x10, raw pixels: each tensor's channels are its image's colour.
SPEC = InputSpec(name="x", shape=[1, 3, 6, 10], color="BGR", resize="stretch")


def colour_of(i: int) -> List[int]:
    """A BGR colour of its own for image i, every channel different."""
    return [10 + 7 * i, 250 - 11 * i, 40 + 13 * i]


def coloured_folder(folder: Path, count: int) -> Path:
    """`count` flat colour images of an odd size (37x53), named 000.png...; image i is colour_of(i)."""
    folder.mkdir(parents=True)
    for i in range(count):
        cv2.imwrite(str(folder / f"{i:03d}.png"), np.full((37, 53, 3), colour_of(i), np.uint8))
    return folder


def indices(tensors: List[np.ndarray]) -> List[int]:
    """Which image each (1,3,H,W) tensor came from, read back from its colour."""
    known = {tuple(colour_of(i)): i for i in range(64)}
    found = []
    for t in tensors:
        assert t.shape == (1, 3, 6, 10)
        bgr = tuple(int(v) for v in t[0, :, 3, 5])
        assert (t == np.array(bgr, np.float32).reshape(1, 3, 1, 1)).all()  # flat: one image per tensor
        found.append(known[bgr])
    return found


def load(tmp_path: Path, **config) -> BuildImages:
    folder = coloured_folder(tmp_path / "calib", 16)
    images = load_images(BuildConfig(calib=folder, **config), SPEC, BuildProgress(quiet=True))
    assert images is not None and images.folder == folder
    return images


def test_int8_build_preprocesses_each_part_from_its_own_images(tmp_path: Path) -> None:
    images = load(tmp_path, precision="int8")
    # 16 images, stride 4: i % 4 == 0 → gate, i % 4 == 2 → search, the rest → calibration
    assert indices(images.gate) == [0, 4, 8, 12]
    assert indices(images.search) == [2, 6, 10, 14]
    assert indices(images.calibration) == [1, 3, 5, 7, 9, 11, 13, 15]
    assert [p.name for p in images.split.gate] == ["000.png", "004.png", "008.png", "012.png"]
    assert len(images.gate_transforms) == 4 and len(images.search_transforms) == 4


def test_without_the_fallback_search_its_images_calibrate(tmp_path: Path) -> None:
    images = load(tmp_path, precision="best", int8_fallback="off")
    assert indices(images.gate) == [0, 4, 8, 12]
    assert images.search == [] and images.split.search == []
    assert indices(images.calibration) == [i for i in range(16) if i % 4]


def test_fp16_build_preprocesses_only_the_gate_images(tmp_path: Path) -> None:
    images = load(tmp_path, precision="fp16")
    assert indices(images.gate) == [0, 4, 8, 12]
    assert images.calibration == [] and images.search == []


def test_fp32_build_reads_no_images(tmp_path: Path) -> None:
    assert load_images(BuildConfig(precision="fp32", calib=tmp_path / "missing"), SPEC, BuildProgress(quiet=True)) is None


def test_missing_default_images_name_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images_mod, "default_calib_dir", lambda: tmp_path / "gone")
    with pytest.raises(CalibrationError, match="default calibration images .*gone.* are missing; pass a folder of images with --calib"):
        load_images(BuildConfig(precision="int8"), SPEC, BuildProgress(quiet=True))


def test_probe_never_sees_gate_images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    searched = load(tmp_path / "a", precision="int8")
    assert probe_images(BuildConfig(), searched) == searched.split.search
    unsearched = load(tmp_path / "b", precision="fp16")
    assert probe_images(BuildConfig(), unsearched) == unsearched.split.calibration
    assert not set(probe_images(BuildConfig(), unsearched)) & set(unsearched.split.gate)
    # an FP32 build: the whole --calib folder, or nothing when the default folder is missing
    folder = coloured_folder(tmp_path / "c", 3)
    assert probe_images(BuildConfig(precision="fp32", calib=folder), None) == list_images(folder)
    monkeypatch.setattr(images_mod, "default_calib_dir", lambda: tmp_path / "gone")
    assert probe_images(BuildConfig(precision="fp32"), None) == []


class CountingProgress(BuildProgress):
    """Quiet, but keeps each task's total and how far it was advanced."""

    def __init__(self) -> None:
        super().__init__(quiet=True)
        self.bars: List[List[int]] = []

    @contextlib.contextmanager
    def task(self, description: str, total: int) -> Iterator[Callable[[int], None]]:
        bar = [total, 0]
        self.bars.append(bar)

        def advance(n: int = 1) -> None:
            bar[1] += n

        yield advance


@pytest.mark.parametrize("precision", ["fp16", "int8", "best"])
def test_the_preprocess_bar_ends_full(tmp_path: Path, precision: str) -> None:
    progress = CountingProgress()
    load_images(BuildConfig(calib=coloured_folder(tmp_path / "calib", 16), precision=precision), SPEC, progress)
    assert [total for total, _ in progress.bars] == [done for _, done in progress.bars]
    assert progress.bars[0][0] == (4 if precision == "fp16" else 16)
