"""A tiny real model for daemon and telemetry tests: a CenterFace-shaped ONNX graph (heatmap,
scale, offset, landmarks at stride 4) small enough to run thousands of frames a second on
ONNX Runtime, written as a bundle that Bundle.load verifies. The real Pipeline, the real
CenterFace decoder and the synthetic source run it in the tests.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import numpy as np

from edge_sdk.fsutil import sha256_file
from edge_sdk.preprocess import InputSpec

HEIGHT, WIDTH = 32, 32


def make_tiny_model(path: Path, seed: int = 0, height: int = HEIGHT, width: int = WIDTH) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weight = rng.normal(0, 0.02, size=(15, 3, 1, 1)).astype(np.float32)
    bias = np.zeros(15, np.float32)
    bias[0] = -1.0 + 0.1 * seed  # heatmap logits: seed changes the scores a little
    nodes = [
        helper.make_node("AveragePool", ["input"], ["pooled"], kernel_shape=[4, 4], strides=[4, 4]),
        helper.make_node("Conv", ["pooled", "w", "b"], ["maps"]),
        helper.make_node("Split", ["maps"], ["logits", "scale", "offset", "landmarks"], axis=1, split=[1, 2, 2, 10]),
        helper.make_node("Sigmoid", ["logits"], ["heatmap"]),
    ]
    h4, w4 = height // 4, width // 4
    graph = helper.make_graph(
        nodes, f"tiny_centerface_{seed}",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, height, width])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, c, h4, w4])
         for n, c in (("heatmap", 1), ("scale", 2), ("offset", 2), ("landmarks", 10))],
        initializer=[numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def make_tiny_bundle(folder: Path, seed: int = 0, score_threshold: float = 0.3) -> Path:
    """A bundle folder the runtime's Bundle.load accepts (sha256 of every file listed)."""
    model = make_tiny_model(folder / "model.onnx", seed)
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
