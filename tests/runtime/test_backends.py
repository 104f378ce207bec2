"""Backend selection and the ONNX Runtime runner (real inference on a tiny model)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge_sdk.errors import BackendError, BundleError, ModelError
from edge_sdk.manifest import Bundle
from edge_sdk.runtime import backends
from edge_sdk.runtime.backends import available_backends, select_backend
from edge_sdk.runtime.backends.base import Backend, TensorSpec
from edge_sdk.runtime.backends.onnxruntime import PROVIDERS, OnnxRuntimeBackend, resolve_providers


def test_runner_matches_a_plain_session_and_reuses_its_buffers(tiny_bundle: Path) -> None:
    import onnxruntime as ort

    model = tiny_bundle / "model.onnx"
    x = np.random.default_rng(0).uniform(0, 255, (1, 3, 32, 64)).astype(np.float32)
    reference = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"input.1": x})
    with OnnxRuntimeBackend(model, provider="cpu", threads=1) as backend:
        assert backend.input_names == ["input.1"] and backend.output_names == ["537", "538", "539", "540"]
        first = backend.infer({"input.1": x})
        x2 = x[:, :, ::-1].copy()
        x[...] = x2  # same array, new content: the bound input must see it
        second = backend.infer({"input.1": x})
        expected2 = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"input.1": x2})
    for got, want in zip(first, reference):
        assert got.shape == want.shape
    assert all(a is b for a, b in zip(first, second)), "outputs are the runner's own reused buffers"
    for got, want in zip(second, expected2):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_copies_when_asked(tiny_bundle: Path) -> None:
    x = np.zeros((1, 3, 32, 64), np.float32)
    with OnnxRuntimeBackend(tiny_bundle / "model.onnx", provider="cpu", reuse_outputs=False) as backend:
        a = backend.infer({"input.1": x})
        b = backend.infer({"input.1": x})
    assert all(u is not v for u, v in zip(a, b))


@pytest.mark.parametrize(
    "feed, message",
    [
        ({}, "missing model inputs"),
        ({"input.1": np.zeros((1, 3, 16, 16), np.float32)}, "has shape"),
    ],
)
def test_bad_feeds(tiny_bundle: Path, feed: dict, message: str) -> None:
    with OnnxRuntimeBackend(tiny_bundle / "model.onnx", provider="cpu") as backend:
        with pytest.raises(BackendError, match=message):
            backend.infer(feed)


def test_float64_input_is_converted(tiny_bundle: Path) -> None:
    with OnnxRuntimeBackend(tiny_bundle / "model.onnx", provider="cpu") as backend:
        out = backend.infer({"input.1": np.full((1, 3, 32, 64), 255.0)})
    assert out[0].dtype == np.float32 and out[0].min() > 0.99


def test_inactive_runner_refuses() -> None:
    with pytest.raises(BackendError, match="not active"):
        OnnxRuntimeBackend("nowhere.onnx").infer({})


def test_missing_and_corrupt_model(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        OnnxRuntimeBackend(tmp_path / "none.onnx", provider="cpu").activate()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    with pytest.raises(ModelError, match="cannot load"):
        OnnxRuntimeBackend(bad, provider="cpu").activate()


@pytest.mark.parametrize("provider", ["cuda", "tensorrt"])
def test_explicit_provider_that_is_missing_is_an_error(provider: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_sdk.runtime.backends import onnxruntime as ort_backend

    monkeypatch.setattr(ort_backend, "available_providers", lambda: ["CPUExecutionProvider"])
    with pytest.raises(BackendError, match="not available here"):
        resolve_providers(provider)


CUDA, CPU, TRT = "CUDAExecutionProvider", "CPUExecutionProvider", "TensorrtExecutionProvider"


@pytest.mark.parametrize(
    "installed, expected",
    [
        # The rule (resolve_providers' docstring, the backend table in runtime/backends): auto is
        # CUDA when present, then CPU for what CUDA cannot run; else CPU alone. Never TensorRT
        # (it compiles engines on first run: only when asked for), never anything else listed.
        ([TRT, CUDA, CPU], [CUDA, CPU]),  # what onnxruntime-gpu with TensorRT lists
        (["AzureExecutionProvider", CPU], [CPU]),  # what the CPU wheel lists (1.17+)
        ([CPU, CUDA], [CUDA, CPU]),  # CUDA first whatever the order listed
        (["OpenVINOExecutionProvider", "DmlExecutionProvider", CPU], [CPU]),
        ([CPU], [CPU]),
    ],
)
def test_auto_provider_is_cuda_then_cpu_and_nothing_else(installed, expected, monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_sdk.runtime.backends import onnxruntime as ort_backend

    monkeypatch.setattr(ort_backend, "available_providers", lambda: list(installed))
    assert resolve_providers("auto") == expected


class FakeSilentFallbackSession:
    """What ONNX Runtime returns when the CUDA libraries fail to load: a CPU-only session."""

    def get_providers(self):
        return ["CPUExecutionProvider"]


def test_a_provider_that_silently_did_not_load_is_an_error(tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_sdk.runtime.backends import onnxruntime as ort_backend

    monkeypatch.setattr(ort_backend, "available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    backend = OnnxRuntimeBackend(tiny_bundle / "model.onnx", provider="cuda", session_loader=FakeSilentFallbackSession)
    with pytest.raises(BackendError, match="did not enable CUDAExecutionProvider"):
        backend.activate()


@pytest.mark.parametrize("precision, filename", [("fp32", "model.onnx"), ("fp16", "model.fp16.onnx")])
def test_select_backend_picks_the_precision_variant(tiny_bundle: Path, precision: str, filename: str) -> None:
    backend = select_backend("onnxruntime-cpu", bundle=Bundle.load(tiny_bundle), precision=precision, threads=1)
    assert isinstance(backend, OnnxRuntimeBackend)
    assert backend.model_path.name == filename and backend.provider == "cpu" and backend.threads == 1


def test_select_backend_missing_variant(tiny_bundle: Path) -> None:
    with pytest.raises(BundleError, match="no int8 variant"):
        select_backend("onnxruntime", bundle=Bundle.load(tiny_bundle), precision="int8")


def test_tensorrt_backend_without_tensorrt_says_what_to_install(tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # `import tensorrt` fails, installed or not
    with pytest.raises(BackendError) as err:
        select_backend("tensorrt", bundle=Bundle.load(tiny_bundle))
    assert str(err.value) == (
        "the tensorrt backend is unavailable: it needs TensorRT, which cannot be imported here ('tensorrt' is not "
        "installed. Install it with: pip install \"edge-sdk[trt]\" (TensorRT comes with JetPack on a Jetson: sudo apt "
        "install python3-libnvinfer)); use --backend onnxruntime, or run on a Jetson with JetPack"
    )
    assert "tensorrt" not in available_backends()
    # auto never fails for lack of TensorRT or a GPU
    assert isinstance(select_backend("auto", bundle=Bundle.load(tiny_bundle)), OnnxRuntimeBackend)


def test_tensorrt_backend_runs_when_tensorrt_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorRT importable (the fake 8.5 runtime): `--backend tensorrt` builds the bundle's engine,
    runs it, and the backend is listed as available (tests/runtime/test_tensorrt_backend.py has the rest)."""
    from fakes.fake_tensorrt import fake_model
    from fakes.fake_tensorrt_runtime import FakeRuntimeCuda, FakeTensorRTRuntime85
    from runtime_factories import CENTERFACE_DECODER, write_bundle

    from edge_sdk.preprocess import InputSpec

    assert importlib.util.find_spec(backends.TENSORRT_MODULE) is not None
    cuda = FakeRuntimeCuda()
    trt = FakeTensorRTRuntime85(cuda=cuda)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    model = tmp_path / "fake.json"
    model.write_bytes(fake_model("model.onnx", "fp32", [{"name": "input.1", "shape": [1, 3, 32, 64]}]))
    bundle = Bundle.load(write_bundle(tmp_path / "b", model, InputSpec(name="input.1", shape=[1, 3, 32, 64]), CENTERFACE_DECODER))
    assert "tensorrt" in available_backends()
    with select_backend("tensorrt", bundle=bundle, cuda=cuda, cache_dir=tmp_path / "engines") as backend:
        x = np.full((1, 3, 32, 64), 200.0, np.float32)
        heat = backend.infer({"input.1": x})[0]
        np.testing.assert_allclose(heat, 1.0 / (1.0 + np.exp(-(200.0 - 128.0) / 4.0)), rtol=1e-6)
    assert trt.engines_built() == 1 and backend.name == "tensorrt"


def test_unknown_backend_name() -> None:
    with pytest.raises(BackendError, match="unknown backend 'magic'"):
        select_backend("magic", model_path=Path("x.onnx"))


class _Echo(Backend):
    """The smallest backend: one input of a known shape and type; `_infer_impl` records what it got."""

    name = "echo"

    def __init__(self, casting: str = "same_kind") -> None:
        super().__init__()
        self.casting = casting
        self.seen: list = []

    def activate(self) -> None:
        self.input_names, self.output_names = ["x", "scale"], ["y"]
        self.input_specs = {"x": TensorSpec([None, 3, 4], np.float32, casting=self.casting, shown=["N", 3, 4]),
                            "scale": TensorSpec([], None)}  # no type known: any
        self.is_active = True

    def _infer_impl(self, feed):
        self.seen.append(feed)
        return [feed["x"]]

    def deactivate(self) -> None:
        self.is_active = False


class _Device:
    """A device tensor as the GPU preprocessor hands it over (__cuda_array_interface__)."""

    def __init__(self, shape: tuple, dtype: Any) -> None:
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.__cuda_array_interface__ = {"data": (4096, False), "shape": shape, "typestr": self.dtype.str, "version": 3}


def test_base_infer_runs_the_backend_on_a_checked_feed() -> None:
    x = np.ones((2, 3, 4), np.float32)
    with _Echo() as backend:
        (y,) = backend.infer({"x": x, "scale": np.float32(2.0)})
        backend.infer({"x": np.ones((5, 3, 4), np.float64), "scale": 1})  # any batch; float64 casts same_kind
    assert y is x and backend.seen[0]["x"] is x and len(backend.seen) == 2


@pytest.mark.parametrize(
    "feed, message",
    [
        ({"x": np.ones((1, 3, 4), np.float32)}, r"missing model inputs \['scale'\]; the model's inputs are \['x', 'scale'\]"),
        ({}, r"missing model inputs \['x', 'scale'\]"),
        ({"x": np.ones((1, 3, 5), np.float32), "scale": 1}, r"input 'x' has shape \[1, 3, 5\], the model expects \['N', 3, 4\]"),
        ({"x": np.ones((3, 4), np.float32), "scale": 1}, r"input 'x' has shape \[3, 4\]"),
        ({"x": [[[1.0] * 4] * 2], "scale": 1}, r"input 'x' has shape \[1, 2, 4\]"),  # a nested list: numpy's shape
        ({"x": np.ones((1, 3, 4), np.complex64), "scale": 1}, "input 'x' is complex64, the model expects float32"),
        ({"x": _Device((1, 3, 4), np.float16), "scale": 1}, "input 'x' is float16, the model expects float32"),
    ],
)
def test_base_infer_refuses_a_bad_feed_before_the_backend_runs(feed: dict, message: str) -> None:
    with _Echo() as backend:
        with pytest.raises(BackendError, match=message):
            backend.infer(feed)
    assert backend.seen == []


def test_base_infer_refuses_an_inactive_backend_and_casting_is_the_backends_call() -> None:
    backend = _Echo(casting="unsafe")
    with pytest.raises(BackendError, match=r"not active; call activate\(\) or use it as a context manager"):
        backend.infer({"x": np.ones((1, 3, 4), np.float32), "scale": 1})
    with backend:
        backend.infer({"x": np.ones((1, 3, 4), np.complex64), "scale": 1})  # unsafe: the backend converts
        with pytest.raises(BackendError, match="float16, the model expects float32"):  # a device tensor never casts
            backend.infer({"x": _Device((1, 3, 4), np.float16), "scale": 1})
    assert len(backend.seen) == 1


def test_a_backend_without_an_implementation_says_so() -> None:
    class Bare(Backend):
        def activate(self) -> None:
            self.is_active = True

    with pytest.raises(NotImplementedError):
        Bare().__enter__().infer({})


def test_ort_runner_checks_inputs_through_the_base(tiny_bundle: Path) -> None:
    with OnnxRuntimeBackend(tiny_bundle / "model.onnx", provider="cpu") as backend:
        spec = backend.input_specs["input.1"]
        assert spec.shape == (1, 3, 32, 64) and spec.dtype == np.float32
        with pytest.raises(BackendError, match=r"input 'input.1' has shape \[1, 3, 32, 65\], the model expects \[1, 3, 32, 64\]"):
            backend.infer({"input.1": np.zeros((1, 3, 32, 65), np.float32)})
    assert backend.input_specs == {}


def test_a_registered_backend_is_selected_and_listed(tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "_REGISTRY", dict(backends._REGISTRY))  # this test's registrations leave with it
    made: list = []

    def factory(**kw: Any) -> Backend:
        made.append(kw)
        return _Echo()

    runs_here = {"echo": True}
    backends.register_backend("echo", factory, available=lambda: runs_here["echo"])
    backend = select_backend("echo", bundle="the bundle", precision="fp16", threads=3, extra=1)
    assert isinstance(backend, _Echo)
    assert made == [{"model_path": None, "bundle": "the bundle", "precision": "fp16", "threads": 3, "extra": 1}]
    assert "echo" in available_backends()
    runs_here["echo"] = False
    assert "echo" not in available_backends()
    with pytest.raises(BackendError, match="'echo' is registered already"):
        backends.register_backend("echo", factory)
    with pytest.raises(BackendError, match="unknown backend 'magic'; choose one of auto, .*, tensorrt, echo"):
        select_backend("magic")


def test_the_built_in_names_are_the_registry() -> None:
    assert backends.BACKEND_NAMES == ("auto", "onnxruntime", "onnxruntime-cpu", "onnxruntime-cuda", "onnxruntime-tensorrt",
                                      "tensorrt")
    assert tuple(backends._REGISTRY) == backends.BACKEND_NAMES
    # one registered name per execution provider the ONNX Runtime runner knows
    assert [n.split("-", 1)[1] for n in backends.BACKEND_NAMES if n.startswith("onnxruntime-")] == list(PROVIDERS)
    listed = available_backends()  # this onnxruntime: CPU at least; `auto` picks, it is never listed itself
    assert {"onnxruntime", "onnxruntime-cpu"} <= set(listed) and "auto" not in listed


@pytest.mark.parametrize("name", backends.BACKEND_NAMES)
def test_every_registered_backend_keeps_the_runner_contract(name: str, tiny_bundle: Path, tmp_path: Path) -> None:
    """Each registered backend that can run here: created inactive, refuses until activated, runs
    the bundle variant it names to the outputs a plain ONNX Runtime session gives for that file,
    checks its feed, describes itself, and refuses again once deactivated."""
    import onnxruntime as ort

    from edge_sdk.runtime.backends.base import Capabilities

    if name != "auto" and name not in available_backends():
        pytest.skip(f"{name} cannot run here")
    bundle = Bundle.load(tiny_bundle)
    x = np.random.default_rng(3).uniform(0, 255, (1, 3, 32, 64)).astype(np.float32)
    on_tensorrt = name == "tensorrt" or (name == "auto" and backends.tensorrt_status() is None)
    options = {"cache_dir": tmp_path / "engines"} if on_tensorrt else {}  # a build of its own, not the user's cache
    backend = select_backend(name, bundle=bundle, threads=1, **options)
    assert not backend.is_active and backend.precision in bundle.variants() and backend.precision_reason
    with pytest.raises(BackendError, match="not active"):
        backend.infer({"input.1": x})
    with backend:
        got = backend.infer({"input.1": x})
        with pytest.raises(BackendError, match="missing model inputs"):
            backend.infer({})
        described = backend.describe()
        assert isinstance(backend.capabilities(), Capabilities)
    session = ort.InferenceSession(str(bundle.model_path(backend.precision)), providers=["CPUExecutionProvider"])
    want = session.run(backend.output_names, {"input.1": x})
    for g, w in zip(got, want):  # loose enough for another runtime's kernels, tight enough for a wrong output
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert {"backend", "precision", "precision_reason"} <= set(described)
    assert described["precision"] == backend.precision
    with pytest.raises(BackendError, match="not active"):
        backend.infer({"input.1": x})


@pytest.mark.parametrize("batch,pattern", [(1, True), ("batch", False)], ids=["fixed-batch", "free-batch"])
def test_a_free_batch_model_runs_without_the_memory_pattern_on_the_cpu(tmp_path: Path, batch, pattern) -> None:
    """ONNX Runtime keeps a memory pattern per input shape: a model that takes batches of several
    sizes runs without one (the session's own options say so); a fixed-shape model keeps it. The
    free-batch session answers every batch size as the fixed one does frame by frame."""
    from edge_sdk.runtime.backends.onnxruntime import SessionFromOnnx
    from runtime_factories import tiny_centerface_bytes

    path = tmp_path / "model.onnx"
    path.write_bytes(tiny_centerface_bytes(batch=batch))
    session = SessionFromOnnx(path, ["CPUExecutionProvider"], threads=1)()
    assert session.get_session_options().enable_mem_pattern is pattern
    single = tmp_path / "single.onnx"
    single.write_bytes(tiny_centerface_bytes(batch=1))
    one = SessionFromOnnx(single, ["CPUExecutionProvider"], threads=1)()
    rng = np.random.default_rng(0)
    for n in ((1, 3, 2, 1) if batch == "batch" else (1,)):
        x = rng.uniform(0, 255, (n, 3, 32, 64)).astype(np.float32)
        got = session.run(None, {"input.1": x})
        for row in range(n):
            for a, b in zip(got, one.run(None, {"input.1": x[row:row + 1]})):
                np.testing.assert_allclose(a[row:row + 1], b, rtol=1e-5, atol=1e-5)
