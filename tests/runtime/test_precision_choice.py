"""Which variant of a bundle runs: `choose_precision` and `select_backend(precision=...)`.

The bundles here hold all three variants (copies of one tiny model: the file name tells which
was picked) and a manifest whose gated choice is INT8, as `edge-sdk build` writes one whose INT8
variant passed the accuracy gate.
"""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from edge_sdk.errors import BackendError, BundleError, ConfigError
from edge_sdk.manifest import MANIFEST, Bundle
from edge_sdk.precision import FP16_ALSO_INT8, Measured, choose_engine_precision, fastest_passing
from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime import backends
from edge_sdk.runtime.backends import Backend, choose_precision, select_backend
from edge_sdk.runtime.backends import onnxruntime as ort_backend
from edge_sdk.runtime.backends.onnxruntime import OnnxRuntimeBackend
from runtime_factories import CENTERFACE_DECODER, tiny_centerface_model, write_bundle

CPU, CUDA, TRT = "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"
FILES = {"fp32": "model.onnx", "fp16": "model.fp16.onnx", "int8": "model.int8.qdq.onnx"}
# What the builder writes when INT8 passes its gate (edge_sdk/builder/variants.py and record.py).
GATED_INT8 = {
    "precision": "int8",
    "requested_precision": "best",
    "variants": ["fp32", "fp16", "int8"],
    "accuracy": {
        "fp32": {"f1_vs_fp32": 1.0, "cosine": 1.0},
        "fp16": {"f1_vs_fp32": 0.9991, "cosine": 0.99993},
        "int8": {"f1_vs_fp32": 0.9815, "cosine": 0.889,
                 "gate": {"passed": True, "metric": "f1_vs_fp32", "value": 0.9815, "threshold": 0.97}},
    },
}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_centerface_model(tmp_path_factory.mktemp("precision") / "tiny.onnx")


def make_bundle(root: Path, model: Path, variants: List[str], manifest: Dict[str, Any]) -> Bundle:
    extra = [v for v in variants if v != "fp32"]
    write_bundle(root, model, InputSpec(name="input.1", shape=[1, 3, 32, 64]), CENTERFACE_DECODER, extra_variants=extra)
    doc = json.loads((root / MANIFEST).read_text())
    if "fp32" not in variants:
        (root / "model.onnx").unlink()
        del doc["files"]["model.onnx"]
    doc.pop("precision")
    doc.update(manifest)
    (root / MANIFEST).write_text(json.dumps(doc))
    return Bundle.load(root)


@pytest.fixture
def gated_int8(tmp_path: Path, model: Path) -> Bundle:
    return make_bundle(tmp_path / "bundle", model, ["fp32", "fp16", "int8"], GATED_INT8)


@pytest.fixture
def providers(monkeypatch: pytest.MonkeyPatch):
    """Set what this onnxruntime claims to offer."""
    def set_(*names: str) -> None:
        monkeypatch.setattr(ort_backend, "available_providers", lambda: list(names))

    set_(CPU)
    return set_


@pytest.fixture
def no_tensorrt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # `import tensorrt` fails, installed or not


class FakeTensorRTBackend(Backend):
    """Stands in for the native TensorRT backend module: records what it was asked to build."""

    name = "tensorrt"
    built: List[str] = []

    @classmethod
    def from_bundle(cls, bundle: Any, precision: str, **options: Any) -> "FakeTensorRTBackend":
        backend = cls()
        if precision == "auto":  # the real backend resolves auto itself; with no device report: the gated choice
            precision, backend.precision_reason = choose_precision(precision, bundle, "tensorrt")
            backend.precision = precision
        cls.built.append(precision)
        bundle.model_path(precision)  # a missing variant fails as the real one would
        return backend


@pytest.fixture
def fake_tensorrt(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """TensorRT importable (the fake 8.5) and a TensorRT backend module in this build: the real
    tensorrt_status() then says the native backend can run, and `auto` selects it."""
    from fakes.fake_tensorrt import FakeTensorRT85

    module = types.ModuleType(backends.TENSORRT_MODULE)
    module.TensorRTBackend = FakeTensorRTBackend  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTensorRT85())
    monkeypatch.setitem(sys.modules, backends.TENSORRT_MODULE, module)
    monkeypatch.setattr(FakeTensorRTBackend, "built", [])
    assert backends.tensorrt_status() is None
    return FakeTensorRTBackend.built


def picked(backend: Backend) -> Optional[str]:
    """The variant an ONNX Runtime backend will load, read from its model file's name."""
    assert isinstance(backend, OnnxRuntimeBackend)
    return {f: v for v, f in FILES.items()}[backend.model_path.name]


# -- ONNX Runtime on the CPU -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["auto", "onnxruntime", "onnxruntime-cpu"])
def test_auto_on_the_cpu_runs_fp32_although_the_gated_choice_is_int8(
        gated_int8: Bundle, providers, no_tensorrt: None, name: str) -> None:
    backend = select_backend(name, bundle=gated_int8, precision="auto", threads=1)
    assert picked(backend) == "fp32" and backend.precision == "fp32"
    assert backend.precision_reason == backends.CPU_REASON
    assert "CPU" in backend.precision_reason and "INT8 Q/DQ 2.6x slower" in backend.precision_reason
    described = backend.describe()
    assert (described["precision"], described["precision_reason"]) == ("fp32", backend.precision_reason)


def test_auto_is_the_default_of_select_backend(gated_int8: Bundle, providers, no_tensorrt: None) -> None:
    backend = select_backend("onnxruntime-cpu", bundle=gated_int8)
    assert picked(backend) == "fp32" and "CPU" in backend.precision_reason


def test_auto_on_the_cpu_takes_the_most_exact_variant_held(tmp_path: Path, model: Path, providers) -> None:
    bundle = make_bundle(tmp_path / "b", model, ["fp16", "int8"], dict(GATED_INT8, variants=["fp16", "int8"]))
    assert choose_precision("auto", bundle, "onnxruntime-cpu")[0] == "fp16"


# -- explicit precisions -------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
@pytest.mark.parametrize("name", ["onnxruntime-cpu", "onnxruntime-cuda", "onnxruntime-tensorrt"])
def test_an_explicit_precision_is_honoured(gated_int8: Bundle, providers, precision: str, name: str) -> None:
    providers(TRT, CUDA, CPU)
    backend = select_backend(name, bundle=gated_int8, precision=precision)
    assert picked(backend) == precision
    assert (backend.precision, backend.precision_reason) == (precision, "requested")


def test_an_explicit_precision_is_honoured_on_tensorrt(gated_int8: Bundle, fake_tensorrt: List[str]) -> None:
    backend = select_backend("auto", bundle=gated_int8, precision="fp16")
    assert fake_tensorrt == ["fp16"] and (backend.precision, backend.precision_reason) == ("fp16", "requested")


def test_an_explicit_precision_the_bundle_lacks_is_the_typed_error(tmp_path: Path, model: Path, providers) -> None:
    bundle = make_bundle(tmp_path / "b", model, ["fp32"], {"precision": "fp32"})
    with pytest.raises(BundleError, match=r"has no int8 variant \(model.int8.qdq.onnx\); it has: fp32"):
        select_backend("onnxruntime-cpu", bundle=bundle, precision="int8")


@pytest.mark.parametrize("precision", ["best", "FP16", "int4", "", None])
def test_an_unknown_precision_names_the_allowed_ones(gated_int8: Bundle, precision: Any) -> None:
    with pytest.raises(ConfigError, match=r"precision must be one of auto, fp32, fp16, int8, got "):
        select_backend("onnxruntime-cpu", bundle=gated_int8, precision=precision)
    with pytest.raises(ConfigError, match=r"precision must be one of auto, fp32, fp16, int8, got "):
        choose_precision(precision, gated_int8, "tensorrt")


# -- TensorRT and the GPU providers ----------------------------------------------------------------


def test_auto_selection_with_tensorrt_runs_the_gated_choice(gated_int8: Bundle, fake_tensorrt: List[str]) -> None:
    backend = select_backend("auto", bundle=gated_int8)  # backend auto -> TensorRT, precision auto -> int8
    assert isinstance(backend, FakeTensorRTBackend) and fake_tensorrt == ["int8"]
    assert backend.precision == "int8"
    assert backend.precision_reason == (
        "the bundle's gated choice (f1_vs_fp32 0.9815 >= 0.97 on the gate images)"
    )
    assert backend.describe() == {"backend": "tensorrt", "precision": "int8", "precision_reason": backend.precision_reason}


def test_onnx_runtime_tensorrt_provider_runs_the_gated_choice(gated_int8: Bundle, providers, no_tensorrt: None) -> None:
    providers(TRT, CUDA, CPU)
    backend = select_backend("onnxruntime-tensorrt", bundle=gated_int8)
    assert picked(backend) == "int8" and "gated choice" in backend.precision_reason


@pytest.mark.parametrize("name", ["auto", "onnxruntime", "onnxruntime-cuda"])
def test_auto_on_the_cuda_provider_runs_fp16(gated_int8: Bundle, providers, no_tensorrt: None, name: str) -> None:
    providers(TRT, CUDA, CPU)  # auto takes CUDA, never the TensorRT provider
    backend = select_backend(name, bundle=gated_int8)
    assert picked(backend) == "fp16" and backend.provider in ("auto", "cuda")
    assert "CUDA" in backend.precision_reason and "fp16: f1_vs_fp32 0.9991" in backend.precision_reason


@pytest.mark.parametrize(
    "backend, variants, manifest, expected",
    [
        # INT8 failed the gate: the builder recorded FP16
        ("tensorrt", ["fp32", "fp16", "int8"], {"precision": "fp16"}, "fp16"),
        ("onnxruntime-cuda", ["fp32", "fp16", "int8"], {"precision": "fp16"}, "fp16"),
        # built with --precision fp32: one variant, the gated choice is fp32 everywhere
        ("tensorrt", ["fp32"], {"precision": "fp32"}, "fp32"),
        ("onnxruntime-cuda", ["fp32"], {"precision": "fp32"}, "fp32"),
        # a full-precision choice is kept on the GPU even when reduced variants lie beside it
        ("onnxruntime-cuda", ["fp32", "fp16", "int8"], {"precision": "fp32"}, "fp32"),
        # no gated choice recorded (a hand-made manifest): TensorRT takes the most reduced variant
        ("tensorrt", ["fp32", "fp16"], {}, "fp16"),
        ("onnxruntime-tensorrt", ["fp32", "fp16", "int8"], {}, "int8"),
        ("onnxruntime-cuda", ["fp32", "fp16", "int8"], {}, "fp32"),
        ("onnxruntime-cpu", ["fp32", "fp16", "int8"], {}, "fp32"),
    ],
)
def test_auto_table(tmp_path: Path, model: Path, backend: str, variants: List[str], manifest: Dict[str, Any],
                    expected: str) -> None:
    bundle = make_bundle(tmp_path / "b", model, variants, dict(manifest, variants=variants))
    variant, reason = choose_precision("auto", bundle, backend)
    assert variant == expected and variant in bundle.variants() and reason


# -- what the manifest says, untrusted --------------------------------------------------------------


@pytest.mark.parametrize(
    "accuracy, note",
    [
        (GATED_INT8["accuracy"], "f1_vs_fp32 0.9815 >= 0.97 on the gate images"),
        ({"int8": {"gate": {"passed": False, "metric": "f1_vs_fp32", "value": 0.91, "threshold": 0.97}}},
         "f1_vs_fp32 0.9100 < 0.97 on the gate images"),
        ({"int8": {"gate": {"passed": True, "metric": "cosine", "value": 0.995, "threshold": 0.99}}},
         "cosine 0.9950 >= 0.99 on the gate images"),
        ({"int8": {"f1_vs_fp32": None, "cosine": 0.5}}, "cosine 0.5000"),
        (None, ""),
    ],
)
def test_accuracy_note(tmp_path: Path, model: Path, accuracy: Any, note: str) -> None:
    bundle = make_bundle(tmp_path / "b", model, ["fp32", "int8"], {"precision": "int8", "accuracy": accuracy})
    assert bundle.accuracy_note("int8") == note


@pytest.mark.parametrize(
    "accuracy, message",
    [
        # hostile or malformed entries: refused when the bundle loads, naming the field
        ({"int8": {"gate": {"passed": "yes", "metric": "f1_vs_fp32", "value": 0.99, "threshold": 0.97}, "cosine": 0.9}},
         "accuracy.int8.gate.passed must be true or false"),
        ({"int8": {"gate": {"passed": True, "metric": "<script>", "value": 0.99, "threshold": 0.97}}},
         "accuracy.int8.gate.metric must be one of"),
        ({"int8": {"gate": {"passed": True, "metric": "f1_vs_fp32", "value": "0.99", "threshold": 0.97}}},
         "accuracy.int8.gate.value must be a number"),
        ({"int8": {"f1_vs_fp32": True}}, "accuracy.int8.f1_vs_fp32 must be a number"),
        ({"int8": "great"}, "accuracy.int8 must be a JSON object"),
        (["int8"], "accuracy must be a JSON object"),
    ],
)
def test_a_malformed_accuracy_entry_is_a_bundle_error_naming_it(tmp_path: Path, model: Path, accuracy: Any,
                                                                message: str) -> None:
    with pytest.raises(BundleError, match=message):
        make_bundle(tmp_path / "b", model, ["fp32", "int8"], {"precision": "int8", "accuracy": accuracy})


@pytest.mark.parametrize("recorded", [None, "best"])
def test_a_gated_choice_that_is_no_variant_is_ignored(tmp_path: Path, model: Path, recorded: Any) -> None:
    bundle = make_bundle(tmp_path / "b", model, ["fp32", "fp16"], {"precision": recorded})
    assert bundle.gated_precision is None
    assert choose_precision("auto", bundle, "tensorrt")[0] == "fp16"


@pytest.mark.parametrize(
    "manifest, message",
    [
        ({"precision": ["int8"]}, r"precision must be a variant name, got \['int8'\]"),
        ({"precision": 8}, "precision must be a variant name, got 8"),
        ({"precision": {"int8": 1}}, "precision must be a variant name"),
        ({"variants": [["int8"]]}, r"variants must be a list of variant names, got \[\['int8'\]\]"),
        ({"variants": 3}, "variants must be a list of variant names, got 3"),
        ({"variants": "fp32"}, "variants must be a list of variant names, got 'fp32'"),
        ({"precision": "fp8"}, "precision must be one of 'fp32', 'fp16', 'int8', 'best', got 'fp8'"),
        ({"precision": "auto"}, "precision must be one of 'fp32', 'fp16', 'int8', 'best', got 'auto'"),
    ],
)
def test_a_malformed_choice_is_a_bundle_error_naming_the_key(tmp_path: Path, model: Path, manifest: Dict[str, Any],
                                                             message: str) -> None:
    with pytest.raises(BundleError, match=message):
        make_bundle(tmp_path / "b", model, ["fp32"], manifest)


# -- describe() ------------------------------------------------------------------------------------


def test_describe_says_which_variant_runs_and_why_once_active(gated_int8: Bundle, providers, no_tensorrt: None) -> None:
    with select_backend("auto", bundle=gated_int8, threads=1) as backend:
        described = backend.describe()
    assert described["precision"] == "fp32" and "CPU" in described["precision_reason"]
    assert described["providers"] == [CPU] and described["model"].endswith("model.onnx")


def test_a_model_file_given_directly_has_no_variant(gated_int8: Bundle) -> None:
    backend = select_backend("onnxruntime-cpu", gated_int8.root / "model.onnx")
    assert backend.describe()["precision"] is None
    assert backend.describe()["precision_reason"] == "a model file given directly, not a bundle variant"
    assert select_backend("onnxruntime-cpu", gated_int8.root / "model.onnx", precision="fp16").precision == "fp16"


# -- the one policy: requested x variants x backend x device measurements --------------------------


MEASURED_FP16 = Measured("fp16", "chosen on this device", {"chosen": "fp16"})


@pytest.mark.parametrize(
    "requested, measured, cached, expected",
    [
        # auto: what `edge-sdk engine` measured on this device wins, with its summary
        ("auto", MEASURED_FP16, set(), ("fp16", "fp16", "chosen on this device", {"chosen": "fp16"})),
        # ... unless it names a variant the bundle does not hold: the gated choice then
        ("auto", Measured("fp32", "x", {}), set(), ("int8", "int8", None, None)),
        # no measurement: the gated INT8, from the FP16+INT8 engine when only that one is cached
        ("auto", None, {"best"}, ("int8", "best", None, None)),
        ("auto", None, {"best", "int8"}, ("int8", "int8", None, None)),
        ("auto", None, set(), ("int8", "int8", None, None)),
        # a precision asked for is that engine, measurements and cache aside
        ("fp16", Measured("int8", "x", {}), {"best"}, ("fp16", "fp16", "requested", None)),
        ("int8", None, {"best"}, ("int8", "int8", "requested", None)),
    ],
)
def test_engine_precision_policy(tmp_path: Path, model: Path, requested: str, measured: Optional[Measured], cached: set,
                                 expected: tuple) -> None:
    bundle = make_bundle(tmp_path / "b", model, ["fp16", "int8"], dict(GATED_INT8, variants=["fp16", "int8"]))
    asked: List[str] = []

    def engine_cached(precision: str) -> bool:
        asked.append(precision)
        return precision in cached

    got = choose_engine_precision(requested, bundle, measured, engine_cached)
    variant, engine, reason, summary = expected
    assert (got.variant, got.engine, got.device_choice) == (variant, engine, summary)
    if reason is not None:
        assert got.reason == reason
    else:
        assert got.reason.startswith("the bundle's gated choice (f1_vs_fp32 0.9815")
        assert got.reason.endswith(FP16_ALSO_INT8) == (engine == "best")
    assert requested == "auto" or asked == []  # a requested precision reads no cache


def test_policy_refuses_an_unknown_precision_and_an_empty_bundle(tmp_path: Path, model: Path) -> None:
    with pytest.raises(ConfigError, match="precision must be one of auto, fp32, fp16, int8, got 'fp8'"):
        choose_engine_precision("fp8", make_bundle(tmp_path / "b", model, ["fp32"], {}))
    empty = types.SimpleNamespace(variants=lambda: [], root=tmp_path / "empty", gated_precision=None)
    with pytest.raises(BackendError, match="holds no model variant; rebuild it"):
        choose_precision("auto", empty, "onnxruntime-cpu")


@pytest.mark.parametrize(
    "rows, expected",
    [
        ([("fp16", 2.0, True), ("int8", 1.5, True)], "int8"),
        ([("fp16", 2.0, True), ("int8", 1.5, False)], "fp16"),  # faster, but failed the gate
        ([("fp16", 2.0, True), ("int8", 2.0, True)], "fp16"),  # equals: the first
        ([("fp16", 2.0, False), ("int8", 1.0, False)], None),
        ([], None),
    ],
)
def test_the_fastest_engine_that_passes_is_chosen(rows: List[tuple], expected: Optional[str]) -> None:
    best = fastest_passing(rows, passed=lambda r: r[2], median_ms=lambda r: r[1])
    assert (best[0] if best is not None else None) == expected


def test_backends_reexport_the_policy() -> None:
    assert backends.choose_precision is choose_precision and backends.CPU_REASON == "FP32 is fastest on ONNX Runtime's CPU " \
        "provider (measured: INT8 Q/DQ 2.6x slower without VNNI, FP16 no faster)"
