"""The TensorRT backend against the fake TensorRT runtime (8.5, 10, 11) on a fake integrated (Xavier
NX) and a fake discrete GPU. The fakes' device memory is host memory, so every test can check the
bytes that reached the engine and the outputs it wrote; the oracle for the outputs is the
network's arithmetic done here with numpy (TinyCenterFace), never the backend's own buffers.
"""
from __future__ import annotations

import ctypes
import json
import logging
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import pytest

from edge_sdk.cuda import DeviceTensor
from edge_sdk.errors import BackendError, BundleError
from edge_sdk.manifest import MANIFEST, Bundle
from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime import backends
from edge_sdk.runtime.backends import select_backend
from edge_sdk.trt.cache import EngineCache, EngineKey
from fakes.fake_cuda_host import DISCRETE, XAVIER_NX
from fakes.fake_tensorrt import fake_model
from fakes.fake_tensorrt_runtime import CENTERFACE_OUTPUTS, RUNTIME_FAKES, FakeRuntimeCuda
from runtime_factories import CENTERFACE_DECODER, write_bundle

SPEC = InputSpec(name="input.1", shape=[1, 3, 32, 64], resize="letterbox")
VERSIONS = sorted(RUNTIME_FAKES)
GPUS = {"xavier": XAVIER_NX, "discrete": DISCRETE}


def expected(x: np.ndarray) -> Dict[str, np.ndarray]:
    """TinyCenterFace's arithmetic, written out again: 4x4 cell means over the channels."""
    n, c, h, w = x.shape
    gray = x.astype(np.float64).reshape(n, c, h // 4, 4, w // 4, 4).mean(axis=(1, 3, 5))[:, None]
    return {"537": 1.0 / (1.0 + np.exp(-(gray - 128.0) / 4.0))}


def make_fake_bundle(root: Path, spec: InputSpec = SPEC, outputs: Optional[List[Dict[str, Any]]] = None,
                     model_inputs: Optional[List[Dict[str, Any]]] = None) -> Bundle:
    """A bundle whose model is a fake-parser JSON model (works without onnx, on Python 3.8)."""
    root.mkdir(parents=True, exist_ok=True)
    model = root.parent / f"{root.name}.model.json"
    inputs = model_inputs or [{"name": spec.name, "shape": list(spec.shape)}]
    model.write_bytes(fake_model("model.onnx", "fp32", inputs))
    write_bundle(root, model, spec, CENTERFACE_DECODER)
    if outputs is not None:
        manifest = json.loads((root / MANIFEST).read_text())
        manifest["outputs"] = outputs
        (root / MANIFEST).write_text(json.dumps(manifest))
    return Bundle.load(root)


@pytest.fixture(autouse=True)
def deactivated(monkeypatch: pytest.MonkeyPatch):
    """Each backend a test activates is deactivated when the test ends (an active backend listens
    to TensorRT's one process-wide logger: one left active would hear the next tests' messages)."""
    from edge_sdk.runtime.backends.tensorrt import TensorRTBackend
    from edge_sdk.trt import log as trt_log

    listening = trt_log.listening()
    opened: List[Any] = []
    activate = TensorRTBackend.activate

    def recorded(self: Any) -> None:
        opened.append(self)
        activate(self)

    monkeypatch.setattr(TensorRTBackend, "activate", recorded)
    yield
    for backend in opened:
        backend.deactivate()
    assert trt_log.listening() == listening


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Any]:
    """env(version, gpu, **fake kwargs) -> (fake tensorrt, fake CUDA, bundle, cache dir)."""

    def make(version: str = "8.5", gpu: str = "xavier", graphs: bool = True, **kwargs: Any):
        cuda = FakeRuntimeCuda(props=GPUS[gpu], graphs=graphs)
        trt = RUNTIME_FAKES[version](cuda=cuda, **kwargs)
        monkeypatch.setitem(sys.modules, "tensorrt", trt)
        bundle = make_fake_bundle(tmp_path / "bundle")
        return trt, cuda, bundle, tmp_path / "engines"

    return make


def open_backend(trt: Any, cuda: Any, bundle: Bundle, cache: Path, **options: Any):
    from edge_sdk.runtime.backends.tensorrt import TensorRTBackend

    backend = TensorRTBackend.from_bundle(bundle, "fp32", cuda=cuda, cache_dir=cache, **options)
    backend.activate()
    return backend


def frame_tensor(seed: int, rows: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 255, (rows, 3, 32, 64)).astype(np.float32)


def ops(cuda: FakeRuntimeCuda) -> List[str]:
    out, cuda.executed[:] = list(cuda.executed), []
    return out


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_host_feed_one_copy_in_outputs_mapped_or_copied(env, version: str, gpu: str) -> None:
    trt, cuda, bundle, cache = env(version, gpu)
    backend = open_backend(trt, cuda, bundle, cache, use_graphs=False)
    assert backend.output_names == [n for n, _ in CENTERFACE_OUTPUTS]
    ops(cuda)
    results = []
    for seed in (1, 2):
        x = frame_tensor(seed)
        outs = backend.infer({"input.1": x})
        np.testing.assert_allclose(outs[0], expected(x)["537"], rtol=1e-5)
        assert [o.shape for o in outs] == [(1, c, 8, 16) for _, c in CENTERFACE_OUTPUTS]
        results.append(outs)
        if gpu == "xavier":  # TensorRT wrote into mapped memory: the host array is the result, no copy back
            assert ops(cuda) == [f"htod:{x.nbytes}", "trt:enqueue:1"]
            assert all(cuda.device_pointer_of(o) is not None for o in outs)
        else:  # device outputs, one async copy each into pinned memory
            assert ops(cuda) == [f"htod:{x.nbytes}", "trt:enqueue:1"] + [f"dtoh:{1 * c * 8 * 16 * 4}" for _, c in CENTERFACE_OUTPUTS]
    assert all(a is b for a, b in zip(*results))  # the same buffers every call
    # set_tensor_address once per tensor, at activation
    assert len(trt.calls["set_tensor_address"]) == 5
    memory = backend.describe()["output_memory"]
    assert memory.startswith("mapped") if gpu == "xavier" else memory.startswith("pinned")
    backend.deactivate()


def test_device_feed_is_bound_not_copied(env) -> None:
    trt, cuda, bundle, cache = env("10", "discrete")
    backend = open_backend(trt, cuda, bundle, cache, use_graphs=False)
    x = frame_tensor(7)
    tensor = DeviceTensor(cuda.alloc_device(x.nbytes), x.shape, np.float32)
    ctypes.memmove(tensor.ptr, x.ctypes.data, x.nbytes)  # as the GPU preprocessor's kernel would
    ops(cuda)
    outs = backend.infer({"input.1": tensor})
    assert not any(op.startswith("htod") for op in ops(cuda))
    assert trt.calls["set_tensor_address"][-1] == ("input.1", tensor.ptr)
    np.testing.assert_array_equal(trt.inputs_seen[-1], x)
    np.testing.assert_allclose(outs[0], expected(x)["537"], rtol=1e-5)
    # back to a host array: rebound to the backend's own input buffer, copied once
    y = frame_tensor(8)
    np.testing.assert_allclose(backend.infer({"input.1": y})[0], expected(y)["537"], rtol=1e-5)
    assert ops(cuda)[0] == f"htod:{y.nbytes}"
    with pytest.raises(BackendError, match="float16, the engine expects float32"):
        backend.infer({"input.1": DeviceTensor(tensor.buffer, (1, 3, 32, 64), np.float16)})
    backend.deactivate()


@pytest.mark.parametrize(
    "model_inputs, outputs, message",
    [
        ([{"name": "images", "shape": [1, 3, 32, 64]}], None,
         r"engine .* has input\(s\) \['images'\], the manifest of .* lists \['input.1'\]"),
        ([{"name": "input.1", "shape": [1, 3, 64, 64]}], None,
         r"input 'input.1' has shape \[1, 3, 64, 64\], the manifest of .* says \[1, 3, 32, 64\]"),
        (None, [{"name": "537", "shape": [1, 1, 8, 16]}, {"name": "heat", "shape": [1, 1, 8, 16]}],
         r"has outputs \['537', '538', '539', '540'\], the manifest of .* lists \['537', 'heat'\]"),
        (None, [{"name": n, "shape": [1, c, 4, 16]} for n, c in CENTERFACE_OUTPUTS],
         r"output '537' has shape \[1, 1, 8, 16\], the manifest of .* says \[1, 1, 4, 16\]"),
    ],
    ids=["input-name", "input-shape", "output-names", "output-shape"],
)
def test_engine_io_that_disagrees_with_the_manifest_names_both(monkeypatch, tmp_path, model_inputs, outputs, message) -> None:
    cuda = FakeRuntimeCuda()
    trt = RUNTIME_FAKES["8.5"](cuda=cuda)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    bundle = make_fake_bundle(tmp_path / "b", outputs=outputs, model_inputs=model_inputs)
    from edge_sdk.runtime.backends.tensorrt import TensorRTBackend

    backend = TensorRTBackend.from_bundle(bundle, "fp32", cuda=cuda, cache_dir=tmp_path / "engines")
    used = cuda.used
    with pytest.raises(BundleError, match=message):
        backend.activate()
    assert not backend.is_active and cuda.used == used  # nothing left allocated


def test_execute_false_is_a_backend_error_with_tensorrt_s_log(env) -> None:
    trt, cuda, bundle, cache = env("8.5")
    backend = open_backend(trt, cuda, bundle, cache)
    trt.fail_execute = "2: [executionContext.cpp::enqueueInternal] Error Code 2: Internal Error (illegal memory access)"
    with pytest.raises(BackendError, match=r"execute_async_v3 returned False(.|\n)*illegal memory access"):
        backend.infer({"input.1": frame_tensor(1)})


def test_unbound_tensor_makes_the_fake_return_false(env) -> None:
    """The fake follows enqueueV3: a tensor without an address -> False and a logged error."""
    trt, cuda, bundle, cache = env("11")
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(trt.engine([{"name": "input.1", "shape": [1, 3, 32, 64]}]))
    context = engine.create_execution_context()
    context.set_tensor_address("input.1", 0x1000)
    assert context.execute_async_v3(cuda.create_stream().handle) is False
    assert "Address is not set for tensor 537" in trt.logged[-1]


def test_fake_a_capture_after_an_unflushed_shape_change_is_invalidated(env) -> None:
    """The fake follows TensorRT and CUDA: the first enqueue after a shape change does work that
    is not permitted under capture; the capture is invalidated and ends with an error, no graph."""
    from edge_sdk.errors import CudaError

    trt, cuda, _bundle, _cache = env("8.5")
    profile = {"input.1": [[1, 3, 32, 64], [2, 3, 32, 64], [4, 3, 32, 64]]}
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(
        trt.engine([{"name": "input.1", "shape": [-1, 3, 32, 64]}], profiles=[profile]))
    context = engine.create_execution_context()
    for i in range(engine.num_io_tensors):
        context.set_tensor_address(engine.get_tensor_name(i), cuda.alloc_device(4 * 3 * 32 * 64 * 4).ptr)
    stream = cuda.create_stream()
    assert context.set_input_shape("input.1", (2, 3, 32, 64))
    cuda.begin_capture(stream)
    assert context.execute_async_v3(stream.handle) is False
    with pytest.raises(CudaError, match="cudaErrorStreamCaptureInvalidated"):
        cuda.end_capture(stream)
    assert stream.capture is None  # the stream left capture mode
    assert context.execute_async_v3(stream.handle) is True  # plain: does the deferred work
    cuda.synchronize(stream)
    cuda.begin_capture(stream)
    assert context.execute_async_v3(stream.handle) is True
    assert [name for name, _op in cuda.end_capture(stream).ops] == ["trt:enqueue:2"]


def put_engine(trt: Any, bundle: Bundle, cache: Path, data: bytes, precision: str = "fp32", sm: str = "7.2") -> Path:
    key = EngineKey(bundle.hash, trt.__version__, sm, precision, None)
    return EngineCache(cache).put(key, data)


@pytest.mark.parametrize("version", VERSIONS)
def test_dynamic_batch_within_the_profile(env, version: str) -> None:
    trt, cuda, bundle, cache = env(version)
    profile = {"input.1": [[1, 3, 32, 64], [4, 3, 32, 64], [8, 3, 32, 64]]}
    put_engine(trt, bundle, cache, trt.engine([{"name": "input.1", "shape": [-1, 3, 32, 64]}], profiles=[profile]))
    backend = open_backend(trt, cuda, bundle, cache)
    assert trt.engines_built() == 0  # the cached engine was used
    trt.calls["set_input_shape"].clear()
    for rows in (3, 3, 8, 1):
        x = frame_tensor(rows, rows)
        outs = backend.infer({"input.1": x})
        assert outs[0].shape == (rows, 1, 8, 16)
        np.testing.assert_allclose(outs[0], expected(x)["537"], rtol=1e-5)
        assert trt.inputs_seen[-1].shape == (rows, 3, 32, 64)
    assert [s[1][0] for s in trt.calls["set_input_shape"]] == [3, 8, 1]  # only when the row count changes
    with pytest.raises(BackendError, match="9 rows for 'input.1', but the engine's optimization profile takes 1 to 8"):
        backend.infer({"input.1": frame_tensor(0, 9)})
    assert backend.describe()["batch"] == {"min": 1, "max": 8, "dynamic": True}


def test_an_engine_built_for_one_batch_says_so(env) -> None:
    """A DLA engine of a dynamic-batch model has one batch size (min = opt = max)."""
    trt, cuda, bundle, cache = env("8.5")
    profile = {"input.1": [[4, 3, 32, 64]] * 3}
    put_engine(trt, bundle, cache, trt.engine([{"name": "input.1", "shape": [-1, 3, 32, 64]}], profiles=[profile]))
    backend = open_backend(trt, cuda, bundle, cache)
    x = frame_tensor(2, 4)
    np.testing.assert_allclose(backend.infer({"input.1": x})[0], expected(x)["537"], rtol=1e-5)
    with pytest.raises(BackendError, match="2 rows for 'input.1', but the engine was built for exactly 4"):
        backend.infer({"input.1": frame_tensor(0, 2)})


def test_dynamic_batch_of_an_engine_the_builder_made(monkeypatch, tmp_path) -> None:
    """A model whose batch is -1: the builder writes the profile (batch 1..max_batch), the backend reads it."""
    cuda = FakeRuntimeCuda(props=DISCRETE)
    trt = RUNTIME_FAKES["10"](cuda=cuda)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    bundle = make_fake_bundle(tmp_path / "b", model_inputs=[{"name": "input.1", "shape": [-1, 3, 32, 64]}])
    backend = open_backend(trt, cuda, bundle, tmp_path / "engines", max_batch=4)
    x = frame_tensor(9, 4)
    np.testing.assert_allclose(backend.infer({"input.1": x})[0], expected(x)["537"], rtol=1e-5)
    with pytest.raises(BackendError, match="takes 1 to 4; send at most 4 crops per batch"):
        backend.infer({"input.1": frame_tensor(9, 5)})


def test_cuda_graph_captured_once_and_replayed(env) -> None:
    trt, cuda, bundle, cache = env("8.5", "discrete")
    backend = open_backend(trt, cuda, bundle, cache)
    for seed in range(6):
        x = frame_tensor(seed)
        np.testing.assert_allclose(backend.infer({"input.1": x})[0], expected(x)["537"], rtol=1e-5)
    # one plain run, one capture, four replays; the replays copy each new input (the graph's copy node)
    assert (backend.graph.captures, backend.graph.replays) == (1, 4)
    assert len(trt.calls["execute_async_v3"]) == 2
    assert sum(c.runs for e in [backend._engine] for c in e.contexts) == 6
    assert backend.describe()["cuda_graphs"].startswith("on")


def test_failed_capture_falls_back_to_plain_launches(env, caplog) -> None:
    trt, cuda, bundle, cache = env("10", capturable=False)
    backend = open_backend(trt, cuda, bundle, cache)
    with caplog.at_level(logging.WARNING):
        for seed in range(4):
            x = frame_tensor(seed)
            np.testing.assert_allclose(backend.infer({"input.1": x})[0], expected(x)["537"], rtol=1e-5)
    described = backend.describe()
    assert described["cuda_graphs"].endswith("without a graph at 1 row(s): the capture failed")
    assert "execute_async_v3 returned False" in described["cuda_graph_failures"]["1"]
    assert backend.graph.captures == 0 and len(trt.calls["execute_async_v3"]) == 5  # 4 plain runs, 1 failed capture
    assert sum("capturing the engine" in r.getMessage() for r in caplog.records) == 1


ROI_ROWS = (1, 1, 2, 2, 1, 2, 2, 2, 1, 3, 1, 3, 3, 2)


def dynamic_backend(env, version: str = "8.5", gpu: str = "xavier", **fake: Any):
    trt, cuda, bundle, cache = env(version, gpu, **fake)
    profile = {"input.1": [[1, 3, 32, 64], [2, 3, 32, 64], [4, 3, 32, 64]]}
    sm = "{}.{}".format(*GPUS[gpu].sm)
    put_engine(trt, bundle, cache, trt.engine([{"name": "input.1", "shape": [-1, 3, 32, 64]}], profiles=[profile]), sm=sm)
    return trt, cuda, open_backend(trt, cuda, bundle, cache)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_graphs_with_row_counts_that_vary(env, version: str, gpu: str) -> None:
    """ROI crops per frame vary. After each shape change the context runs plainly once (TensorRT's
    deferred work is not permitted under capture, and a graph needs the context prepared for its
    shape); while the count stays, one graph per count is captured and replayed."""
    trt, cuda, backend = dynamic_backend(env, version, gpu)
    plain = []
    for k, rows in enumerate(ROI_ROWS):
        before = len(trt.calls["execute_async_v3"])
        x = frame_tensor(k, rows)
        outs = backend.infer({"input.1": x})
        np.testing.assert_allclose(outs[0], expected(x)["537"], rtol=1e-5)
        plain.append(len(trt.calls["execute_async_v3"]) - before)
    changed = [k == 0 or ROI_ROWS[k] != ROI_ROWS[k - 1] for k in range(len(ROI_ROWS))]
    graphs = backend.graph
    # an enqueue call per shape change (plain) and per capture; none for a replay
    assert sum(plain) == sum(changed) + graphs.captures
    assert graphs.captures == 3 and graphs.replays == len(ROI_ROWS) - sum(changed) - graphs.captures
    assert backend.describe()["cuda_graphs"].startswith("on")
    assert not any("not permitted" in m for m in trt.logged)


@pytest.mark.parametrize("returns, said", [
    (False, "execute_async_v3 returned False"),  # enqueueV3 noticed the failed capture
    (True, "cudaErrorStreamCaptureInvalidated"),  # it did not: cudaStreamEndCapture says so
])
def test_a_failed_capture_runs_that_shape_plainly_and_is_reported(env, caplog, returns: bool, said: str) -> None:
    """A capture TensorRT cannot make for one shape: that row count runs plainly from then on,
    said once in the log and in describe(); the other counts keep their graphs; nothing raises."""
    trt, cuda, backend = dynamic_backend(env)
    refuse = {2}
    context = backend._context
    enqueue = context.execute_async_v3

    def execute(handle: int) -> bool:  # the engine cannot be captured at 2 rows (e.g. a layer's kernel)
        stream = trt.cuda.by_handle[handle]
        if stream.capture is not None and context.shapes["input.1"][0] in refuse:
            trt.cuda.invalidate_capture(stream, "operation not permitted when stream is capturing")
            trt.error("1: [executionContext.cpp::enqueueV3] Error Code 1: Cuda Runtime (operation not permitted when "
                      "stream is capturing)")
            return returns
        return enqueue(handle)

    context.execute_async_v3 = execute
    with caplog.at_level(logging.WARNING, logger="edge_sdk.runtime.backends"):
        for k, rows in enumerate(ROI_ROWS):
            x = frame_tensor(k, rows)
            np.testing.assert_allclose(backend.infer({"input.1": x})[0], expected(x)["537"], rtol=1e-5)
    described = backend.describe()
    assert list(described["cuda_graph_failures"]) == ["2"]
    why = described["cuda_graph_failures"]["2"]
    assert said in why and (returns or "not permitted when stream is capturing" in why)
    assert "2 row(s)" in described["cuda_graphs"]
    assert sum("2 row(s)" in r.getMessage() for r in caplog.records) == 1
    assert backend.graph.enabled and backend.graph.captures == 2  # 1 and 3 rows still captured


def test_pycuda_without_graphs_says_so(env) -> None:
    trt, cuda, bundle, cache = env("8.5", graphs=False)
    backend = open_backend(trt, cuda, bundle, cache)
    backend.infer({"input.1": frame_tensor(1)})
    assert backend.describe()["cuda_graphs"] == "off: fake-host has no CUDA graph API (kernels are launched per call)"


def corrupt(trt, bundle, cache) -> str:
    path = put_engine(trt, bundle, cache, trt.engine([{"name": "input.1", "shape": [1, 3, 32, 64]}]))
    data = bytearray(path.read_bytes())
    data[5] ^= 0xFF
    path.write_bytes(bytes(data))  # the sidecar's sha256 no longer matches
    return "fails its sha256 check"


def other_version(trt, bundle, cache) -> str:
    put_engine(trt, bundle, cache, trt.engine([{"name": "input.1", "shape": [1, 3, 32, 64]}], tensorrt="8.5.1.7"))
    return "not compatible with this version of TensorRT"


def other_gpu(trt, bundle, cache) -> str:
    put_engine(trt, bundle, cache, trt.engine([{"name": "input.1", "shape": [1, 3, 32, 64]}], device="FakeGPU SM 8.7"))
    return "incompatible device"


def other_bundle(trt, bundle, cache) -> str:
    path = put_engine(trt, bundle, cache, trt.engine([{"name": "input.1", "shape": [1, 3, 32, 64]}]))
    sidecar = Path(str(path) + ".json")
    meta = json.loads(sidecar.read_text())
    meta["key"]["bundle_hash"] = "0123456789abcdef"
    sidecar.write_text(json.dumps(meta))
    return "describes another engine"


@pytest.mark.parametrize("spoil", [corrupt, other_version, other_gpu, other_bundle])
def test_a_stale_cached_engine_is_rebuilt_never_run(env, caplog, spoil) -> None:
    trt, cuda, bundle, cache = env("8.5")
    why = spoil(trt, bundle, cache)
    with caplog.at_level(logging.WARNING):
        backend = open_backend(trt, cuda, bundle, cache)
    assert trt.engines_built() == 1
    assert any(why in note for note in backend.describe()["engine_notes"])
    assert any(why in r.getMessage() for r in caplog.records)
    assert backend.engine_cached is False
    x = frame_tensor(3)
    np.testing.assert_allclose(backend.infer({"input.1": x})[0], expected(x)["537"], rtol=1e-5)
    # what runs is the engine the builder made (its record lists layers), never the spoiled one
    assert "layers" in backend._engine.record and backend._engine.record["tensorrt"] == trt.__version__


@pytest.mark.parametrize("spoil", [other_version, other_gpu])
def test_a_second_runner_reads_why_its_engine_did_not_load(env, spoil) -> None:
    """TensorRT keeps the first logger while a Runtime lives: the second runner reads the
    process logger too, so the reason its cached engine failed to deserialize reaches its notes."""
    from edge_sdk.trt import log as trt_log

    trt, cuda, bundle, cache = env("8.5")
    listeners = trt_log.listening()  # runners other tests left active still listen
    first = open_backend(trt, cuda, bundle, cache)
    why = spoil(trt, bundle, cache)
    second = open_backend(trt, cuda, bundle, cache)
    assert any(why in note for note in second.describe()["engine_notes"]), second.describe()["engine_notes"]
    x = frame_tensor(4)
    for backend in (first, second):
        np.testing.assert_allclose(backend.infer({"input.1": x})[0], expected(x)["537"], rtol=1e-5)
    assert trt_log.listening() == listeners + 2
    first.deactivate()
    second.deactivate()
    assert trt_log.listening() == listeners


def test_dla_core_runs_with_gpu_fallback_and_no_graphs(env) -> None:
    trt, cuda, bundle, cache = env("8.5")
    from edge_sdk.runtime.backends.tensorrt import TensorRTBackend
    from fakes.fake_tensorrt import decode_engine

    backend = TensorRTBackend.from_bundle(bundle, "fp16", cuda=cuda, cache_dir=cache, dla_core=1)
    record = decode_engine(backend.engine_path.read_bytes())
    assert (record["device_type"], record["dla_core"], "GPU_FALLBACK" in record["flags"]) == ("DLA", 1, True)
    backend.activate()
    assert backend._engine.dla_core == 1  # Runtime.DLA_core was set before deserializing
    x = frame_tensor(4)
    np.testing.assert_allclose(backend.infer({"input.1": x})[0], expected(x)["537"], rtol=1e-5)
    described = backend.describe()
    assert described["dla_core"] == 1 and described["cuda_graphs"].startswith("off: DLA")


def test_deactivate_frees_everything_and_twice_is_harmless(env) -> None:
    trt, cuda, bundle, cache = env("10", "discrete")
    before = cuda.used
    backend = open_backend(trt, cuda, bundle, cache)
    backend.infer({"input.1": frame_tensor(1)})
    assert cuda.used > before
    backend.deactivate()
    backend.deactivate()
    assert cuda.used == before and not backend.is_active
    with pytest.raises(BackendError, match="not active"):
        backend.infer({"input.1": frame_tensor(1)})


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_activate_deactivate_cycles_destroy_their_streams_and_events(env, gpu: str) -> None:
    """Stream and event handles of the bindings are not freed by garbage collection: the fake
    counts those created and not destroyed."""
    trt, cuda, bundle, cache = env("8.5", gpu)
    backend = open_backend(trt, cuda, bundle, cache)
    backend.deactivate()
    for i in range(5):
        backend.activate()
        backend.infer({"input.1": frame_tensor(i)})
        backend.deactivate()
    assert cuda.streams == 6 and cuda.events >= 12
    assert (cuda.live_streams, cuda.live_events) == (0, 0)


def test_auto_picks_tensorrt_and_the_bundle_s_choice(env) -> None:
    trt, cuda, bundle, cache = env("8.5")
    backend = select_backend("auto", bundle=bundle, cuda=cuda, cache_dir=cache)
    assert backend.name == "tensorrt" and backend.cpu_bound is False
    assert (backend.precision, backend.describe()["precision"]) == ("fp32", "fp32")
    assert backend.describe()["tensorrt"] == "8.5.2.2"


def test_auto_without_tensorrt_falls_back_and_says_so_once(tiny_bundle: Path, monkeypatch, caplog) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setattr(backends, "_FALLBACK_SAID", set())
    bundle = Bundle.load(tiny_bundle)
    with caplog.at_level(logging.WARNING, logger="edge_sdk.runtime.backends"):
        first = select_backend("auto", bundle=bundle)
        second = select_backend("auto", bundle=bundle)
    assert first.name == second.name == "onnxruntime"
    said = [r.getMessage() for r in caplog.records if "running ONNX Runtime instead" in r.getMessage()]
    assert len(said) == 1 and "it needs TensorRT, which cannot be imported here" in said[0]


def test_backend_tensorrt_without_tensorrt_exits_10_naming_what_to_install(tiny_bundle: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from edge_sdk.cli import app

    monkeypatch.setitem(sys.modules, "tensorrt", None)
    result = CliRunner().invoke(app, ["detect", "synthetic://faces?width=160&height=120&count=2", "--bundle",
                                      str(tiny_bundle), "--backend", "tensorrt", "--max-frames", "1"])
    assert result.exit_code == 10, result.output
    flat = " ".join(result.output.split())
    assert 'pip install "edge-sdk[trt]"' in flat and "python3-libnvinfer" in flat


def test_stream_handles_as_tensorrt_takes_them() -> None:
    """execute_async_v3 takes the cudaStream_t as an int: cuda-python's converts with int()."""
    from edge_sdk.runtime.backends.tensorrt import stream_handle

    cudart = pytest.importorskip("cuda.cudart", reason="cuda-python (the nvrtc extra)")
    assert stream_handle(cudart.cudaStream_t(0x1234)) == 0x1234
    assert stream_handle(type("PycudaStream", (), {"handle": 0x5678})()) == 0x5678


def test_the_engine_checked_is_the_engine_deserialized(env) -> None:
    """An engine replaced between the lookup (from_bundle checks it against its sidecar) and
    activate() is never run: activate reads the bytes once, checks them, deserializes them."""
    from edge_sdk.runtime.backends.tensorrt import TensorRTBackend
    from edge_sdk.trt.cache import EngineCacheError

    trt, cuda, bundle, cache = env("8.5")
    backend = TensorRTBackend.from_bundle(bundle, "fp32", cuda=cuda, cache_dir=cache)
    swapped = trt.engine([{"name": "input.1", "shape": [1, 3, 32, 64]}])  # a valid engine, not the one checked
    backend.engine_path.write_bytes(swapped)
    with pytest.raises(EngineCacheError, match="changed after it was looked up"):
        backend.activate()
    assert not backend.is_active and trt.engines_built() == 1


def streams_model(env, profile: Dict[str, Any]):
    """A Model over the fake TensorRT backend whose cached engine has optimization `profile`."""
    from edge_sdk.runtime.model import Model

    trt, cuda, bundle, cache = env("8.5")
    put_engine(trt, bundle, cache, trt.engine([{"name": "input.1", "shape": [-1, 3, 32, 64]}], profiles=[profile]))
    backend = open_backend(trt, cuda, bundle, cache, use_graphs=False)
    return trt, Model(backend, SPEC, dict(CENTERFACE_DECODER), bundle)


def stream_frames(count: int) -> List[Any]:
    from edge_sdk.runtime.frame import Frame

    rng = np.random.default_rng(count)
    return [Frame(rng.integers(0, 256, (48 + 8 * i, 96, 3), dtype=np.uint8), index=0, stream_id=f"cam{i}")
            for i in range(count)]


def cpu_rows(frames: List[Any]) -> np.ndarray:
    """The oracle of what reaches the engine: each frame through the CPU preprocessor alone."""
    from edge_sdk.preprocess import Preprocessor

    return np.concatenate([Preprocessor(SPEC)(f.image)[0] for f in frames])


@pytest.mark.parametrize("streams, max_batch, calls", [(4, 4, [4]), (6, 4, [4, 2]), (4, 8, [4]), (3, 2, [2, 1])])
def test_several_streams_on_a_profile_engine_share_calls_of_its_batch(env, streams: int, max_batch: int,
                                                                      calls: List[int]) -> None:
    """An engine built for 1..8 rows: the streams' frames go in calls of up to max_batch_size rows
    (the batch comes from the engine's optimization profile, not the manifest's batch of 1)."""
    from edge_sdk.runtime.detectors.shared import StreamSetup, make_stream_detector

    trt, model = streams_model(env, {"input.1": [[1, 3, 32, 64], [4, 3, 32, 64], [8, 3, 32, 64]]})
    detector = make_stream_detector(model, [StreamSetup(f"cam{i}") for i in range(streams)], max_batch)
    try:
        before, trt.inputs_seen[:] = len(trt.calls["execute_async_v3"]), []
        frames = stream_frames(streams)
        found = detector.detect_batch(frames)
        assert len(found) == streams
        assert len(trt.calls["execute_async_v3"]) - before == len(calls)
        assert [len(x) for x in trt.inputs_seen] == calls
        seen = np.concatenate(trt.inputs_seen)
        # the streams' rows in any order (they submit side by side), each the frame's own tensor
        want = cpu_rows(frames)
        assert sorted(map(bytes, seen)) == sorted(map(bytes, want))
        assert "fixed" not in detector.describe()["batch"]["calls"]
        assert detector.describe()["batch"]["rows_per_call"] == min(max_batch, 8)
    finally:
        detector.close()


def test_one_stream_detector_batches_frames_as_the_profile_allows(env) -> None:
    from edge_sdk.runtime.detectors.batched import make_batch_detector

    trt, model = streams_model(env, {"input.1": [[1, 3, 32, 64], [4, 3, 32, 64], [8, 3, 32, 64]]})
    detector = make_batch_detector(model, max_batch_size=4)
    trt.inputs_seen[:] = []
    frames = stream_frames(3)
    assert len(detector.detect_batch(frames)) == 3
    # the first batch lays the engine's memory out with a run of its largest batch, then one call
    assert [len(x) for x in trt.inputs_seen] == [4, 3]
    np.testing.assert_array_equal(trt.inputs_seen[1], cpu_rows(frames))
    trt.inputs_seen[:] = []
    assert len(detector.detect_batch(stream_frames(4) + stream_frames(2))) == 6
    assert [len(x) for x in trt.inputs_seen] == [4, 2]
    assert detector.describe()["batch"]["rows_per_call"] == 4


def test_a_profile_that_starts_above_one_row_gets_its_fewest(env) -> None:
    """A profile of 2..4 rows: one stream's call is filled up to 2 rows (the extra row zero, its
    outputs cut off), two streams fill a call between them."""
    from edge_sdk.runtime.detectors.shared import StreamSetup, make_stream_detector

    trt, model = streams_model(env, {"input.1": [[2, 3, 32, 64], [2, 3, 32, 64], [4, 3, 32, 64]]})
    detector = make_stream_detector(model, [StreamSetup("cam0")], 4)
    try:
        trt.inputs_seen[:] = []
        frames = stream_frames(1)
        assert len(detector.detect_batch(frames)) == 1
        assert [len(x) for x in trt.inputs_seen] == [2]
        np.testing.assert_array_equal(trt.inputs_seen[0][:1], cpu_rows(frames))
        assert not trt.inputs_seen[0][1:].any()
    finally:
        detector.close()


@pytest.mark.parametrize("kind", ["Runtime", "Builder"])
def test_a_tensorrt_factory_that_returns_nothing_is_a_backend_error(env, kind: str) -> None:
    """trt.Runtime / trt.Builder are pybind11 factories: a null createInferRuntime (CUDA did not
    initialise) is a bare TypeError there; here it is the typed error, with TensorRT's reason."""
    from edge_sdk.runtime.backends.tensorrt import TensorRTBackend

    trt, cuda, bundle, cache = env("8.5")
    trt.null_factories.add(kind)
    used = cuda.used
    with pytest.raises(BackendError, match=rf"could not create its {kind} \(createInfer{kind} returned nothing(.|\n)*"
                                           "CUDA initialization failure with error: 222"):
        TensorRTBackend.from_bundle(bundle, "fp32", cuda=cuda, cache_dir=cache).activate()
    assert cuda.used == used  # nothing left allocated
