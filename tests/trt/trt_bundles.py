"""Tiny bundles for the engine tests: fake models, calibration tensors, calib.cache, manifest.

A module of its own (not conftest.py) so that tests import it by a name no other test folder uses."""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import numpy as np

from edge_sdk.fsutil import sha256_file
from edge_sdk.trt.device import GpuInfo
from fakes.fake_tensorrt import fake_model

INPUT = "input.1"
SHAPE = [1, 3, 8, 8]
XAVIER = GpuInfo(name="Jetson Xavier NX (fake)", sm="7.2", source="test")
ORIN = GpuInfo(name="Jetson AGX Orin (fake)", sm="8.7", source="test")


# Every tensor of the fake models (each layer's output is named after the layer): a complete cache.
CACHE_TENSORS = (INPUT, "conv1", "relu1", "conv2", "conv2_7", "head")


def calib_cache_text(header: str = "TRT-8502-EntropyCalibration2", names: Sequence[str] = CACHE_TENSORS) -> str:
    lines = [header] + [f"{n}: {struct.pack('>f', (i + 1) / 127.0).hex()}" for i, n in enumerate(names)]
    return "\n".join(lines) + "\n"


def write_bundle(
    root: Path,
    shape: Sequence[int] = SHAPE,
    layers: Sequence[str] = ("conv1", "relu1", "conv2", "conv2_7", "head"),
    calib_samples: int = 3,
    cache_header: Optional[str] = "TRT-8502-EntropyCalibration2",
    cache_tensors: Sequence[str] = CACHE_TENSORS,
    algorithm: str = "entropy",
    variants: Sequence[str] = ("fp32", "fp16", "int8"),
    fp32_layers: Sequence[str] = ("conv2",),
    layer_precisions: Optional[Dict[str, str]] = None,
    sample_shape: Optional[Sequence[int]] = None,
    fallback_layers: Optional[Dict[str, str]] = None,
    model_shape: Optional[Sequence[int]] = None,
    dla_unsupported: Sequence[str] = ("head",),
) -> Path:
    """A bundle folder the fake TensorRT can build: fake models, calib/*.npy, calib.cache, manifest."""
    root.mkdir(parents=True, exist_ok=True)
    # model_shape: the input as the model declares it (-1: a dynamic dim); the manifest keeps `shape`
    inputs = [{"name": INPUT, "shape": list(model_shape or shape)}]
    names = {"fp32": ("model.onnx", "fp32"), "fp16": ("model.fp16.onnx", "fp16"), "int8": ("model.int8.qdq.onnx", "qdq")}
    for variant in variants:
        fname, types_ = names[variant]
        (root / fname).write_bytes(fake_model(fname, types_, inputs, layers, dla_unsupported))
    if calib_samples:
        (root / "calib").mkdir()
        for i in range(calib_samples):
            # Sample i is filled with i + 1, so the order TensorRT sees is visible in its sums.
            arr = np.full(sample_shape or shape[1:], float(i + 1), dtype=np.float32)
            np.save(str(root / "calib" / f"{i:04d}.npy"), arr)
    if cache_header:
        (root / "calib.cache").write_text(calib_cache_text(cache_header, cache_tensors))
    if layer_precisions is None:
        layer_precisions = {n: ("fp32" if n in fp32_layers else "int8") for n in ("conv1", "conv2", "head")}
    manifest: Dict[str, Any] = {
        "schema_version": 1,
        "model": {"name": "fake", "source_sha256": "0" * 64},
        "target": {"name": "xavier-nx", "sm": "7.2", "tensorrt": "8.5.2"},
        "inputs": [{"name": INPUT, "shape": list(shape), "dtype": "float32", "layout": "NCHW", "color": "BGR",
                    "mean": [0, 0, 0], "scale": [1, 1, 1], "resize": "letterbox", "pad_value": 0}],
        "outputs": [{"name": "537", "shape": [1, 1, 2, 2], "dtype": "float32"}],
        "decoder": {"type": "centerface", "score_threshold": 0.5, "nms_iou": 0.3},
        "precision": "best",
        "calibration": {"algorithm": algorithm, "samples": calib_samples},
        "int8": {"fp32_layers": list(fp32_layers), "layer_precisions": layer_precisions},
    }
    if fallback_layers is not None:
        manifest["int8"]["fallback_layers"] = dict(fallback_layers)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    manifest["files"] = {str(p.relative_to(root)): sha256_file(p) for p in files}
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return root


