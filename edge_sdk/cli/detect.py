"""`edge-sdk detect SOURCE`: run a bundle on a camera, stream, video, folder or synthetic scene.

Annotations here are not postponed: Typer on Python 3.8 must see the evaluated option
metadata (tests/test_imports.py checks).
"""

import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import typer
from typing_extensions import Annotated

from edge_sdk.cli._common import cli_errors
from edge_sdk.precision import RUNTIME_PRECISIONS
from edge_sdk.runtime.backends import BACKEND_NAMES

_NAMED = re.compile(r"([A-Za-z0-9_-]+)=(.*)", re.DOTALL)  # ID=URI: a URI's own "=" comes after ":", "/" or "?"


def split_sources(values: List[str]) -> List[Tuple[str, str]]:
    """(stream id, URI) of each SOURCE argument: `ID=URI`, or a plain URI whose id is its position
    ("0", "1", ...). The ids are checked with the config (edge_sdk.runtime.config.StreamConfig)."""
    from edge_sdk.errors import ConfigError

    out = []
    for position, value in enumerate(values):
        named = _NAMED.fullmatch(value)
        if named is None:
            out.append((str(position), value))
        elif not named.group(2):
            raise ConfigError(f"SOURCE {value!r}: no URI after the id; write ID=URI, e.g. door=rtsp://cam-door/stream")
        else:
            out.append((named.group(1), named.group(2)))
    return out


def source_overrides(values: List[str], loop: bool, fps: Optional[float]) -> Dict[str, Any]:
    """The config overrides for the SOURCE arguments: one plain URI is the one [source] (stream
    "0", merged with a config file's [source] options); anything else one [[sources]] table each."""
    extra: Dict[str, Any] = {}
    if loop:
        extra["loop"] = True
    if fps is not None:
        extra["fps"] = fps
    streams = split_sources(values)
    if len(values) == 1 and _NAMED.fullmatch(values[0]) is None:
        return {"source": dict(extra, uri=values[0])}
    return {"sources": [dict(extra, id=stream, uri=uri) for stream, uri in streams]}


def _summary(pipeline: Any, wall_s: float, console: Any) -> None:
    from rich.table import Table

    from edge_sdk.runtime.timing import SUMMARY_STAGES

    stats = pipeline.stats
    fps = stats.frames_processed / wall_s if wall_s > 0 else 0.0
    head = (
        f"frames {stats.frames_processed}  ·  {fps:.1f} FPS  ·  {wall_s:.1f} s  ·  cache hits {stats.cache_hits}  ·  "
        f"dropped {stats.frames_dropped}  ·  source errors {stats.source_errors}  ·  reconnects {stats.reconnects}"
    )
    console.print(head)
    backend = pipeline.backend
    described = backend.describe() if backend is not None else {}
    if described.get("precision"):
        console.print(f"ran {described['precision']} on {described.get('backend')}: {described.get('precision_reason')}")
    layout = pipeline.describe()
    where = {stage["stage"]: stage["runs_on"] for stage in layout["stages"]}
    memory = layout.get("frame_memory") or {}
    if where["infer"] == where["decode/merge"]:
        stages = f"infer and decode on the {where['infer']}"
    else:
        stages = f"infer on the {where['infer']}, decode on the {where['decode/merge']}"
    console.print(f"mode {layout['mode']}  ·  preprocess on the {where['preprocess']}, {stages}  ·  "
                  f"{layout['pool_size']} frame buffers in {memory.get('path', 'host')} memory")
    pct = pipeline.latency.percentiles((50, 95, 99))
    table = Table(title="latency (ms)", title_justify="left")
    for col in ("stage", "p50", "p95", "p99"):
        table.add_column(col, justify="right" if col != "stage" else "left")
    for stage in SUMMARY_STAGES:
        if stage in pct:
            row = pct[stage]
            table.add_row(stage, f"{row['p50']:.2f}", f"{row['p95']:.2f}", f"{row['p99']:.2f}")
    console.print(table)


@cli_errors
def detect(
    sources: Annotated[List[str], typer.Argument(metavar="SOURCE", help="csi://0, v4l2:///dev/video0, rtsp://…, a video file, a folder of images, or synthetic://faces?width=1920&height=1080; ID=URI names its stream (letters, digits, - and _), otherwise its position does (0, 1, ...). One source per process for now: several are refused.")],
    bundle: Annotated[Optional[Path], typer.Option("--bundle", help="Bundle folder from `edge-sdk build`. Default: the embedded CenterFace bundle, built once into the user cache.")] = None,
    precision: Annotated[Optional[str], typer.Option("--precision", help=f"Model variant: {', '.join(RUNTIME_PRECISIONS)}. auto: the bundle's gated choice where the backend runs it well (TensorRT), fp32 on ONNX Runtime's CPU provider. Default: auto.")] = None,
    backend: Annotated[Optional[str], typer.Option("--backend", help=f"{', '.join(BACKEND_NAMES)}. auto: TensorRT when installed, else ONNX Runtime.")] = None,
    max_frames: Annotated[Optional[int], typer.Option("--max-frames", help="Stop after N frames (0: until the source ends).")] = None,
    jsonl: Annotated[Optional[str], typer.Option("--jsonl", help="Write one JSON line per frame to this file ('-' for stdout).")] = None,
    save_video: Annotated[Optional[Path], typer.Option("--save-video", help="Write the frames with boxes drawn (.avi: MJPG, .mp4: mp4v).")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", help="Inference threads (ONNX Runtime intra-op; 0: its default).")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Run the model on every frame, even unchanged ones.")] = False,
    mode: Annotated[Optional[str], typer.Option("--mode", help="Per-frame strategy: full (one pass on the whole frame), tiles or roi (small objects in big frames).")] = None,
    loop: Annotated[bool, typer.Option("--loop", help="Restart a file, folder or finite synthetic source at its end.")] = False,
    fps: Annotated[Optional[float], typer.Option("--fps", help="Pace file/folder/synthetic sources to this rate (0: as fast as possible).")] = None,
    config: Annotated[Optional[Path], typer.Option("--config", help="TOML pipeline config; flags override it.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")] = False,
) -> None:
    """Detect objects in every frame of SOURCE and report per-stage latencies."""
    import time

    from rich.console import Console

    from edge_sdk.default_bundle import ensure_default_bundle
    from edge_sdk.runtime.config import config_from_dict, load_config
    from edge_sdk.runtime.pipeline import Pipeline
    from edge_sdk.runtime.sinks import JsonlSink, Sink, VideoSink
    from edge_sdk.runtime.sources import parse_uri

    for _, uri in split_sources(sources):
        parse_uri(uri)  # a missing file or unknown scheme fails now, before any bundle is built
    console = Console(stderr=True)
    overrides = source_overrides(sources, loop, fps)
    for key, value in (("precision", precision), ("backend", backend), ("max_frames", max_frames), ("threads", threads), ("mode", mode)):
        if value is not None:
            overrides[key] = value
    if bundle is not None:
        overrides["bundle"] = str(bundle)
    if no_cache:
        overrides["cache"] = {"enabled": False}
    cfg = load_config(config, overrides) if config is not None else config_from_dict(overrides, origin="command line")
    cfg = cfg.single_stream("command line")  # several sources: refused before a bundle is built
    if not cfg.bundle:
        cfg.bundle = str(ensure_default_bundle(cfg.precision, echo=None if quiet else console.print))

    sinks: List[Sink] = []
    pipeline = Pipeline(cfg, on_event=None if quiet else lambda e: console.print(f"[yellow]{_describe_event(e)}[/yellow]"))
    try:
        pipeline.open()
        src = pipeline.source
        if jsonl is not None:
            sinks.append(JsonlSink(jsonl))
        if save_video is not None:
            sinks.append(VideoSink(save_video, fps=(src.fps if src is not None and src.fps else 30.0)))
        total = src.frame_count if src is not None and not cfg.source.loop else None
        if cfg.max_frames:
            total = min(total, cfg.max_frames) if total else cfg.max_frames
        started = time.perf_counter()
        with _progress(console, total, quiet or (jsonl == "-" and not console.is_terminal)) as advance:
            for result in pipeline:
                for sink in sinks:
                    sink.write(result)
                advance()
        wall = time.perf_counter() - started
    finally:
        try:
            for sink in sinks:
                sink.close()
        finally:
            pipeline.close()
    if not quiet:
        _summary(pipeline, wall, console)
        for sink in sinks:
            target = getattr(sink, "path", "")
            if isinstance(sink, JsonlSink) and target != "-":
                console.print(f"wrote {sink.lines} lines to {target}")
            elif isinstance(sink, VideoSink):
                console.print(f"wrote {sink.frames} frames to {target}")


def _describe_event(event: Dict[str, Any]) -> str:
    kind = event.get("event")
    if kind == "source_lost":
        return f"source lost ({event.get('error')}); reconnecting (failure {event.get('failures')})"
    if kind == "source_reconnected":
        return f"source back after {event.get('attempts')} failed attempt(s)"
    if kind == "frame_size_changed":
        return f"frame size changed from {event.get('from')} to {event.get('to')}; the preprocessor replanned"
    return str(event)


class _progress:
    """A Rich progress bar on stderr (frames done of `total` when known); a no-op when disabled."""

    def __init__(self, console: Any, total: Optional[int], disabled: bool) -> None:
        self.console, self.total, self.disabled = console, total, disabled
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Any:
        if self.disabled:
            return lambda: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("detect"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=self.console, transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task("frames", total=self.total)
        progress, task = self._progress, self._task
        return lambda: progress.advance(task)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
