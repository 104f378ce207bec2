"""A tiny real model for daemon and telemetry tests: a CenterFace-shaped ONNX graph (heatmap,
scale, offset, landmarks at stride 4) small enough to run thousands of frames a second on
ONNX Runtime, written as a bundle that Bundle.load verifies. The real Pipeline, the real
CenterFace decoder and the synthetic source run it in the tests. The model is written without
the `onnx` package, so the device test set runs it too.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import numpy as np

from edge_sdk.fsutil import sha256_file
from edge_sdk.preprocess import InputSpec

HEIGHT, WIDTH = 32, 32


def make_tiny_model(path: Path, seed: int = 0, height: int = HEIGHT, width: int = WIDTH,
                    score_bias: float = 0.0, size_bias: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(tiny_model_bytes(seed, height, width, score_bias, size_bias))
    return path


def tiny_model_bytes(seed: int = 0, height: int = HEIGHT, width: int = WIDTH, score_bias: float = 0.0,
                     size_bias: float = 0.0) -> bytes:
    """The model, written without the `onnx` package (tests/onnx_proto.py). `score_bias` is
    added to the heatmap logits: a negative one scales every score down (a damaged model);
    `size_bias` to the box-scale maps: a positive one makes boxes of a few cells, which IoU
    matching can tell apart (the default's are degenerate once placed in the frame)."""
    from onnx_proto import make_graph, make_model, make_node, make_tensor, value_info

    rng = np.random.default_rng(seed)
    weight = rng.normal(0, 0.02, size=(15, 3, 1, 1)).astype(np.float32)
    bias = np.zeros(15, np.float32)
    bias[0] = -1.0 + 0.1 * seed + score_bias  # heatmap logits: seed changes the scores a little
    bias[1:3] = size_bias
    nodes = [
        make_node("AveragePool", ["input"], ["pooled"], kernel_shape=[4, 4], strides=[4, 4]),
        make_node("Conv", ["pooled", "w", "b"], ["maps"]),
        make_node("Split", ["maps"], ["logits", "scale", "offset", "landmarks"], axis=1, split=[1, 2, 2, 10]),
        make_node("Sigmoid", ["logits"], ["heatmap"]),
    ]
    h4, w4 = height // 4, width // 4
    graph = make_graph(
        nodes, f"tiny_centerface_{seed}",
        [value_info("input", [1, 3, height, width])],
        [value_info(n, [1, c, h4, w4]) for n, c in (("heatmap", 1), ("scale", 2), ("offset", 2), ("landmarks", 10))],
        [make_tensor("w", weight), make_tensor("b", bias)],
    )
    return make_model(graph, opset=11, ir_version=7)


def make_tiny_bundle(folder: Path, seed: int = 0, score_threshold: float = 0.3, score_bias: float = 0.0,
                     size_bias: float = 0.0) -> Path:
    """A bundle folder the runtime's Bundle.load accepts (sha256 of every file listed)."""
    model = make_tiny_model(folder / "model.onnx", seed, score_bias=score_bias, size_bias=size_bias)
    spec = InputSpec(name="input", shape=[1, 3, HEIGHT, WIDTH])
    digest = sha256_file(model)
    manifest: Dict[str, Any] = {
        "schema_version": 1,
        "model": {"name": f"tiny-{seed}", "source_sha256": digest},
        "target": {"name": "cpu", "sm": None, "tensorrt": None},
        "inputs": [spec.to_dict()],
        "outputs": [{"name": n, "shape": [1, c, HEIGHT // 4, WIDTH // 4], "dtype": "float32"}
                    for n, c in (("heatmap", 1), ("scale", 2), ("offset", 2), ("landmarks", 10))],
        "decoder": {"type": "centerface", "score_threshold": score_threshold, "nms_iou": 0.3},
        "precision": "fp32",
        "files": {"model.onnx": digest},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return folder
