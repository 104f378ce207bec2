"""Model presets: the family's preprocessing and decoder from the model's metadata and output
layout, or from the configured decoder; provenance of every setting; placement and pad value."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import cv2
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edge_sdk.builder import presets
from edge_sdk.builder.inputs import resolve_model
from edge_sdk.builder.progress import BuildProgress
from edge_sdk.builder.project import BuildConfig, make_config
from edge_sdk.errors import BundleError, ConfigError, ModelError
from edge_sdk.manifest import parse_manifest
from edge_sdk.preprocess import InputSpec, Preprocessor

pytestmark = pytest.mark.host

# What Ultralytics 8.2.46 wrote into a YOLOv8n export (nudenet==3.4.2's 320n.onnx), names shortened.
ULTRALYTICS_META = {
    "description": "Ultralytics best model trained on data.yml", "author": "Ultralytics", "version": "8.2.46",
    "license": "AGPL-3.0 License (https://ultralytics.com/license)", "docs": "https://docs.ultralytics.com",
    "stride": "32", "task": "detect", "batch": "1", "imgsz": "[320, 416]",
    "names": "{0: 'person', 1: 'bicycle', 2: 'car'}",
}


def head_model(meta: Dict[str, str], out_dims: Sequence[object], in_dims: Sequence[object] = ("batch", 3, "height", "width"),
               outputs: int = 1) -> onnx.ModelProto:
    """A model with an exporter's input and output signature and metadata (the graph is Identity
    nodes: the presets read the signature and the metadata, never run it)."""
    inp = helper.make_tensor_value_info("images", TensorProto.FLOAT, list(in_dims))
    outs = [helper.make_tensor_value_info(f"output{k}", TensorProto.FLOAT, list(out_dims)) for k in range(outputs)]
    nodes = [helper.make_node("Identity", ["images"], [f"output{k}"]) for k in range(outputs)]
    model = helper.make_model(helper.make_graph(nodes, "g", [inp], outs), opset_imports=[helper.make_opsetid("", 13)])
    for key, value in meta.items():
        prop = model.metadata_props.add()
        prop.key, prop.value = key, value
    return model


def resolved(tmp_path: Path, model: onnx.ModelProto, toml: str = "", **cli: object):
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    if toml:
        (tmp_path / "edge.toml").write_text(toml)
    config = make_config(dict(model=path, **cli), project_dir=tmp_path)
    progress = BuildProgress(quiet=True)
    lines: List[str] = []
    progress.info = lines.append  # type: ignore[method-assign]
    return resolve_model(config, None, progress), lines


def test_metadata_is_parsed_as_literals() -> None:
    meta = presets.read_metadata(head_model(ULTRALYTICS_META, [1, 7, 2100]))
    assert meta.ultralytics and meta.task == "detect"
    assert meta.imgsz == (416, 320)  # the metadata writes [height, width]
    assert meta.names == {0: "person", 1: "bicycle", 2: "car"} and meta.stride == 32 and meta.batch == 1


def test_newer_exports_args_literal_gives_half_and_nms() -> None:
    meta = presets.read_metadata(head_model(dict(ULTRALYTICS_META, args="{'batch': 1, 'half': True, 'nms': True}"),
                                            [1, 300, 6]))
    assert (meta.half, meta.nms) == (True, True)


@pytest.mark.parametrize("key, value", [
    ("names", "__import__('os').system('touch /tmp/pwned')"),  # never evaluated
    ("names", "{0: 'a', 'x': 'b'}"),
    ("imgsz", "[640]"),
    ("imgsz", "[640, -1]"),
    ("stride", "'32'"),
    ("args", "[1, 2]"),
])
def test_malformed_metadata_is_a_model_error_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ModelError, match=f"metadata '{key}'"):
        presets.read_metadata(head_model(dict(ULTRALYTICS_META, **{key: value}), [1, 7, 2100]))


def test_another_exporters_keys_of_the_same_name_are_left_out_not_fatal() -> None:
    meta = presets.read_metadata(head_model({"imgsz": "640x640", "names": "person,car", "producer": "x"}, [1, 7, 2100]))
    assert (meta.imgsz, meta.names, meta.ultralytics) == (None, None, False)
    assert set(meta.ignored) == {"imgsz", "names"}


def test_left_out_metadata_is_a_build_warning(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    onnx.save(head_model({"imgsz": "640x640"}, [1, 10, 4], [1, 3, 32, 32]), str(path))
    progress = BuildProgress(quiet=True)
    resolve_model(make_config({"model": path}, project_dir=tmp_path), None, progress)
    assert [w for w in progress.warnings if "metadata 'imgsz' is '640x640'" in w and "left out" in w]


def test_half_written_on_its_own_by_older_exports() -> None:
    meta = presets.read_metadata(head_model(dict(ULTRALYTICS_META, half="False"), [1, 7, 2100]))
    assert meta.half is False and meta.nms is None


@pytest.mark.parametrize("dims, classes, kind", [
    ([1, 7, 2100], 3, "yolov8"),            # [N, 4 + C, boxes]
    (["batch", 7, "anchors"], 3, "yolov8"),
    ([1, 6300, 8], 3, "yolov5"),             # [N, boxes, 5 + C]
    ([1, 84, 8400], None, "yolov8"),
    ([1, 25200, 85], None, "yolov5"),
    ([1, 300, 6], 3, None),                   # end-to-end NMS: neither
])
def test_output_layout_picks_the_yolo_head(dims: List[object], classes: Optional[int], kind: Optional[str]) -> None:
    assert presets.output_layout([("output0", dims)], classes)[0] == kind


def test_ultralytics_export_gets_its_preset_size_and_decoder_with_provenance(tmp_path: Path) -> None:
    inputs, lines = resolved(tmp_path, head_model(ULTRALYTICS_META, ["batch", 7, "anchors"]))
    spec = inputs.spec
    assert (spec.color, spec.mean, spec.resize, spec.placement, spec.pad_value) == ("RGB", [0.0] * 3, "letterbox", "center", 114)
    assert spec.scale == pytest.approx([1 / 255.0] * 3)
    assert spec.shape == [1, 3, 320, 416]
    assert inputs.decoder_spec == {"type": "yolov8", "num_classes": 3, "labels": ["person", "bicycle", "car"]}
    prov = inputs.provenance
    assert prov.input["size"] == "metadata: imgsz" and prov.input["name"] == "graph"
    assert {prov.input[k] for k in ("color", "mean", "scale", "resize", "placement", "pad_value")} == {"preset: ultralytics"}
    assert prov.decoder["type"].startswith("preset: ultralytics") and prov.decoder["num_classes"] == "metadata: names"
    assert prov.decoder["labels"] == "metadata: names"
    assert prov.preset["name"] == "ultralytics"
    printed = "\n".join(lines)
    assert "size 416x320 ← metadata: imgsz" in printed and "type yolov8 ← preset: ultralytics" in printed


def test_yolov5_export_metadata_without_author_and_its_layout(tmp_path: Path) -> None:
    meta = {"stride": "32", "names": "{0: 'person', 1: 'bicycle', 2: 'car'}"}
    inputs, _ = resolved(tmp_path, head_model(meta, [1, 25200, 8], [1, 3, 640, 640]))
    assert inputs.spec.color == "RGB" and inputs.spec.pad_value == 114 and inputs.spec.shape == [1, 3, 640, 640]
    assert inputs.decoder_spec == {"type": "yolov5", "num_classes": 3, "labels": ["person", "bicycle", "car"]}
    assert inputs.provenance.input["size"] == "graph"


def test_a_segment_task_implies_the_yolo_head_fitted_to_its_outputs(tmp_path: Path) -> None:
    inputs, lines = resolved(tmp_path, head_model(dict(ULTRALYTICS_META, task="segment"), [1, 39, 2100]))
    assert inputs.decoder_spec is not None and inputs.spec.color == "RGB"
    assert (inputs.decoder_spec["type"], inputs.decoder_spec["head"], inputs.decoder_spec["mask_channels"]) == (
        "yolov8", "segment", 32)  # 39 = 4 + 3 classes + 32 mask coefficients
    assert any("metadata task segment" in line for line in lines)


def test_a_pose_task_whose_columns_do_not_fit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="pose head with 3 classes") as info:
        resolved(tmp_path, head_model(dict(ULTRALYTICS_META, task="pose"), [1, 39, 2100]))
    assert info.value.exit_code == 4


def test_flags_and_edge_toml_win_over_the_preset_and_say_so(tmp_path: Path) -> None:
    toml = '[input]\nplacement = "top-left"\npad_value = 0\n'
    inputs, _ = resolved(tmp_path, head_model(ULTRALYTICS_META, [1, 7, 2100]), toml, color="BGR", input_size="320x320")
    spec, prov = inputs.spec, inputs.provenance.input
    assert (spec.color, spec.placement, spec.pad_value, spec.shape) == ("BGR", "top-left", 0, [1, 3, 320, 320])
    assert prov["color"] == "flag: --color" and prov["size"] == "flag: --input-size"
    assert prov["placement"] == prov["pad_value"] == f"edge.toml: {tmp_path / 'edge.toml'}"
    assert prov["scale"] == "preset: ultralytics"


@pytest.mark.parametrize("decoder, color, scale, placement", [
    ("yolov8", "RGB", 1 / 255.0, "center"),
    ("yolox", "BGR", 1.0, "top-left"),
])
def test_a_decoder_alone_implies_its_family_preset(tmp_path: Path, decoder: str, color: str, scale: float, placement: str) -> None:
    inputs, _ = resolved(tmp_path, head_model({}, [1, 2100, 8], [1, 3, 320, 416]), decoder={"type": decoder})
    spec = inputs.spec
    assert (spec.color, spec.placement, spec.pad_value) == (color, placement, 114)
    assert spec.scale == pytest.approx([scale] * 3)
    assert inputs.provenance.decoder == {"type": "flag: --decoder"}
    assert inputs.provenance.input["color"] == f"preset: {inputs.provenance.preset['name']}"


def test_a_model_without_family_keeps_the_defaults(tmp_path: Path) -> None:
    inputs, _ = resolved(tmp_path, head_model({}, [1, 10, 4], [1, 3, 32, 32]))
    assert (inputs.spec.color, inputs.spec.pad_value, inputs.decoder_spec) == ("BGR", 0, None)
    assert inputs.provenance.input["color"] == "default" and inputs.provenance.preset["name"] is None


@pytest.mark.parametrize("toml, match", [
    ('[input]\npad_value = 300\n', "pad_value"),
    ('[input]\npad_value = "grey"\n', "pad_value"),
    ('[input]\nplacement = "bottom"\n', "placement"),
])
def test_bad_pad_value_or_placement_in_edge_toml_is_a_config_error(tmp_path: Path, toml: str, match: str) -> None:
    (tmp_path / "edge.toml").write_text(toml)
    with pytest.raises(ConfigError, match=match):
        make_config({}, project_dir=tmp_path)


def _upstream_yolox_preproc(bgr: np.ndarray, input_size: Sequence[int]) -> np.ndarray:
    """YOLOX's `yolox/data/data_augment.py: preproc` (uint8 canvas of 114, image at the top left,
    ratio min(h / ih, w / iw), size truncated by int()), as NCHW float32 BGR 0..255."""
    padded = np.ones((input_size[0], input_size[1], 3), dtype=np.uint8) * 114
    r = min(input_size[0] / bgr.shape[0], input_size[1] / bgr.shape[1])
    resized = cv2.resize(bgr, (int(bgr.shape[1] * r), int(bgr.shape[0] * r)), interpolation=cv2.INTER_LINEAR).astype(np.uint8)
    padded[: int(bgr.shape[0] * r), : int(bgr.shape[1] * r)] = resized
    return padded.transpose(2, 0, 1)[None].astype(np.float32)


@pytest.mark.parametrize("frame_hw", [(335, 500), (427, 640), (500, 333), (123, 457), (416, 416)])
def test_top_left_placement_matches_yolox_preproc(frame_hw: Sequence[int]) -> None:
    rng = np.random.default_rng(3)
    frame = rng.integers(0, 256, size=(*frame_hw, 3), dtype=np.uint8)
    spec = InputSpec(name="images", shape=[1, 3, 416, 416], color="BGR", placement="top-left", pad_value=114)
    tensor, transform = Preprocessor(spec)(frame)
    np.testing.assert_array_equal(tensor, _upstream_yolox_preproc(frame, (416, 416)))
    assert (transform.x, transform.y) == (0.0, 0.0)


def test_center_placement_pads_both_sides_with_the_pad_value() -> None:
    frame = np.full((100, 200, 3), 7, np.uint8)
    tensor, transform = Preprocessor(InputSpec(shape=[1, 3, 64, 64], pad_value=114))(frame)
    assert transform.y == 16.0
    assert np.all(tensor[0, :, :16] == 114) and np.all(tensor[0, :, 48:] == 114) and np.all(tensor[0, :, 16:48] == 7)


def _manifest(**extra: object) -> bytes:
    base = {"schema_version": 2, "files": {"model.onnx": "0" * 64}, "inputs": [InputSpec().to_dict()]}
    base.update(extra)
    return json.dumps(base).encode()


def test_manifest_round_trips_placement_and_provenance() -> None:
    spec = InputSpec(placement="top-left", pad_value=114)
    prov = {"input": {"placement": "preset: yolox"}, "decoder": {"type": "flag: --decoder"}, "preset": {"name": "yolox"}}
    manifest = parse_manifest(_manifest(inputs=[spec.to_dict()], provenance=prov), "m.json")
    assert InputSpec.from_dict(manifest["inputs"][0]) == spec


def test_an_old_manifest_without_placement_reads_as_centred() -> None:
    entry = InputSpec().to_dict()
    del entry["placement"]
    assert InputSpec.from_dict(entry).placement == "center"


@pytest.mark.parametrize("extra, match", [
    ({"inputs": [dict(InputSpec().to_dict(), placement="middle")]}, "inputs\\[0\\]"),
    ({"inputs": [dict(InputSpec().to_dict(), pad_value=-1)]}, "inputs\\[0\\]"),
    ({"inputs": [dict(InputSpec().to_dict(), pad_value="114")]}, "inputs\\[0\\]"),
    ({"provenance": {"input": {"color": "somewhere"}}}, "provenance.input.color"),
    ({"provenance": {"input": {"color": 3}}}, "provenance.input.color"),
    ({"provenance": []}, "provenance"),
    ({"provenance": {"preset": {"name": 1}}}, "provenance.preset"),
])
def test_manifest_with_bad_input_or_provenance_is_a_bundle_error(extra: Dict[str, object], match: str) -> None:
    with pytest.raises(BundleError, match=match):
        parse_manifest(_manifest(**extra), "m.json")


def test_build_config_rejects_bad_placement_directly() -> None:
    with pytest.raises(ConfigError, match="placement"):
        BuildConfig(placement="left")


# --- a YOLOX-layout model built with nothing but its decoder --------------------------------------


def make_yolox_red() -> onnx.ModelProto:
    """A one-class head in YOLOX's export layout, output [1, cells, 4 + 1 + 1] = (raw x, y, w, h,
    objectness, class score), undecoded, one stride-8 level on a 96x128 input (the probe tests'
    grid). Objectness = sigmoid(20 * (mean ch2 - mean ch0) / 255 - 6): a red cell fed as YOLOX is
    fed (BGR 0..255) lights up; fed RGB, or in 0..1, nothing does."""
    from test_probe import CELLS, GRID_H, GRID_W, NET_H, NET_W, STRIDE

    w = np.zeros((1, 3, STRIDE, STRIDE), np.float32)
    w[0, 2], w[0, 0] = 20.0 / (255 * STRIDE ** 2), -20.0 / (255 * STRIDE ** 2)
    rows = np.zeros((1, CELLS, 4), np.float32)
    rows[..., :2] = 0.5  # the centre of each cell; w = h = exp(0) * stride
    n = helper.make_node
    nodes = [
        n("Conv", ["images", "w", "b"], ["logit"], kernel_shape=[STRIDE, STRIDE], strides=[STRIDE, STRIDE]),
        n("Sigmoid", ["logit"], ["obj_map"]),
        n("Reshape", ["obj_map", "shape"], ["obj"]),
        n("Concat", ["rows", "obj", "cls"], ["output"], axis=2),
    ]
    inits = [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
             helper.make_tensor("b", TensorProto.FLOAT, [1], [-6.0]),
             helper.make_tensor("shape", TensorProto.INT64, [3], [1, CELLS, 1]),
             helper.make_tensor("rows", TensorProto.FLOAT, rows.shape, rows.ravel()),
             helper.make_tensor("cls", TensorProto.FLOAT, [1, CELLS, 1], np.ones(CELLS, np.float32))]
    assert GRID_H * GRID_W == CELLS
    graph = helper.make_graph(nodes, "yolox_red", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, NET_H, NET_W])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, CELLS, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _yolox_build(tmp_path: Path, *extra: str):
    from typer.testing import CliRunner

    from edge_sdk.cli import app
    from test_probe import write_square_images

    model = tmp_path / "yolox_red.onnx"
    onnx.save(make_yolox_red(), str(model))
    calib = write_square_images(tmp_path / "calib", 8, seed=5)
    decoder = json.dumps({"type": "yolox", "strides": [8], "num_classes": 1, "score_threshold": 0.5})
    args = ["build", str(model), "--out", str(tmp_path / "bundle"), "--decoder", decoder, "--calib", str(calib),
            "--precision", "fp32", *extra]
    return CliRunner().invoke(app, args, env={"COLUMNS": "200"})


def test_yolox_layout_builds_with_its_decoder_alone_and_finds_its_objects(tmp_path: Path) -> None:
    from edge_sdk.manifest import Bundle

    result = _yolox_build(tmp_path)
    assert result.exit_code == 0, result.output
    manifest = Bundle.load(tmp_path / "bundle").manifest
    spec = InputSpec.from_dict(manifest["inputs"][0])
    assert (spec.color, spec.scale, spec.placement, spec.pad_value) == ("BGR", [1.0] * 3, "top-left", 114)
    assert manifest["provenance"]["preset"]["name"] == "yolox"
    probe = manifest["preprocess_probe"]
    assert probe["verdict"] == "configured" and probe["configured"] == "BGR, 0..255"
    assert next(c for c in probe["candidates"] if c["configured"])["detections"] == 8 * 3  # every red square


def test_yolox_layout_forced_to_rgb_stops_the_build(tmp_path: Path) -> None:
    result = _yolox_build(tmp_path, "--color", "RGB")
    assert result.exit_code == 6, result.output
    text = " ".join(result.output.split())
    assert "preprocessing probe (confidence high): the configured RGB, 0..255 finds nothing" in text
    assert 'set [input] color = "BGR"' in text
