"""`edge-sdk detect SOURCE`: run a bundle on a camera, stream, video, folder or synthetic scene.

Annotations here are not postponed: Typer on Python 3.8 must see the evaluated option
metadata (tests/test_imports.py checks).
"""

from pathlib import Path
from typing import Any, Dict, List, Optional

import typer
from typing_extensions import Annotated

from edge_sdk.cli._common import cli_errors

DEFAULT_BUNDLE_NAME = "default"


def build_record(root: Path) -> Path:
    """What the cached default bundle in `root` was built from (see default_build_key). It lies
    beside the bundle folder, not in it: a bundle folder holds only the files its manifest lists,
    or the next build refuses to replace it."""
    return root.parent / f"{root.name}.build.json"


def default_bundle_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("edge-sdk")) / "bundles" / DEFAULT_BUNDLE_NAME


def default_calibration_folder() -> Path:
    """The images `edge-sdk build` calibrates the default model on (a source checkout's calibrate/images)."""
    from edge_sdk.builder.pipeline import default_calib_dir

    return default_calib_dir()


def _calibration_digest(folder: Path) -> Optional[str]:
    """sha256 over the names and contents of the images in `folder`; None without the folder."""
    import hashlib

    from edge_sdk.fsutil import sha256_file

    if not folder.is_dir():
        return None
    h = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        h.update(f"{path.name}:{sha256_file(path)}\n".encode())
    return h.hexdigest()


def default_build_key() -> Dict[str, Any]:
    """What defines the default bundle: the model file, its input spec and decoder settings, and
    the calibration images (for the INT8 variant)."""
    from edge_sdk.builder.default_model import DEFAULT_MODEL

    return {
        "model_sha256": DEFAULT_MODEL.sha256,
        "input": DEFAULT_MODEL.input_spec.to_dict(),
        "decoder": dict(DEFAULT_MODEL.decoder),
        "calibration_images": _calibration_digest(default_calibration_folder()),
    }


def stale_reason(bundle: Any, key: Dict[str, Any]) -> Optional[str]:
    """Why a cached default bundle differs from what building the default now gives, or None."""
    import json

    from edge_sdk.errors import ConfigError
    from edge_sdk.preprocess import InputSpec

    if (bundle.get("model") or {}).get("source_sha256") != key["model_sha256"]:
        return "it was built from another model file"
    try:
        inputs = bundle.inputs
    except (ConfigError, TypeError):
        return "its input spec is not valid"
    expected = InputSpec.from_dict(key["input"])
    if len(inputs) != 1 or inputs[0] != expected:
        if len(inputs) != 1:
            return f"it has {len(inputs)} inputs, the default model 1"
        old, new = inputs[0].to_dict(), expected.to_dict()
        changed = ", ".join(f"{k} {old.get(k)} → {new[k]}" for k in new if old.get(k) != new[k])
        return f"its input spec differs from the default model's: {changed}"
    if bundle.decoder != key["decoder"]:
        return f"its decoder settings {bundle.decoder} differ from the default model's {key['decoder']}"
    if "int8" in bundle.variants() and key["calibration_images"] is not None:
        try:
            record = json.loads(build_record(bundle.root).read_text())
        except (OSError, ValueError):
            record = None
        if not isinstance(record, dict) or record.get("calibration_images") != key["calibration_images"]:
            return "its INT8 variant was calibrated on other images than today's default calibration set"
    return None


def ensure_default_bundle(precision: str, root: Optional[Path] = None, echo: Any = None) -> Path:
    """The embedded default bundle, built on first use into the user cache and reused after.

    A cached bundle is reused only while it is current: it passes its checks, has the requested
    precision, and was built from what defines the default today (model file, input spec,
    decoder settings, calibration images: :func:`default_build_key`); otherwise it is built again.
    Building needs the host extra (onnx); without it the error says how to get a bundle.
    """
    from edge_sdk import _imports
    from edge_sdk.errors import BundleError
    from edge_sdk.fsutil import atomic_write_json
    from edge_sdk.manifest import Bundle

    root = Path(root) if root is not None else default_bundle_dir()
    key = default_build_key()
    reason = None
    if (root / "manifest.json").is_file():
        try:
            bundle = Bundle.load(root)
        except BundleError:
            bundle, reason = None, "it fails its checks"
        if bundle is not None:
            reason = stale_reason(bundle, key)
            if reason is None and precision in bundle.variants():
                return root
    if not _imports.available("onnx"):
        raise BundleError(
            "no --bundle given, and this machine cannot build the default bundle: the builder needs the host extra "
            "(pip install \"edge-sdk[host]\"). Or build one on a host with `edge-sdk build --out bundle`, "
            "copy the folder here and run `edge-sdk detect SOURCE --bundle bundle`"
        )
    from edge_sdk.builder.pipeline import build
    from edge_sdk.builder.project import BuildConfig

    if echo is not None:
        if reason is not None:
            echo(f"the cached default bundle in {root} is out of date ({reason}); building it again")
        echo(f"building the default bundle (CenterFace, {precision}) into {root}; later runs reuse it")
    build(BuildConfig(model=None, target="host", out=root, precision="fp32" if precision == "fp32" else "best"))
    try:
        atomic_write_json(build_record(root), key)
    except OSError as exc:
        raise BundleError(f"cannot write {build_record(root)} ({exc}); free space or fix permissions on {root.parent}") from exc
    return root


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
    source: Annotated[str, typer.Argument(help="csi://0, v4l2:///dev/video0, rtsp://…, a video file, a folder of images, or synthetic://faces?width=1920&height=1080")],
    bundle: Annotated[Optional[Path], typer.Option("--bundle", help="Bundle folder from `edge-sdk build`. Default: the embedded CenterFace bundle, built once into the user cache.")] = None,
    precision: Annotated[Optional[str], typer.Option("--precision", help="Model variant: fp32, fp16 or int8.")] = None,
    backend: Annotated[Optional[str], typer.Option("--backend", help="auto, onnxruntime, onnxruntime-cpu, onnxruntime-cuda, onnxruntime-tensorrt or tensorrt.")] = None,
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

    from edge_sdk.runtime.config import config_from_dict, load_config
    from edge_sdk.runtime.pipeline import Pipeline
    from edge_sdk.runtime.sinks import JsonlSink, Sink, VideoSink
    from edge_sdk.runtime.sources import parse_uri

    parse_uri(source)  # a missing file or unknown scheme fails now, before any bundle is built
    console = Console(stderr=True)
    overrides: Dict[str, Any] = {"source": {"uri": source}}
    if loop:
        overrides["source"]["loop"] = True
    if fps is not None:
        overrides["source"]["fps"] = fps
    for key, value in (("precision", precision), ("backend", backend), ("max_frames", max_frames), ("threads", threads), ("mode", mode)):
        if value is not None:
            overrides[key] = value
    if bundle is not None:
        overrides["bundle"] = str(bundle)
    if no_cache:
        overrides["cache"] = {"enabled": False}
    cfg = load_config(config, overrides) if config is not None else config_from_dict(overrides, origin="command line")
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
