"""The runtime's one typed configuration object, built from a TOML file plus overrides.

```toml
bundle = "bundle"          # folder written by `edge-sdk build`
precision = "auto"         # auto (TensorRT: the bundle's gated choice; ONNX Runtime CPU: fp32) | fp32 | fp16 | int8
backend = "auto"           # auto | onnxruntime | onnxruntime-cpu | onnxruntime-cuda | onnxruntime-tensorrt | tensorrt
threads = 2                # ONNX Runtime intra-op threads (0 = ONNX Runtime's default)
max_frames = 0             # 0 = until the source ends
mode = "full"              # per-frame detection strategy: full | tiles | roi
capture_nice = 10          # capture thread priority below inference (0..19); > 0 with a CPU backend: SCHED_IDLE

[source]
uri = "csi://0"
loop = false
fps = 0                    # pace file/folder/synthetic sources; 0 = as fast as possible
options = { width = 1920, height = 1080, framerate = 30, flip = 0 }

[cache]
enabled = true             # used in mode "full" only: a thumbnail cannot see small objects move
threshold = 4.0            # largest grey-level change of any pixel of a 64x36 thumbnail

[roi]                      # parameters of modes "tiles" and "roi" (edge_sdk.roi.strategies.RoiConfig)
sweep_tiles = 2

[reconnect]
initial_s = 0.5
max_s = 8.0
max_attempts = 30          # 0 = keep trying forever
```

Validation happens once, at the edge (`load_config`, `config_from_dict`, or `Pipeline` calling
`validate()` on a config built in code); errors name the key and the file.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

from edge_sdk.errors import ConfigError
from edge_sdk.fsutil import read_toml
from edge_sdk.precision import AUTO, RUNTIME_PRECISIONS
from edge_sdk.roi.config import MODES, RoiConfig
from edge_sdk.runtime.backends import BACKEND_NAMES
from edge_sdk.validate import require_finite

PREPROCESS_PLACEMENTS = ("auto", "capture", "inline")


@dataclass
class SourceConfig:
    uri: str = ""
    loop: bool = False
    fps: float = 0.0  # target rate for file/folder/synthetic sources; 0 = unpaced
    options: Dict[str, Any] = field(default_factory=dict)  # scheme-specific: width, height, framerate, flip, latency...


@dataclass
class CacheConfig:
    enabled: bool = True
    threshold: float = 4.0  # largest |difference| in grey levels (0..255) of any thumbnail pixel
    width: int = 64
    height: int = 36


@dataclass
class ReconnectConfig:
    initial_s: float = 0.5
    max_s: float = 8.0
    max_attempts: int = 30  # 0 = forever


@dataclass
class PipelineConfig:
    source: SourceConfig = field(default_factory=SourceConfig)
    bundle: Optional[str] = None
    precision: str = AUTO  # a bundle variant, or auto: the backend picks (choose_precision)
    backend: str = "auto"
    threads: int = 0  # 0 = backend default
    max_frames: int = 0  # 0 = no limit
    mode: str = "full"
    score_threshold: Optional[float] = None  # output threshold in every mode; None: the bundle decoder's
    nms_iou: Optional[float] = None  # NMS IoU of the decoder; None: the bundle decoder's
    preprocess: str = "auto"  # where CPU preprocessing runs: auto | capture (beside capture) | inline (inference thread)
    frame_memory: str = "auto"  # capture ring: auto (on a Jetson what `edge-sdk engine` measured faster, pinned until then; pinned on a discrete GPU; else host) | host | mapped | pinned
    pool_size: int = 4  # preallocated frame buffers (>= 3)
    capture_nice: int = 10  # the capture thread's priority below the process (0..19; 0 = same)
    cache: CacheConfig = field(default_factory=CacheConfig)
    reconnect: ReconnectConfig = field(default_factory=ReconnectConfig)
    roi: RoiConfig = field(default_factory=RoiConfig)

    @property
    def cache_enabled(self) -> bool:
        """The prediction cache runs in mode "full" only: its thumbnail cannot see small objects
        move, so in "tiles" and "roi" a hit would serve stale boxes and freeze the tracks."""
        return self.cache.enabled and self.mode == "full"

    def validate(self, origin: str = "config") -> "PipelineConfig":
        def bad(key: str, msg: str) -> ConfigError:
            return ConfigError(f"{origin}: {key} {msg}")

        if self.precision not in RUNTIME_PRECISIONS:
            raise bad("precision", f"must be one of {', '.join(RUNTIME_PRECISIONS)}, got {self.precision!r}")
        if self.backend not in BACKEND_NAMES:
            raise bad("backend", f"must be one of {', '.join(BACKEND_NAMES)}, got {self.backend!r}")
        if self.mode not in MODES:
            raise bad("mode", f"must be one of {', '.join(MODES)}, got {self.mode!r}")
        for key, value, low in (
            ("threads", self.threads, 0),
            ("max_frames", self.max_frames, 0),
            ("pool_size", self.pool_size, 3),
            ("capture_nice", self.capture_nice, 0),
            ("cache.width", self.cache.width, 4),
            ("cache.height", self.cache.height, 4),
            ("reconnect.max_attempts", self.reconnect.max_attempts, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise bad(key, f"must be an integer >= {low}, got {value!r}")
        for key, value in (
            ("source.fps", self.source.fps),
            ("cache.threshold", self.cache.threshold),
            ("reconnect.initial_s", self.reconnect.initial_s),
            ("reconnect.max_s", self.reconnect.max_s),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise bad(key, f"must be a number >= 0 (finite), got {value!r}")
        for key, value in (("source.loop", self.source.loop), ("cache.enabled", self.cache.enabled)):
            if not isinstance(value, bool):
                raise bad(key, f"must be true or false, got {value!r}")
        for key in ("score_threshold", "nms_iou"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0):
                raise bad(key, f"must be a number in [0, 1] (or absent: the bundle decoder's), got {value!r}")
        from edge_sdk.cuda.frames import CHOICES as FRAME_MEMORY  # the one list; importing it loads no CUDA

        if self.frame_memory not in FRAME_MEMORY:
            raise bad("frame_memory", f"must be one of {', '.join(FRAME_MEMORY)}, got {self.frame_memory!r}")
        if self.preprocess not in PREPROCESS_PLACEMENTS:
            raise bad("preprocess", f"must be one of {', '.join(PREPROCESS_PLACEMENTS)}, got {self.preprocess!r}")
        if self.capture_nice > 19:
            raise bad("capture_nice", f"must be between 0 and 19, got {self.capture_nice}")
        if not isinstance(self.source.uri, str):
            raise bad("source.uri", f"must be a string, got {self.source.uri!r}")
        if not isinstance(self.source.options, dict):
            raise bad("source.options", f"must be a table, got {self.source.options!r}")
        if self.bundle is not None and not isinstance(self.bundle, str):
            raise bad("bundle", f"must be a path string, got {self.bundle!r}")
        self.roi.validate(f"{origin}: roi")
        return self

    def replace(self, **changes: Any) -> "PipelineConfig":
        """A copy with top-level fields changed (`source=`, `cache=` take whole sub-configs)."""
        return dataclasses.replace(self, **changes)


_SECTIONS = {"source": SourceConfig, "cache": CacheConfig, "reconnect": ReconnectConfig, "roi": RoiConfig}


def config_from_dict(data: Mapping[str, Any], origin: str = "config") -> PipelineConfig:
    """Build a PipelineConfig from nested dicts; unknown keys and wrong types name the key."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{origin}: expected a table at the top level")
    require_finite(data, origin, ConfigError)  # TOML has nan and inf; CLI floats take "nan" too
    top_fields = {f.name for f in dataclasses.fields(PipelineConfig)}
    kwargs: Dict[str, Any] = {}
    for key, value in data.items():
        if key not in top_fields:
            raise ConfigError(f"{origin}: unknown key {key!r}; known keys: {', '.join(sorted(top_fields))}")
        if key == "roi" and isinstance(value, Mapping) and "score_threshold" in value:
            raise ConfigError(
                f"{origin}: roi.score_threshold is not a key any more: the output threshold is one value for every "
                "mode; set the top-level score_threshold (default: the bundle decoder's) instead"
            )
        if key in _SECTIONS:
            kwargs[key] = _section(_SECTIONS[key], value, key, origin)
        else:
            kwargs[key] = value
    cfg = PipelineConfig(**kwargs)
    return cfg.validate(origin)


def _section(cls: Any, value: Any, name: str, origin: str) -> Any:
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"{origin}: [{name}] must be a table, got {value!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    for key in value:
        if key not in known:
            raise ConfigError(f"{origin}: unknown key {name}.{key}; known keys in [{name}]: {', '.join(sorted(known))}")
    return cls(**dict(value))


def load_config(path: Any, overrides: Optional[Mapping[str, Any]] = None) -> PipelineConfig:
    """Read a TOML config file; `overrides` (same layout, e.g. from CLI flags) win over the file."""
    path = Path(path)
    merged = merge_tables(read_toml(path), overrides or {})
    cfg = config_from_dict(merged, origin=str(path))
    if cfg.bundle and not Path(cfg.bundle).is_absolute():
        cfg.bundle = str((path.parent / cfg.bundle))
    return cfg


def merge_tables(base: Mapping[str, Any], extra: Mapping[str, Any]) -> Dict[str, Any]:
    """`extra` laid over `base`, table by table (nested tables merge, other values replace)."""
    out: Dict[str, Any] = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_tables(out[key], value)
        else:
            out[key] = value
    return out


def cache_size(cfg: CacheConfig) -> Tuple[int, int]:
    return cfg.width, cfg.height
