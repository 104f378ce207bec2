"""`edge-sdk build` as a chain of steps: check the target and `--out` → resolve the model, its input
and decoder (:mod:`~edge_sdk.builder.inputs`) → prepare the graph → equalize an INT8 build's graph
(:mod:`~edge_sdk.builder.equalize`) → split and preprocess the images
(:mod:`~edge_sdk.builder.images`) → probe the preprocessing → FP16 and INT8 with their
accuracy gate (:mod:`~edge_sdk.builder.variants`, :mod:`~edge_sdk.builder.int8`) → assemble the
manifest (:mod:`~edge_sdk.builder.record`) → write the bundle → the engine where the host can
build it.

Every step is a function in its own module; this one only orders them. Nothing is written to
`--out` until every check has passed. Progress goes to a :class:`BuildProgress`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from edge_sdk.builder import bundle as bundle_mod
from edge_sdk.builder import graph as graph_mod
from edge_sdk.builder.images import BuildImages, default_calib_dir, list_images, load_images, probe_images, split_images
from edge_sdk.builder.inputs import ModelInputs, resolve_model
from edge_sdk.builder.progress import BuildProgress
from edge_sdk.builder.project import BuildConfig
from edge_sdk.builder.record import assemble, summarize
from edge_sdk.builder.reference import gate_reference
from edge_sdk.builder.variants import make_variants
from edge_sdk.errors import AccuracyGateError, CalibrationError, TargetError
from edge_sdk.manifest import Bundle
from edge_sdk.preprocess import InputSpec
from edge_sdk.targets import Target, get_target

# default_calib_dir, list_images and split_images are imported from here too (the CLI, benchmarks).
__all__ = ["BuildProgress", "BuildResult", "build", "default_calib_dir", "list_images", "split_images"]


@dataclass
class BuildResult:
    bundle: Bundle
    summary: Dict[str, Any]
    engine: Optional[Path] = None
    engine_message: str = ""
    warnings: List[str] = field(default_factory=list)


def build(config: BuildConfig, progress: Optional[BuildProgress] = None, cache_dir: Optional[Path] = None) -> BuildResult:
    """Run the whole host build for `config`; returns the written bundle and a summary."""
    progress = progress or BuildProgress(quiet=True)
    started = time.perf_counter()
    target = _check_target(config)
    inputs = resolve_model(config, cache_dir, progress)
    fp32, graph = _prepare_graph(inputs, target, progress)
    if config.max_batch > 1:
        from edge_sdk.builder.batch import check_fp32

        check_fp32(fp32, inputs.spec, config.max_batch)  # a graph that fixes its batch fails before the long steps
    if config.needs_int8:
        fp32, graph["equalization"] = _equalize(fp32, config.equalize, progress)
    images = load_images(config, inputs.spec, progress)
    probe = _probe(config, fp32, inputs, images, progress)
    variants = make_variants(config, target, fp32, inputs, images, progress)
    batch = _batch(config, variants, inputs, images, progress)
    recorded = assemble(config, target, inputs, graph, images, variants, probe, started)
    if batch is not None:
        recorded.manifest["batch"] = batch
    reference = gate_reference(recorded.manifest, fp32, inputs, images, config.min_f1)
    bundle = bundle_mod.write_bundle(config.out, recorded.manifest, variants.models, recorded.texts, recorded.tensors,
                                     reference)
    engine, engine_message = _maybe_engine(bundle.root, target, variants.precision, config)
    summary = summarize(bundle, recorded.manifest, engine, engine_message, progress.warnings)
    return BuildResult(bundle, summary, engine, engine_message, list(progress.warnings))


def _check_target(config: BuildConfig) -> Target:
    """The target, `--out` and `--dla-core` checked before any long work."""
    target = get_target(config.target)
    bundle_mod.check_output_dir(config.out)
    if config.dla_core is not None and config.dla_core >= target.dla_cores:
        raise TargetError(f"--dla-core {config.dla_core}: target {target.name} has {target.dla_cores} DLA core(s); use 0..{target.dla_cores - 1} or omit it")
    return target


def _prepare_graph(inputs: ModelInputs, target: Target, progress: BuildProgress) -> Tuple[Any, Dict[str, Any]]:
    """The optimized FP32 model every variant starts from, and the manifest's `graph` record."""
    from edge_sdk.builder.qdq import name_nodes

    fixed = graph_mod.fix_input(inputs.model, inputs.spec.name, inputs.spec.shape)
    graph_mod.check_supported(fixed, target.trt_major)
    before = graph_mod.graph_stats(fixed)
    upgraded = graph_mod.upgrade_opset(fixed)
    fp32, method = graph_mod.optimize(upgraded)
    name_nodes(fp32)  # stable layer names: the manifest's layer precisions refer to them
    after = graph_mod.graph_stats(fp32)
    progress.info(f"graph: {before.nodes} → {after.nodes} nodes, {after.parameters:,} parameters, "
                  f"{after.flops / 1e9:.2f} GFLOPs, opset {before.opset} → {after.opset} ({method})")
    return fp32, {"source": before.to_dict(), "optimized": after.to_dict(), "optimizer": method}


def _batch(config: BuildConfig, variants: Any, inputs: ModelInputs, images: Optional[BuildImages],
           progress: BuildProgress) -> Optional[Dict[str, Any]]:
    """With --max-batch N > 1: every variant given a symbolic batch (in `variants.models`, in place)
    and checked at N against batch 1 (:mod:`~edge_sdk.builder.batch`); the manifest's `batch`
    entry. None at N = 1: the variants keep their fixed batch of 1."""
    if config.max_batch == 1:
        return None
    from edge_sdk.builder import batch as batch_mod

    with progress.task(f"check the variants at batch {config.max_batch}", len(variants.models)) as advance:
        variants.models, check = batch_mod.batch_variants(variants.models, inputs.spec, config.max_batch,
                                                          images.gate if images is not None else None, advance)
    progress.info(batch_mod.describe(check, config.preferred_batch))
    return batch_mod.batch_record(1, config.preferred_batch, config.max_batch, check)


def _equalize(fp32: Any, enabled: bool, progress: BuildProgress) -> Tuple[Any, Dict[str, Any]]:
    """Cross-layer equalization (:mod:`~edge_sdk.builder.equalize`) of an INT8 build's FP32 graph:
    the bundle's model.onnx, its Q/DQ model and its calibration cache all describe the result."""
    from edge_sdk.builder.equalize import equalize

    if not enabled:
        return fp32, {"applied": False, "reason": "turned off ([build] equalize = false)"}
    equalized, report = equalize(fp32)
    progress.info(report.describe())
    record = report.to_dict()
    if not report.applied:
        record["reason"] = "no Conv → (Relu) → Conv pair to equalize"
    return equalized, record


def _probe(config: BuildConfig, fp32: Any, inputs: ModelInputs, images: Optional[BuildImages],
           progress: BuildProgress) -> Dict[str, Any]:
    """The preprocessing probe (edge_sdk.builder.probe) on up to 8 of :func:`probe_images`; never
    gate images. It is recorded in the manifest and changes nothing: advice of low confidence is a
    warning; of high confidence (the configured preprocessing makes the model fire on noise or
    find nothing, another does not) it stops the build (AccuracyGateError, exit 6) unless
    --force-preprocessing."""
    from edge_sdk.builder import probe as probe_mod

    if not config.probe:
        return probe_mod.skipped("turned off (--no-probe or [build] probe = false)").to_dict()
    spec, decoder_spec = inputs.spec, inputs.decoder_spec
    try:
        paths = probe_mod.pick_images(probe_images(config, images))
        reason = probe_mod.cannot_run(fp32, spec, decoder_spec, paths)
    except CalibrationError as exc:  # an FP32 build's --calib folder, read only by the probe
        reason = str(exc)
    if reason is not None:
        result = probe_mod.skipped(reason)
    else:
        with progress.task("preprocessing probe", probe_mod.runs(len(paths)) * len(probe_mod.candidates(spec))) as advance:
            result = probe_mod.probe(fp32, spec, decoder_spec, paths, advance, _preset_spec(inputs))
    if result.refuses() and not config.force_preprocessing:
        raise AccuracyGateError(result.refusal(config.source, inputs.provenance.input))
    warning = result.warning(config.source)
    if warning is not None:
        progress.warn(warning)
    elif result.verdict == "configured":
        conf = result.configured
        assert conf is not None
        progress.info(f"preprocessing probe: no alternative does clearly better than the configured {conf.name} "
                      f"({len(result.candidates) - 1} tried on {result.images} images; {conf.detections} detections)")
    else:
        progress.info(f"preprocessing probe: no candidate finds objects on {result.images} images; it says nothing here")
    return result.to_dict()


def _preset_spec(inputs: ModelInputs) -> Optional[Tuple[str, InputSpec]]:
    """The model's own preset and the input it gives (the probe's third kind of evidence)."""
    from edge_sdk.builder.presets import PRESETS

    preset = PRESETS.get(str(inputs.provenance.preset.get("name")))
    if preset is None:
        return None
    return preset.name, replace(inputs.spec, color=preset.color, mean=list(preset.mean), scale=list(preset.scale))


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
