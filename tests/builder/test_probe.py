"""The preprocessing probe: the real CenterFace on the default calibration images, and small
YOLOv8-style detectors whose outputs depend on the channel order or on the pixel range, so the
probe has something real to find (or, correctly configured, nothing)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np
import pytest
from typer.testing import CliRunner

from edge_sdk.builder.probe import (
    Candidate,
    Pairs,
    candidates,
    clearly_better,
    judge,
    pair_scores,
    pick_images,
    probe,
    shuffled,
)
from edge_sdk.detections import Detections
from edge_sdk.preprocess import InputSpec

pytestmark = pytest.mark.host
onnx = pytest.importorskip("onnx")
cv2 = pytest.importorskip("cv2")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

# --- small YOLOv8-style detectors --------------------------------------------------------------

NET_W, NET_H, STRIDE = 128, 96, 8
GRID_W, GRID_H = NET_W // STRIDE, NET_H // STRIDE
CELLS = GRID_W * GRID_H
YOLO_DECODER = {"type": "yolov8", "num_classes": 1, "score_threshold": 0.5}
UNIT = [1.0 / 255.0] * 3  # the scale of pixels in 0..1
RED_RGB = (230, 30, 30)  # what the red detector looks for (R, G, B)


def make_yolo(kind: str, two_inputs: bool = False) -> "onnx.ModelProto":
    """A one-class YOLOv8-style head, output [1, 5, cells] = (cx, cy, w, h, score) with one
    8x8 box per 8x8 cell of a 128x96 input. It expects RGB pixels in 0..1.

    kind "red": score = sigmoid(20 * (mean R - mean B - 0.3)) per cell: red cells light up,
    and only when channel 0 holds red (a BGR input puts blue there). kind "bright":
    score = sigmoid(20 * (mean of R, G, B - 0.3)): blind to the channel order, but in 0..255
    every cell is far above 0.3 and the model fires everywhere.
    """
    w = np.zeros((1, 3, STRIDE, STRIDE), np.float32)
    if kind == "red":
        w[0, 0], w[0, 2] = 20.0 / STRIDE ** 2, -20.0 / STRIDE ** 2
    elif kind == "bright":
        w[0, :] = 20.0 / (3 * STRIDE ** 2)
    else:
        raise ValueError(kind)
    ys, xs = np.mgrid[0:GRID_H, 0:GRID_W]
    boxes = np.stack([(xs.ravel() + 0.5) * STRIDE, (ys.ravel() + 0.5) * STRIDE,
                      np.full(CELLS, STRIDE), np.full(CELLS, STRIDE)]).astype(np.float32)[None]
    n = helper.make_node
    nodes = [
        n("Conv", ["images", "w", "b"], ["logit"], kernel_shape=[STRIDE, STRIDE], strides=[STRIDE, STRIDE]),
        n("Sigmoid", ["logit"], ["score_map"]),
        n("Reshape", ["score_map", "flat"], ["score"]),
        n("Concat", ["boxes", "score"], ["output0"], axis=1),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([-20.0 * 0.3], np.float32), "b"),
             numpy_helper.from_array(np.array([1, 1, CELLS], np.int64), "flat"), numpy_helper.from_array(boxes, "boxes")]
    inputs = [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, NET_H, NET_W])]
    if two_inputs:
        inputs.append(helper.make_tensor_value_info("scale_hint", TensorProto.FLOAT, [1]))
        nodes.append(n("Identity", ["scale_hint"], ["scale_out"]))
    outputs = [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 5, CELLS])]
    if two_inputs:
        outputs.append(helper.make_tensor_value_info("scale_out", TensorProto.FLOAT, [1]))
    model = helper.make_model(helper.make_graph(nodes, f"{kind}_yolo", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 13)], producer_name="edge-sdk-tests")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def write_square_images(folder: Path, count: int, squares: int = 3, seed: int = 0) -> Path:
    """`count` PNGs of the network's size: dark noise (0..60) and `squares` red 8x8 squares on
    distinct grid cells, so each square is exactly one cell (one true detection)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    red_bgr = RED_RGB[::-1]
    for i in range(count):
        img = rng.integers(0, 61, size=(NET_H, NET_W, 3), dtype=np.uint8)
        for cell in rng.choice(CELLS, size=squares, replace=False):
            y, x = (cell // GRID_W) * STRIDE, (cell % GRID_W) * STRIDE
            img[y : y + STRIDE, x : x + STRIDE] = red_bgr
        cv2.imwrite(str(folder / f"{i:03d}.png"), img)
    return folder


def spec(color: str, scale: Sequence[float] = UNIT, mean: Sequence[float] = (0.0, 0.0, 0.0)) -> InputSpec:
    return InputSpec(name="images", shape=[1, 3, NET_H, NET_W], color=color, mean=list(mean), scale=list(scale))


@pytest.fixture(scope="module")
def squares(tmp_path_factory) -> List[Path]:
    folder = write_square_images(tmp_path_factory.mktemp("squares"), 8)
    return sorted(folder.glob("*.png"))


def by_name(result, name: str) -> Candidate:
    return next(c for c in result.candidates if c.name == name)


# --- the YOLO-style detectors -----------------------------------------------------------------


def test_red_detector_configured_right_gets_no_warning(squares) -> None:
    result = probe(make_yolo("red"), spec("RGB"), YOLO_DECODER, squares)
    assert result.verdict == "configured" and result.warning() is None
    conf = result.configured
    assert (conf.name, conf.detections, conf.images_with_detections) == ("RGB, 0..1", 24, 8)  # 3 squares x 8 images
    assert by_name(result, "BGR, 0..1").detections == 0  # blue where red should be
    assert len(result.candidates) == 8 and len({c.name for c in result.candidates}) == 8


def test_red_detector_fed_bgr_finds_nothing_and_the_probe_refuses_with_the_numbers_and_the_fix(squares) -> None:
    result = probe(make_yolo("red"), spec("BGR"), YOLO_DECODER, squares)
    assert result.verdict == "alternative"
    assert result.better.name == "RGB, 0..1"  # the smallest change that fixes it, not also a new range
    # nothing on any image under BGR; RGB finds the squares on all 8 and nothing on the controls
    assert result.confidence == "high" and result.refuses()
    message = result.refusal("/project/edge.toml", {"color": "flag: --color"})
    assert message.startswith("preprocessing probe (confidence high): the configured BGR, 0..1 finds nothing on any of 8 "
                              "images, and RGB, 0..1 finds objects on 8 of them and none of the pixel-shuffled controls")
    assert "on 8 images it finds 24 vs 0 detections" in message
    assert "Under BGR, 0..1 (color from flag: --color) the model finds nothing" in message
    assert 'set [input] color = "RGB" in /project/edge.toml (or pass --color RGB)' in message
    assert message.endswith("build anyway with --force-preprocessing")
    assert "mean = " not in message  # the pixel range was right: only the colour order is named
    assert result.to_dict()["confidence"] == "high"


def test_red_detector_firing_on_noise_in_0_255_is_no_better(squares) -> None:
    """In 0..255 the red detector also fires on the dark noise (R - B > 0.3 of 255): 30x the
    detections of the right range, which the pixel-shuffled controls expose."""
    result = probe(make_yolo("red"), spec("RGB"), YOLO_DECODER, squares)
    noisy = by_name(result, "RGB, 0..255")
    assert noisy.detections > 10 * result.configured.detections and noisy.spurious
    assert noisy.control_detections > 20 and result.configured.control_detections == 0
    assert result.verdict == "configured"


def test_bright_detector_firing_everywhere_in_0_255_is_no_better_than_the_right_range(squares) -> None:
    result = probe(make_yolo("bright"), spec("BGR"), YOLO_DECODER, squares)
    assert result.verdict == "configured", [c.to_dict() for c in result.candidates]
    fires_everywhere = by_name(result, "BGR, 0..255")
    assert fires_everywhere.detections == CELLS * 8 and fires_everywhere.spurious  # 8x more than the squares
    assert by_name(result, "RGB, 0..1").detections == 24  # the channel order does not matter to it


def test_configured_0_255_that_fires_everywhere_warns(squares) -> None:
    result = probe(make_yolo("bright"), spec("BGR", scale=[1.0] * 3), YOLO_DECODER, squares)
    assert result.verdict == "alternative" and result.configured.spurious
    assert result.better.name == "BGR, 0..1"
    message = result.warning()
    assert message.startswith("preprocessing probe: the configured BGR, 0..255 makes the model fire on images without "
                              f"objects ({CELLS} detections per pixel-shuffled image) and BGR, 0..1 does not")
    assert "set [input] mean = [0, 0, 0], scale = [0.00392157, 0.00392157, 0.00392157] in edge.toml" in message
    assert "--scale 0.00392157,0.00392157,0.00392157" in message
    assert result.confidence == "high"  # the controls and the detections agree


def test_images_without_objects_give_no_signal_and_no_warning(tmp_path: Path) -> None:
    dark = sorted(write_square_images(tmp_path / "dark", 4, squares=0).glob("*.png"))
    result = probe(make_yolo("red"), spec("BGR"), YOLO_DECODER, dark)
    assert result.verdict == "no_signal" and result.warning() is None
    assert all(c.detections == 0 or c.spurious for c in result.candidates)
    assert by_name(result, "RGB, 0..255").spurious  # in 0..255 it fires on the noise, and on the controls alike


# --- the real default model on the default calibration images ---------------------------------


@pytest.fixture(scope="module")
def centerface_probe(centerface_384x640_path):
    """probe(spec) on the search images the default build uses (8 of them)."""
    from edge_sdk.builder.default_model import CENTERFACE
    from edge_sdk.builder.graph import model_from_path
    from edge_sdk.builder.images import default_calib_dir, list_images, split_images

    folder = default_calib_dir()
    if not folder.is_dir():
        pytest.skip(f"the default calibration images ({folder}) are not in this checkout")
    paths = pick_images(split_images(list_images(folder), 0.25, 4, 8).search)
    model = model_from_path(centerface_384x640_path)

    def run(color: str):
        configured = InputSpec.from_dict(dict(CENTERFACE.input_spec.to_dict(), color=color))
        return probe(model, configured, CENTERFACE.decoder, paths)

    return run


def test_centerface_with_its_rgb_spec_gets_no_warning(centerface_probe) -> None:
    result = centerface_probe("RGB")
    assert result.images == 8
    assert result.verdict == "configured" and result.warning() is None, [c.to_dict() for c in result.candidates]
    assert result.configured.detections >= 100  # colour scenes full of faces: the probe has a signal


def test_centerface_forced_to_bgr_warns_that_rgb_is_better(centerface_probe) -> None:
    result = centerface_probe("BGR")
    assert result.verdict == "alternative" and result.better.name == "RGB, 0..255", [c.to_dict() for c in result.candidates]
    rgb, bgr = result.better, result.configured
    assert rgb.pairs.count >= 20 and rgb.pairs.higher_share >= 0.75  # the same faces, scored higher
    message = result.warning()
    assert message.startswith("preprocessing probe: RGB, 0..255 fits the model clearly better than the configured BGR, 0..255")
    assert f"finds {rgb.detections} vs {bgr.detections} detections" in message
    assert 'set [input] color = "RGB"' in message and "--color RGB" in message
    # the same faces scored higher is evidence from the detections alone: a warning, never a refusal
    assert result.confidence == "low" and not result.refuses()
    assert message.endswith("confidence low (detections alone, no control shows BGR, 0..255 makes noise): "
                            "this build keeps BGR, 0..255")


# --- the rule, on hand-made scores -------------------------------------------------------------


def scored(detections: int, top: float, pairs: Optional[Pairs] = None, spurious: bool = False) -> Candidate:
    c = Candidate(spec("RGB"), "0..1", detections=detections, mean_top_score=top, spurious=spurious)
    c.pairs = pairs
    return c


@pytest.mark.parametrize(
    "alt, conf, expected",
    [
        # (1) more detections: 1.5x and at least max(4, images/2) = 4 more on 8 images
        (scored(30, 0.80), scored(20, 0.80), True),
        (scored(29, 0.80), scored(20, 0.80), False),  # 1.45x
        (scored(6, 0.80), scored(3, 0.80), False),  # 2x, but only 3 more
        (scored(7, 0.80), scored(3, 0.80), True),
        (scored(30, 0.70), scored(20, 0.80), False),  # more, but top scores drop by 0.1
        # (2) clearly higher top scores with as many detections
        (scored(20, 0.80), scored(20, 0.55), True),
        (scored(19, 0.80), scored(20, 0.55), False),
        # (3) the same objects, more confidently
        (scored(22, 0.80, Pairs(40, 0.80, 0.05)), scored(20, 0.78), True),
        (scored(22, 0.80, Pairs(19, 0.90, 0.05)), scored(20, 0.78), False),  # too few pairs
        (scored(22, 0.80, Pairs(40, 0.60, 0.05)), scored(20, 0.78), False),  # gains split both ways (gray images)
        (scored(22, 0.80, Pairs(40, 1.00, 0.001)), scored(20, 0.78), False),  # higher, by nothing
        (scored(19, 0.80, Pairs(40, 0.80, 0.05)), scored(20, 0.78), False),  # and it loses detections
        # a model that fires on images without objects is no evidence
        (scored(900, 1.0, spurious=True), scored(20, 0.80), False),
        (scored(20, 0.80), scored(900, 1.0, spurious=True), True),
        (scored(7, 0.80), scored(900, 1.0, spurious=True), False),  # fewer than one per image
    ],
)
def test_clearly_better_rule(alt: Candidate, conf: Candidate, expected: bool) -> None:
    assert clearly_better(alt, conf, images=8) is expected


def dets(*rows) -> Detections:
    """rows of (x1, y1, x2, y2, score[, class id])."""
    rows = [tuple(r) + (0,) * (6 - len(r)) for r in rows]
    a = np.array(rows, np.float32).reshape(-1, 6)
    return Detections(a[:, :4], a[:, 4], a[:, 5].astype(np.int32))


def test_pair_scores_matches_one_to_one_and_ignores_pairs_below_the_threshold() -> None:
    alt = [dets((0, 0, 10, 10, 0.9), (0, 0, 10, 10, 0.85), (50, 50, 60, 60, 0.7), (100, 0, 110, 10, 0.2), (200, 0, 210, 10, 0.9)),
           dets((0, 0, 5, 5, 0.9, 1)), dets()]
    conf = [dets((1, 1, 11, 11, 0.6), (50, 50, 60, 60, 0.8), (100, 0, 110, 10, 0.3)), dets((0, 0, 5, 5, 0.4, 0)),
            dets((0, 0, 5, 5, 0.9))]
    p = pair_scores(alt, conf, threshold=0.5)
    # pairs: 0.9 with 0.6 (the 0.85 twin finds it taken) and 0.7 with 0.8; (0.2, 0.3) is below the
    # threshold; the box at 200 has no partner, nor the class-1 box, nor anything in an empty image
    assert p.count == 2 and p.higher_share == 0.5 and p.median_gain == pytest.approx(0.1)


def test_shuffled_control_keeps_the_colours_and_loses_the_squares(squares) -> None:
    frame = cv2.imread(str(squares[0]))
    control = shuffled(frame)
    assert control.shape == frame.shape and control.flags.c_contiguous
    assert sorted(map(tuple, control.reshape(-1, 3))) == sorted(map(tuple, frame.reshape(-1, 3)))
    red = np.all(control == RED_RGB[::-1], axis=2)
    cells = red.reshape(GRID_H, STRIDE, GRID_W, STRIDE).sum(axis=(1, 3))
    assert red.sum() == 3 * STRIDE ** 2 and cells.max() < STRIDE ** 2 // 4  # no cell is a square any more


def test_candidates_cover_both_orders_and_every_range_once() -> None:
    own = spec("BGR", scale=[1 / 127.5] * 3, mean=[127.5] * 3)
    names = [c.name for c in candidates(own)]
    assert names[0] == "BGR, -1..1" and names[1] == "RGB, -1..1"
    assert sorted(names) == sorted(f"{c}, {r}" for c in ("BGR", "RGB") for r in ("0..255", "0..1", "-1..1", "ImageNet mean/std"))
    custom = [c.name for c in candidates(spec("RGB", scale=[0.5] * 3, mean=[10.0] * 3))]
    assert custom[0] == "RGB, mean [10, 10, 10] scale [0.5, 0.5, 0.5]" and len(custom) == 10
    imagenet = next(c for c in candidates(own) if c.name == "BGR, ImageNet mean/std").spec
    assert imagenet.mean == pytest.approx([103.53, 116.28, 123.675])  # per network channel: B first


# --- what it cannot do, it says ---------------------------------------------------------------


def test_skips_a_model_with_several_inputs(squares) -> None:
    result = probe(make_yolo("red", two_inputs=True), spec("RGB"), YOLO_DECODER, squares)
    assert result.verdict == "skipped"
    assert result.warning() == ("preprocessing probe skipped: the model has 2 inputs (images, scale_hint); "
                                "the probe feeds images to a model with one input")


@pytest.mark.parametrize(
    "decoder, paths, reason",
    [
        (None, "squares", "no decoder, so no detections or scores to compare"),
        ({"type": "centerface"}, "squares", "the decoder cannot read the model's outputs"),
        (YOLO_DECODER, "none", "no images to run the model on"),
        (YOLO_DECODER, "text", "cannot read image"),
    ],
)
def test_skips_with_a_reason(squares, tmp_path: Path, decoder, paths: str, reason: str) -> None:
    given = {"squares": squares, "none": [], "text": [tmp_path / "notes.png"]}[paths]
    (tmp_path / "notes.png").write_text("not an image")
    result = probe(make_yolo("red"), spec("RGB"), decoder, given)
    assert result.verdict == "skipped" and reason in result.reason
    assert result.warning().startswith("preprocessing probe skipped: ") and "\n" not in result.warning()
    assert result.to_dict() == {"verdict": "skipped", "reason": result.reason}


# --- through `edge-sdk build` -----------------------------------------------------------------


def invoke(args: List[str], cwd: Path):
    from edge_sdk.cli import app

    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(app, args)
    finally:
        os.chdir(old)


def red_build_args(model: Path, out: Path, calib: Path, *extra: str) -> List[str]:
    return ["build", str(model), "--out", str(out), "--input-size", f"{NET_W}x{NET_H}", "--decoder", json.dumps(YOLO_DECODER),
            "--scale", ",".join(f"{v:.10g}" for v in UNIT), "--calib", str(calib), *extra]


def saved_yolo(kind: str, folder: Path) -> Path:
    path = folder / f"{kind}.onnx"
    onnx.save(make_yolo(kind), str(path))
    return path


@pytest.fixture
def red_model(tmp_path: Path) -> Path:
    return saved_yolo("red", tmp_path)


def test_build_with_bgr_that_finds_nothing_stops_with_exit_6_naming_the_fix(tmp_path: Path, red_model: Path) -> None:
    calib = write_square_images(tmp_path / "calib", 16, seed=3)
    out = tmp_path / "bundle"
    result = invoke(red_build_args(red_model, out, calib, "--color", "BGR", "--precision", "fp16"), tmp_path)
    assert result.exit_code == 6, result.output
    text = " ".join(result.output.split())  # Rich wraps long lines
    assert "preprocessing probe (confidence high): the configured BGR, 0..1 finds nothing on any of 8 images" in text
    assert "(color from flag: --color)" in text
    assert 'set [input] color = "RGB" in edge.toml (or pass --color RGB)' in text and "--force-preprocessing" in text
    assert not out.exists()  # nothing written


def test_build_with_bgr_forced_warns_records_the_probe_and_keeps_the_configuration(tmp_path: Path, red_model: Path) -> None:
    from edge_sdk.manifest import Bundle

    calib = write_square_images(tmp_path / "calib", 16, seed=3)
    out = tmp_path / "bundle"
    result = invoke(red_build_args(red_model, out, calib, "--color", "BGR", "--precision", "fp16", "--force-preprocessing"),
                    tmp_path)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # Rich wraps long lines
    assert "warning: preprocessing probe: the configured BGR, 0..1 finds nothing on any of 8 images" in text
    assert 'set [input] color = "RGB" in edge.toml (or pass --color RGB); this build keeps BGR, 0..1 (--force-preprocessing)' in text
    m = Bundle.load(out).manifest
    assert m["inputs"][0]["color"] == "BGR"  # never changed silently
    probe_record = m["preprocess_probe"]
    assert probe_record["verdict"] == "alternative" and probe_record["configured"] == "BGR, 0..1"
    assert probe_record["better"] == "RGB, 0..1"
    by = {c["name"]: c for c in probe_record["candidates"]}
    assert by["RGB, 0..1"]["detections"] == 24 and by["BGR, 0..1"]["detections"] == 0 and by["BGR, 0..1"]["configured"]
    # fp16 builds have no search part: 8 of the 12 calibration images, never a gate image (i % 4 == 0)
    assert len(probe_record["files"]) == probe_record["images"] == 8
    assert all(int(Path(f).stem) % 4 != 0 for f in probe_record["files"])


def test_int8_build_probes_on_the_search_images_only(tmp_path: Path, detector_path: Path, calib_dir: Path) -> None:
    """16 images: every 4th by name to the gate, the ones 2 after them to the search: the probe's."""
    from detector_factory import tiny_build_args

    from edge_sdk.manifest import Bundle

    out = tmp_path / "bundle"
    result = invoke(tiny_build_args(detector_path, out, calib_dir, "--precision", "int8", "--calib-method", "percentile",
                                    "--json"), tmp_path)
    assert result.exit_code == 0, result.output
    record = Bundle.load(out).manifest["preprocess_probe"]
    assert record["verdict"] == "configured" and record["configured"] == "BGR, 0..255"
    assert sorted(record["files"]) == ["002.png", "006.png", "010.png", "014.png"]


def test_json_summary_carries_the_probe_and_its_warning(tmp_path: Path, red_model: Path) -> None:
    calib = write_square_images(tmp_path / "calib", 16, seed=3)
    result = invoke(red_build_args(red_model, tmp_path / "bundle", calib, "--color", "BGR", "--precision", "fp32", "--json",
                                   "--force-preprocessing"), tmp_path)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["preprocess_probe"]["verdict"] == "alternative"
    assert summary["preprocess_probe"]["confidence"] == "high"
    assert summary["provenance"]["input"]["color"] == "flag: --color"
    assert summary["provenance"]["preset"]["name"] == "ultralytics"  # --decoder yolov8 implies it
    assert summary["preprocess_probe"]["images"] == 8  # an FP32 build probes on the --calib folder
    assert [w for w in summary["warnings"] if w.startswith("preprocessing probe: the configured BGR, 0..1 finds nothing")]


def test_right_configuration_builds_without_a_probe_warning(tmp_path: Path, red_model: Path) -> None:
    calib = write_square_images(tmp_path / "calib", 16, seed=3)
    result = invoke(red_build_args(red_model, tmp_path / "bundle", calib, "--color", "RGB", "--precision", "fp16", "--json"), tmp_path)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["preprocess_probe"]["verdict"] == "configured"
    assert not [w for w in summary["warnings"] if "preprocessing probe" in w]


def test_help_documents_no_probe() -> None:
    from edge_sdk.cli import app

    result = CliRunner().invoke(app, ["build", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "--no-probe" in result.output and "preprocessing probe" in result.output


@pytest.mark.parametrize("how", ["--no-probe", "edge.toml"])
def test_probe_can_be_turned_off(tmp_path: Path, red_model: Path, how: str) -> None:
    calib = write_square_images(tmp_path / "calib", 16, seed=3)
    extra = ["--no-probe"] if how == "--no-probe" else []
    if how == "edge.toml":
        (tmp_path / "edge.toml").write_text("[build]\nprobe = false\n")
    result = invoke(red_build_args(red_model, tmp_path / "bundle", calib, "--color", "BGR", "--precision", "fp32", "--json", *extra), tmp_path)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["preprocess_probe"] == {"verdict": "skipped", "reason": "turned off (--no-probe or [build] probe = false)"}
    assert not [w for w in summary["warnings"] if "preprocessing probe" in w]


def test_build_without_a_decoder_says_the_probe_is_skipped_and_goes_on(tmp_path: Path, red_model: Path) -> None:
    from edge_sdk.manifest import Bundle

    calib = write_square_images(tmp_path / "calib", 16, seed=3)
    out = tmp_path / "bundle"
    args = ["build", str(red_model), "--out", str(out), "--input-size", f"{NET_W}x{NET_H}", "--calib", str(calib), "--precision", "fp32"]
    result = invoke(args, tmp_path)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "preprocessing probe" in line]
    assert lines and lines[0].startswith("warning: preprocessing probe skipped: no decoder")
    assert Bundle.load(out).manifest["preprocess_probe"]["verdict"] == "skipped"


# --- [input] color is checked where it is read ---------------------------------------------------


def test_color_other_than_rgb_or_bgr_in_edge_toml_names_the_key_and_the_file(tmp_path: Path, red_model: Path) -> None:
    (tmp_path / "edge.toml").write_text('[input]\ncolor = "GRAY"\n')
    result = invoke(["build", str(red_model), "--out", str(tmp_path / "bundle"), "--precision", "fp32"], tmp_path)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert re.search(r"error: \[input\] color must be BGR or RGB .*got 'GRAY' \(from .*edge\.toml\)", text), text
    assert not (tmp_path / "bundle").exists()


def test_color_on_the_command_line_names_the_flag(tmp_path: Path, red_model: Path) -> None:
    result = invoke(["build", str(red_model), "--out", str(tmp_path / "bundle"), "--color", "rgba"], tmp_path)
    assert result.exit_code == 2, result.output
    assert "--color must be BGR or RGB" in " ".join(result.output.split()) and "'rgba'" in result.output


def test_color_is_checked_in_the_config_object_too() -> None:
    from edge_sdk.builder.project import BuildConfig
    from edge_sdk.errors import ConfigError

    with pytest.raises(ConfigError, match=r"\[input\] color must be BGR or RGB, got 'YUV'"):
        BuildConfig(color="YUV")


def test_probe_setting_must_be_a_boolean(tmp_path: Path) -> None:
    from edge_sdk.builder.project import make_config
    from edge_sdk.errors import ConfigError

    (tmp_path / "edge.toml").write_text('[build]\nprobe = "no"\n')
    with pytest.raises(ConfigError, match=r"probe must be true or false, got 'no' \(from .*edge\.toml\)"):
        make_config({}, tmp_path)


# --- the INT8 gate never passes agreement between two noise outputs ---------------------------


def bright_0_255_args(model: Path, out: Path, calib: Path, *extra: str) -> List[str]:
    return red_build_args(model, out, calib, "--scale", "1", "--calib-method", "minmax", "--json", *extra)


@pytest.fixture
def bright_model(tmp_path: Path) -> Path:
    return saved_yolo("bright", tmp_path)


def test_probe_stops_a_build_whose_configured_range_fires_on_the_controls(tmp_path: Path, bright_model: Path) -> None:
    calib = write_square_images(tmp_path / "calib", 16, seed=3)
    result = invoke(bright_0_255_args(bright_model, tmp_path / "bundle", calib), tmp_path)
    assert result.exit_code == 6, result.output
    # --decoder yolov8 implies Ultralytics' RGB; --scale 1 makes it 0..255
    assert "the configured RGB, 0..255 makes the model fire on images without objects" in " ".join(result.output.split())


def test_int8_gate_refuses_agreement_between_noise_outputs(tmp_path: Path, bright_model: Path) -> None:
    """In 0..255 the bright detector fires on every cell of every image, pixel-shuffled or not:
    INT8 agrees with FP32 almost perfectly, on noise. Without the probe, the gate itself says no."""
    calib = write_square_images(tmp_path / "calib", 16, seed=3)
    result = invoke(bright_0_255_args(bright_model, tmp_path / "bundle", calib, "--no-probe"), tmp_path)
    assert result.exit_code == 6, result.output
    text = " ".join(result.output.split())
    assert re.search(r"INT8 f1_vs_fp32 = (0\.9\d+|1\.0000) is no pass: FP32 itself fires on images without objects "
                     rf"\({CELLS} detections per pixel-shuffled gate image, {CELLS} per gate image\)", text), text
    assert "comparison is between two noise outputs" in text and "--allow-accuracy-loss" in text


def test_a_refused_gate_kept_by_allow_accuracy_loss_is_recorded_and_not_recommended(tmp_path: Path, bright_model: Path) -> None:
    from edge_sdk.manifest import Bundle

    calib = write_square_images(tmp_path / "calib", 16, seed=3)
    out = tmp_path / "bundle"
    result = invoke(bright_0_255_args(bright_model, out, calib, "--no-probe", "--allow-accuracy-loss"), tmp_path)
    assert result.exit_code == 0, result.output
    manifest = Bundle.load(out).manifest
    gate = manifest["accuracy"]["int8"]["gate"]
    assert gate["passed"] is False and gate["value"] >= 0.97 and "fires on images without objects" in gate["refused"]
    assert manifest["precision"] == "fp16"  # best: INT8 did not pass
    assert manifest["int8"]["search"] == []  # no fallback search on noise


def test_gate_on_a_real_reference_is_unchanged(tmp_path: Path, red_model: Path) -> None:
    calib = write_square_images(tmp_path / "calib", 16, seed=3)
    result = invoke(red_build_args(red_model, tmp_path / "bundle", calib, "--color", "RGB", "--precision", "int8", "--json"), tmp_path)
    assert result.exit_code == 0, result.output
    gate = json.loads(result.stdout)["gate"]
    assert gate["passed"] is True and "refused" not in gate


# --- confidence: the model's own preset is the second piece of evidence ------------------------


@pytest.mark.parametrize("alt_is_preset, confidence", [(True, "high"), (False, "low")])
def test_advice_towards_the_models_own_preset_is_high_confidence(alt_is_preset: bool, confidence: str) -> None:
    """More detections alone (rule 1) is low confidence, unless the alternative is what the model
    itself says (its metadata's preset) and the configuration departs from it."""
    conf = scored(20, 0.80)
    conf.configured = True
    alt = scored(30, 0.80)
    alt.preset = alt_is_preset
    result = judge([conf, alt], 8, 0.5)
    assert result.verdict == "alternative" and result.better is alt
    assert result.confidence == confidence and result.refuses() == (confidence == "high")


def test_a_preset_among_several_better_alternatives_is_the_one_named() -> None:
    conf = scored(10, 0.80)
    conf.configured = True
    most, preset = scored(40, 0.80), scored(30, 0.80)
    preset.preset = True
    assert judge([conf, most, preset], 8, 0.5).better is preset


def test_the_configured_preset_is_kept_against_detections_alone() -> None:
    """The YOLOX case: the configured spec IS the preset, and an alternative finds more on images
    from another domain: low confidence, a warning; the build keeps the preset."""
    conf = scored(10, 0.80)
    conf.configured = conf.preset = True
    result = judge([conf, scored(30, 0.80)], 8, 0.5)
    assert result.confidence == "low" and not result.refuses()


def test_the_models_own_preset_is_the_candidate_with_its_colour_order_and_range(squares) -> None:
    """probe(..., preset=(name, spec)): exactly the candidate with the preset's colour order, mean
    and scale is marked, whatever the configured one; the result names the preset."""
    result = probe(make_yolo("red"), spec("BGR"), YOLO_DECODER, squares, preset=("ultralytics", spec("RGB")))
    assert [c.name for c in result.candidates if c.preset] == ["RGB, 0..1"] and result.preset == "ultralytics"
    assert result.better is not None and result.better.preset
    other = probe(make_yolo("red"), spec("RGB"), YOLO_DECODER, squares,
                  preset=("imagenet", spec("BGR", scale=[1 / (255 * 0.225), 1 / (255 * 0.224), 1 / (255 * 0.229)],
                                           mean=[255 * 0.406, 255 * 0.456, 255 * 0.485])))
    assert [c.name for c in other.candidates if c.preset] == ["BGR, ImageNet mean/std"]
    none = probe(make_yolo("red"), spec("RGB"), YOLO_DECODER, squares)
    assert not any(c.preset for c in none.candidates) and none.preset is None


@pytest.mark.parametrize("cap,filled", [(3, True), (4, False)])
def test_an_image_filled_up_to_max_detections_makes_a_candidate_spurious(squares, cap: int, filled: bool) -> None:
    """Three squares an image: a decoder capped at three detections is filled on every image."""
    result = probe(make_yolo("red"), spec("RGB"), dict(YOLO_DECODER, max_detections=cap), squares)
    conf = result.configured
    assert conf.detections == 24 and conf.filled is filled and conf.spurious is filled
