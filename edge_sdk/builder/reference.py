"""What `edge-sdk verify` needs from the build: the gate images as network inputs and FP32's
outputs on them, written into the bundle as `reference.npz` (see :mod:`edge_sdk.verify`, which
reads it on the device).

The gate images are the ones the accuracy gate scored and nothing was tuned on, so the device
compares an engine with FP32 on the images the builder's verdict came from, decoded and matched
the same way. Layout of the file (deflate-compressed `.npz`, no pickled objects):

| array | shape | dtype |
|---|---|---|
| `inputs` | (N, C, H, W) | uint8, float16 or float32: the smallest that holds the inputs exactly |
| `transforms` | (N, 6) | float64: scale_x, scale_y, pad_x, pad_y, frame width, frame height |
| `output_names` | (K,) | unicode |
| `output_0` … `output_{K-1}` | (N, …) | float16, or float32 (see below) |

The outputs are float16 unless a value would overflow it, or the decoder finds other detections
in the rounded outputs than in FP32's own (a score next to the threshold): then float32, so the
stored reference decodes to exactly FP32's detections.

The manifest's `reference` section says the same, with the gate threshold (`min_f1`).
"""
from __future__ import annotations

import io
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from edge_sdk.builder.bundle import encode_calib_tensor
from edge_sdk.manifest import REFERENCE
from edge_sdk.geometry import Placement

MAX_IMAGES = 8  # gate images kept: enough to compare an engine with FP32, small enough to ship (the default build holds back 14)
FLOAT16_MAX = float(np.finfo(np.float16).max)


def transform_rows(transforms: Sequence[Placement]) -> np.ndarray:
    """(N, 6) float64: each frame's placement in the network input as scale_x, scale_y, pad_x,
    pad_y, frame width and height (:meth:`Placement.affine` reads them back)."""
    return np.array([[t.scale_x, t.scale_y, t.x, t.y, t.src[2] - t.src[0], t.src[3] - t.src[1]] for t in transforms],
                    dtype=np.float64).reshape(-1, 6)


def output_dtype(values: np.ndarray) -> np.dtype:
    """float16, unless a value would overflow it (then float32)."""
    finite = values[np.isfinite(values)]
    big = float(np.abs(finite).max()) if finite.size else 0.0
    return np.dtype(np.float16 if big < FLOAT16_MAX else np.float32)


def reference_npz(inputs: Sequence[np.ndarray], transforms: Sequence[Placement], output_names: Sequence[str],
                  outputs: Sequence[Sequence[np.ndarray]], decoder: Any = None) -> Tuple[bytes, Dict[str, Any]]:
    """(the file's bytes, what the manifest says of it) for per-image inputs (1, C, H, W), their
    transforms and the FP32 outputs of each image (model output order, batch 1). `decoder`: the
    model's, to check that float16 keeps FP32's detections (float32 is stored otherwise)."""
    if not inputs or len(inputs) != len(transforms) or len(inputs) != len(outputs):
        raise ValueError(f"reference_npz: {len(inputs)} inputs, {len(transforms)} transforms, {len(outputs)} outputs")
    stacked = np.concatenate([np.asarray(x, np.float32) for x in inputs], axis=0)
    arrays: Dict[str, np.ndarray] = {
        "inputs": encode_calib_tensor(stacked),
        "transforms": transform_rows(transforms),
        "output_names": np.array(list(output_names), dtype=str),
    }
    exact = [np.concatenate([np.asarray(out[k], np.float32) for out in outputs], axis=0) for k in range(len(output_names))]
    stored = [values.astype(output_dtype(values)) for values in exact]
    if decoder is not None and not _same_detections(decoder, exact, stored, transforms):
        stored = exact
    dtypes: Dict[str, str] = {}
    for k, name in enumerate(output_names):
        arrays[f"output_{k}"] = stored[k]
        dtypes[name] = stored[k].dtype.name
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    section = {
        "file": REFERENCE,
        "images": int(stacked.shape[0]),
        "inputs_dtype": arrays["inputs"].dtype.name,
        "outputs": dtypes,
    }
    return buf.getvalue(), section


def _same_detections(decoder: Any, exact: Sequence[np.ndarray], rounded: Sequence[np.ndarray],
                     transforms: Sequence[Placement]) -> bool:
    from edge_sdk.builder.evaluate import agreement, decode_all

    def per_image(stacked: Sequence[np.ndarray]) -> List[List[np.ndarray]]:
        return [[o[i : i + 1].astype(np.float32) for o in stacked] for i in range(len(transforms))]

    a = decode_all(decoder, per_image(exact), transforms)
    b = decode_all(decoder, per_image(rounded), transforms)
    m = agreement(b, a)
    return m["fp"] == 0 and m["fn"] == 0


def gate_reference(manifest: Dict[str, Any], fp32: Any, inputs: Any, images: Any, min_f1: float) -> Dict[str, bytes]:
    """The bundle's `reference.npz` for a build: FP32 (ONNX Runtime, CPU) on up to MAX_IMAGES gate
    images (`inputs`: the build's ModelInputs; `images`: its BuildImages, None in an FP32 build,
    which reads none). Adds the
    `reference` section to `manifest` and returns {file: bytes} for write_bundle; returns {} and
    adds nothing when there are no gate images."""
    from edge_sdk.builder.evaluate import run_model

    if images is None or not images.gate:
        return {}
    tensors: List[np.ndarray] = list(images.gate[:MAX_IMAGES])
    transforms = list(images.gate_transforms[:MAX_IMAGES])
    outputs = run_model(fp32, inputs.spec.name, tensors)
    names = [o.name for o in fp32.graph.output]
    data, section = reference_npz(tensors, transforms, names, outputs, inputs.decoder)
    section["source"] = ("the gate images (held back from calibration and the fallback search); outputs of "
                         "model.onnx on ONNX Runtime's CPU provider")
    section["min_f1"] = float(min_f1)
    manifest["reference"] = section
    return {REFERENCE: data}
