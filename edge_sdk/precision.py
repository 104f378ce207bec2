"""Precision names, declared here once and imported everywhere else, and the one policy that
decides which variant of a bundle runs.

* `PRECISIONS`: the model variants a bundle can hold (`edge_sdk.manifest.VARIANT_FILES`),
  most exact first.
* `BUILD_PRECISIONS`: what `edge-sdk build` and `edge-sdk engine` accept; `best` means every
  variant, with INT8 kept only when it passes the accuracy gate.
* `RUNTIME_PRECISIONS`: what the runtime accepts; `auto` lets the policy choose for the backend.

The policy: requested precision x the bundle's variants x the backend x what was measured on
the device -> the variant that runs, and why.

* :func:`choose_precision`: the variant for a concrete backend (the bundle's gated choice, the
  variants it holds, what each backend runs fastest).
* :func:`choose_engine_precision`: on the native TensorRT backend, the choice `edge-sdk engine`
  measured on this device comes first, and the engine to find or build may be the FP16+INT8 one.
* :func:`fastest_passing`: what `edge-sdk engine` measures the choice by: the fastest engine that
  passes the accuracy gate (edge_sdk.precision_choice chooses by it, edge_sdk.trt.choice checks a
  stored choice against it).

The reading of stored measurements and caches is the callers'; this module imports nothing but
the error types, so command-line help can be built from it at no cost.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from edge_sdk.errors import BackendError, ConfigError

PRECISIONS = ("fp32", "fp16", "int8")
BEST = "best"
BUILD_PRECISIONS = PRECISIONS + (BEST,)
AUTO = "auto"
RUNTIME_PRECISIONS = (AUTO,) + PRECISIONS

# Measured side by side in one run (`python bench/bench_build.py BUNDLE --threads 1`, the default
# CenterFace bundle at 640x384, ONNX Runtime 1.32 on an AMD EPYC without VNNI): median FP32 46.2 ms,
# FP16 46.6 ms (1.01x), INT8 Q/DQ 119.7 ms (2.59x).
CPU_REASON = (
    "FP32 is fastest on ONNX Runtime's CPU provider (measured: INT8 Q/DQ 2.6x slower without VNNI, "
    "FP16 no faster)"
)
FP16_ALSO_INT8 = "; the FP16+INT8 engine `edge-sdk engine` built for it (INT8, FP16 where a layer is not INT8)"


def check_precision(value: Any) -> None:
    """ConfigError naming the allowed values unless `value` is one of RUNTIME_PRECISIONS."""
    if value not in RUNTIME_PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(RUNTIME_PRECISIONS)}, got {value!r}")


def most_exact(held: Sequence[str]) -> str:
    """The most exact of the variants held."""
    return next(p for p in PRECISIONS if p in held)


def choose_precision(requested: str, bundle: Any, backend: str) -> Tuple[str, str]:
    """(variant, why) for a bundle on a concrete backend (`tensorrt`, `onnxruntime-tensorrt`,
    `onnxruntime-cuda` or `onnxruntime-cpu`).

    * `fp32`, `fp16`, `int8`: that variant (a bundle without it fails when the backend loads it).
    * `auto` on TensorRT (native or ONNX Runtime's execution provider): the bundle's gated choice
      (INT8 when it passed the builder's accuracy gate), else its most reduced variant. The native
      backend asks this only when `edge-sdk engine` has made no choice on the device
      (:func:`choose_engine_precision`).
    * `auto` on ONNX Runtime's CUDA provider: FP16 when the gated choice is a reduced precision
      (the provider has FP16 kernels but runs an INT8 Q/DQ model's layers in float), else FP32.
    * `auto` on ONNX Runtime's CPU provider: FP32 (see CPU_REASON).
    """
    check_precision(requested)
    if requested != AUTO:
        return requested, "requested"
    held = bundle.variants()
    if not held:
        raise BackendError(f"bundle {bundle.root} holds no model variant; rebuild it")
    gated = bundle.gated_precision
    if backend in ("tensorrt", "onnxruntime-tensorrt"):
        if gated is not None:
            note = bundle.accuracy_note(gated)
            return gated, "the bundle's gated choice" + (f" ({note})" if note else "")
        reduced = held[-1]  # VARIANT_FILES order: most exact first
        return reduced, f"the bundle records no gated choice; {reduced} is its most reduced variant"
    if backend == "onnxruntime-cuda":
        if gated in ("fp16", "int8") and "fp16" in held:
            note = bundle.accuracy_note("fp16")
            return "fp16", (
                "ONNX Runtime's CUDA provider has FP16 kernels but runs INT8 Q/DQ layers in float"
                + (f" (fp16: {note})" if note else "")
            )
        return most_exact(held), "the bundle's gated choice is full precision"
    return most_exact(held), CPU_REASON


class Measured(NamedTuple):
    """The precision `edge-sdk engine` chose on this device, as the runtime reads it
    (edge_sdk.trt.choice): the variant, why, and the summary describe() reports."""

    chosen: str
    reason: str
    summary: Dict[str, Any]


class EngineChoice(NamedTuple):
    """What runs on the native TensorRT backend: the bundle variant, the precision of the engine
    to find or build (`best`: the FP16+INT8 engine), why, the device choice summary (or None:
    the precision was not chosen on this device) and the frame memory `edge-sdk engine` measured
    on this device (edge_sdk.trt.choice.frame_memory; None: not measured). The measurement is of
    the device, not of the precision: it holds whichever precision runs."""

    variant: str
    engine: str
    reason: str
    device_choice: Optional[Dict[str, Any]]
    frame_memory: Optional[Dict[str, Any]] = None


def choose_engine_precision(requested: str, bundle: Any, measured: Optional[Measured] = None,
                            engine_cached: Callable[[str], bool] = lambda _precision: False) -> EngineChoice:
    """The native TensorRT backend's choice for `requested` (fp32, fp16 and int8 map to their own engines):

    1. `auto` with a choice `edge-sdk engine` (precision best) made and verified on this device
       (`measured`) that names a variant the bundle holds: that variant, and the engine it built;
    2. else the bundle's gated choice (:func:`choose_precision`); when that is INT8 and only the
       FP16+INT8 engine `edge-sdk engine` builds for a bundle without gate inputs is cached
       (`engine_cached(precision)`), that engine (it is the gated INT8, with FP16 where a layer is
       not INT8), instead of a second build.
    """
    if requested == AUTO and measured is not None and measured.chosen in bundle.variants():
        return EngineChoice(measured.chosen, measured.chosen, measured.reason, measured.summary)
    variant, reason = choose_precision(requested, bundle, "tensorrt")
    if requested == AUTO and variant == "int8" and not engine_cached(variant) and engine_cached(BEST):
        return EngineChoice(variant, BEST, reason + FP16_ALSO_INT8, None)
    return EngineChoice(variant, variant, reason, None)


def fastest_passing(rows: Sequence[Any], passed: Callable[[Any], bool], median_ms: Callable[[Any], float]) -> Optional[Any]:
    """The row to choose among measured engines: the fastest (lowest median) of those that pass
    the accuracy gate, the first of equals; None when none passes."""
    passing: List[Any] = [r for r in rows if passed(r)]
    return min(passing, key=median_ms) if passing else None
