"""After a build: the layer report (engine inspector) and the dynamic-batch optimization profile."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edge_sdk.cli import app
from edge_sdk.errors import BackendError, ConfigError
from edge_sdk.roi.config import RoiConfig
from edge_sdk.trt import engine as engine_mod
from edge_sdk.trt.engine import build_engine
from edge_sdk.trt.options import BuildOptions
from edge_sdk.trt.profiles import BatchRange, batch_range
from edge_sdk.trt.report import report_lines, report_warnings, summarize_layers
from fakes.fake_tensorrt import MISSING_SCALE, decode_engine
from trt_bundles import INPUT, XAVIER


def _build(bundle, fake, cache_dir, **kw):
    kw.setdefault("gpu", XAVIER)
    kw.setdefault("allocate", fake.device_memory.allocate)
    result = build_engine(bundle, BuildOptions(cache_dir=cache_dir, **kw))
    return result, decode_engine(result.path.read_bytes())


@pytest.fixture
def on_xavier(monkeypatch, install_trt):
    fake = install_trt("8.5")
    monkeypatch.setattr(engine_mod, "detect_gpu", lambda: XAVIER)
    return fake


# --- the layer report ----------------------------------------------------------------------


# (precision, DLA core) -> layers per precision and per device, worked out from the fake bundle:
# five layers conv1 relu1 conv2 conv2_7 head; node conv2 (layers conv2, conv2_7) is an FP32
# fallback; `head` cannot run on the DLA.
REPORTS = {
    ("fp32", None): ({"FP32": 5}, {"GPU": 5}),
    ("fp16", None): ({"FP16": 5}, {"GPU": 5}),
    ("int8", None): ({"INT8": 3, "FP32": 2}, {"GPU": 5}),
    ("best", None): ({"INT8": 3, "FP32": 2}, {"GPU": 5}),
    # on the DLA: conv1 + relu1 make one DLA subgraph; the FP32 layers and head fall back to the GPU
    ("int8", 0): ({"INT8": 2, "FP32": 2}, {"DLA": 1, "GPU": 3}),
    ("fp16", 0): ({"FP16": 2}, {"DLA": 1, "GPU": 1}),
}


@pytest.mark.parametrize("precision, dla", sorted(REPORTS, key=str))
def test_layer_report_counts_precisions_and_devices(install_trt, make_bundle, cache_dir, precision, dla) -> None:
    fake = install_trt("8.5")
    result, _ = _build(make_bundle(), fake, cache_dir, precision=precision, dla_core=dla)
    precisions, devices = REPORTS[(precision, dla)]
    report = result.layers
    assert report["detailed"] is True
    assert {k: v for k, v in report["precisions"].items() if v} == precisions
    assert {k: v for k, v in report["devices"].items() if v} == devices
    stored = json.loads(result.layer_report.read_text())
    assert stored == report and result.layer_report.parent == result.path.parent
    assert result.layer_report.name == result.path.name.replace(".engine", ".layers.json")


def test_tensors_missing_from_the_cache_are_named(install_trt, make_bundle, cache_dir) -> None:
    """A host-made cache without the scales of some tensors: TensorRT leaves their layers out
    of INT8 with a warning only; the report names them."""
    fake = install_trt("8.5")
    bundle = make_bundle(cache_tensors=(INPUT, "conv1", "conv2"))
    result, _ = _build(bundle, fake, cache_dir, precision="best")
    report = result.layers
    assert report["missing_scales"] == ["relu1", "head"]
    assert {k: v for k, v in report["precisions"].items() if v} == {"INT8": 1, "FP16": 2, "FP32": 2}
    assert any(MISSING_SCALE.format(name="relu1") == w for w in report["warnings"])


def test_engine_command_prints_the_report_and_the_warnings(runner_env, make_bundle, cache_dir) -> None:
    bundle = make_bundle(cache_tensors=(INPUT, "conv1", "conv2"))
    args = ["engine", str(bundle), "--precision", "best", "--cache-dir", str(cache_dir)]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "layers: 1 INT8, 2 FP16, 2 FP32 (GPU 5" in first.stdout
    assert "pinned layers: 2 of 2 run in the precision asked" in first.stdout
    assert "layer report: " in first.stdout and ".layers.json" in first.stdout
    assert "2 tensor(s) have no scale in the calibration cache" in first.output and "relu1, head" in first.output
    second = CliRunner().invoke(app, args)  # a cache hit prints the stored report
    assert second.exit_code == 0 and "found in the cache" in second.stdout
    assert "layers: 1 INT8, 2 FP16, 2 FP32" in second.stdout and "relu1, head" in second.output


def test_build_warnings_are_reported_even_when_the_build_succeeds(install_trt, make_bundle, cache_dir, tmp_path: Path,
                                                                  monkeypatch) -> None:
    monkeypatch.setattr(engine_mod, "detect_gpu", lambda: XAVIER)
    timing, bundle = tmp_path / "timing.cache", make_bundle()
    _build(bundle, install_trt("8.5", device_name="Other GPU"), cache_dir, precision="fp16", timing_cache=timing)
    fake = install_trt("8.5")
    result, _ = _build(bundle, fake, cache_dir, precision="fp16", timing_cache=timing, force=True)
    assert result.layers["warnings"] == ["timing cache was created on a different device; ignoring it"]
    result = CliRunner().invoke(app, ["engine", str(bundle), "--precision", "fp16", "--cache-dir", str(cache_dir)])
    assert "found in the cache" in result.stdout  # the stored report keeps the warnings
    assert "TensorRT printed 1 warning(s) during the build: timing cache was created on a different device" in result.output


def test_json_output_carries_the_report(runner_env, make_bundle, cache_dir) -> None:
    result = CliRunner().invoke(app, ["engine", str(make_bundle()), "--precision", "int8", "--cache-dir", str(cache_dir), "--json"])
    out = json.loads(result.stdout)
    assert out["layers"]["precisions"]["INT8"] == 3 and Path(out["layer_report"]).is_file()


def test_a_names_only_engine_says_precisions_are_unknown() -> None:
    report = summarize_layers(["conv1", "relu1"], "", [], dla=False, pinned={"conv1": "fp32"})
    assert report["detailed"] is False and "precisions unknown" in report["note"]
    assert report["pinned"]["not_found"] == ["conv1"]


def test_a_fused_layer_counts_for_each_pinned_part() -> None:
    layers = [{"Name": "conv1 + relu1", "LayerType": "CaskConvolution",
               "Outputs": [{"Name": "relu1", "Format/Datatype": "Row major linear FP32"}]},
              {"Name": "Reformatting CopyNode for Input Tensor 0 to head", "LayerType": "Reformat",
               "Outputs": [{"Name": "x", "Format/Datatype": "Channel major FP16 format where channel % 8 == 0"}]},
              {"Name": "head", "LayerType": "CaskConvolution",
               "Outputs": [{"Name": "head", "Format/Datatype": "Thirty-two wide channel vectorized row major Int8 format"}]}]
    report = summarize_layers(layers, "", [], dla=False, pinned={"relu1": "fp32", "head": "fp16", "gone": "fp32"})
    assert report["precisions"]["FP32"] == 1 and report["precisions"]["INT8"] == 1 and report["reformats"] == 1
    assert report["pinned"]["honoured"] == ["relu1"] and report["pinned"]["not_honoured"] == {"head": "INT8"}
    assert report["pinned"]["not_found"] == ["gone"]


# --- the dynamic-batch optimization profile ----------------------------------------------------


@pytest.fixture
def runner_env(on_xavier):
    return on_xavier


def test_a_dynamic_batch_gets_a_profile_from_the_roi_settings(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    most = RoiConfig().max_fine_inputs
    result, record = _build(make_bundle(model_shape=[-1, 3, 8, 8]), fake, cache_dir, precision="fp16")
    assert record["profiles"] == [{INPUT: [[1, 3, 8, 8], [most, 3, 8, 8], [most, 3, 8, 8]]}]
    assert result.batch["profile"] == {INPUT: [[1, 3, 8, 8], [most, 3, 8, 8], [most, 3, 8, 8]]}


def test_other_dynamic_dims_take_the_manifest_size(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("10")
    _, record = _build(make_bundle(model_shape=[-1, 3, -1, -1], shape=[1, 3, 8, 16]), fake, cache_dir, precision="fp16",
                       batch=BatchRange(1, 2, 6))
    assert record["profiles"] == [{INPUT: [[1, 3, 8, 16], [2, 3, 8, 16], [6, 3, 8, 16]]}]


def test_a_fixed_batch_is_built_without_a_profile_and_says_so(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    result, record = _build(make_bundle(), fake, cache_dir, precision="fp16")
    assert record["profiles"] == [] and result.batch == {"profile": None, "fixed": True}
    assert any("batch is fixed" in n and "[1, 3, 8, 8]" in n for n in result.notes)


def test_int8_calibration_on_a_dynamic_batch_runs_at_the_manifest_shape(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    _, record = _build(make_bundle(model_shape=[-1, 3, 8, 8]), fake, cache_dir, precision="int8", recalibrate=True)
    assert record["calibration_profile"] == {INPUT: [[1, 3, 8, 8]] * 3}
    assert record["int8"]["batch_sums"] == [192.0, 384.0, 576.0]


def test_cli_batch_options_and_a_cached_engine_for_another_range(runner_env, make_bundle, cache_dir) -> None:
    bundle = make_bundle(model_shape=[-1, 3, 8, 8])
    base = ["engine", str(bundle), "--precision", "fp16", "--cache-dir", str(cache_dir), "--json"]
    first = json.loads(CliRunner().invoke(app, base + ["--max-batch", "8", "--opt-batch", "4"]).stdout)
    assert first["batch"]["profile"] == {INPUT: [[1, 3, 8, 8], [4, 3, 8, 8], [8, 3, 8, 8]]}
    again = json.loads(CliRunner().invoke(app, base + ["--max-batch", "8", "--opt-batch", "4"]).stdout)
    assert again["cached"] is True
    other = json.loads(CliRunner().invoke(app, base + ["--max-batch", "6"]).stdout)
    assert other["cached"] is False and any("was built for batch" in n for n in other["notes"])
    assert runner_env.engines_built() == 2


def test_a_fixed_model_is_not_rebuilt_for_another_batch_range(runner_env, make_bundle, cache_dir) -> None:
    base = ["engine", str(make_bundle()), "--precision", "fp16", "--cache-dir", str(cache_dir), "--json"]
    CliRunner().invoke(app, base)
    again = json.loads(CliRunner().invoke(app, base + ["--max-batch", "3"]).stdout)
    assert again["cached"] is True and runner_env.engines_built() == 1


@pytest.mark.parametrize("args", [["--opt-batch", "9", "--max-batch", "8"], ["--max-batch", "0"]])
def test_a_bad_batch_range_is_a_config_error(runner_env, make_bundle, cache_dir, args) -> None:
    result = CliRunner().invoke(app, ["engine", str(make_bundle()), "--cache-dir", str(cache_dir)] + args)
    assert result.exit_code == ConfigError.exit_code and "--max-batch" in result.output
    assert runner_env.engines_built() == 0


def test_an_input_with_an_unknown_dynamic_size_is_refused(install_trt, make_bundle, cache_dir, tmp_path) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle(model_shape=[-1, 3, 8, 8])
    manifest = json.loads((bundle / "manifest.json").read_text())
    (bundle / "model.onnx").write_bytes((bundle / "model.onnx").read_bytes().replace(b"[-1, 3, 8, 8]", b"[-1, 3, -1, 8]"))
    manifest["inputs"][0]["name"] = "other"  # the manifest no longer describes this input
    from edge_sdk.fsutil import sha256_file

    manifest["files"] = {rel: sha256_file(bundle / rel) for rel in manifest["files"]}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(Exception) as exc:
        _build(bundle, fake, cache_dir, precision="fp16")
    assert "dynamic dimension 2" in str(exc.value) and fake.engines_built() == 0
    assert not isinstance(exc.value, BackendError)


def test_a_failed_inspection_is_said_in_the_report_and_the_engine_stands(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")

    class BrokenRuntime(fake.Runtime):
        def deserialize_cuda_engine(self, serialized_engine):
            raise RuntimeError("out of DLA memory")

    fake.Runtime = BrokenRuntime
    result, _ = _build(make_bundle(), fake, cache_dir, precision="fp16")
    assert result.path.is_file() and result.layers["detailed"] is False
    assert "engine inspector failed: RuntimeError: out of DLA memory" in result.layers["note"]


# --- the DLA and a dynamic batch ---------------------------------------------------------------------


def test_fake_dla_with_a_dynamic_profile_runs_every_layer_on_the_gpu(install_trt, tmp_path: Path) -> None:
    """The fake builder as TensorRT: the DLA has no dynamic dimensions; with GPU fallback every
    layer leaves it (a warning each), without it the build fails."""
    from fakes.fake_tensorrt import FakeLogger, fake_model

    fake = install_trt("8.5")
    model = tmp_path / "m.onnx"
    model.write_bytes(fake_model(inputs=[{"name": INPUT, "shape": [-1, 3, 8, 8]}], dla_unsupported=()))
    for fallback in (True, False):
        builder = fake.Builder(FakeLogger())
        network = builder.create_network(1)
        assert fake.OnnxParser(network, builder.logger).parse_from_file(str(model))
        config = builder.create_builder_config()
        config.set_flag(fake.BuilderFlag.FP16)
        config.default_device_type, config.DLA_core = fake.DeviceType.DLA, 0
        if fallback:
            config.set_flag(fake.BuilderFlag.GPU_FALLBACK)
        profile = builder.create_optimization_profile()
        profile.set_shape(INPUT, [1, 3, 8, 8], [4, 3, 8, 8], [4, 3, 8, 8])
        config.add_optimization_profile(profile)
        data = builder.build_serialized_network(network, config)
        if fallback:
            layers = decode_engine(bytes(data))["layer_info"]
            assert all(l["LayerType"] != "DLA" for l in layers) and len(layers) == 5
            assert sum("DLA does not support dynamic shapes" in w for w in fake.warnings) == 5
        else:
            assert data is None and "GPU fallback is not enabled" in fake.logged[-1]


@pytest.mark.parametrize("max_batch, opt_batch, dla, expected", [
    (None, None, True, (1, 1, 12)),       # the DLA runs one size: the default mode's single frame
    (None, None, False, (1, 12, 12)),     # the GPU tunes for the fullest ROI pass
    (8, None, True, (1, 1, 8)),
    (8, 4, True, (1, 4, 8)),
])
def test_the_default_batch_range_follows_the_device(max_batch, opt_batch, dla, expected) -> None:
    assert batch_range(max_batch, opt_batch, dla=dla).to_dict() == dict(zip(("min", "opt", "max"), expected))


def test_a_dla_build_without_a_batch_runs_one_input(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    result, record = _build(make_bundle(model_shape=[-1, 3, 8, 8]), fake, cache_dir, precision="fp16", dla_core=0)
    assert record["profiles"] == [{INPUT: [[1, 3, 8, 8]] * 3}]
    assert any("static shapes only" in n and "batch 1" in n and "--opt-batch N" in n for n in result.notes)


@pytest.mark.parametrize("opt", [1, 4])
def test_a_dla_build_of_a_dynamic_batch_gets_a_static_profile(install_trt, make_bundle, cache_dir, opt: int) -> None:
    fake = install_trt("8.5")
    result, record = _build(make_bundle(model_shape=[-1, 3, 8, 8]), fake, cache_dir, precision="fp16", dla_core=0,
                            batch=BatchRange(1, opt, 8))
    assert record["profiles"] == [{INPUT: [[opt, 3, 8, 8]] * 3}]
    assert result.batch["profile"] == {INPUT: [[opt, 3, 8, 8]] * 3}
    assert any("static shapes only" in n and f"batch {opt}" in n for n in result.notes)
    report = result.layers
    assert report["devices"] == {"DLA": 1, "GPU": 1} and report["dla"]["subgraphs"] == 1
    assert not any("falling back to GPU" in w for w in report["warnings"])
    assert report_warnings(report) == []


def test_no_layer_on_the_dla_is_said(install_trt, make_bundle, cache_dir, monkeypatch) -> None:
    """Were the DLA left with nothing (every layer unsupported there), the report and the
    warnings say so rather than a silent GPU engine keyed as a DLA one."""
    fake = install_trt("8.5")
    bundle = make_bundle(dla_unsupported=("conv1", "relu1", "conv2", "conv2_7", "head"))
    result, _ = _build(bundle, fake, cache_dir, precision="fp16", dla_core=1)
    report = result.layers
    assert report["devices"] == {"DLA": 0, "GPU": 5} and report["dla"] == {"core": 1, "subgraphs": 0, "gpu_layers": 5}
    assert any("no layer runs on DLA core 1" in w for w in report_warnings(report))
    assert any("DLA core 1: no layer" in line for line in report_lines(report))
