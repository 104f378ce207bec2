"""`edge-sdk detect SOURCE [SOURCE ...]`: run a bundle on cameras, streams, videos, folders or
synthetic scenes. One source runs the Pipeline; several run one MultiStreamPipeline (one model,
one dynamic batcher) whose JSONL rows carry each frame's stream and whose summary has a line per
stream and the batcher's efficiency.

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
    sources: Annotated[Optional[List[str]], typer.Argument(metavar="SOURCE", show_default=False, help="csi://0, v4l2:///dev/video0, rtsp://…, a video file, a folder of images, or synthetic://faces?width=1920&height=1080; ID=URI names its stream (letters, digits, - and _), otherwise its position does (0, 1, ...). Several run through one model in batches, each in its mode. None: the --config file's [source] or [[sources]].")] = None,
    bundle: Annotated[Optional[Path], typer.Option("--bundle", help="Bundle folder from `edge-sdk build`. Default: the embedded CenterFace bundle, built once into the user cache.")] = None,
    precision: Annotated[Optional[str], typer.Option("--precision", help=f"Model variant: {', '.join(RUNTIME_PRECISIONS)}. auto: the bundle's gated choice where the backend runs it well (TensorRT), fp32 on ONNX Runtime's CPU provider. Default: auto.")] = None,
    backend: Annotated[Optional[str], typer.Option("--backend", help=f"{', '.join(BACKEND_NAMES)}. auto: TensorRT when installed, else ONNX Runtime.")] = None,
    max_frames: Annotated[Optional[int], typer.Option("--max-frames", help="Stop after N frames (0: until the source ends); with several sources, N frames of each.")] = None,
    jsonl: Annotated[Optional[str], typer.Option("--jsonl", help="Write one JSON line per frame to this file ('-' for stdout).")] = None,
    save_video: Annotated[Optional[Path], typer.Option("--save-video", help="Write the frames with boxes drawn (.avi: MJPG, .mp4: mp4v) with OpenCV.")] = None,
    out: Annotated[Optional[List[str]], typer.Option("--out", help="Send the annotated frames (boxes, labels, FPS) as H.264 through GStreamer: rtsp://HOST:PORT/PATH serves them (e.g. rtsp://0.0.0.0:8554/live), FILE.mp4 writes them, display://0 shows them on a Jetson. Repeat for several. Needs python3-gi and GStreamer (see README).")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", help="Inference threads (ONNX Runtime intra-op; 0: its default).")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Run the model on every frame, even unchanged ones.")] = False,
    no_track: Annotated[bool, typer.Option("--no-track", help="No track ids: leave tracking off ([tracking] enabled = false).")] = False,
    mode: Annotated[Optional[str], typer.Option("--mode", help="Per-frame strategy: full (one pass on the whole frame), tiles or roi (small objects in big frames).")] = None,
    loop: Annotated[bool, typer.Option("--loop", help="Restart a file, folder or finite synthetic source at its end.")] = False,
    fps: Annotated[Optional[float], typer.Option("--fps", help="Pace file/folder/synthetic sources to this rate (0: as fast as possible).")] = None,
    config: Annotated[Optional[Path], typer.Option("--config", help="TOML pipeline config; flags override it.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")] = False,
) -> None:
    """Detect objects in every frame of each SOURCE and report per-stage latencies."""
    import time

    from rich.console import Console

    from edge_sdk.cli._stop import stop_signals
    from edge_sdk.default_bundle import ensure_default_bundle
    from edge_sdk.errors import ConfigError, Stopped
    from edge_sdk.output.video import AnnotatedSink, open_outputs, parse_output
    from edge_sdk.runtime.config import config_from_dict, load_config
    from edge_sdk.runtime.pipeline import Pipeline
    from edge_sdk.runtime.sinks import JsonlSink, Sink, VideoSink
    from edge_sdk.runtime.sources import parse_uri

    sources = list(sources or [])
    outs = list(out or [])
    for value in outs:
        parse_output(value)  # a missing folder or unknown scheme fails now, before any bundle is built
    if not sources and config is None:
        raise ConfigError("no SOURCE: give one or more (e.g. `edge-sdk detect csi://0`), or a --config file with "
                          "[source] or [[sources]]")
    for _, uri in split_sources(sources):
        parse_uri(uri)  # a missing file or unknown scheme fails now, before any bundle is built
    console = Console(stderr=True)
    overrides = source_overrides(sources, loop, fps) if sources else {}
    for key, value in (("precision", precision), ("backend", backend), ("max_frames", max_frames), ("threads", threads), ("mode", mode)):
        if value is not None:
            overrides[key] = value
    if bundle is not None:
        overrides["bundle"] = str(bundle)
    if no_cache:
        overrides["cache"] = {"enabled": False}
    if no_track:
        overrides["tracking"] = {"enabled": False}
    cfg = load_config(config, overrides) if config is not None else config_from_dict(overrides, origin="command line")
    if not sources:  # the config's own: checked as SOURCE arguments are; --loop and --fps apply to each
        for table in cfg.sources or [cfg.source]:
            parse_uri(table.uri)
            table.loop = table.loop or loop
            if fps is not None:
                table.fps = fps
        cfg.validate("command line")
    several = len(cfg.streams()) > 1
    if several:  # what several sources cannot do is refused before a bundle is built
        if save_video is not None or outs:
            flag = "--save-video" if save_video is not None else "--out"
            raise ConfigError(f"{flag} writes one source's frames: with several sources, leave it out (or run "
                              f"`edge-sdk detect SOURCE {flag} ...` for the one to watch)")
    else:
        cfg = cfg.single_stream("command line")
    # installed before the bundle is built or a source opened: SIGTERM and SIGINT stop detect
    # cleanly (recordings closed, summary printed, exit 0), also when it inherited SIGINT ignored
    with stop_signals() as stopping:
        if not cfg.bundle:
            cfg.bundle = str(ensure_default_bundle(cfg.precision, echo=None if quiet else console.print))
        if several:
            _detect_streams(cfg, jsonl, quiet, console, stopping)
            return

        sinks: List[Sink] = []
        pipeline = Pipeline(cfg, on_event=None if quiet else lambda e: console.print(f"[yellow]{_describe_event(e)}[/yellow]"))
        try:
            pipeline.open()
            src = pipeline.source
            if jsonl is not None:
                sinks.append(JsonlSink(jsonl))
            if save_video is not None:
                sinks.append(VideoSink(save_video, fps=(src.fps if src is not None and src.fps else 30.0)))
            if outs:
                sinks.append(AnnotatedSink(open_outputs(outs, fps=(src.fps if src is not None and src.fps else 30.0))))
            total = src.frame_count if src is not None and not cfg.source.loop else None
            if cfg.max_frames:
                total = min(total, cfg.max_frames) if total else cfg.max_frames
            started = time.perf_counter()
            with _progress(console, total, quiet or (jsonl == "-" and not console.is_terminal)) as advance:
                try:
                    for result in pipeline:
                        with stopping.held():  # a frame goes to every sink or to none
                            for sink in sinks:
                                sink.write(result)
                            advance()
                except Stopped as exc:
                    if exc.forced:
                        raise  # the summary and the sinks' counts follow a first stop only
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
                elif isinstance(sink, AnnotatedSink):
                    for row in sink.stats():
                        console.print(_describe_output(row))
        if stopping.requested:
            console.print(f"[yellow]stopped by {stopping.name} after {pipeline.stats.frames_processed} frames[/yellow]")


def _describe_output(row: Dict[str, Any]) -> str:
    """One line per --out: frames sent, dropped, the encoder and its cost."""
    cost = f", {row['encode_ms_mean']:.2f} ms per frame" if row.get("encode_ms_mean") is not None else ""
    line = f"{row['out']}: {row['frames']} frames sent, {row['dropped']} dropped ({row['encoder'] or 'no encoder'}{cost})"
    return line + (f"; stopped: {row['error']}" if row.get("error") else "")


def _batch_policy(cfg: Any, model: Any, streams: int, console: Optional[Any]) -> Any:
    """The BatchPolicy of `cfg` for `model` (edge_sdk.runtime.streams.fitted_policy), its note printed."""
    from edge_sdk.runtime.streams import fitted_policy

    policy, note = fitted_policy(cfg.batching, model, streams, origin="command line")
    if note is not None and console is not None:
        console.print(f"[yellow]{note}[/yellow]")
    return policy


def _detect_streams(cfg: Any, jsonl: Optional[str], quiet: bool, console: Any, stopping: Any) -> None:
    """Several sources through one model: a MultiStreamPipeline, rows in order per stream,
    `max_frames` frames of each stream (0: until every source ends)."""
    import time

    from edge_sdk.errors import Stopped
    from edge_sdk.runtime.model import load_model
    from edge_sdk.runtime.sinks import JsonlSink
    from edge_sdk.runtime.sources import open_source
    from edge_sdk.runtime.streams import MALLOC_ARENAS, MultiStreamPipeline

    streams = cfg.batched_streams()
    ids = [s.id for s in streams]
    model = load_model(cfg.bundle, backend=cfg.backend, precision=cfg.precision, threads=cfg.threads, warm_runs=1)
    sink = detector = None
    stopped = ""
    try:
        policy = _batch_policy(cfg, model, len(streams), None if quiet else console)
        detector = _streams_detector(cfg, model, streams, policy.max_batch_size)
        pipeline = MultiStreamPipeline([(s.id, open_source(s.uri, loop=s.loop, **s.options)) for s in streams],
                                       detector, policy, reconnect=cfg.reconnect, pool_size=cfg.pool_size,
                                       frames_in_flight=cfg.batching.frames_in_flight, fps={s.id: s.fps for s in streams},
                                       tracking=cfg.tracking, malloc_arenas=MALLOC_ARENAS)
        if jsonl is not None:
            sink = JsonlSink(jsonl)
        cap = cfg.max_frames
        totals: Dict[str, List[float]] = {sid: [] for sid in ids}
        started = time.perf_counter()
        with _progress(console, cap * len(ids) if cap else None, quiet or (jsonl == "-" and not console.is_terminal)) \
                as advance, pipeline:
            try:
                for result in pipeline.results():
                    mine = totals[result.stream]
                    if cap and len(mine) >= cap:
                        continue  # this stream has its frames; the others run on
                    with stopping.held():  # counted and written, or neither
                        mine.append(result.latency_ms["total"])
                        if sink is not None:
                            sink.write(result)
                        advance()
                    if cap and _all_done(pipeline, totals, cap):
                        break
            except Stopped as exc:
                if exc.forced:
                    raise  # the summary and the sink's count follow a first stop only
                stopped = exc.name
        wall = time.perf_counter() - started
        if not quiet:
            _streams_summary(pipeline, model, totals, wall, console)
            if sink is not None and sink.path != "-":
                console.print(f"wrote {sink.lines} lines to {sink.path}")
        if stopped:
            console.print(f"[yellow]stopped by {stopped} after {sum(len(rows) for rows in totals.values())} "
                          f"frames[/yellow]")
    finally:
        try:
            if sink is not None:
                sink.close()
        finally:
            if detector is not None:
                detector.close()
            model.close()


def _streams_detector(cfg: Any, model: Any, streams: List[Any], max_batch_size: int) -> Any:
    """Every stream in mode full: one batched detector over the frames (prepared ahead on the
    capture threads). Otherwise a detector per stream in its mode, their backend calls gathered."""
    from edge_sdk.runtime.detectors.batched import make_batch_detector
    from edge_sdk.runtime.detectors.shared import StreamSetup, make_stream_detector

    thresholds = {"score_threshold": cfg.score_threshold, "nms_iou": cfg.nms_iou}
    if all(s.mode == "full" for s in streams):
        return make_batch_detector(model, max_batch_size, thresholds)
    given = {key: value for key, value in thresholds.items() if value is not None}
    return make_stream_detector(model, [StreamSetup(s.id, s.mode, s.roi, dict(given)) for s in streams], max_batch_size)


def _all_done(pipeline: Any, totals: Dict[str, List[float]], cap: int) -> bool:
    """Every stream has `cap` frames or has ended (or been given up)."""
    if all(len(rows) >= cap for rows in totals.values()):
        return True
    states = pipeline.states()
    return all(len(rows) >= cap or states[sid] in ("ended", "given_up") for sid, rows in totals.items())


def _streams_summary(pipeline: Any, model: Any, totals: Dict[str, List[float]], wall_s: float, console: Any) -> None:
    """A line per stream (frames, fps, p50/p99 of its total latency, drops) and the batcher's line."""
    import numpy as np

    stats = pipeline.stats()
    frames = sum(len(rows) for rows in totals.values())
    per_s = (lambda n: n / wall_s if wall_s > 0 else 0.0)
    described = model.backend.describe()
    console.print(f"streams {len(totals)}  ·  frames {frames}  ·  {per_s(frames):.1f} FPS in all  ·  {wall_s:.1f} s  ·  "
                  f"ran {described.get('precision')} on {described.get('backend')}")
    for sid, rows in totals.items():
        state = stats["streams"][sid]
        if rows:
            p50, p99 = np.percentile(rows, 50), np.percentile(rows, 99)
            latency = f"latency p50 {p50:.2f} ms  p99 {p99:.2f} ms"
        else:
            latency = "latency -"
        console.print(f"stream {sid}: frames {len(rows)}  ·  {per_s(len(rows)):.1f} FPS  ·  {latency}  ·  "
                      f"dropped {state['frames_dropped']}  ·  source errors {state['source_errors']}  ·  {state['state']}")
    batcher = stats["batcher"]
    histogram = ", ".join(f"{size}: {count}" for size, count in batcher["histogram"].items())
    delay = batcher["queue_delay_ms"]
    queue = f"queue delay p50 {delay['p50']:.2f} ms  p99 {delay['p99']:.2f} ms" if delay else "queue delay -"
    console.print(f"batch efficiency {batcher['efficiency']:.0%} over {batcher['batches']} batches of up to "
                  f"{batcher['max_batch_size']} (sizes {{{histogram}}})  ·  {queue}")
    for event in pipeline.events():
        if event["event"] != "stream_ended":
            console.print(f"[yellow]stream {event['stream']}: {_describe_event(event)}[/yellow]")


def _describe_event(event: Dict[str, Any]) -> str:
    kind = event.get("event")
    if kind == "source_lost":
        return f"source lost ({event.get('error')}); reconnecting (failure {event.get('failures')})"
    if kind == "source_reconnected":
        return f"source back after {event.get('attempts')} failed attempt(s)"
    if kind == "source_failed":
        return f"source failed ({event.get('error')}); retrying (failure {event.get('failures')})"
    if kind == "source_given_up":
        return f"source given up after {event.get('failures')} failures in a row"
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
