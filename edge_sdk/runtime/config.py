"""The runtime's one typed configuration object, built from a TOML file plus overrides.

```toml
bundle = "bundle"          # folder written by `edge-sdk build`
precision = "auto"         # auto (TensorRT: the bundle's gated choice; ONNX Runtime CPU: fp32) | fp32 | fp16 | int8
backend = "auto"           # auto | onnxruntime | onnxruntime-cpu | onnxruntime-cuda | onnxruntime-tensorrt | tensorrt
threads = 2                # ONNX Runtime intra-op threads (0 = ONNX Runtime's default)
max_frames = 0             # 0 = until the source ends
mode = "full"              # per-frame detection strategy: full | tiles | roi
capture_nice = 10          # capture thread priority below inference (0..19); > 0 with a CPU backend: SCHED_IDLE

[source]                   # one camera, stream id "0"; or several [[sources]] tables instead
uri = "csi://0"
loop = false
fps = 0                    # pace file/folder/synthetic sources; 0 = as fast as possible
options = { width = 1920, height = 1080, framerate = 30, flip = 0 }

# [[sources]]              # several cameras: one table each (not together with [source])
# id = "door"              # the stream id in every result: letters, digits, - and _; unique
# uri = "rtsp://cam-door/stream"
# mode = "roi"             # optional: this stream's strategy (default: the top-level mode)
# fps = 15                 # optional cap; loop and options as in [source]
# [sources.roi]            # optional: this stream's ROI settings (default: the top-level [roi])
# sweep_tiles = 3

[cache]
enabled = true             # used in mode "full" only: a thumbnail cannot see small objects move
threshold = 4.0            # largest grey-level change of any pixel of a 64x36 thumbnail

[roi]                      # parameters of modes "tiles" and "roi" (edge_sdk.roi.strategies.RoiConfig)
sweep_tiles = 2

[reconnect]
initial_s = 0.5
max_s = 8.0
max_attempts = 30          # 0 = keep trying forever

[batching]                 # several sources: their frames go through the model in batches
max_batch_size = 4         # default: the number of sources (at most what the bundle takes)
preferred_batch_sizes = [4]  # default: [max_batch_size]; a batch goes as soon as the largest can be formed
max_queue_delay_ms = 5.0   # the longest a frame waits for a fuller batch
frames_in_flight = 1       # frames of one stream in the batcher or the model at once (<= pool_size - 2)

[tracking]                 # a track id on every detection, per stream, in every mode (edge_sdk.tracking)
enabled = true
high_score = 0.5           # matched first, may start a track; lower ones (>= low_score) are matched second
buffer_frames = 30         # a lost track waits this long to be found again; or buffer_s at the stream's fps
```

Validation happens once, at the edge (`load_config`, `config_from_dict`, or `Pipeline` calling
`validate()` on a config built in code); errors name the key and the file.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from edge_sdk.config_schema import check_fields, from_table, key
from edge_sdk.cuda.frames import CHOICES as FRAME_MEMORY  # the one list; importing it loads no CUDA
from edge_sdk.errors import ConfigError
from edge_sdk.fsutil import read_toml
from edge_sdk.manifest_check import MAX_BATCH
from edge_sdk.precision import AUTO, RUNTIME_PRECISIONS
from edge_sdk.roi.config import MODES, RoiConfig
from edge_sdk.runtime.backends import BACKEND_NAMES
from edge_sdk.runtime.batcher import BatchPolicy
from edge_sdk.runtime.frame import DEFAULT_STREAM_ID
from edge_sdk.tracking.tracker import TrackingConfig

MAX_SOURCES = 16  # [[sources]] tables in one config: beyond, one process per group of cameras
STREAM_ID = {"max_len": 64, "pattern": r"[A-Za-z0-9_-]+", "allows": "letters, digits, '-' and '_'"}

PREPROCESS_PLACEMENTS = ("auto", "capture", "inline")


@dataclass
class SourceConfig:
    uri: str = ""
    loop: bool = False
    fps: float = key(0.0, low=0, high=1000)  # target rate for file/folder/synthetic sources; 0 = unpaced
    options: Dict[str, Any] = key(factory=dict, max_len=64)  # scheme-specific: width, height, framerate, flip, latency...


@dataclass
class StreamConfig:
    id: str = key(**STREAM_ID)  # the stream id in every result, JSONL row and MQTT message; unique
    uri: str = key(max_len=4096)  # csi://0, v4l2:///dev/video0, rtsp://..., a file, a folder, synthetic://...
    loop: bool = False  # restart a file, folder or finite synthetic source at its end
    fps: float = key(0.0, low=0, high=1000)  # as in [source]: paces file/folder/synthetic sources; 0 = unpaced
    options: Dict[str, Any] = key(factory=dict, max_len=64)  # as in [source]
    mode: Optional[str] = key(None, choices=MODES)  # this stream's strategy; None: the top-level mode
    roi: Optional[RoiConfig] = None  # [sources.roi]: this stream's ROI settings; None: the top-level [roi]

    def source(self) -> SourceConfig:
        return SourceConfig(uri=self.uri, loop=self.loop, fps=self.fps, options=dict(self.options))


@dataclass
class CacheConfig:
    enabled: bool = True
    threshold: float = key(4.0, low=0, high=255)  # largest |difference| in grey levels (0..255) of any thumbnail pixel
    width: int = key(64, low=4, high=1024)
    height: int = key(36, low=4, high=1024)


@dataclass
class ReconnectConfig:
    initial_s: float = key(0.5, low=0, high=3600)
    max_s: float = key(8.0, low=0, high=86400)
    max_attempts: int = key(30, low=0, high=1000000)  # 0 = forever


@dataclass
class BatchingConfig:
    """How the frames of several sources share the model (edge_sdk.runtime.batcher.BatchPolicy)."""

    max_batch_size: Optional[int] = key(None, low=1, high=MAX_BATCH)  # frames per backend call; unset: the number of sources, at most what the bundle takes
    preferred_batch_sizes: Optional[List[int]] = key(None, max_len=MAX_BATCH)  # sizes a batch goes out at without waiting, sorted; unset: [max_batch_size]
    max_queue_delay_ms: float = key(5.0, low=0, high=10000)  # the longest a frame waits for a fuller batch
    frames_in_flight: int = key(1, low=1, high=62)  # frames of one stream in the batcher or the model at once; at most pool_size - 2

    def policy(self, streams: int, limit: Optional[int] = None, origin: str = "config") -> BatchPolicy:
        """The BatchPolicy for `streams` sources: max_batch_size defaults to `streams`, capped at
        `limit` (the largest batch the model takes) when it is not set; ConfigError naming the key."""
        size = self.max_batch_size
        if size is None:
            size = max(1, min(streams, limit) if limit else streams)
        preferred = self.preferred_batch_sizes if self.preferred_batch_sizes is not None else [size]
        try:
            return BatchPolicy(size, tuple(preferred), self.max_queue_delay_ms)
        except ConfigError as exc:
            raise ConfigError(f"{origin}: batching.{exc}") from None


@dataclass
class PipelineConfig:
    source: SourceConfig = field(default_factory=SourceConfig)
    bundle: Optional[str] = None
    precision: str = key(AUTO, choices=RUNTIME_PRECISIONS)  # a bundle variant, or auto: the backend picks (choose_precision)
    backend: str = key("auto", choices=BACKEND_NAMES)  # what runs the model; auto and onnxruntime pick one of the others
    threads: int = key(0, low=0, high=1024)  # 0 = backend default
    max_frames: int = key(0, low=0, high=10 ** 12)  # 0 = no limit
    mode: str = key("full", choices=MODES)  # per-frame detection strategy
    score_threshold: Optional[float] = key(None, low=0, high=1)  # output threshold in every mode; None: the bundle decoder's
    nms_iou: Optional[float] = key(None, low=0, high=1)  # NMS IoU of the decoder; None: the bundle decoder's
    preprocess: str = key("auto", choices=PREPROCESS_PLACEMENTS)  # where CPU preprocessing runs: capture (beside capture) or inline (inference thread)
    frame_memory: str = key("auto", choices=FRAME_MEMORY)  # capture ring: auto (on a Jetson what `edge-sdk engine` measured faster, pinned until then; pinned on a discrete GPU; else host) | host | mapped | pinned
    pool_size: int = key(4, low=3, high=64)  # preallocated frame buffers
    capture_nice: int = key(10, low=0, high=19)  # the capture thread's priority below the process (0 = same)
    cache: CacheConfig = field(default_factory=CacheConfig)
    reconnect: ReconnectConfig = field(default_factory=ReconnectConfig)
    roi: RoiConfig = field(default_factory=RoiConfig)
    sources: List[StreamConfig] = key(factory=list, max_len=MAX_SOURCES)  # [[sources]]: several cameras, each with its id (instead of [source])
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    @property
    def cache_enabled(self) -> bool:
        """The prediction cache runs in mode "full" only: its thumbnail cannot see small objects
        move, so in "tiles" and "roi" a hit would serve stale boxes and freeze the tracks."""
        return self.cache.enabled and self.mode == "full"

    def validate(self, origin: str = "config") -> "PipelineConfig":
        """Every key against its type and bounds (edge_sdk.config_schema); ConfigError naming it."""
        check_fields(self, origin)
        self.roi.validate(origin)
        self.tracking.validate(origin)
        if self.sources and self.source not in (SourceConfig(), self.sources[0].source()):  # single_stream's form
            raise ConfigError(f"{origin}: both [source] and [[sources]] are set: keep one (several cameras: one "
                              "[[sources]] table each, with its id)")
        seen = set()
        for i, stream in enumerate(self.sources):
            if stream.id in seen:
                raise ConfigError(f"{origin}: sources[{i}].id {stream.id!r} is the id of an earlier source: "
                                  "give each source its own id")
            seen.add(stream.id)
            if stream.roi is not None:
                stream.roi.validate(origin)
        self.batching.policy(len(self.streams()), origin=origin)
        if self.batching.frames_in_flight > self.pool_size - 2:
            raise ConfigError(f"{origin}: batching.frames_in_flight must be at most pool_size - 2 = {self.pool_size - 2}, "
                              f"got {self.batching.frames_in_flight}; raise pool_size for more")
        return self

    def streams(self) -> List[StreamConfig]:
        """The sources to run, each with its id: the [[sources]] tables, or the one [source] as
        stream "0"."""
        if self.sources:
            return list(self.sources)
        s = self.source
        return [StreamConfig(id=DEFAULT_STREAM_ID, uri=s.uri, loop=s.loop, fps=s.fps, options=dict(s.options))]

    def stream_ids(self) -> List[str]:
        return [s.id for s in self.streams()]

    def single_stream(self, origin: str = "config") -> "PipelineConfig":
        """This config for a pipeline that runs one source: that source in `source` too (its
        [[sources]] table stays, with its id), its own mode and ROI settings where it has them.
        ConfigError when there are several."""
        streams = self.streams()
        if len(streams) > 1:
            raise ConfigError(f"{origin}: {len(streams)} sources ({', '.join(s.id for s in streams)}), but this "
                              "pipeline runs one: running several sources in one process is not available yet; "
                              "start one process per source")
        if not self.sources:
            return self
        only = streams[0]
        return self.replace(source=only.source(), mode=only.mode or self.mode, roi=only.roi or self.roi)

    def batched_streams(self) -> List[StreamConfig]:
        """The sources of a run of several through one model, each with its mode and ROI settings
        resolved: its own where it has them, else the top-level `mode` and [roi]."""
        return [dataclasses.replace(s, mode=s.mode or self.mode, roi=s.roi or self.roi) for s in self.streams()]

    def replace(self, **changes: Any) -> "PipelineConfig":
        """A copy with top-level fields changed (`source=`, `cache=` take whole sub-configs)."""
        return dataclasses.replace(self, **changes)


_SECTIONS = {"source": SourceConfig, "cache": CacheConfig, "reconnect": ReconnectConfig, "roi": RoiConfig,
             "batching": BatchingConfig, "tracking": TrackingConfig}


def _check_sources_table(data: Mapping[str, Any], origin: str) -> None:
    """What the table layout says before the keys are checked: [source] and [[sources]] at
    once, [sources] written as one table, more than MAX_SOURCES of them."""
    sources = data.get("sources")
    if sources is None:
        return
    if "source" in data:
        raise ConfigError(f"{origin}: both [source] and [[sources]] are set: keep one (several cameras: one "
                          "[[sources]] table each, with its id)")
    if isinstance(sources, Mapping):
        raise ConfigError(f"{origin}: sources must be a list of tables: write [[sources]] (two brackets), one per camera")
    if not isinstance(sources, (list, tuple)):
        return  # the key check names the type
    if len(sources) > MAX_SOURCES:
        raise ConfigError(f"{origin}: sources has {len(sources)} tables; at most {MAX_SOURCES} sources run in one "
                          "process: split them over several configs")
    for i, table in enumerate(sources):
        roi = table.get("roi") if isinstance(table, Mapping) else None
        if isinstance(roi, Mapping) and "score_threshold" in roi:
            raise ConfigError(f"{origin}: sources[{i}].roi.score_threshold is not a key: the output threshold is one "
                              "value for every stream; set the top-level score_threshold instead")
        _check_roi_tracks(roi, f"sources[{i}].roi", origin)


def _check_roi_tracks(roi: Any, path: str, origin: str) -> None:
    """roi.track_iou, the link of the ROI scheduler's own tracks, is gone with them: advice."""
    if isinstance(roi, Mapping) and "track_iou" in roi:
        raise ConfigError(f"{origin}: {path}.track_iou is not a key any more: the roi scheduler follows the [tracking] "
                          "tracker's tracks; set tracking.match_cost (the largest 1 - IoU x score of a match) instead")


def config_from_dict(data: Mapping[str, Any], origin: str = "config") -> PipelineConfig:
    """Build a PipelineConfig from nested dicts; unknown keys and wrong types name the key."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{origin}: expected a table at the top level")
    roi = data.get("roi")
    if isinstance(roi, Mapping) and "score_threshold" in roi:
        raise ConfigError(
            f"{origin}: roi.score_threshold is not a key any more: the output threshold is one value for every "
            "mode; set the top-level score_threshold (default: the bundle decoder's) instead"
        )
    _check_roi_tracks(roi, "roi", origin)
    _check_sources_table(data, origin)
    return from_table(PipelineConfig, data, origin).validate(origin)


def load_config(path: Any, overrides: Optional[Mapping[str, Any]] = None) -> PipelineConfig:
    """Read a TOML config file; `overrides` (same layout, e.g. from CLI flags) win over the file,
    and sources given there replace the file's (:func:`overlay`)."""
    path = Path(path)
    merged = overlay(read_toml(path), overrides or {})
    cfg = config_from_dict(merged, origin=str(path))
    if cfg.bundle and not Path(cfg.bundle).is_absolute():
        cfg.bundle = str((path.parent / cfg.bundle))
    return cfg


def overlay(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """`overrides` laid over a config file's tables (merge_tables), where sources given in either
    form replace the file's: a `source` override drops the file's [[sources]], a `sources`
    override its [source]."""
    data = dict(data)
    for given, dropped in (("source", "sources"), ("sources", "source")):
        if given in overrides:
            data.pop(dropped, None)
    return merge_tables(data, overrides)


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
