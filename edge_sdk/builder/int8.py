"""The INT8 variant: calibrate, quantize, fall back, gate.

1. Ranges from the calibration images (:mod:`~edge_sdk.builder.calibration`), one rule for every
   tensor (minmax, entropy, percentile) or each tensor's MSE-optimal range (`mse`), written as
   the TensorRT calibration cache when the target's TensorRT version is known
   (:mod:`~edge_sdk.builder.calib_cache`), and as ranges.json. The FP32 graph they describe is
   already equalized (:mod:`~edge_sdk.builder.equalize`, in the pipeline's graph step).
2. An explicit Q/DQ ONNX (:mod:`~edge_sdk.builder.qdq`).
3. With `--int8-fallback auto`, when it scores below `min_f1 + search_margin` on the search
   images, layers leave INT8 (:mod:`~edge_sdk.builder.sensitivity`): ranked by sensitivity per
   FLOP on calibration images, the cheapest that restore accuracy first, scored on the search
   images. They run in FP16 where the device builds with FP16 (`--precision best`; the search and
   the gate run them through float16, :func:`~edge_sdk.builder.fp16.layers_in_fp16`), in FP32
   with `--precision int8` or where FP16 cannot reach the target.
4. The gate judges the result on the gate images, which neither the calibration nor the search
   has seen (:mod:`~edge_sdk.builder.evaluate`), and the calibrated ranges' coverage of their
   activations is measured. A failed gate stops the build (exit 6, naming the layers that still
   hold accuracy back) unless --allow-accuracy-loss.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np

from edge_sdk.builder.evaluate import GateResult, Reference, VariantReport, enforce, gate
from edge_sdk.builder.images import BuildImages
from edge_sdk.builder.progress import BuildProgress
from edge_sdk.builder.project import BuildConfig
from edge_sdk.errors import CalibrationError
from edge_sdk.precision import BEST
from edge_sdk.preprocess import InputSpec
from edge_sdk.targets import Target

# Calibration images used to rank layers by INT8 sensitivity (each layer costs a pass over them).
RANK_IMAGES = 8
# Calibration images a per-tensor range search needs (fewer: its ranges follow single images).
MIN_SEARCH_IMAGES = {"mse": 16}


@dataclass
class Int8Outcome:
    """The INT8 model and everything the manifest and the bundle's files say about it."""

    model: Any
    report: VariantReport  # against FP32 on the gate images
    gate: GateResult
    algorithm: str  # the TensorRT calibrator the cache is written for
    fp32_layers: List[str]  # only the layers that must run in FP32
    fallback_layers: Dict[str, str]  # layer kept out of INT8 → "fp16" | "fp32" (its precision on the device)
    layer_precisions: Dict[str, str]
    layers: Dict[str, Dict[str, Any]]  # layer → precision, FLOPs, sensitivity
    int8_flop_share: float
    coverage: Dict[str, float]  # tensor → fraction of the gate images' activations outside its range
    calib_cache: Optional[str]  # None when the target's TensorRT version is not known on the host
    ranges_json: str
    search: List[Dict[str, Any]]  # each try of the fallback search
    search_target: Optional[float] = None
    search_f1: Optional[float] = None
    search_reference_detections: Optional[int] = None
    gate_reference_detections: Optional[int] = None


def build_int8(config: BuildConfig, target: Target, fp32: Any, spec: InputSpec, images: BuildImages,
               reference: Reference, decoder: Any, progress: BuildProgress) -> Int8Outcome:
    """Calibrate, quantize, and (with the fallback on) take the layers that buy the most accuracy
    per FLOP out of INT8 until the SEARCH images reach `min_f1 + search_margin`; the gate then
    judges the result on the gate images (`reference`, FP32's outputs on them), which neither the
    calibration nor the search has seen."""
    from edge_sdk.builder import calib_cache, calibration, graph, qdq, sensitivity
    from edge_sdk.builder.fp16 import layers_in_fp16

    check_calibration_count(config.calib_method, len(images.calibration))
    search_ref: Optional[Reference] = None
    if images.search:
        with progress.task("evaluate fp32 (search images)", len(images.search)) as advance:
            search_ref = Reference(fp32, spec.name, images.search, images.search_transforms, decoder, advance)
    feeds = [{spec.name: t} for t in images.calibration]
    with progress.task(f"calibrate ({config.calib_method})", calibration.PASSES * len(feeds)) as advance:
        result = calibration.collect_ranges(fp32, feeds, method=config.calib_method, percentile=config.percentile,
                                            progress=advance)
    ranges = result.ranges
    algorithm = calib_cache.cache_algorithm(config.calib_method)
    # The host target's TensorRT version is only known on the machine that builds the engine.
    cache_text = None
    if target.tensorrt is not None:
        cache_text = calib_cache.format_calib_cache(ranges, target.calib_cache_header(algorithm))
    flops = graph.layer_flops(fp32)
    kept_as = fallback_precision(config.precision)
    exclude: List[str] = []
    sensitivities: Dict[str, float] = {}
    int8_model = qdq.quantize_qdq(fp32, ranges, exclude)
    search_log: List[Dict[str, Any]] = []
    search_target: Optional[float] = None
    search_f1: Optional[float] = None
    noise = reference.noise()
    if noise is not None:
        progress.warn(f"{noise}: the INT8 gate cannot pass on agreement with it; no fallback search")
    if config.int8_fallback == "auto" and search_ref is not None and noise is None:
        search_target = round(min(1.0, config.min_f1 + config.search_margin), 6)
        with progress.task("evaluate int8 (search images)", len(search_ref.tensors)) as advance:
            first = search_ref.compare("int8", int8_model, advance)
        search_f1 = first.f1 if first.f1 is not None else first.cosine
        if search_f1 < search_target:
            progress.info(f"int8 scores {search_f1:.4f} on the search images < {search_target} (gate {config.min_f1} + margin "
                          f"{config.search_margin}): searching layers to keep in {kept_as.upper()}")
            # Rank on calibration images, score on the search images: the gate images stay unseen.
            rank_feeds = feeds if len(feeds) <= RANK_IMAGES else [feeds[i] for i in np.linspace(0, len(feeds) - 1, RANK_IMAGES).round().astype(int)]
            with progress.task("rank layers by INT8 sensitivity", len(qdq.quantizable_nodes(fp32))) as advance:
                ranking = sensitivity.rank_layers(fp32, ranges, rank_feeds, progress=advance)
            sensitivities = {name: float(value) for name, value in ranking}
            ranking = sensitivity.rank_by_cost(ranking, flops)
            simulate = layers_in_fp16 if kept_as == "fp16" else None
            exclude, search_f1, history = sensitivity.search_fallback(fp32, ranges, ranking, search_ref.score, search_target,
                                                                      simulate=simulate)
            search_log = [dict(h, precision=kept_as) for h in history]
            if search_f1 < search_target and kept_as == "fp16":
                progress.info(f"with the layers in FP16 the search reaches only {search_f1:.4f}: searching again with them in FP32")
                exclude, search_f1, history = sensitivity.search_fallback(fp32, ranges, ranking, search_ref.score, search_target)
                search_log += [dict(h, precision="fp32") for h in history]
                kept_as = "fp32"
            progress.info(f"int8 fallback: {len(exclude)} of {len(ranking)} layers kept in {kept_as.upper()} "
                          f"({int8_flop_share(flops, exclude):.1%} of the FLOPs stay INT8) → {search_f1:.4f} on the search images")
    int8_model = qdq.quantize_qdq(fp32, ranges, exclude)
    fallback = {name: kept_as for name in exclude}
    gate_model = layers_in_fp16(int8_model, exclude) if exclude and kept_as == "fp16" else int8_model
    with progress.task("evaluate int8 (gate images)", len(images.gate)) as advance:
        report = reference.compare("int8", gate_model, advance)
    result_gate = gate(report, config.min_f1, noise=noise)
    n_gate = count_detections(reference)
    progress.info(f"int8 gate: {result_gate.metric} {result_gate.value:.4f} (>= {result_gate.threshold} needed) on "
                  f"{len(images.gate)} gate images" + ("" if n_gate is None else f" ({n_gate} FP32 detections)")
                  + (", none of them seen by the calibration or the search" if search_ref is not None else ", unseen by the calibration")
                  + (f"; {len(exclude)} layer(s) in {kept_as.upper()} as on the device" if exclude else ""))
    gate_feeds = [{spec.name: t} for t in images.gate]
    with progress.task("coverage", len(gate_feeds)) as advance:
        coverage = calibration.coverage(fp32, ranges, gate_feeds, progress=advance)
    worst = calibration.worst_clipped(coverage, config.coverage_warn, top=3)
    if worst:
        progress.warn(f"calibration coverage: more than {config.coverage_warn:.0%} of held-back activations fall outside the "
                      "calibrated range in " + ", ".join(f"{k} ({v:.1%})" for k, v in worst)
                      + "; add calibration images closer to the deployment scene")
    share = int8_flop_share(flops, exclude)
    report.extra["fallback_layers"] = len(exclude)
    report.extra["fp32_layers"] = len(exclude) if kept_as == "fp32" else 0
    report.extra["int8_flop_share"] = round(share, 4)
    if search_f1 is not None:
        report.extra["search_f1"] = round(float(search_f1), 4)
    enforce(result_gate, "int8", config.allow_accuracy_loss, config.int8_fallback == "auto",
            held_back=holding_back(sensitivities, exclude), share=share)
    if result_gate.refused:
        progress.warn(f"INT8 {result_gate.metric} {result_gate.value:.4f} is no pass ({result_gate.refused}); "
                      "kept because of --allow-accuracy-loss")
    elif not result_gate.passed:
        progress.warn(f"INT8 {result_gate.metric} {result_gate.value:.4f} is below {result_gate.threshold}; kept because of --allow-accuracy-loss")
    return Int8Outcome(
        model=int8_model, report=report, gate=result_gate, algorithm=algorithm,
        fp32_layers=[n for n in exclude if fallback[n] == "fp32"], fallback_layers=fallback,
        layer_precisions=dict(qdq.layer_precisions(fp32, exclude, kept_as=kept_as)),
        layers=layer_table(flops, sensitivities, exclude, kept_as), int8_flop_share=round(share, 4),
        coverage=coverage, calib_cache=cache_text,
        ranges_json=json.dumps(result.to_json(), indent=2) + "\n", search=search_log, search_target=search_target,
        search_f1=None if search_f1 is None else round(float(search_f1), 4),
        search_reference_detections=count_detections(search_ref), gate_reference_detections=n_gate,
    )


def fallback_precision(precision: str) -> str:
    """What layers kept out of INT8 run in on the device: FP16 when the engine is built with FP16
    enabled (`best`), FP32 for an INT8-only build."""
    return "fp16" if precision == BEST else "fp32"


def check_calibration_count(method: str, count: int) -> None:
    """CalibrationError when `method` searches each tensor's range on fewer images than it needs."""
    need = MIN_SEARCH_IMAGES.get(method, 1)
    if count < need:
        raise CalibrationError(
            f"calibration method {method!r} searches a range per tensor and needs at least {need} calibration images; "
            f"got {count}. Add images to the --calib folder (about twice as many: a quarter are held back for the gate "
            f"and a quarter for the fallback search), or use --calib-method minmax")


def int8_flop_share(flops: Dict[str, int], exclude: List[str]) -> float:
    """Fraction of the quantizable layers' FLOPs that run in INT8 (1.0 with nothing excluded)."""
    total = sum(flops.values())
    if total <= 0:
        return 1.0
    return 1.0 - sum(flops.get(n, 0) for n in set(exclude)) / total


def layer_table(flops: Dict[str, int], sensitivities: Dict[str, float], exclude: List[str], kept_as: str) -> Dict[str, Dict[str, Any]]:
    """The manifest's per-layer record: precision, FLOPs, sensitivity (None when not ranked)."""
    out = set(exclude)
    return {name: {"precision": kept_as if name in out else "int8", "flops": int(f),
                   "sensitivity": None if name not in sensitivities else float(f"{sensitivities[name]:.6g}")}
            for name, f in flops.items()}


def holding_back(sensitivities: Dict[str, float], exclude: List[str], top: int = 5) -> List[str]:
    """The layers that hold accuracy back: the excluded ones when the fallback ran, else the most
    sensitive ranked ones (empty when nothing was ranked)."""
    if exclude:
        return list(exclude)[:top] + ([f"… {len(exclude) - top} more"] if len(exclude) > top else [])
    ranked = sorted(sensitivities, key=lambda n: -sensitivities[n])
    return ranked[:top]


def count_detections(reference: Optional[Reference]) -> Optional[int]:
    """FP32's detections on a reference's images (None without a decoder or a reference)."""
    if reference is None or reference.detections is None:
        return None
    return int(sum(len(d) for d in reference.detections))
