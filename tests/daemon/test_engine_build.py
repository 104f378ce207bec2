"""A reload that builds a TensorRT engine shows the build in the retained status (`engine_build`),
while the live model runs on; an engine from the cache shows nothing; a failed build clears the
block and the reload fails with TensorRT's reason. TensorRT here is the strict 8.5 fake
(tests/fakes) on the fake Xavier NX CUDA; the build is held on an Event, so the test decides
when it ends."""
from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, List, Optional, Tuple

import numpy as np
import pytest

from edge_sdk.daemon.enginebuild import EVERY_S, EngineBuild
from edge_sdk.daemon.model import RunningModel
from edge_sdk.daemon.reload import HotReloader
from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime.config import PipelineConfig
from edge_sdk.telemetry.schemas import errors
from fakes.fake_cuda_host import XAVIER_NX
from fakes.fake_tensorrt import fake_model
from fakes.fake_tensorrt_runtime import FakeRuntimeCuda, FakeTensorRTRuntime85
from runtime_factories import CENTERFACE_DECODER, write_bundle

SPEC = InputSpec(name="input.1", shape=[1, 3, 32, 64], resize="letterbox")
WAIT_S = 20.0  # a bound on waits for the worker, never a pause


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def bundle(models: Path, name: str) -> Path:
    """A bundle whose model is a fake-parser model named `name` (its own hash: its own engine)."""
    models.mkdir(parents=True, exist_ok=True)
    model = models / f"{name}.model.json"
    model.write_bytes(fake_model(name, "fp32", [{"name": SPEC.name, "shape": list(SPEC.shape)}]))
    return write_bundle(models / name, model, SPEC, CENTERFACE_DECODER)


@pytest.fixture
def tensorrt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """(fake tensorrt, gate): the fake's builds wait for `gate.release` once `gate.hold` is set."""
    cuda = FakeRuntimeCuda(props=XAVIER_NX)
    trt = FakeTensorRTRuntime85(cuda=cuda)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    monkeypatch.setattr("edge_sdk.cuda.require_cuda", lambda *_a, **_k: cuda)
    monkeypatch.setenv("EDGE_SDK_ENGINE_CACHE", str(tmp_path / "engines"))

    class Gate:
        hold = False
        fail: Optional[str] = None
        started = threading.Event()
        release = threading.Event()

    build = trt.Builder.build_serialized_network

    def gated(self: Any, network: Any, config: Any) -> Any:
        if Gate.hold:
            Gate.started.set()
            assert Gate.release.wait(WAIT_S), "the test never ended the build"
        if Gate.fail is not None:
            self._fail(Gate.fail)  # what TensorRT does: an error in its log, no engine
            return None
        return build(self, network, config)

    monkeypatch.setattr(trt.Builder, "build_serialized_network", gated)
    return trt, Gate


@pytest.fixture
def daemon(tensorrt, tmp_path: Path):
    """(running model on the TensorRT fake, reloader, results heard by on_result)."""
    models = tmp_path / "models"
    live = bundle(models, "live")
    running = RunningModel(PipelineConfig(backend="tensorrt", threads=1).validate())
    results: List[Tuple[Any, Any, str]] = []
    done = threading.Event()

    def heard(model: Any, error: Any, path: str) -> None:
        results.append((model, error, path))
        done.set()

    running.open(live)
    reloader = HotReloader(models, running.load, on_result=heard)
    yield running, reloader, results, done, models
    reloader.join(WAIT_S)
    ready = reloader.poll()
    for model in ([ready] if ready is not None else []) + [running.model]:
        model.close()


def live_infers(running: RunningModel) -> np.ndarray:
    """The live engine's output for one input: it answers while the candidate's engine builds."""
    x = np.full(SPEC.shape, 200, np.float32)
    return np.array(running.model.backend.infer({SPEC.name: x})[0], copy=True)


def test_a_build_shows_in_the_status_until_the_model_is_ready(tensorrt, daemon) -> None:
    trt, gate = tensorrt
    running, reloader, results, _, models = daemon
    bundle(models, "v2")
    before = live_infers(running)
    assert before.size and np.all(before > 0.99)  # sigmoid((200 - 128) / 4): the fake engine's arithmetic
    assert running.engine_build.describe() is None
    gate.hold = True
    reloader.request("v2")
    assert gate.started.wait(WAIT_S)
    block = running.engine_build.describe()
    assert block is not None and block["bundle"] == "v2"
    assert block["message"].startswith("building the fp32 engine") and block["fraction"] is None
    assert "IProgressMonitor" in block["fraction_unknown"]
    message = {"schema": "edge-sdk/status/1", "device_id": "d", "ts": 1, "seq": 1, "state": "online", "engine_build": block}
    assert errors(message) == []
    assert np.array_equal(live_infers(running), before)  # the live model runs on meanwhile
    assert running.engine_build.due()  # the frame loop publishes the block
    gate.release.set()
    reloader.join(WAIT_S)
    new = reloader.poll()
    assert new is not None and results == [] and new.bundle.root.name == "v2"
    assert running.engine_build.describe() is None
    assert running.engine_build.due()  # ... and the null once it ends
    assert not running.engine_build.due()
    running.swap(new)


def test_an_engine_from_the_cache_shows_no_block(tensorrt, daemon) -> None:
    trt, gate = tensorrt
    running, reloader, results, _, models = daemon
    heard: List[str] = []
    running.engine_build = Recording(heard)
    reloader.request(str(models / "live"))  # the live bundle: its engine is in the cache
    reloader.join(WAIT_S)
    new = reloader.poll()
    assert new is not None and results == []
    assert heard == [] and trt.calls["build"] == ["live"]  # built once, at start
    new.close()
    bundle(models, "v2")
    reloader.request("v2")  # the oracle that `heard` hears a build: v2 has no engine yet
    reloader.join(WAIT_S)
    new = reloader.poll()
    assert new is not None and trt.calls["build"] == ["live", "v2"]
    assert heard[0].startswith("building the fp32 engine") and running.engine_build.describe() is None
    new.close()


class Recording(EngineBuild):
    def __init__(self, heard: List[str]) -> None:
        super().__init__()
        self.heard = heard

    def progress(self, bundle: str) -> Any:
        say = super().progress(bundle)

        def record(message: str) -> None:
            self.heard.append(message)
            say(message)
        return record


def test_a_failed_build_clears_the_block_and_the_reload_fails_with_its_reason(tensorrt, daemon) -> None:
    trt, gate = tensorrt
    running, reloader, results, done, models = daemon
    bundle(models, "broken")
    gate.hold, gate.fail = True, "Network has dynamic or shape inputs, but no optimization profile has been defined."
    reloader.request("broken")
    assert gate.started.wait(WAIT_S)
    assert running.engine_build.describe()["bundle"] == "broken"
    assert running.engine_build.due()
    gate.release.set()
    assert done.wait(WAIT_S)
    (model, error, path), = results
    assert model is None and "no optimization profile" in str(error) and path.endswith("broken")
    assert running.engine_build.describe() is None and running.engine_build.due()
    assert running.model.bundle.root.name == "live" and running.reload_failures == 1


def test_the_status_is_published_at_most_once_a_second() -> None:
    clock = Clock()
    build = EngineBuild(clock)
    assert not build.due()
    say = build.progress("v2")
    say("building the fp16 engine")
    assert build.due() and not build.due()
    clock.now += EVERY_S / 2
    say("reading the engine's layers")
    assert not build.due()
    assert build.describe() == {"bundle": "v2", "message": "reading the engine's layers", "step": 2,
                                "elapsed_s": 0.5, "fraction": None, "fraction_unknown": build.describe()["fraction_unknown"]}
    clock.now += EVERY_S / 2
    assert build.due()
    build.end()
    assert build.describe() is None and build.due() and not build.due()
    build.progress("v3")  # a load that never builds (engine cached) publishes nothing
    build.end()
    clock.now += 10
    assert not build.due()


def test_the_daemon_publishes_the_block_while_a_shadow_s_engine_builds(tmp_path: Path, broker, message_log,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The real daemon (ONNX Runtime, synthetic source, real Mosquitto): the engine builder's
    callback is driven here (ONNX Runtime builds no engine), held on an Event, so the retained
    status is seen with the block during the build, the live stream's frames go on, and the
    block is null once the shadow runs."""
    import edge_sdk.daemon.model as daemon_model
    from edge_sdk.daemon import Daemon
    from edge_sdk.telemetry import schemas
    from polling import wait_until
    from test_daemon import Running, command, config
    from tiny_bundle import make_tiny_bundle

    models = tmp_path / "models"
    make_tiny_bundle(models / "a", seed=0, size_bias=2.0)
    make_tiny_bundle(models / "b", seed=1, size_bias=2.0)
    building, release = threading.Event(), threading.Event()
    load = daemon_model.load_model

    def builds_b(bundle: Any, **kwargs: Any) -> Any:
        if Path(bundle).name == "b":
            kwargs["progress"]("building the fp16 engine from model_fp16.onnx (TensorRT 8.5.2.2, Xavier NX)")
            building.set()
            assert release.wait(WAIT_S)
        return load(bundle, **kwargs)

    monkeypatch.setattr(daemon_model, "load_model", builds_b)
    log = message_log(broker.url, ["edge-sdk/cam-1/#"])
    daemon = Daemon(config(models, tmp_path, broker.url, shadow={"every_n_frames": 2, "window_frames": 20}))
    running = Running(daemon)
    try:
        assert wait_until(lambda: daemon.frames > 5)
        command(log, schemas.topic("cam-1", "cmd"), {"schema": "edge-sdk/cmd/1", "id": "r1", "cmd": "reload",
                                                     "args": {"bundle": "b", "shadow": True}})
        assert building.wait(WAIT_S)
        assert log.wait(lambda m: any((s.get("engine_build") or {}).get("bundle") == "b" for s in log.on("status")),
                        timeout=WAIT_S), log.on("status")
        frames = daemon.frames
        assert wait_until(lambda: daemon.frames > frames + 5)  # the live model runs on meanwhile
        release.set()
        assert log.wait(lambda m: any(s["bundle"] == "b" for s in log.on("shadow")), timeout=30), log.on("shadow")
        assert log.wait(lambda m: log.on("status")[-1].get("engine_build", "absent") is None, timeout=WAIT_S)
    finally:
        release.set()
        assert running.stop() == 0
    block = [s["engine_build"] for s in log.on("status") if s.get("engine_build")][0]
    assert block["message"].startswith("building the fp16 engine") and block["fraction"] is None
    for message in log.messages:
        if isinstance(message["payload"], dict) and not message["topic"].endswith("/cmd"):
            assert schemas.errors(message["payload"]) == [], message


def files_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file()) / (1 << 20)


def test_a_reload_s_build_gets_the_workspace_free_memory_leaves(tensorrt, daemon, monkeypatch) -> None:
    """TensorRT's default workspace is the whole device memory: beside a live model on an 8 GB
    Xavier NX the build is bounded by MemAvailable less the candidate's files and the margin."""
    from fakes.fake_tensorrt import decode_engine

    trt, _ = tensorrt
    running, reloader, results, _, models = daemon
    free = 1536 << 20
    monkeypatch.setattr("edge_sdk.daemon.shadow.free_memory_bytes", lambda: free)
    running.memory_margin_mb = 300.0
    path = bundle(models, "v2")
    reloader.request("v2")
    reloader.join(WAIT_S)
    new = reloader.poll()
    assert new is not None and results == []
    want_mib = int(1536 - files_mb(path) - 300.0)
    record = decode_engine(new.backend.engine_path.read_bytes())
    assert record["pool_limits"] == {"WORKSPACE": want_mib << 20}
    new.close()


def test_a_build_that_cannot_fit_beside_the_live_model_is_refused_with_figures(tensorrt, daemon, monkeypatch) -> None:
    trt, _ = tensorrt
    running, reloader, results, done, models = daemon
    monkeypatch.setattr("edge_sdk.daemon.shadow.free_memory_bytes", lambda: 300 << 20)
    bundle(models, "v2")
    reloader.request("v2")
    assert done.wait(WAIT_S)
    (model, error, _path), = results
    assert model is None and trt.calls["build"] == ["live"]  # refused before TensorRT was asked
    message = str(error)
    assert "cannot be built beside the running model: 300.0 MB are free (MemAvailable)" in message
    assert "256 MB are kept for the live model" in message and "edge-sdk engine" in message
    assert running.reload_failures == 1 and running.engine_build.describe() is None
    assert np.all(live_infers(running) > 0.99)  # the live model runs on


def test_an_engine_from_the_cache_needs_no_workspace(tensorrt, daemon, monkeypatch) -> None:
    trt, _ = tensorrt
    running, reloader, results, _, models = daemon
    monkeypatch.setattr("edge_sdk.daemon.shadow.free_memory_bytes", lambda: 1 << 20)  # nothing to build in
    reloader.request(str(models / "live"))
    reloader.join(WAIT_S)
    new = reloader.poll()
    assert new is not None and results == [] and trt.calls["build"] == ["live"]
    new.close()


def test_the_workspace_rule_is_the_shadow_s(tmp_path: Path, monkeypatch) -> None:
    from edge_sdk.daemon.shadow import MIN_BUILD_WORKSPACE_MIB, build_workspace_mib, fit_problem
    from edge_sdk.errors import BackendError

    path = bundle(tmp_path / "models", "v2")
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    free = size + (256 << 20) + (MIN_BUILD_WORKSPACE_MIB << 20)
    assert build_workspace_mib(path, 256.0, free) == MIN_BUILD_WORKSPACE_MIB
    assert fit_problem(path, 256.0, free) is None  # a shadow fits where its build fits
    with pytest.raises(BackendError, match=f"under the {MIN_BUILD_WORKSPACE_MIB} MiB a build needs"):
        build_workspace_mib(path, 256.0, free - (1 << 20))
    monkeypatch.setattr("edge_sdk.daemon.shadow.free_memory_bytes", lambda: None)  # /proc/meminfo unreadable
    assert build_workspace_mib(path, 256.0) is None  # TensorRT's default, as the shadow's check lets it load


def test_tensorrt_10_reports_the_fraction_done_in_the_status(monkeypatch, tmp_path: Path) -> None:
    """TensorRT >= 10 calls the IProgressMonitor on the builder config: the block carries the
    fraction of the phase it is in, never going back, 1.0 when the phase ends (8.5 has none:
    test_a_build_shows_in_the_status_until_the_model_is_ready)."""
    from fakes.fake_tensorrt_runtime import RUNTIME_FAKES

    cuda = FakeRuntimeCuda(props=XAVIER_NX)
    trt = RUNTIME_FAKES["10"](cuda=cuda)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    monkeypatch.setattr("edge_sdk.cuda.require_cuda", lambda *_a, **_k: cuda)
    monkeypatch.setenv("EDGE_SDK_ENGINE_CACHE", str(tmp_path / "engines"))
    monkeypatch.setattr("edge_sdk.daemon.shadow.free_memory_bytes", lambda: 4 << 30)
    blocks: List[Any] = []

    class Watching(EngineBuild):
        def _done(self, bundle: str, done: float, phase: str) -> None:
            super()._done(bundle, done, phase)
            blocks.append(self.describe())

    running = RunningModel(PipelineConfig(backend="tensorrt", threads=1).validate())
    running.engine_build = Watching()
    model = running.load(bundle(tmp_path / "models", "v2"))
    try:
        steps = [c for c in trt.calls["progress"] if c[0] == "step"]
        assert steps  # the fake's builder reported its tactic steps
        fractions = [b["fraction"] for b in blocks]
        assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == 1.0
        assert {b["phase"] for b in blocks} == {"Building engine"}
        assert all("fraction_unknown" not in b for b in blocks)
        message = {"schema": "edge-sdk/status/1", "device_id": "d", "ts": 1, "seq": 1, "state": "online",
                   "engine_build": blocks[len(blocks) // 2]}
        assert errors(message) == []
        # one step per layer inside the first of two top steps: the first step is 1/layers of a half
        assert next(f for f in fractions if f > 0) == round(1 / len(steps) / 2, 3)
    finally:
        model.close()
