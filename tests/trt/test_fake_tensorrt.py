"""The fakes enforce the real API surface of TensorRT 8.5, 10 and 11, and the calibrator
trampolines behave as TensorRT's: so the engine code must log and fail by itself."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from edge_sdk.errors import BackendError, CalibrationError
from edge_sdk.fsutil import sha256_file
from edge_sdk.trt.engine import build_engine
from edge_sdk.trt.options import BuildOptions
from fakes.fake_tensorrt import FAKES, FakeLogger, FakeTensorRT85, decode_engine, fake_model
from trt_bundles import XAVIER

REMOVED_IN_11 = ["FP16", "INT8", "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS"]


@pytest.mark.parametrize("version, code", [("8.5", 8502), ("10", 100300), ("11", 110000)])
def test_version_codes_are_real(version: str, code: int) -> None:
    assert FAKES[version]().version_code == code


@pytest.mark.parametrize("version, present", [("8.5", True), ("10", True), ("11", False)])
def test_what_11_removed(version: str, present: bool, tmp_path: Path) -> None:
    trt = FAKES[version]()
    assert all(hasattr(trt.BuilderFlag, f) for f in REMOVED_IN_11) is present
    assert hasattr(trt, "IInt8EntropyCalibrator2") is present
    logger = FakeLogger()
    builder = trt.Builder(logger)
    assert hasattr(builder, "platform_has_fast_int8") is present
    config = builder.create_builder_config()
    assert hasattr(config, "int8_calibrator") is present and hasattr(config, "set_calibration_profile") is present
    model = tmp_path / "m.onnx"
    model.write_bytes(fake_model())
    network = builder.create_network(1 if version == "8.5" else 0)
    assert trt.OnnxParser(network, logger).parse_from_file(str(model))
    layer = network.get_layer(0)
    assert hasattr(layer, "precision") is present and hasattr(layer, "set_output_type") is present
    if not present:
        with pytest.raises(AttributeError):
            config.int8_calibrator = None


@pytest.mark.parametrize("version, value", [("10", 1), ("11", 0)])
def test_strongly_typed_flag_values(version: str, value: int) -> None:
    assert int(FAKES[version]().NetworkDefinitionCreationFlag.STRONGLY_TYPED) == value


def _int8_network(trt, tmp_path: Path):
    logger = FakeLogger()
    builder = trt.Builder(logger)
    network = builder.create_network(1)
    model = tmp_path / "m.onnx"
    model.write_bytes(fake_model())
    trt.OnnxParser(network, logger).parse_from_file(str(model))
    config = builder.create_builder_config()
    config.set_flag(trt.BuilderFlag.INT8)
    return logger, builder, network, config


def test_trampolines_print_and_swallow_callback_errors(tmp_path: Path, capsys) -> None:
    trt = FakeTensorRT85()

    class Raising(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)

        def get_batch_size(self) -> int:
            return 1

        def get_batch(self, names):
            raise RuntimeError("disk on fire")

        def read_calibration_cache(self):
            return None

        def write_calibration_cache(self, cache) -> None:
            pass

    logger, builder, network, config = _int8_network(trt, tmp_path)
    config.int8_calibrator = Raising()
    assert builder.build_serialized_network(network, config) is None  # no batch at all: TensorRT's own failure
    assert "[ERROR] Exception caught in get_batch(): disk on fire" in capsys.readouterr().err
    assert any("no scaling factors" in m for m in logger.messages)


@pytest.mark.parametrize("pointers, text", [(2, "2 pointer(s) for 1 input(s)"), (1, "holds 16 bytes")])
def test_get_batch_pointers_are_checked_against_the_inputs(tmp_path: Path, pointers: int, text: str) -> None:
    trt = FakeTensorRT85()
    small = trt.device_memory.allocate(16)

    class Wrong(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)

        def get_batch_size(self) -> int:
            return 1

        def get_batch(self, names):
            return [small.ptr] * pointers

        def read_calibration_cache(self):
            return None

        def write_calibration_cache(self, cache) -> None:
            pass

    logger, builder, network, config = _int8_network(trt, tmp_path)
    config.int8_calibrator = Wrong()
    assert builder.build_serialized_network(network, config) is None
    assert any(text in m for m in logger.messages), logger.messages


def test_an_error_in_a_later_batch_fails_the_build_though_tensorrt_carried_on(install_trt, make_bundle, cache_dir, caplog) -> None:
    """Batch 1 is fed, batch 2's file is corrupt: TensorRT would build from batch 1 alone. The
    calibrator keeps and logs the error, and the build raises it; nothing is cached."""
    fake = install_trt("8.5")
    bundle = make_bundle(cache_header=None)
    (bundle / "calib" / "0001.npy").write_bytes(b"not numpy")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"] = {rel: sha256_file(bundle / rel) for rel in manifest["files"]}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.ERROR, logger="edge_sdk.trt.calibrator"):
        with pytest.raises(CalibrationError, match="0001.npy is unreadable"):
            build_engine(bundle, BuildOptions(cache_dir=cache_dir, gpu=XAVIER, precision="int8",
                                              allocate=fake.device_memory.allocate))
    assert fake.calls["calibration_batches"] == [[192.0]]  # TensorRT did carry on with one batch
    assert fake.engines_built() == 1 and not list(cache_dir.glob("*.engine"))
    assert any("get_batch() failed" in r.getMessage() for r in caplog.records)


def test_a_manifest_smaller_than_the_model_fails_the_calibration(install_trt, make_bundle, cache_dir) -> None:
    fake = install_trt("8.5")
    bundle = make_bundle(shape=[1, 3, 4, 4], model_shape=[1, 3, 8, 8], cache_header=None)
    with pytest.raises(BackendError, match="holds 192 bytes"):
        build_engine(bundle, BuildOptions(cache_dir=cache_dir, gpu=XAVIER, precision="int8",
                                          allocate=fake.device_memory.allocate))


def test_runtime_refuses_an_engine_of_another_version(install_trt, tmp_path: Path, make_bundle) -> None:
    trt85 = install_trt("8.5")
    options = BuildOptions(cache_dir=tmp_path / "c", gpu=XAVIER, precision="fp16")
    data = build_engine(make_bundle(), options).path.read_bytes()
    assert decode_engine(data)["profiling_verbosity"] == "DETAILED"
    logger = FakeLogger()
    assert FAKES["10"]().Runtime(logger).deserialize_cuda_engine(data) is None and logger.messages
    engine = trt85.Runtime(FakeLogger()).deserialize_cuda_engine(data)
    info = engine.create_engine_inspector().get_engine_information(trt85.LayerInformationFormat.JSON)
    assert [layer["Name"] for layer in json.loads(info)["Layers"]] == ["conv1", "relu1", "conv2", "conv2_7", "head"]
