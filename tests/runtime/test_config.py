"""The pipeline config: TOML loading, overrides, and errors that name the key and the file."""
from __future__ import annotations

from pathlib import Path

import pytest

from edge_sdk.errors import ConfigError
from edge_sdk.runtime.config import PipelineConfig, SourceConfig, config_from_dict, load_config

GOOD = """
bundle = "my-bundle"
precision = "fp16"
backend = "onnxruntime-cpu"
threads = 2
max_frames = 10

[source]
uri = "csi://0"
fps = 15
options = { width = 1280, height = 720 }

[cache]
enabled = false
threshold = 2.5

[reconnect]
max_attempts = 0
"""


def test_load_full_config(tmp_path: Path) -> None:
    path = tmp_path / "edge.toml"
    path.write_text(GOOD)
    cfg = load_config(path)
    assert cfg.bundle == str(tmp_path / "my-bundle")
    assert (cfg.precision, cfg.backend, cfg.threads, cfg.max_frames) == ("fp16", "onnxruntime-cpu", 2, 10)
    assert cfg.source == SourceConfig(uri="csi://0", loop=False, fps=15, options={"width": 1280, "height": 720})
    assert cfg.cache.enabled is False and cfg.cache.threshold == 2.5
    assert cfg.reconnect.max_attempts == 0 and cfg.reconnect.max_s == 8.0


def test_overrides_win(tmp_path: Path) -> None:
    path = tmp_path / "edge.toml"
    path.write_text(GOOD)
    cfg = load_config(path, {"precision": "int8", "source": {"uri": "clip.mp4"}, "bundle": "/abs/b"})
    assert cfg.precision == "int8" and cfg.source.uri == "clip.mp4" and cfg.source.fps == 15 and cfg.bundle == "/abs/b"


@pytest.mark.parametrize(
    "text, message",
    [
        ('precision = "fp8"', r"precision must be one of auto, fp32, fp16, int8, got 'fp8'"),
        ('precision = "best"', r"precision must be one of auto, fp32, fp16, int8, got 'best'"),  # a build choice only
        ('backend = "cuda"', r"backend must be one of auto, onnxruntime, onnxruntime-cpu, onnxruntime-cuda, "
                             r"onnxruntime-tensorrt, tensorrt, got 'cuda'"),
        ("threads = -1", r"threads must be an integer in \[0, 1024\], got -1"),
        ("thread = 2", r"unknown key\(s\) thread; known keys: source, bundle"),
        ("[cache]\nthreshhold = 2", r"unknown key\(s\) cache.threshhold; known keys in \[cache\]: enabled"),
        ('[source]\nfps = "fast"', r"source.fps must be a number in \[0, 1000\], got 'fast'"),
        ('[cache]\nenabled = "yes"', r"cache.enabled must be true or false"),
        ("pool_size = 2", r"pool_size must be an integer in \[3, 64\], got 2"),
        ('mode = "magic"', r"mode must be one of full, tiles, roi"),
        ("source = 3", r"source must be a table, got 3"),
        ("precision = ", r"not valid TOML"),
    ],
)
def test_errors_name_the_key_and_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_precision_defaults_to_auto(tmp_path: Path) -> None:
    """Unset, the backend picks the variant (choose_precision); in code, from a file, and from
    the command line alike."""
    path = tmp_path / "edge.toml"
    path.write_text('bundle = "b"\n')
    assert PipelineConfig().precision == "auto"
    assert load_config(path).precision == "auto"
    assert config_from_dict({}, origin="command line").precision == "auto"
    assert config_from_dict({"precision": "auto"}).precision == "auto"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "none.toml")


def test_config_in_code_is_validated_by_validate() -> None:
    with pytest.raises(ConfigError, match="command line: backend"):
        config_from_dict({"backend": "gpu"}, origin="command line")
    with pytest.raises(ConfigError, match="max_frames"):
        PipelineConfig(max_frames=-5).validate()
