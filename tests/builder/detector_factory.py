"""Small factories for the builder tests: a tiny CenterFace-like ONNX detector made with
onnx.helper, and folders of synthetic images it detects things in."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# --- tiny CenterFace-like detector ------------------------------------------------------------

# Network input of the tiny detector (H, W) and its stride.
TINY_HW = (64, 96)
TINY_STRIDE = 4
TINY_THRESHOLD = 150.0  # mean brightness of a 4x4 cell above which the heatmap says "object"


def make_detector(
    opset: int = 9,
    dummy_dims: Sequence[int] = (10, 3, 32, 32),
    weights_as_inputs: bool = True,
    input_name: str = "input.1",
    foldable: bool = True,
) -> "onnx.ModelProto":
    """A CenterFace look-alike: one stride-4 Conv measures each 4x4 cell's brightness; the
    heatmap is `sigmoid((brightness - 150) / 8)`, boxes are 8x8 (scale = log 2), offsets and
    landmarks are 0. Bright squares on a dark image are "faces".

    Like CenterFace it declares a dummy input shape and lists its weights as graph inputs.
    With `foldable`, the heatmap bias is computed by an Add of two constants (onnxslim folds it).
    """
    rng = np.random.default_rng(0)
    n = helper.make_node
    w_feat = np.full((4, 3, TINY_STRIDE, TINY_STRIDE), 1.0 / (3 * TINY_STRIDE * TINY_STRIDE), np.float32)
    w_feat[1:] = rng.normal(0, 0.01, size=w_feat[1:].shape).astype(np.float32)  # extra texture channels
    b_feat = np.zeros(4, np.float32)
    w_heat = np.zeros((1, 4, 1, 1), np.float32)
    w_heat[0, 0] = 1.0 / 8.0
    w_scale = np.zeros((2, 4, 1, 1), np.float32)
    b_scale = np.full(2, np.log(2.0), np.float32)
    w_off = np.zeros((2, 4, 1, 1), np.float32)
    w_off[:, 1:] = 0.001
    w_lm = np.zeros((10, 4, 1, 1), np.float32)
    w_lm[:, 1:] = 0.002
    inits = {
        "feat.w": w_feat, "feat.b": b_feat, "heat.w": w_heat, "scale.w": w_scale, "scale.b": b_scale,
        "off.w": w_off, "off.b": np.zeros(2, np.float32), "lm.w": w_lm, "lm.b": np.full(10, 0.1, np.float32),
    }
    nodes = [
        n("Conv", [input_name, "feat.w", "feat.b"], ["feat"], kernel_shape=[4, 4], strides=[4, 4], name="feat_conv"),
        n("Relu", ["feat"], ["feat_relu"], name="feat_relu"),
        n("Conv", ["feat_relu", "heat.w"], ["heat_raw"], kernel_shape=[1, 1], name="heat_conv"),
    ]
    bias = np.array([-TINY_THRESHOLD / 8.0], np.float32).reshape(1, 1, 1, 1)
    if foldable:
        nodes += [
            n("Constant", [], ["bias_a"], value=numpy_helper.from_array(bias * 0.5, "bias_a"), name="bias_a"),
            n("Constant", [], ["bias_b"], value=numpy_helper.from_array(bias * 0.5, "bias_b"), name="bias_b"),
            n("Add", ["bias_a", "bias_b"], ["bias"], name="bias_add"),
        ]
    else:
        inits["bias"] = bias
    nodes += [
        n("Add", ["heat_raw", "bias"], ["heat_logit"], name="heat_add"),
        n("Sigmoid", ["heat_logit"], ["537"], name="heat_sigmoid"),
        n("Conv", ["feat_relu", "scale.w", "scale.b"], ["538"], kernel_shape=[1, 1], name="scale_conv"),
        n("Conv", ["feat_relu", "off.w", "off.b"], ["539"], kernel_shape=[1, 1], name="off_conv"),
        n("Conv", ["feat_relu", "lm.w", "lm.b"], ["540"], kernel_shape=[1, 1], name="lm_conv"),
    ]
    d = list(dummy_dims)
    oh, ow = d[2] // TINY_STRIDE, d[3] // TINY_STRIDE
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [d[0], c, oh, ow]) for name, c in
               (("537", 1), ("538", 2), ("539", 2), ("540", 10))]
    inputs = [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, d)]
    initializers = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    if weights_as_inputs:
        inputs += [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in inits.items()]
    graph = helper.make_graph(nodes, "tiny_detector", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="edge-sdk-tests")
    model.ir_version = 7 if opset <= 13 else 8
    return model


TINY_DECODER = {"type": "centerface", "score_threshold": 0.5, "nms_iou": 0.3}


def tiny_build_args(model: Path, out: Path, calib: Optional[Path] = None, *extra: str) -> List[str]:
    """CLI arguments that build the tiny detector quickly."""
    args = ["build", str(model), "--out", str(out), "--input-size", f"{TINY_HW[1]}x{TINY_HW[0]}", "--decoder", "centerface"]
    if calib is not None:
        args += ["--calib", str(calib)]
    return args + list(extra)


def square_image(rng: np.random.Generator, size: Tuple[int, int] = (96, 144), squares: int = 3, black: bool = False) -> np.ndarray:
    """A dark BGR image with bright squares (what the tiny detector detects)."""
    h, w = size
    img = rng.integers(0, 60, size=(h, w, 3), dtype=np.uint8)
    if black:
        return np.zeros((h, w, 3), np.uint8)
    for _ in range(squares):
        s = int(rng.integers(10, 16))
        y, x = int(rng.integers(0, h - s)), int(rng.integers(0, w - s))
        img[y : y + s, x : x + s] = int(rng.integers(200, 256))
    return img


def write_images(folder: Path, count: int, seed: int = 0, black_except_every: Optional[int] = None) -> Path:
    """`count` PNGs named 000.png.... With `black_except_every=k`, only every k-th image (the
    ones the builder holds back for the gate, by name order) has squares; the rest are black."""
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        black = black_except_every is not None and i % black_except_every != 0
        cv2.imwrite(str(folder / f"{i:03d}.png"), square_image(rng, black=black))
    return folder
