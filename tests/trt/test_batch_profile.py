"""The engine's batch range from the bundle's (`edge-sdk build --max-batch`), and `check_batch`:
a configuration that batches more than a bundle, an engine's profile or a backend takes is refused
with the command that fixes it. TensorRT is the fake (tests/fakes), as strict as the real API."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import pytest
from typer.testing import CliRunner

from edge_sdk.cli import app
from edge_sdk.errors import ConfigError
from edge_sdk.manifest import MANIFEST, Bundle
from edge_sdk.manifest_check import batch_limit, check_batch
from edge_sdk.preprocess import InputSpec
from edge_sdk.trt import engine as engine_mod
from edge_sdk.trt.engine import build_engine
from edge_sdk.trt.options import BuildOptions
from edge_sdk.trt.profiles import BatchRange, batch_range
from fakes.fake_cuda_host import DISCRETE
from fakes.fake_tensorrt import decode_engine, fake_model
from fakes.fake_tensorrt_runtime import RUNTIME_FAKES, FakeRuntimeCuda
from runtime_factories import CENTERFACE_DECODER, write_bundle
from trt_bundles import INPUT, XAVIER

RANGE = {"min": 1, "opt": 2, "max": 6}


def _record(bundle: Path, entry: Dict[str, Any]) -> Path:
    """The bundle's manifest with a `batch` entry, as `edge-sdk build --max-batch` writes it."""
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["batch"] = dict(entry, dim="batch")
    (bundle / MANIFEST).write_text(json.dumps(manifest))
    return bundle


@pytest.fixture
def on_xavier(monkeypatch, install_trt):
    fake = install_trt("8.5")
    monkeypatch.setattr(engine_mod, "detect_gpu", lambda: XAVIER)
    return fake


def test_the_engine_profile_spans_the_bundle_range_tuned_for_its_preferred_batch(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    bundle = _record(make_bundle(model_shape=[-1, 3, 8, 8]), RANGE)
    result = build_engine(bundle, BuildOptions(cache_dir=cache_dir, precision="fp16", gpu=XAVIER,
                                               allocate=fake.device_memory.allocate))
    record = decode_engine(result.path.read_bytes())
    assert record["profiles"] == [{INPUT: [[1, 3, 8, 8], [2, 3, 8, 8], [6, 3, 8, 8]]}]


def test_engine_cli_takes_the_bundle_range_and_refuses_more(on_xavier, make_bundle, cache_dir) -> None:
    bundle = _record(make_bundle(model_shape=[-1, 3, 8, 8]), RANGE)
    base = ["engine", str(bundle), "--precision", "fp16", "--cache-dir", str(cache_dir), "--json"]
    first = json.loads(CliRunner().invoke(app, base).stdout)
    assert first["batch"]["profile"] == {INPUT: [[1, 3, 8, 8], [2, 3, 8, 8], [6, 3, 8, 8]]}
    smaller = json.loads(CliRunner().invoke(app, base + ["--max-batch", "4"]).stdout)
    assert smaller["batch"]["profile"] == {INPUT: [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]]}
    built = on_xavier.engines_built()
    refused = CliRunner().invoke(app, base + ["--max-batch", "8"])
    assert refused.exit_code == ConfigError.exit_code
    assert "takes at most 6: rebuild the bundle with `edge-sdk build --max-batch 8`" in refused.output
    assert on_xavier.engines_built() == built


@pytest.mark.parametrize("max_batch, opt_batch, dla, expected", [
    (None, None, False, (1, 2, 6)),   # the bundle's range and preferred batch
    (None, None, True, (1, 1, 6)),    # the DLA runs one size: one frame unless --opt-batch
    (4, None, False, (1, 2, 4)),
    (1, None, False, (1, 1, 1)),      # the preferred batch beyond --max-batch: tuned for the max
    (None, 5, False, (1, 5, 6)),
])
def test_the_default_range_follows_the_bundle(max_batch: Optional[int], opt_batch: Optional[int], dla: bool, expected) -> None:
    got = batch_range(max_batch, opt_batch, dla=dla, recorded=RANGE)
    assert (got.min, got.opt, got.max) == expected


@pytest.mark.parametrize("source", [BatchRange(1, 2, 6), {"min": 1, "opt": 2, "max": 6}])
def test_an_engine_profile_refuses_a_larger_batch(source: Any) -> None:
    assert check_batch(source, 6) == 6
    with pytest.raises(ConfigError, match=r"engine's optimization profile takes at most 6: rebuild the engine with "
                                          r"`edge-sdk engine BUNDLE --max-batch 7`"):
        check_batch(source, 7)


@pytest.mark.parametrize("wanted", [0, -1, True, 2.0])
def test_a_wanted_batch_that_is_no_batch_is_refused(wanted: Any) -> None:
    with pytest.raises(ConfigError, match="whole number of inputs"):
        check_batch(BatchRange(1, 1, 8), wanted)


# --- the TensorRT backend (fake runtime) ------------------------------------------------------------------

def _runtime_bundle(root: Path, model_shape: list, entry: Optional[Dict[str, Any]]) -> Bundle:
    spec = InputSpec(name="input.1", shape=[1, 3, 32, 64], resize="letterbox")
    model = root.parent / f"{root.name}.model.json"
    model.write_bytes(fake_model("model.onnx", "fp32", [{"name": spec.name, "shape": model_shape}]))
    write_bundle(root, model, spec, CENTERFACE_DECODER)
    if entry is not None:
        _record(root, entry)
    return Bundle.load(root)


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch):
    cuda = FakeRuntimeCuda(props=DISCRETE)
    trt = RUNTIME_FAKES["10"](cuda=cuda)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    opened = []
    yield cuda, opened
    for backend in opened:
        backend.deactivate()


def _open(runtime, bundle: Bundle, cache: Path) -> Any:
    from edge_sdk.runtime.backends.tensorrt import TensorRTBackend

    cuda, opened = runtime
    backend = TensorRTBackend.from_bundle(bundle, "fp32", cuda=cuda, cache_dir=cache)
    backend.activate()
    opened.append(backend)
    return backend


def test_the_tensorrt_backend_runs_the_bundle_range_and_refuses_more(runtime, tmp_path: Path) -> None:
    bundle = _runtime_bundle(tmp_path / "b", [-1, 3, 32, 64], {"min": 1, "opt": 2, "max": 4})
    backend = _open(runtime, bundle, tmp_path / "engines")
    assert batch_limit(backend)[0] == 4  # the profile from the bundle's range, no --max-batch given
    assert check_batch(backend, 4) == 4
    x = np.random.default_rng(0).uniform(0, 255, (4, 3, 32, 64)).astype(np.float32)
    assert backend.infer({"input.1": x})[0].shape[0] == 4
    with pytest.raises(ConfigError, match=rf"tensorrt backend takes at most 4: rebuild the engine with "
                                          rf"`edge-sdk engine {bundle.root} --max-batch 5`"):
        check_batch(backend, 5)


def test_a_tensorrt_engine_of_a_fixed_batch_says_to_rebuild_the_bundle(runtime, tmp_path: Path) -> None:
    bundle = _runtime_bundle(tmp_path / "b", [1, 3, 32, 64], None)
    backend = _open(runtime, bundle, tmp_path / "engines")
    assert check_batch(backend, 1) == 1
    with pytest.raises(ConfigError, match=r"takes at most 1: its model has a fixed batch: rebuild the bundle with "
                                          r"`edge-sdk build --max-batch 2`, then `edge-sdk engine .* --max-batch 2`"):
        check_batch(backend, 2)
