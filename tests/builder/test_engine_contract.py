"""Builder -> engine contract: a bundle written by `edge-sdk build` goes through `build_engine`.

The fake TensorRT's parser reads the bundle's real ONNX files (with onnx), so the names the
builder wrote into the manifest (the input, the FP32 fallback layers, the calibration cache's
tensors) are checked against the models it shipped, as TensorRT on the device would see them.
The oracle is the ONNX graph itself, read here with onnx, never the builder's own bookkeeping.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest
from detector_factory import make_detector, tiny_build_args, write_images
from typer.testing import CliRunner

from edge_sdk.cli import app
from edge_sdk.trt.device import GpuInfo
from edge_sdk.trt.engine import build_engine
from edge_sdk.trt.options import BuildOptions
from fakes.fake_tensorrt import FAKES, decode_engine

pytestmark = pytest.mark.host
onnx = pytest.importorskip("onnx")

XAVIER = GpuInfo(name="Jetson Xavier NX (fake)", sm="7.2", source="test")


def build_bundle(root: Path, named: bool) -> Path:
    """The tiny detector built to INT8. Calibration images are black and the search and gate
    images show squares, so calibrated INT8 misses them and the FP32-fallback search keeps
    layers in FP32: the manifest then names layers the engine builder must pin."""
    model = make_detector()
    if not named:  # as many exporters leave them: the builder must name the nodes itself
        for node in model.graph.node:
            node.name = ""
    root.mkdir(parents=True)
    onnx.save(model, str(root / "detector.onnx"))
    calib = write_images(root / "calib", 16, black_except_every=2)
    old = os.getcwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(app, tiny_build_args(root / "detector.onnx", root / "bundle", calib, "--precision", "int8",
                                                         "--calib-method", "minmax"))
    finally:
        os.chdir(old)
    assert result.exit_code == 0, result.output
    return root / "bundle"


@pytest.fixture(scope="module", params=[True, False], ids=["named nodes", "unnamed nodes"])
def bundle(request, tmp_path_factory) -> Path:
    return build_bundle(tmp_path_factory.mktemp("contract") / "work", named=request.param)


def graph_of(path: Path) -> Tuple[Dict[str, List[int]], List[str], List[str], Set[str]]:
    """(real inputs with shapes, node names, node op types, every tensor name) read with onnx."""
    graph = onnx.load(str(path)).graph
    weights = {i.name for i in graph.initializer}
    inputs = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in graph.input if i.name not in weights}
    tensors = set(inputs) | {o for n in graph.node for o in n.output}
    return inputs, [n.name for n in graph.node], [n.op_type for n in graph.node], tensors


def engine_for(bundle: Path, version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fake = FAKES[version]()
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    result = build_engine(bundle, BuildOptions(precision="int8", gpu=XAVIER, cache_dir=tmp_path / "engines",
                                               allocate=fake.device_memory.allocate))
    return fake, result, decode_engine(result.path.read_bytes())


def test_trt85_pins_exactly_the_fallback_layers_the_manifest_names(bundle: Path, tmp_path: Path, monkeypatch) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    fp32_layers = manifest["int8"]["fp32_layers"]
    assert fp32_layers, "the factory must make the builder keep layers in FP32"
    inputs, nodes, ops, _ = graph_of(bundle / "model.onnx")
    assert all(nodes), "every node of the shipped model has a name the manifest can refer to"
    assert set(manifest["int8"]["layer_precisions"]) == {n for n, op in zip(nodes, ops) if op == "Conv"}
    _, result, record = engine_for(bundle, "8.5", tmp_path, monkeypatch)
    # TensorRT 8.5 builds INT8 from the FP32 model with the shipped calibration cache
    assert record["model"] == "model.onnx" and record["int8"]["mode"] == "calibration"
    assert record["int8"]["source"] == "cache" and record["int8"]["header"] == "TRT-8502-MinMaxCalibration"
    # the parser saw the graph's real input, as the manifest describes it
    spec = manifest["inputs"][0]
    assert record["inputs"] == [{"name": spec["name"], "shape": spec["shape"]}]
    assert inputs == {spec["name"]: spec["shape"]}
    assert record["layers"] == nodes
    # every FP32 fallback node is a layer of the network, pinned in precision and output type
    assert record["layer_precisions"] == {name: "FLOAT" for name in fp32_layers}
    assert record["output_types"] == {name: {"0": "FLOAT"} for name in fp32_layers}
    assert "PREFER_PRECISION_CONSTRAINTS" in record["flags"] and "OBEY_PRECISION_CONSTRAINTS" not in record["flags"]
    assert result.constrained_layers == len(fp32_layers)
    # the layer report read back from the engine: each pinned layer runs in FP32
    assert sorted(result.layers["pinned"]["honoured"]) == sorted(fp32_layers), result.layers["pinned"]
    assert not [n for n in result.notes if "no TensorRT layer" in n], result.notes


def test_calibration_cache_names_tensors_of_the_shipped_model(bundle: Path) -> None:
    """TensorRT matches cache lines to the network's tensors by name: every line must name one."""
    lines = (bundle / "calib.cache").read_text().splitlines()
    assert lines[0] == "TRT-8502-MinMaxCalibration"
    names = [line.rpartition(":")[0] for line in lines[1:] if line.strip()]
    _, _, _, tensors = graph_of(bundle / "model.onnx")
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["inputs"][0]["name"] in names
    assert names and set(names) <= tensors, sorted(set(names) - tensors)


def test_trt10_builds_from_the_qdq_model_with_the_same_input(bundle: Path, tmp_path: Path, monkeypatch) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    inputs, nodes, _, _ = graph_of(bundle / "model.int8.qdq.onnx")
    _, _, record = engine_for(bundle, "10", tmp_path, monkeypatch)
    assert record["model"] == "model.int8.qdq.onnx" and record["model_types"] == "qdq"
    assert record["int8"] == {"mode": "qdq"} and record["layer_precisions"] == {}
    spec = manifest["inputs"][0]
    assert record["inputs"] == [{"name": spec["name"], "shape": spec["shape"]}] and inputs == {spec["name"]: spec["shape"]}
    # the FP32 fallback layers are the Conv nodes of the Q/DQ model whose weights no DequantizeLinear feeds
    graph = onnx.load(str(bundle / "model.int8.qdq.onnx")).graph
    producer = {o: n.op_type for n in graph.node for o in n.output}
    float_convs = {n.name for n in graph.node if n.op_type == "Conv" and producer.get(n.input[1]) != "DequantizeLinear"}
    assert float_convs == set(manifest["int8"]["fp32_layers"])
    assert set(record["layers"]) == set(nodes)
