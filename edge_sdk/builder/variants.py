"""The precision variants beside FP32, their accuracy, and the precision the bundle recommends.

FP16 is converted (:mod:`~edge_sdk.builder.fp16`) and compared with FP32 on the gate images;
INT8 is made and gated by :mod:`~edge_sdk.builder.int8` against the same FP32 reference. An FP32
build has no other variant and reads no images.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from edge_sdk.builder.evaluate import Reference, VariantReport
from edge_sdk.builder.images import BuildImages
from edge_sdk.builder.inputs import ModelInputs
from edge_sdk.builder.int8 import Int8Outcome, build_int8, count_detections
from edge_sdk.builder.progress import BuildProgress
from edge_sdk.builder.project import BuildConfig
from edge_sdk.precision import BEST
from edge_sdk.targets import Target

# Fewer FP32 detections than this on the gate images and f1_vs_fp32 says little.
FEW_DETECTIONS = 10


@dataclass
class Variants:
    """Every model the bundle ships and what the manifest says about their accuracy."""

    models: Dict[str, Any]  # variant → ModelProto, "fp32" first, then "fp16" and "int8" where built
    accuracy: Dict[str, Any]  # variant → the manifest's accuracy entry (the INT8 one with its gate)
    precision: str  # the variant the bundle recommends
    int8: Optional[Int8Outcome] = None


def make_variants(config: BuildConfig, target: Target, fp32: Any, inputs: ModelInputs,
                  images: Optional[BuildImages], progress: BuildProgress) -> Variants:
    """FP16 and, where `config` asks for it, INT8 from the optimized `fp32`, each compared with
    FP32 on the gate images; a failed INT8 gate raises unless --allow-accuracy-loss."""
    models: Dict[str, Any] = {"fp32": fp32}
    reports: Dict[str, VariantReport] = {}
    int8: Optional[Int8Outcome] = None
    if config.precision != "fp32":
        from edge_sdk.builder.fp16 import to_fp16

        assert images is not None  # every build but FP32 reads images
        spec, decoder = inputs.spec, inputs.decoder
        models["fp16"] = to_fp16(fp32)
        with progress.task("evaluate fp32 (gate images)", len(images.gate)) as advance:
            reference = Reference(fp32, spec.name, images.gate, images.gate_transforms, decoder, advance)
        found = count_detections(reference)
        if decoder is not None and found is not None and found < FEW_DETECTIONS:
            progress.warn(f"FP32 finds only {found} detections on the held-back images; f1_vs_fp32 says little. "
                          "Use calibration images that contain the objects the model detects")
        with progress.task("evaluate fp16", len(images.gate)) as advance:
            reports["fp16"] = reference.compare("fp16", models["fp16"], advance)
        if config.needs_int8:
            int8 = build_int8(config, target, fp32, spec, images, reference, decoder, progress)
            models["int8"] = int8.model
            reports["int8"] = int8.report
    accuracy: Dict[str, Any] = {"fp32": {"f1_vs_fp32": 1.0, "max_abs_err": 0.0, "cosine": 1.0}}
    accuracy.update({k: v.to_dict() for k, v in reports.items()})
    if int8 is not None:
        accuracy["int8"]["gate"] = int8.gate.to_dict()
    return Variants(models, accuracy, recommended_precision(config.precision, None if int8 is None else int8.gate.passed), int8)


def recommended_precision(requested: str, int8_passed: Optional[bool]) -> str:
    """The variant the bundle recommends for `--precision requested`: that variant itself, and
    for `best` INT8 unless it failed the gate (kept by --allow-accuracy-loss), then FP16."""
    if requested != BEST:
        return requested
    return "fp16" if int8_passed is False else "int8"
