"""`edge-sdk verify`: run a backend and FP32 on the bundle's held-back gate inputs and compare them.

    verifier = Verifier(bundle)                       # reads reference.npz; FP32 once, lazily
    report = verifier.check(runner)                   # any backend: activate / infer / deactivate
    report.passed, report.to_dict()

Polygraphy's comparator, on the bundle's own data: the builder stored the gate images as network
inputs and FP32's outputs on them (:mod:`edge_sdk.builder.reference`, `reference.npz`). The
reference is ONNX Runtime FP32 run here on model.onnx when ONNX Runtime is installed, else the
stored FP32 outputs (float16: their rounding, about 5e-4 of a value, shows in the absolute
errors). Per output: max and mean absolute error and the cosine similarity; per task:
`f1_vs_fp32`, the decoder's detections matched with FP32's at IoU 0.5 exactly as the builder's
accuracy gate scores them (edge_sdk.builder.evaluate, which imports numpy only). The gate: f1
at least the manifest's (`reference.min_f1`, else the INT8 gate's threshold); as the builder's
gate does, the outputs' cosine counts only for a model without a decoder (at least
DEFAULT_MIN_COSINE) or when `min_cosine` is given (a healthy INT8 engine of a detector can be
at 0.94 on a box-offset output and still find the same objects); every max absolute error at
most `max_abs_err` when given.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from edge_sdk.errors import BundleError, ConfigError
from edge_sdk.manifest import REFERENCE, Bundle
from edge_sdk.npyfile import ArrayHeader, fits, npz_headers, read_npz
from edge_sdk.geometry import Placement

REFERENCES = ("auto", "onnxruntime", "bundle")
DEFAULT_MIN_F1 = 0.97  # the builder's default gate ([build] min_f1), for manifests that record none
DEFAULT_MIN_COSINE = 0.99  # the builder's gate on models without a decoder
MAX_IMAGES = 256
_INPUT_DTYPES = ("uint8", "float16", "float32")
_OUTPUT_DTYPES = ("float16", "float32")
_FLOAT_DTYPES = ("float16", "float32", "float64")
MAX_OUTPUTS = 64
# What reference.npz may hold once decompressed: the gate inputs (at most MAX_IMAGES) and FP32's
# outputs on them. Checked from the arrays' headers before any is read.
REFERENCE_MAX_BYTES = 1 << 30


def missing_reference(bundle: Bundle, why: str) -> BundleError:
    return BundleError(
        f"bundle {bundle.root} {why}, so there is nothing to verify an engine against: it was made by an older "
        "edge-sdk or by an FP32 build (which reads no images). Rebuild it with `edge-sdk build --precision best` "
        "(or fp16 / int8): the new bundle carries the gate inputs and FP32's outputs"
    )


@dataclass
class GateReference:
    """The bundle's gate inputs, their transforms and FP32's stored outputs (float32 here)."""

    inputs: List[np.ndarray]  # (1, C, H, W) float32 each
    transforms: List[Placement]
    output_names: List[str]
    outputs: List[List[np.ndarray]]  # per image, in output_names order, batch 1
    min_f1: Optional[float] = None  # the build's gate threshold
    stored_dtypes: List[str] = field(default_factory=list)  # of the stored outputs

    @property
    def images(self) -> int:
        return len(self.inputs)


def load_reference(bundle: Bundle) -> GateReference:
    """`reference.npz` of a loaded (checksummed) bundle, its layout checked against the manifest;
    BundleError naming the problem and the fix otherwise."""
    section = bundle.get("reference")
    if REFERENCE not in bundle.files:
        raise missing_reference(bundle, f"carries no {REFERENCE} (gate inputs and FP32 reference outputs)")
    path = bundle.root / REFERENCE
    origin = str(path)
    spec = bundle.inputs[0] if bundle.inputs else None
    if spec is None:
        raise BundleError(f"the manifest of {bundle.root} lists no input; rebuild the bundle")
    headers = npz_headers(path, REFERENCE_MAX_BYTES, BundleError)
    check_reference_headers(bundle, headers, origin)
    names = read_npz(path, {"output_names": headers["output_names"]}, BundleError)["output_names"]
    if names.ndim != 1 or names.dtype.kind != "U" or len(set(names.tolist())) != len(names) or not len(names):
        raise _bad(origin, "output_names must be a list of distinct names")
    output_names = [str(s) for s in names.tolist()]
    listed = {o.get("name"): o.get("shape") for o in bundle.get("outputs") or [] if isinstance(o, dict)}
    if listed and sorted(listed) != sorted(output_names):
        raise _bad(origin, f"outputs {output_names} differ from the manifest's {list(listed)}")
    for k, name in enumerate(output_names):  # each output of the manifest's shape, before it is read
        want, got = listed.get(name), headers[f"output_{k}"].shape
        if isinstance(want, list) and all(isinstance(d, int) and d > 0 for d in want[1:]) \
                and list(got[1:]) != list(want[1:]):
            raise _bad(origin, f"output_{k} ({name}) has shape {list(got)}, the manifest says {want} (rows: images)")
    arrays = read_npz(path, headers, BundleError)
    bad = partial(_bad, origin)
    x, tr = arrays["inputs"], arrays["transforms"]
    n = int(x.shape[0])
    if tr.shape != (n, 6) or not np.issubdtype(tr.dtype, np.floating) or not np.isfinite(tr).all() \
            or (tr[:, [0, 1, 4, 5]] <= 0).any():
        raise bad(f"transforms must be ({n}, 6) finite floats with positive scales and frame sizes, got {list(tr.shape)}")
    stacked = []
    for k, name in enumerate(output_names):
        out = arrays.get(f"output_{k}")
        if out is None or out.dtype.name not in _OUTPUT_DTYPES or out.ndim < 1 or out.shape[0] != n:
            raise bad(f"output_{k} ({name}) must be float16/float32 with {n} rows")
        stacked.append(out.astype(np.float32))
    inputs = [x[i : i + 1].astype(np.float32) for i in range(n)]
    transforms = [Placement.affine(float(r[0]), float(r[1]), float(r[2]), float(r[3]), int(r[4]), int(r[5])) for r in tr]
    outputs = [[o[i : i + 1] for o in stacked] for i in range(n)]
    min_f1 = section.get("min_f1") if isinstance(section, dict) else None
    if not (isinstance(min_f1, (int, float)) and not isinstance(min_f1, bool) and 0.0 <= min_f1 <= 1.0):
        min_f1 = None
    dtypes = sorted({arrays[f"output_{k}"].dtype.name for k in range(len(output_names))})
    return GateReference(inputs, transforms, output_names, outputs, min_f1, dtypes)


def _bad(origin: str, what: str) -> BundleError:
    return BundleError(f"{origin}: {what}; rebuild the bundle")


def check_reference_headers(bundle: Bundle, headers: Dict[str, ArrayHeader], origin: str) -> None:
    """The arrays of reference.npz, from their headers (nothing read yet): `inputs` of the
    manifest's input shape, `transforms`, `output_names` and one `output_k` per name with a row
    per image, and nothing else. BundleError naming the array otherwise."""
    bad = partial(_bad, origin)
    for key in ("inputs", "transforms", "output_names"):
        if key not in headers:
            raise bad(f"no array {key!r}")
    x, names = headers["inputs"], headers["output_names"]
    want = tuple(int(d) for d in bundle.inputs[0].shape[1:])
    if not fits(x, _INPUT_DTYPES, (None,) + want) or not 1 <= x.shape[0] <= MAX_IMAGES:
        raise bad(f"inputs are {x.dtype.name} {list(x.shape)}, expected (N <= {MAX_IMAGES}, {', '.join(map(str, want))}) "
                  f"of {'/'.join(_INPUT_DTYPES)}")
    n = x.shape[0]
    if not fits(headers["transforms"], _FLOAT_DTYPES, (n, 6)):
        raise bad(f"transforms must be ({n}, 6) floats, got {headers['transforms'].dtype.name} {list(headers['transforms'].shape)}")
    if names.dtype.kind != "U" or len(names.shape) != 1 or not 1 <= names.shape[0] <= MAX_OUTPUTS \
            or names.nbytes > MAX_OUTPUTS * 4096:
        raise bad(f"output_names must be a list of 1 to {MAX_OUTPUTS} names")
    outputs = [f"output_{k}" for k in range(names.shape[0])]
    for key in outputs:
        out = headers.get(key)
        if out is None or out.dtype.name not in _OUTPUT_DTYPES or len(out.shape) < 1 or out.shape[0] != n:
            raise bad(f"{key} must be float16/float32 with {n} rows")
    extra = sorted(set(headers) - {"inputs", "transforms", "output_names"} - set(outputs))
    if extra:
        raise bad(f"unexpected arrays {extra}")


def gate_threshold(bundle: Bundle, reference: Optional[GateReference] = None) -> float:
    """The f1_vs_fp32 gate of the bundle: the build's min_f1 (reference section), else the INT8
    gate's threshold in `accuracy`, else DEFAULT_MIN_F1."""
    if reference is not None and reference.min_f1 is not None:
        return float(reference.min_f1)
    gate = ((bundle.get("accuracy") or {}).get("int8") or {}).get("gate") if isinstance(bundle.get("accuracy"), dict) else None
    value = gate.get("threshold") if isinstance(gate, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0:
        return float(value)
    return DEFAULT_MIN_F1


def run_runner(runner: Any, input_name: str, inputs: Sequence[np.ndarray], names: Sequence[str]) -> List[List[np.ndarray]]:
    """Each input through an active runner; outputs copied (backends reuse their buffers) and put
    in `names` order. BundleError when the runner's outputs are not those names."""
    have = list(runner.output_names)
    if sorted(have) != sorted(names):
        raise BundleError(f"the backend's outputs {have} are not the reference's {list(names)}; rebuild the bundle")
    order = [have.index(n) for n in names]
    results = []
    for x in inputs:
        outs = runner.infer({input_name: x})
        results.append([np.array(outs[k], dtype=np.float32, copy=True) for k in order])
    return results


@dataclass
class VerifyReport:
    """A runner's outputs on the gate inputs against FP32's, and the verdict."""

    backend: Dict[str, Any]  # the runner's describe()
    reference: str  # where FP32's outputs came from
    images: int
    outputs: List[Any]  # edge_sdk.builder.evaluate.OutputError, one per output
    match: Optional[Dict[str, float]]  # tp/fp/fn/precision/recall/f1 against FP32, None without a decoder
    detections: int
    reference_detections: int
    min_f1: float
    min_cosine: Optional[float]
    max_abs_err: Optional[float]
    failures: List[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def f1(self) -> Optional[float]:
        return None if self.match is None else float(self.match["f1"])

    def to_dict(self) -> Dict[str, Any]:
        return {
            "passed": self.passed,
            "backend": self.backend.get("backend"),
            "precision": self.backend.get("precision"),
            "precision_reason": self.backend.get("precision_reason"),
            "engine": self.backend.get("engine"),
            "reference": self.reference,
            "images": self.images,
            "f1_vs_fp32": None if self.f1 is None else round(self.f1, 4),
            "match": None if self.match is None else {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.match.items()},
            "detections": self.detections,
            "reference_detections": self.reference_detections,
            "outputs": {o.name: {"max_abs_err": _g(o.max_abs_err), "mean_abs_err": _g(o.mean_abs_err),
                                 "cosine": round(o.cosine, 6)} for o in self.outputs},
            "tolerances": {"min_f1": self.min_f1, "min_cosine": self.min_cosine, "max_abs_err": self.max_abs_err},
            "failures": list(self.failures),
        }


def _g(v: float) -> float:
    return float(f"{v:.6g}")


class Verifier:
    """Compares runners with FP32 on a bundle's gate inputs (see the module docstring).

    `reference`: "onnxruntime" (FP32 model.onnx run here on ONNX Runtime's CPU provider),
    "bundle" (the stored outputs) or "auto" (ONNX Runtime when it imports). `min_f1`: None for
    the bundle's gate (:func:`gate_threshold`)."""

    def __init__(self, bundle: Bundle, reference: str = "auto", min_f1: Optional[float] = None,
                 min_cosine: Optional[float] = None, max_abs_err: Optional[float] = None) -> None:
        if reference not in REFERENCES:
            raise ConfigError(f"--reference must be one of {', '.join(REFERENCES)}, got {reference!r}")
        for name, value, low, high in (("--min-f1", min_f1, 0.0, 1.0), ("--min-cosine", min_cosine, -1.0, 1.0)):
            if value is not None and not low <= value <= high:
                raise ConfigError(f"{name} must be between {low:g} and {high:g}, got {value}")
        if max_abs_err is not None and not max_abs_err >= 0.0:
            raise ConfigError(f"--max-abs-err must be a non-negative number, got {max_abs_err}")
        self.bundle = bundle
        self.data = load_reference(bundle)
        self.input_name = bundle.inputs[0].name
        self.min_f1 = gate_threshold(bundle, self.data) if min_f1 is None else float(min_f1)
        self.max_abs_err = max_abs_err
        self.reference = self._resolve(reference)
        self._ref_outputs: Optional[List[List[np.ndarray]]] = None
        self._ref_detections: Optional[List[Any]] = None
        self.decoder = self._decoder()
        if min_cosine is None and self.decoder is None:
            min_cosine = DEFAULT_MIN_COSINE  # no task-level signal: the outputs themselves are the gate
        self.min_cosine: Optional[float] = None if min_cosine is None else float(min_cosine)

    @staticmethod
    def _resolve(reference: str) -> str:
        if reference != "auto":
            return reference
        from edge_sdk import _imports

        return "onnxruntime" if _imports.available("onnxruntime") else "bundle"

    def _decoder(self) -> Any:
        spec = self.bundle.decoder
        if not spec.get("type"):
            return None
        from edge_sdk.decoders import make_decoder

        return make_decoder(spec, self.bundle.inputs[0])

    def reference_outputs(self) -> List[List[np.ndarray]]:
        """FP32's outputs on the gate inputs (computed once)."""
        if self._ref_outputs is None:
            if self.reference == "bundle":
                self._ref_outputs = self.data.outputs
            else:
                from edge_sdk.runtime.backends import select_backend

                with select_backend("onnxruntime-cpu", bundle=self.bundle, precision="fp32") as fp32:
                    self._ref_outputs = run_runner(fp32, self.input_name, self.data.inputs, self.data.output_names)
        return self._ref_outputs

    @property
    def reference_label(self) -> str:
        if self.reference == "bundle":
            return f"the bundle's stored FP32 outputs ({REFERENCE}, {'/'.join(self.data.stored_dtypes)})"
        return "ONNX Runtime FP32 (CPU) on model.onnx"

    def check(self, runner: Any) -> VerifyReport:
        """Run `runner` (activated here when it is not yet) on every gate input and compare."""
        from edge_sdk.builder.evaluate import agreement, decode_all, output_errors

        ref = self.reference_outputs()
        if not runner.is_active:
            runner.activate()
        test = run_runner(runner, self.input_name, self.data.inputs, self.data.output_names)
        errors = output_errors(self.data.output_names, ref, test)
        match, found, expected = None, 0, 0
        if self.decoder is not None:
            if self._ref_detections is None:
                self._ref_detections = decode_all(self.decoder, ref, self.data.transforms)
            dets = decode_all(self.decoder, test, self.data.transforms)
            match = agreement(dets, self._ref_detections)
            found, expected = sum(len(d) for d in dets), sum(len(d) for d in self._ref_detections)
        failures = []
        if match is not None and match["f1"] < self.min_f1:
            failures.append(f"f1_vs_fp32 {match['f1']:.4f} < {self.min_f1:g}")
        for e in errors:
            if self.min_cosine is not None and e.cosine < self.min_cosine:
                failures.append(f"{e.name}: cosine {e.cosine:.6f} < {self.min_cosine:g}")
            if self.max_abs_err is not None and e.max_abs_err > self.max_abs_err:
                failures.append(f"{e.name}: max abs error {e.max_abs_err:.4g} > {self.max_abs_err:g}")
        return VerifyReport(dict(runner.describe()), self.reference_label, self.data.images, errors, match, found,
                            expected, self.min_f1, self.min_cosine, self.max_abs_err, failures)


def verify_bundle(bundle: Bundle, backend: str = "tensorrt", precision: str = "auto", reference: str = "auto",
                  min_f1: Optional[float] = None, min_cosine: Optional[float] = None,
                  max_abs_err: Optional[float] = None, **backend_options: Any) -> VerifyReport:
    """What `edge-sdk verify` does: the backend `backend` on the variant `precision` picks (as
    `run` would), checked against FP32."""
    from edge_sdk.runtime.backends import select_backend

    verifier = Verifier(bundle, reference, min_f1, min_cosine, max_abs_err)
    verifier.reference_outputs()  # FP32 first: its errors (no ONNX Runtime...) before a long engine build
    with select_backend(backend, bundle=bundle, precision=precision, **backend_options) as runner:
        return verifier.check(runner)


def report_lines(report: VerifyReport) -> List[str]:
    """The report as short lines for a terminal."""
    d = report.to_dict()
    lines = [f"{d['backend']} {d['precision']} against {d['reference']} on {d['images']} gate image(s)"]
    if d.get("engine"):
        lines.append(f"  engine: {d['engine']}")
    width = max((len(n) for n in d["outputs"]), default=6)
    lines.append(f"  {'output':<{width}}  {'max |err|':>10}  {'mean |err|':>10}  {'cosine':>9}")
    for name, o in d["outputs"].items():
        lines.append(f"  {name:<{width}}  {o['max_abs_err']:>10.4g}  {o['mean_abs_err']:>10.4g}  {o['cosine']:>9.6f}")
    if d["f1_vs_fp32"] is not None:
        lines.append(f"  f1_vs_fp32 {d['f1_vs_fp32']:.4f} (gate {report.min_f1:g}): {report.detections} detections, "
                     f"FP32 {report.reference_detections}")
    lines.append("  passed" if report.passed else "  FAILED: " + "; ".join(report.failures))
    return lines


__all__ = ["GateReference", "Verifier", "VerifyReport", "gate_threshold", "load_reference", "report_lines",
           "verify_bundle"]
