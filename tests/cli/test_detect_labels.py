"""`edge-sdk detect` on a bundle whose model ends in NMS and whose decoder names its classes: each
JSONL detection carries "label" beside "class_id", with its box in frame pixels (a subprocess, as
a user runs it; the model is written without `onnx`, so the device test set runs this too)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import List

import numpy as np
import pytest

from edge_sdk.preprocess import InputSpec
from runtime_factories import write_bundle

cv2 = pytest.importorskip("cv2")
pytest.importorskip("onnxruntime")

NET = 64  # network input 64x64; frames 128x96 letterbox into it at scale 0.5, pad_y 8
ROWS = np.zeros((10, 6), np.float32)  # Ultralytics nms=True: x1, y1, x2, y2, score, class; then padding
ROWS[0] = [10, 12, 30, 40, 0.9, 2]
ROWS[1] = [40, 20, 60, 30, 0.6, 0]
LABELS = ["person", "bicycle", "car"]


def rows_model(path: Path) -> Path:
    """output0 [1, 10, 6] = ROWS + 0 * mean(image)."""
    from onnx_proto import make_graph, make_model, make_node, make_tensor, value_info

    nodes = [
        make_node("ReduceMean", ["images"], ["mean"], axes=[1, 2, 3], keepdims=0),
        make_node("Mul", ["mean", "zero"], ["zeros"]),
        make_node("Add", ["rows", "zeros"], ["output0"]),
    ]
    graph = make_graph(nodes, "nms_rows", [value_info("images", [1, 3, NET, NET])], [value_info("output0", [1, 10, 6])],
                       [make_tensor("rows", ROWS[None]), make_tensor("zero", np.array(0.0, np.float32))])
    path.write_bytes(make_model(graph, opset=13, ir_version=7))
    return path


def test_jsonl_names_each_detection(tmp_path: Path) -> None:
    spec = InputSpec(name="images", shape=[1, 3, NET, NET], color="RGB", scale=[1 / 255] * 3, resize="letterbox")
    bundle = write_bundle(tmp_path / "bundle", rows_model(tmp_path / "m.onnx"), spec,
                          {"type": "end2end", "format": "rows", "labels": LABELS})
    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(2):
        cv2.imwrite(str(folder / f"{i}.png"), np.full((96, 128, 3), 60 * i, np.uint8))
    out = tmp_path / "out.jsonl"
    cmd: List[str] = [sys.executable, "-c", "from edge_sdk.cli import main; main()", "detect", str(folder),
                      "--bundle", str(bundle), "--jsonl", str(out), "--threads", "1", "--quiet", "--no-cache", "--no-track"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 2
    for line in lines:
        # by hand: x / 0.5, (y - 8) / 0.5
        assert line["detections"] == [
            {"xyxy": [20.0, 8.0, 60.0, 64.0], "score": 0.9, "class_id": 2, "label": "car"},
            {"xyxy": [80.0, 24.0, 120.0, 44.0], "score": 0.6, "class_id": 0, "label": "person"},
        ]
