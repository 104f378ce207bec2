"""Build configuration: one typed object made from `edge.toml` plus command-line overrides.

```toml
model = "models/detector.onnx"      # relative paths are relative to edge.toml
labels = "coco.yaml"                # class names: one per line, or a dataset YAML's `names` (default: the model's metadata)

[input]
name = "images"
size = "640x384"                    # WIDTHxHEIGHT (or [640, 384])
color = "RGB"                       # BGR | RGB
mean = [0, 0, 0]                    # the network sees (pixel - mean) * scale
scale = [0.0039216, 0.0039216, 0.0039216]
resize = "letterbox"                # letterbox | stretch
placement = "center"                # where a letterboxed frame lies: center | top-left (padded right and bottom)
pad_value = 114                     # grey level of the letterbox padding, 0..255
interpolation = "linear"            # linear (cv2.INTER_LINEAR, as blobFromImage) | area (INTER_AREA when shrinking)

[decoder]
type = "centerface"
score_threshold = 0.5

[build]
target = "xavier-nx"
precision = "best"                  # fp32 | fp16 | int8 | best
calib = "calib_images"
calib_method = "minmax"             # minmax | entropy | percentile | mse (per-tensor MSE-optimal range)
equalize = true                     # cross-layer equalization of the FP32 graph before INT8 calibration
min_f1 = 0.97
holdout_fraction = 0.25             # images for the gate (and as many for the fallback search)
search_margin = 0.01                # the fallback search aims at min_f1 + this on its own images
probe = true                        # try other channel orders and pixel ranges on a few images; warn if one fits better
max_batch = 1                       # the variants take batches of 1..max_batch (checked row by row at max_batch)
opt_batch = 1                       # the batch `edge-sdk engine` tunes for (default: max_batch)
```
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from edge_sdk.errors import ConfigError
from edge_sdk.manifest_check import MAX_BATCH
from edge_sdk.fsutil import read_toml
from edge_sdk.precision import BEST, BUILD_PRECISIONS
from edge_sdk.preprocess import COLORS, PLACEMENTS

PROJECT_FILE = "edge.toml"
CALIB_METHODS = ("entropy", "minmax", "percentile", "mse")
FALLBACK_MODES = ("auto", "off")
DEFAULT_CALIB_METHOD = "minmax"  # measured: bench/bench_calibration.py --accuracy


@dataclass
class BuildConfig:
    """Everything `edge-sdk build` needs. `model=None` means the embedded default model;
    `calib=None` the repository's default calibration images. Input fields left None take
    the model's own defaults (the embedded model's spec, or the graph's input)."""

    model: Optional[Path] = None
    target: str = "xavier-nx"
    out: Path = Path("bundle")
    precision: str = "best"
    calib: Optional[Path] = None
    calib_method: str = DEFAULT_CALIB_METHOD
    percentile: float = 99.99
    input_name: Optional[str] = None
    input_size: Optional[Tuple[int, int]] = None  # (width, height)
    mean: Optional[List[float]] = None
    scale: Optional[List[float]] = None
    color: Optional[str] = None
    resize: Optional[str] = None
    interpolation: Optional[str] = None
    placement: Optional[str] = None
    pad_value: Optional[int] = None
    decoder: Optional[Dict[str, Any]] = None
    labels: Optional[Path] = None  # class names file (edge_sdk.labels.read_labels_file); None: decoder.labels or the model's metadata
    dla_core: Optional[int] = None
    workspace_mib: int = 2048
    timing_cache: Optional[Path] = None
    min_f1: float = 0.97
    allow_accuracy_loss: bool = False
    int8_fallback: str = "auto"
    max_calib_images: int = 256
    holdout_fraction: float = 0.25  # of the images go to the gate, as many to the fallback search
    search_margin: float = 0.01  # the fallback search aims at min_f1 + search_margin on its own images
    probe: bool = True  # the preprocessing probe (edge_sdk.builder.probe): never changes the input spec
    force_preprocessing: bool = False  # build even when the probe finds the configured preprocessing makes noise
    equalize: bool = True  # cross-layer equalization before INT8 (edge_sdk.builder.equalize); exact in FP32
    max_batch: int = 1  # the variants take 1..max_batch inputs at a time (edge_sdk.builder.batch); 1: a fixed batch of 1
    opt_batch: Optional[int] = None  # the batch the engine is tuned for; None: max_batch
    min_holdout: int = 4
    min_calib_images: int = 8
    calib_tensors_kept: int = 16  # shipped for re-calibration on the device (uint8 npz, ~0.5 MB each at 640x384)
    coverage_warn: float = 0.01
    source: str = "command line"
    # field → where its value came from ("flag: --color", "edge.toml: PATH"); fields not named took
    # no value from the configuration (edge_sdk.builder.presets.Provenance records the rest)
    origins: Dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        where = f" (from {self.source})" if self.source != "command line" else ""
        if self.precision not in BUILD_PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(BUILD_PRECISIONS)}, got {self.precision!r}{where}")
        if self.calib_method not in CALIB_METHODS:
            raise ConfigError(f"calib_method must be one of {', '.join(CALIB_METHODS)}, got {self.calib_method!r}{where}")
        if self.int8_fallback not in FALLBACK_MODES:
            raise ConfigError(f"int8_fallback must be auto or off, got {self.int8_fallback!r}{where}")
        if not 0.0 <= self.min_f1 <= 1.0:
            raise ConfigError(f"min_f1 must be between 0 and 1, got {self.min_f1}{where}")
        if not 0.0 < self.holdout_fraction <= 0.34:
            raise ConfigError(f"holdout_fraction must be in (0, 0.34] (as many images again go to the fallback search), "
                              f"got {self.holdout_fraction}{where}")
        if not 0.0 <= self.search_margin <= 0.1:
            raise ConfigError(f"search_margin must be between 0 and 0.1, got {self.search_margin}{where}")
        if not 0.0 < self.percentile <= 100.0:
            raise ConfigError(f"percentile must be in (0, 100], got {self.percentile}{where}")
        if self.max_calib_images < self.min_calib_images:
            raise ConfigError(f"max_calib_images must be at least {self.min_calib_images}, got {self.max_calib_images}{where}")
        if self.dla_core is not None and self.dla_core < 0:
            raise ConfigError(f"dla_core must be 0 or more, got {self.dla_core}{where}")
        if self.workspace_mib <= 0:
            raise ConfigError(f"workspace must be a positive number of MiB, got {self.workspace_mib}{where}")
        for key in ("max_batch", "opt_batch"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BATCH):
                raise ConfigError(f"{key} must be a batch size 1..{MAX_BATCH}, got {value!r}{where}")
        if self.opt_batch is not None and self.opt_batch > self.max_batch:
            raise ConfigError(f"opt_batch {self.opt_batch} is larger than max_batch {self.max_batch}{where}: the engine is "
                              "tuned for a batch within 1..max_batch. Lower --opt-batch or raise --max-batch")
        if self.input_size is not None and (len(self.input_size) != 2 or min(self.input_size) <= 0):
            raise ConfigError(f"input size must be WIDTHxHEIGHT with positive sizes, got {self.input_size}{where}")
        if self.color is not None and self.color not in COLORS:
            raise ConfigError(f"[input] color must be {' or '.join(COLORS)}, got {self.color!r}{where}")
        if self.placement is not None and self.placement not in PLACEMENTS:
            raise ConfigError(f"[input] placement must be {' or '.join(PLACEMENTS)}, got {self.placement!r}{where}")
        if self.pad_value is not None and (isinstance(self.pad_value, bool) or not isinstance(self.pad_value, int)
                                           or not 0 <= self.pad_value <= 255):
            raise ConfigError(f"[input] pad_value must be a grey level 0..255 (an integer), got {self.pad_value!r}{where}")

    @property
    def needs_int8(self) -> bool:
        return self.precision in ("int8", BEST)

    @property
    def preferred_batch(self) -> int:
        """The batch the engine is tuned for: opt_batch, else max_batch."""
        return self.max_batch if self.opt_batch is None else self.opt_batch


def parse_size(value: Any, key: str = "input size", source: str = "command line") -> Tuple[int, int]:
    """'640x384' or [640, 384] → (640, 384)."""
    try:
        if isinstance(value, str):
            w, h = value.lower().replace("×", "x").split("x")
            size = (int(w), int(h))
        else:
            w, h = value
            size = (int(w), int(h))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key} must be WIDTHxHEIGHT such as 640x384, got {value!r} (from {source})") from exc
    if min(size) <= 0:
        raise ConfigError(f"{key} must be positive, got {value!r} (from {source})")
    return size


def parse_floats(value: Any, key: str, source: str = "command line") -> List[float]:
    """'0,0,0' / '127.5' / [0, 0, 0] → list of floats (one value is repeated per channel)."""
    try:
        if isinstance(value, str):
            items = [float(v) for v in value.replace(" ", "").split(",") if v]
        elif isinstance(value, (int, float)):
            items = [float(value)]
        else:
            items = [float(v) for v in value]
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key} must be one number or three comma-separated numbers, got {value!r} (from {source})") from exc
    if len(items) == 1:
        items = items * 3
    if len(items) != 3:
        raise ConfigError(f"{key} must have 1 or 3 values, got {len(items)} (from {source})")
    return items


_TOP_KEYS = {"model", "labels", "input", "decoder", "build"}
_INPUT_KEYS = {"name": "input_name", "size": "input_size", "mean": "mean", "scale": "scale", "color": "color", "resize": "resize",
               "interpolation": "interpolation", "placement": "placement", "pad_value": "pad_value"}
_BUILD_KEYS = {
    "target", "out", "precision", "calib", "calib_method", "percentile", "dla_core", "workspace_mib",
    "timing_cache", "min_f1", "allow_accuracy_loss", "int8_fallback", "max_calib_images", "holdout_fraction",
    "search_margin", "probe", "equalize", "max_batch", "opt_batch",
}
_PATH_KEYS = {"model", "labels", "out", "calib", "timing_cache"}
# BuildConfig fields whose `edge-sdk build` option is not --<field with dashes>
_FLAGS = {"workspace_mib": "--workspace", "model": "MODEL", "probe": "--no-probe", "equalize": "--no-equalize"}


def read_project(path: Path) -> Dict[str, Any]:
    """Flatten an edge.toml into BuildConfig field values; ConfigError naming key and file."""
    path = Path(path)
    raw = read_toml(path)
    src = str(path)
    values: Dict[str, Any] = {}
    for key in raw:
        if key not in _TOP_KEYS:
            raise ConfigError(f"unknown key {key!r} in {src}; expected one of {', '.join(sorted(_TOP_KEYS))}")
    if "model" in raw:
        if not isinstance(raw["model"], str):
            raise ConfigError(f"'model' in {src} must be a path string")
        values["model"] = raw["model"]
    if "labels" in raw:
        if not isinstance(raw["labels"], str):
            raise ConfigError(f"'labels' in {src} must be the path of a labels file")
        values["labels"] = raw["labels"]
    for section in ("input", "decoder", "build"):
        if section in raw and not isinstance(raw[section], dict):
            raise ConfigError(f"[{section}] in {src} must be a table")
    for key, value in raw.get("input", {}).items():
        if key not in _INPUT_KEYS:
            raise ConfigError(f"unknown key 'input.{key}' in {src}; expected one of {', '.join(sorted(_INPUT_KEYS))}")
        values[_INPUT_KEYS[key]] = value
    if "decoder" in raw:
        if "type" not in raw["decoder"]:
            raise ConfigError(f"[decoder] in {src} needs a 'type' (e.g. type = \"centerface\")")
        values["decoder"] = dict(raw["decoder"])
    for key, value in raw.get("build", {}).items():
        if key not in _BUILD_KEYS:
            raise ConfigError(f"unknown key 'build.{key}' in {src}; expected one of {', '.join(sorted(_BUILD_KEYS))}")
        values[key] = value
    base = path.parent
    for key in _PATH_KEYS & set(values):
        p = Path(str(values[key])).expanduser()
        values[key] = p if p.is_absolute() else base / p
    return _coerce(values, src)


def _coerce(values: Dict[str, Any], source: str) -> Dict[str, Any]:
    out = dict(values)
    if out.get("input_size") is not None:
        out["input_size"] = parse_size(out["input_size"], "input size", source)
    for key in ("mean", "scale"):
        if out.get(key) is not None:
            out[key] = parse_floats(out[key], key, source)
    if out.get("color") is not None:
        color = str(out["color"]).upper()
        if color not in COLORS:
            key = "--color" if source == "command line" else "[input] color"
            raise ConfigError(f"{key} must be {' or '.join(COLORS)} (the channel order the network expects), "
                              f"got {out['color']!r} (from {source})")
        out["color"] = color
    for key in _PATH_KEYS:
        if out.get(key) is not None:
            out[key] = Path(out[key])
    for key in ("percentile", "min_f1", "holdout_fraction", "search_margin"):
        if key in out and not isinstance(out[key], (int, float)):
            raise ConfigError(f"{key} must be a number, got {out[key]!r} (from {source})")
    for key in ("probe", "equalize"):
        if key in out and not isinstance(out[key], bool):
            raise ConfigError(f"{key} must be true or false, got {out[key]!r} (from {source})")
    for key in ("dla_core", "workspace_mib", "max_calib_images", "max_batch", "opt_batch"):
        if key in out and out[key] is not None and not isinstance(out[key], int):
            raise ConfigError(f"{key} must be an integer, got {out[key]!r} (from {source})")
    return out


def make_config(cli: Mapping[str, Any], project_dir: Optional[Path] = None) -> BuildConfig:
    """Combine `edge.toml` (if present in `project_dir`, default the working directory) with
    command-line values; a CLI value that is not None wins."""
    project = Path(project_dir) if project_dir is not None else Path.cwd()
    toml_path = project / PROJECT_FILE
    values: Dict[str, Any] = {}
    source = "command line"
    if toml_path.is_file():
        values = read_project(toml_path)
        source = str(toml_path)
    origins = {k: f"edge.toml: {toml_path}" for k in values}
    overrides = _coerce({k: v for k, v in cli.items() if v is not None}, "command line")
    values.update(overrides)
    origins.update({k: f"flag: {_FLAGS.get(k, '--' + k.replace('_', '-'))}" for k in overrides})
    values["origins"] = origins
    unknown = set(values) - {f.name for f in fields(BuildConfig)}
    if unknown:
        raise ConfigError(f"unknown build settings: {', '.join(sorted(unknown))}")
    try:
        return BuildConfig(source=source, **values)
    except TypeError as exc:
        raise ConfigError(f"invalid build settings ({exc}) from {source}") from exc


def with_overrides(config: BuildConfig, **changes: Any) -> BuildConfig:
    return replace(config, **changes)


__all__ = ["BuildConfig", "PROJECT_FILE", "make_config", "read_project", "parse_size", "parse_floats"]
