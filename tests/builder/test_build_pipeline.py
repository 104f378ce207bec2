"""Pipeline helpers: the deterministic calibration split and input-spec resolution."""
from __future__ import annotations

from pathlib import Path

import pytest
from detector_factory import make_detector

from edge_sdk.builder.pipeline import list_images, resolve_input_spec, split_images
from edge_sdk.builder.project import BuildConfig
from edge_sdk.errors import CalibrationError, ConfigError
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


def test_default_spec_with_overrides() -> None:
    default = InputSpec(name="input.1", shape=[1, 3, 384, 640])
    spec = resolve_input_spec(BuildConfig(input_size=(320, 192), color="RGB", mean=[1.0] * 3), make_detector(), default)
    assert (spec.name, spec.shape, spec.color, spec.mean, spec.scale) == ("input.1", [1, 3, 192, 320], "RGB", [1.0] * 3, [1.0] * 3)


def test_dummy_dims_are_used_when_nothing_else_is_given() -> None:
    spec = resolve_input_spec(BuildConfig(), make_detector(dummy_dims=(1, 3, 64, 96)), None)
    assert spec.shape == [1, 3, 64, 96]


def test_dynamic_dims_need_an_input_size() -> None:
    model = make_detector()
    dim = model.graph.input[0].type.tensor_type.shape.dim[2]
    dim.Clear()
    dim.dim_param = "height"
    with pytest.raises(ConfigError, match="--input-size"):
        resolve_input_spec(BuildConfig(), model, None)
