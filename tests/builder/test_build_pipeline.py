"""The build as a whole, called as a library: the manifest a searched INT8 build writes, key by
key (the contract the runtime and `edge-sdk engine` read), and the progress it reports."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import ContextManager, List, Tuple

import pytest
from detector_factory import TINY_DECODER, TINY_HW, make_detector, write_images

import edge_sdk
from edge_sdk.builder import pipeline
from edge_sdk.builder.progress import BuildProgress
from edge_sdk.builder.project import BuildConfig
from edge_sdk.manifest import Bundle

pytestmark = pytest.mark.host
onnx = pytest.importorskip("onnx")


class RecordingProgress(BuildProgress):
    """A quiet BuildProgress that keeps every message and task it is given, in order."""

    def __init__(self) -> None:
        super().__init__(quiet=True)
        self.said: List[Tuple[str, str]] = []
        self.tasks: List[Tuple[str, int]] = []

    def info(self, message: str) -> None:
        self.said.append(("info", message))

    def warn(self, message: str) -> None:
        self.said.append(("warn", message))
        super().warn(message)

    def task(self, description: str, total: int) -> ContextManager:
        self.tasks.append((description, total))
        return super().task(description, total)


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, Path, Bundle, pipeline.BuildResult, RecordingProgress]:
    """The tiny detector built to INT8 on images whose calibration part is black: INT8 misses the
    squares of the search and gate images, so the FP32-fallback search keeps both convolutions
    that see the input's range (feat_conv, heat_conv) in FP32."""
    root = tmp_path_factory.mktemp("searched")
    model = root / "detector.onnx"
    onnx.save(make_detector(), str(model))
    calib = write_images(root / "calib", 16, black_except_every=2)
    config = BuildConfig(model=model, out=root / "bundle", precision="int8", calib=calib, calib_method="minmax",
                         input_size=(TINY_HW[1], TINY_HW[0]), decoder=dict(TINY_DECODER))
    progress = RecordingProgress()
    result = pipeline.build(config, progress)
    return model, calib, result.bundle, result, progress


def test_manifest_of_a_searched_int8_build(searched) -> None:
    model, calib, bundle, result, _ = searched
    m = bundle.manifest
    assert list(m) == ["schema_version", "model", "target", "inputs", "outputs", "decoder", "provenance", "precision",
                       "requested_precision", "variants", "graph", "accuracy", "preprocess_probe", "engine", "builder",
                       "calibration", "int8", "input_stats", "reference", "files"]
    assert m["model"] == {"name": "detector", "source_sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
                          "source": "detector.onnx"}
    assert m["inputs"][0]["name"] == "input.1" and m["inputs"][0]["shape"] == [1, 3, TINY_HW[0], TINY_HW[1]]
    h, w = TINY_HW[0] // 4, TINY_HW[1] // 4
    assert m["outputs"] == [{"name": name, "shape": [1, c, h, w], "dtype": "float32"}
                            for name, c in (("537", 1), ("538", 2), ("539", 2), ("540", 10))]
    assert m["decoder"] == TINY_DECODER
    assert (m["precision"], m["requested_precision"], m["variants"]) == ("int8", "int8", ["fp32", "fp16", "int8"])
    assert list(m["graph"]) == ["source", "optimized", "optimizer", "equalization"]
    # the tiny detector's first Relu feeds four heads: no Conv → Relu → Conv pair to equalize
    assert m["graph"]["equalization"]["applied"] is False and m["graph"]["equalization"]["pairs"] == 0
    assert list(m["accuracy"]) == ["fp32", "fp16", "int8"] and m["accuracy"]["int8"]["gate"]["passed"] is True
    assert m["engine"] == {"dla_core": None, "workspace_mib": 2048}
    assert m["builder"]["edge_sdk"] == edge_sdk.__version__ and m["builder"]["seconds"] >= 0

    cal = m["calibration"]
    assert list(cal) == ["algorithm", "trt_calibrator", "percentile", "samples", "held_back", "folder", "split",
                         "tensors_kept", "tensors", "coverage"]
    assert (cal["algorithm"], cal["percentile"], cal["folder"]) == ("minmax", None, str(calib))
    # 16 images, every 4th by name to the gate, the ones 2 after them to the search, 8 calibrate
    assert (cal["samples"], cal["held_back"], cal["tensors_kept"], cal["tensors"]["count"]) == (8, 4, 8, 8)
    split = cal["split"]
    assert [split[k]["images"] for k in ("calibration", "search", "gate")] == [8, 4, 4]
    assert split["search"]["reference_detections"] >= 8 and split["gate"]["reference_detections"] >= 8
    assert split["gate"]["reference_detections"] == m["accuracy"]["int8"]["reference_detections"]
    assert list(cal["coverage"]) == ["clipped_fraction", "warn_above"]

    int8 = m["int8"]
    assert list(int8) == ["fp32_layers", "fallback_layers", "layer_precisions", "int8_flop_share", "layers", "search",
                          "search_target", "search_f1"]
    # --precision int8: the engine has no FP16, so the layers kept out of INT8 run in FP32
    assert sorted(int8["fp32_layers"]) == ["feat_conv", "heat_conv"]
    assert int8["fallback_layers"] == {"feat_conv": "fp32", "heat_conv": "fp32"}
    assert {k for k, v in int8["layer_precisions"].items() if v == "fp32"} == {"feat_conv", "heat_conv"}
    assert [s["fp32_layers"] for s in int8["search"]] == [0, 1, 2] and int8["search"][-1]["score"] == 1.0
    assert {s["precision"] for s in int8["search"]} == {"fp32"}
    # FLOPs by hand: feat_conv 4x3x4x4 MACs per output cell, each head 4 (or 1x4 for heat) per cell
    cells = (TINY_HW[0] // 4) * (TINY_HW[1] // 4)
    flops = {"feat_conv": 2 * cells * 4 * 48, "heat_conv": 2 * cells * 4}
    assert {k: int8["layers"][k]["flops"] for k in flops} == flops
    total = sum(v["flops"] for v in int8["layers"].values())
    assert total == 2 * cells * (4 * 48 + 4 * (1 + 2 + 2 + 10))
    assert int8["int8_flop_share"] == round(1 - sum(flops.values()) / total, 4)
    assert {v["precision"] for k, v in int8["layers"].items() if k not in flops} == {"int8"}
    assert all(isinstance(v["sensitivity"], float) for v in int8["layers"].values())
    assert (int8["search_target"], int8["search_f1"]) == (0.98, 1.0)
    assert {"calib.cache", "ranges.json", "model.onnx", "model.fp16.onnx", "model.int8.qdq.onnx"} <= set(m["files"])
    assert sorted(f for f in m["files"] if f.startswith("calib/")) == [f"calib/{i:04d}.npz" for i in range(8)]
    assert result.summary["fp32_layers"] == int8["fp32_layers"] and result.summary["split"] == split


@pytest.fixture(scope="module")
def searched_best(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Bundle, RecordingProgress]:
    """The same build with --precision best: the engine builds with FP16 enabled."""
    root = tmp_path_factory.mktemp("searched_best")
    model = root / "detector.onnx"
    onnx.save(make_detector(), str(model))
    calib = write_images(root / "calib", 16, black_except_every=2)
    config = BuildConfig(model=model, out=root / "bundle", precision="best", calib=calib, calib_method="minmax",
                         input_size=(TINY_HW[1], TINY_HW[0]), decoder=dict(TINY_DECODER), probe=False)
    progress = RecordingProgress()
    return pipeline.build(config, progress).bundle, progress


def test_with_fp16_on_the_device_the_layers_kept_out_of_int8_are_fp16(searched_best) -> None:
    """FP16 has the range the black calibration images did not give INT8: the same two layers
    restore accuracy in FP16, the search and the gate ran them through float16, and no layer is FP32."""
    bundle, progress = searched_best
    m = bundle.manifest
    int8 = m["int8"]
    assert int8["fallback_layers"] == {"feat_conv": "fp16", "heat_conv": "fp16"} and int8["fp32_layers"] == []
    assert {k for k, v in int8["layer_precisions"].items() if v != "int8"} == {"feat_conv", "heat_conv"}
    assert set(int8["layer_precisions"].values()) == {"int8", "fp16"}
    assert {s["precision"] for s in int8["search"]} == {"fp16"} and int8["search_f1"] >= 0.98
    assert m["accuracy"]["int8"]["gate"]["passed"] and m["accuracy"]["int8"]["fallback_layers"] == 2
    assert m["accuracy"]["int8"]["fp32_layers"] == 0
    assert any("2 layer(s) in FP16 as on the device" in text for kind, text in progress.said if kind == "info")
    # the shipped Q/DQ model leaves them unquantized and free of casts: the engine's FP16 flag decides
    shipped = onnx.load(str(bundle.root / "model.int8.qdq.onnx"))
    assert "Cast" not in {n.op_type for n in shipped.graph.node}


def test_progress_follows_the_steps_in_order(searched) -> None:
    *_, result, progress = searched
    assert [d for d, _ in progress.tasks] == [
        "preprocess", "preprocessing probe", "evaluate fp32 (gate images)", "evaluate fp16",
        "evaluate fp32 (search images)", "calibrate (minmax)", "evaluate int8 (search images)",
        "rank layers by INT8 sensitivity", "evaluate int8 (gate images)", "coverage",
    ]
    infos = [m.split(":")[0] for kind, m in progress.said if kind == "info"]
    assert infos == ["model", "input", "decoder", "graph", "cross-layer equalization", "images", "preprocessing probe", "int8 scores 0.0000 on the search images < 0.98 (gate 0.97 + margin 0.01)",
                     "int8 fallback", "int8 gate"]
    warnings = [m for kind, m in progress.said if kind == "warn"]
    assert warnings == result.warnings == result.summary["warnings"]


def test_build_progress_keeps_warnings_and_prints_keys_literally(capsys: pytest.CaptureFixture) -> None:
    loud, quiet = BuildProgress(), BuildProgress(quiet=True)
    for progress in (loud, quiet):
        progress.info("set [input] color = RGB")
        progress.warn("[build] probe is off")
        with progress.task("work", 2) as advance:
            advance(2)
    err = capsys.readouterr().err
    assert "set [input] color = RGB" in err and "warning: [build] probe is off" in err  # once: the quiet one prints nothing
    assert err.count("[input] color") == 1
    assert loud.warnings == quiet.warnings == ["[build] probe is off"]
    assert not hasattr(pipeline, "Reporter")  # edge_sdk.telemetry.reporter.Reporter is the only Reporter
