"""edge.toml plus command-line overrides → one validated BuildConfig."""
from __future__ import annotations

from pathlib import Path

import pytest

from edge_sdk.builder.project import BuildConfig, make_config, parse_floats, parse_size, read_project
from edge_sdk.errors import ConfigError

pytestmark = pytest.mark.host

TOML = """
model = "models/det.onnx"

[input]
name = "images"
size = "640x480"
color = "rgb"
mean = 0
scale = [0.5, 0.5, 0.5]

[decoder]
type = "yolov8"
score_threshold = 0.3

[build]
target = "orin-nx"
precision = "fp16"
calib = "imgs"
min_f1 = 0.9
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "edge.toml").write_text(text)
    return tmp_path


def test_project_file_values_with_paths_relative_to_it(tmp_path: Path) -> None:
    config = make_config({}, write(tmp_path, TOML))
    assert config.model == tmp_path / "models/det.onnx"
    assert config.calib == tmp_path / "imgs"
    assert (config.input_name, config.input_size, config.color) == ("images", (640, 480), "RGB")
    assert (config.mean, config.scale) == ([0.0] * 3, [0.5] * 3)
    assert config.decoder == {"type": "yolov8", "score_threshold": 0.3}
    assert (config.target, config.precision, config.min_f1) == ("orin-nx", "fp16", 0.9)
    assert config.source.endswith("edge.toml")


def test_command_line_overrides_the_file(tmp_path: Path) -> None:
    config = make_config({"precision": "int8", "input_size": "320x320", "target": None}, write(tmp_path, TOML))
    assert (config.precision, config.input_size, config.target) == ("int8", (320, 320), "orin-nx")


def test_no_project_file_gives_defaults(tmp_path: Path) -> None:
    config = make_config({}, tmp_path)
    assert config == BuildConfig()
    assert (config.model, config.target, config.precision, config.min_f1) == (None, "xavier-nx", "best", 0.97)


@pytest.mark.parametrize(
    "text, message",
    [
        ("modle = 'x.onnx'\n", r"unknown key 'modle'.*edge\.toml"),
        ("[input]\nsise = '1x1'\n", r"unknown key 'input\.sise'"),
        ("[build]\nprecision = 'int4'\n", r"precision must be one of.*edge\.toml"),
        ("[build]\ncalib_method = 'kl'\n", r"calib_method must be one of"),
        ("[input]\nsize = 'big'\n", r"WIDTHxHEIGHT.*edge\.toml"),
        ("[decoder]\nscore_threshold = 0.3\n", r"\[decoder\].*needs a 'type'"),
        ("model = [", r"not valid TOML"),
        ("[build]\ndla_core = 'zero'\n", r"dla_core must be an integer"),
        ("[build]\nsearch_margin = 0.5\n", r"search_margin must be between 0 and 0\.1.*edge\.toml"),
        ("[build]\nsearch_margin = 'wide'\n", r"search_margin must be a number"),
        ("[build]\nholdout_fraction = 0.5\n", r"holdout_fraction must be in \(0, 0\.34\]"),
    ],
)
def test_bad_project_file_names_key_and_file(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_config({}, write(tmp_path, text))


@pytest.mark.parametrize(
    "value, expected",
    [("640x384", (640, 384)), ("640X384", (640, 384)), ([320, 240], (320, 240))],
)
def test_parse_size(value, expected) -> None:
    assert parse_size(value) == expected


@pytest.mark.parametrize("value", ["640", "0x10", "axb", [1, 2, 3]])
def test_parse_size_rejects(value) -> None:
    with pytest.raises(ConfigError):
        parse_size(value)


@pytest.mark.parametrize(
    "value, expected",
    [("127.5", [127.5] * 3), ("1,2,3", [1.0, 2.0, 3.0]), (0, [0.0] * 3), ([0.1, 0.2, 0.3], [0.1, 0.2, 0.3])],
)
def test_parse_floats(value, expected) -> None:
    assert parse_floats(value, "mean") == expected


def test_parse_floats_rejects_two_values() -> None:
    with pytest.raises(ConfigError, match="mean must have 1 or 3 values"):
        parse_floats("1,2", "mean")


def test_search_margin_comes_from_the_project_file(tmp_path: Path) -> None:
    config = make_config({}, write(tmp_path, "[build]\nsearch_margin = 0.02\nholdout_fraction = 0.2\n"))
    assert (config.search_margin, config.holdout_fraction) == (0.02, 0.2)
    assert BuildConfig().search_margin == 0.01


def test_read_project_alone(tmp_path: Path) -> None:
    values = read_project(write(tmp_path, TOML) / "edge.toml")
    assert values["precision"] == "fp16" and values["input_size"] == (640, 480)
