"""From a bundle to a build plan: which of its models to build, with which builder flags, INT8
through a calibrator or from the Q/DQ model, and which layers to pin, on the installed TensorRT."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from edge_sdk.errors import BundleError, CalibrationError, ConfigError
from edge_sdk.manifest import VARIANT_FILES, Bundle
from edge_sdk.precision import BUILD_PRECISIONS
from edge_sdk.trt.api import TrtApi
from edge_sdk.trt.calibrator import CALIB_CACHE, calibration_tensors
from edge_sdk.trt.pins import PIN_PRECISIONS


@dataclass
class BuildPlan:
    """What to build for a requested precision on the installed TensorRT."""

    precision: str
    variant: str  # which bundle model: fp32 | fp16 | int8 (see manifest.VARIANT_FILES)
    fp16: bool = False
    int8: bool = False
    strongly_typed: bool = False
    calibrate: bool = False  # implicit INT8 through a calibrator (8.x)
    fp32_nodes: List[str] = field(default_factory=list)
    fp16_nodes: List[str] = field(default_factory=list)
    known_nodes: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    @property
    def pins(self) -> Dict[str, str]:
        """{ONNX node: "fp32" | "fp16"}: the layers the build pins to a precision."""
        out = {n: "fp16" for n in self.fp16_nodes}
        out.update({n: "fp32" for n in self.fp32_nodes})
        return out

    def to_dict(self) -> Dict[str, Any]:
        return {
            "precision": self.precision,
            "model": VARIANT_FILES[self.variant],
            "fp16": self.fp16,
            "int8": self.int8,
            "strongly_typed": self.strongly_typed,
            "int8_mode": "calibration" if self.calibrate else ("qdq" if self.variant == "int8" else None),
            "fp32_layers": len(self.fp32_nodes),
            "fp16_layers": len(self.fp16_nodes),
        }


def _int8_section(manifest: Dict[str, Any]) -> Tuple[List[str], Dict[str, str], Optional[Dict[str, str]]]:
    """(fp32_layers, layer_precisions, fallback_layers or None for a bundle written before it)."""
    section = manifest.get("int8") or {}
    fp32 = list(section.get("fp32_layers", manifest.get("fp32_layers", [])) or [])
    precisions = dict(section.get("layer_precisions", manifest.get("layer_precisions", {})) or {})
    fallback = section.get("fallback_layers")
    if fallback is None:
        return fp32, precisions, None
    if not isinstance(fallback, dict) or any(not isinstance(k, str) or v not in PIN_PRECISIONS for k, v in fallback.items()):
        raise BundleError(
            f"manifest.json int8.fallback_layers must map ONNX node names to {' or '.join(repr(p) for p in PIN_PRECISIONS)}; "
            "rebuild the bundle"
        )
    return fp32, precisions, dict(fallback)


def _pins_from_manifest(manifest: Dict[str, Any]) -> Tuple[Dict[str, str], List[str]]:
    """({node: "fp32" | "fp16"}, every node the manifest names). `int8.fallback_layers` when
    present ("fp16" where the target builds with FP16, "fp32" where FP16 failed the gate), plus
    `fp32_layers` (which lists the FP32 ones); older bundles: `fp32_layers` and the nodes
    `layer_precisions` keeps in FP32."""
    fp32, precisions, fallback = _int8_section(manifest)
    if fallback is None:
        pins = {n: "fp32" for n in set(fp32) | {n for n, p in precisions.items() if p == "fp32"}}
    else:
        pins = dict(fallback)
        pins.update({n: "fp32" for n in fp32})
    return pins, sorted(set(precisions) | set(pins))


def plan_build(bundle: Bundle, api: TrtApi, precision: str, dla_core: Optional[int] = None) -> BuildPlan:
    if precision not in BUILD_PRECISIONS:
        raise ConfigError(f"--precision must be one of {', '.join(BUILD_PRECISIONS)}, got {precision!r}")
    if dla_core is not None and precision == "fp32":
        raise ConfigError("the DLA runs FP16 and INT8 only: use --precision fp16, int8 or best with --dla-core")
    wants_int8 = precision in ("int8", "best")
    wants_fp16 = precision in ("fp16", "best")
    if api.implicit_int8:
        plan = BuildPlan(precision, "fp32", fp16=wants_fp16, int8=wants_int8)
        if wants_int8:
            has_calib = (bundle.root / CALIB_CACHE).is_file() or bool(calibration_tensors(bundle.root))
            if has_calib:
                plan.calibrate = True
                pins, plan.known_nodes = _pins_from_manifest(bundle.manifest)
                plan.fp32_nodes = sorted(n for n, p in pins.items() if p == "fp32")
                plan.fp16_nodes = sorted(n for n, p in pins.items() if p == "fp16")
                if plan.fp16_nodes and not plan.fp16:
                    plan.fp16 = True
                    plan.notes.append(
                        f"--precision int8: FP16 turned on for the {len(plan.fp16_nodes)} layer(s) the bundle keeps in FP16 "
                        "(int8.fallback_layers); the rest runs INT8"
                    )
            elif (bundle.root / VARIANT_FILES["int8"]).is_file():
                plan.variant = "int8"
                plan.notes.append("no calibration data in the bundle: INT8 from the Q/DQ model")
            else:
                raise CalibrationError(
                    f"bundle {bundle.root} has neither {CALIB_CACHE}, calib/*.npy nor {VARIANT_FILES['int8']}: "
                    "rebuild it with `edge-sdk build --precision int8` (or use --precision fp16)"
                )
    elif api.weak_flags:
        plan = BuildPlan(precision, "int8" if wants_int8 else "fp32", fp16=wants_fp16, int8=wants_int8)
        if wants_int8:
            # The Q/DQ model carries INT8 where the builder quantized. Outside the Q/DQ pairs a
            # weakly typed network with FP16 on may run the FP32 fallback layers in FP16: pin them.
            pins, known = _pins_from_manifest(bundle.manifest)
            if plan.fp16:
                plan.fp32_nodes = sorted(n for n, p in pins.items() if p == "fp32")
                plan.known_nodes = known
            elif any(p == "fp16" for p in pins.values()):
                plan.notes.append(
                    f"TensorRT {api.version} builds INT8 from the Q/DQ model: its FP16 fallback layers run in FP32 "
                    "unless FP16 is on (--precision best)"
                )
    else:
        # Strongly typed only: the model's own types decide.
        variant = "int8" if wants_int8 else ("fp16" if wants_fp16 else "fp32")
        plan = BuildPlan(precision, variant, strongly_typed=True)
        if precision == "best":
            plan.notes.append(
                f"TensorRT {api.version} follows the model's types: 'best' is the Q/DQ model, FP32 outside the quantized layers"
            )
    bundle.model_path(plan.variant)  # BundleError naming the missing variant
    return plan
