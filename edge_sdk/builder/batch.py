"""Bundles for batches: the model variants made to take 1..max_batch inputs at a time, and checked.

The build runs at batch 1 throughout (the graph's optimization, calibration, the FP32-fallback
search, the accuracy gates, the reference); with `max_batch` above 1 the variants it keeps are then
given a symbolic batch dimension on their input and outputs
(:func:`~edge_sdk.builder.graph.symbolic_batch`), and each is run in ONNX Runtime on `max_batch`
inputs at once: row i of every output must equal what the batch-1 model gives for input i alone.
A graph that fixes its batch inside (a Reshape to a constant shape that starts with 1, a Flatten
whose rows are summed...) fails that check and the build is refused with the reason, first on the
FP32 graph before the long steps (:func:`check_fp32`), then per variant (:func:`batch_variants`).

The manifest's `batch` entry records the range ({min, opt, max}: `edge-sdk engine` writes it as
the engine's optimization profile) and the check. With `max_batch` 1 nothing here runs and the
bundle is what it was before batches were offered.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from edge_sdk.builder import graph as graph_mod
from edge_sdk.errors import ModelError
from edge_sdk.preprocess import InputSpec

BATCH_DIM = "batch"  # the symbol the variants' first dimension gets
# Row i at batch N and input i at batch 1 agree to this fraction of the output's largest magnitude
# (the same kernels run on each row: on the CPU they agree exactly, this leaves room for summation order).
ROW_TOLERANCE = 1e-4


@dataclass(frozen=True)
class BatchCheck:
    """What the check at the largest batch found: per variant, the largest difference between a row
    at batch `rows` and the same input at batch 1."""

    rows: int
    inputs: str  # what the rows were: the gate images, or seeded random pixels
    max_abs_diff: Dict[str, float]

    def to_dict(self) -> Dict[str, Any]:
        return {"rows": self.rows, "inputs": self.inputs,
                "max_abs_diff": {k: float(v) for k, v in self.max_abs_diff.items()}}


def batch_record(min_batch: int, opt_batch: int, max_batch: int, check: BatchCheck) -> Dict[str, Any]:
    """The manifest's `batch` entry."""
    return {"min": min_batch, "opt": opt_batch, "max": max_batch, "dim": BATCH_DIM, "check": check.to_dict()}


def random_rows(spec: InputSpec, rows: int, seed: int = 0) -> np.ndarray:
    """`rows` network inputs made from seeded random pixels 0..255 with the spec's mean and scale."""
    _, channels, height, width = spec.shape
    pixels = np.random.default_rng(seed).uniform(0, 255, size=(rows, channels, height, width)).astype(np.float32)
    mean = np.asarray(spec.mean, np.float32).reshape(1, -1, 1, 1)
    scale = np.asarray(spec.scale, np.float32).reshape(1, -1, 1, 1)
    return ((pixels - mean) * scale).astype(np.float32)


def image_rows(tensors: Sequence[np.ndarray], rows: int) -> np.ndarray:
    """`rows` inputs from the preprocessed images (each (1, C, H, W)): image i, and once they run
    out the images again mirrored left-right, so that no two rows are the same input."""
    picked = []
    for i in range(rows):
        x = np.asarray(tensors[i % len(tensors)], np.float32)
        picked.append(x if (i // len(tensors)) % 2 == 0 else x[..., ::-1])
    return np.ascontiguousarray(np.concatenate(picked, axis=0))


def compare_rows(single: Any, batched: Any, input_name: str, rows: np.ndarray, what: str) -> float:
    """Run `batched` on all of `rows` at once and `single` on each row alone; the largest difference
    found. ModelError naming the variant, the output and the row when a row differs, an output
    does not have one row per input, or ONNX Runtime cannot run the batch."""
    n = int(rows.shape[0])
    hint = (f"the model's graph fixes its batch (export it with a dynamic batch axis, e.g. torch.onnx.export's "
            f"dynamic_axes={{{input_name!r}: {{0: 'batch'}}}}), or build with --max-batch 1")
    try:
        together = graph_mod.session_from_model(batched).run(None, {input_name: rows})
    except ModelError:
        raise
    except Exception as exc:  # onnxruntime's own exception types: the graph cannot take the batch
        reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"the {what} model cannot run a batch of {n} in ONNX Runtime ({reason}): {hint}") from exc
    session = graph_mod.session_from_model(single)
    names = [o.name for o in session.get_outputs()]
    worst = 0.0
    for i in range(n):
        alone = session.run(None, {input_name: rows[i:i + 1]})
        for name, out, ref in zip(names, together, alone):
            if out.shape[:1] != (n,) or out.shape[1:] != ref.shape[1:]:
                raise ModelError(f"the {what} model's output {name!r} has shape {list(out.shape)} for a batch of {n} "
                                 f"inputs, {list(ref.shape)} for one: not one row per input; {hint}")
            diff = float(np.max(np.abs(out[i].astype(np.float64) - ref[0].astype(np.float64)))) if ref.size else 0.0
            bound = ROW_TOLERANCE * max(1.0, float(np.max(np.abs(ref)))) if ref.size else 0.0
            if not diff <= bound:
                raise ModelError(f"the {what} model's output {name!r} differs by {diff:.3g} between row {i} of a batch of "
                                 f"{n} and the same input alone (allowed {bound:.3g}): its rows are not computed on their "
                                 f"own; {hint}")
            worst = max(worst, diff)
    return worst


def check_fp32(fp32: Any, spec: InputSpec, max_batch: int) -> None:
    """Before the long steps: does the optimized FP32 graph take a batch of `max_batch`, row by row?
    ModelError with the reason otherwise (see :func:`compare_rows`)."""
    compare_rows(fp32, graph_mod.symbolic_batch(fp32, BATCH_DIM), spec.name, random_rows(spec, max_batch), "fp32")


def batch_variants(models: Dict[str, Any], spec: InputSpec, max_batch: int,
                   tensors: Optional[Sequence[np.ndarray]] = None,
                   advance: Optional[Callable[[int], None]] = None) -> Tuple[Dict[str, Any], BatchCheck]:
    """Every variant in `models` with a symbolic batch, each checked at `max_batch` against itself
    at batch 1 on the gate images (`tensors`; seeded random inputs when there are none: an FP32
    build reads no images). Returns the new models (same keys and order) and the check; `advance(1)`
    after each variant."""
    rows = image_rows(tensors, max_batch) if tensors else random_rows(spec, max_batch)
    batched: Dict[str, Any] = {}
    diffs: Dict[str, float] = {}
    for variant, model in models.items():
        batched[variant] = graph_mod.symbolic_batch(model, BATCH_DIM)
        diffs[variant] = compare_rows(model, batched[variant], spec.name, rows, variant)
        if advance is not None:
            advance(1)
    return batched, BatchCheck(max_batch, "gate images" if tensors else "seeded random inputs", diffs)


def describe(check: BatchCheck, opt_batch: int) -> str:
    """One line for the build's progress."""
    worst = max(check.max_abs_diff.values()) if check.max_abs_diff else 0.0
    names: List[str] = list(check.max_abs_diff)
    return (f"batch: {', '.join(names)} take 1..{check.rows} inputs (opt {opt_batch}); at {check.rows} each row equals "
            f"the input alone on the {check.inputs} (largest difference {worst:.3g})")
