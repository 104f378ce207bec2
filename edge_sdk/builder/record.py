"""What a build records: the manifest written into the bundle, with the text files and calibration
tensors that go beside it, and the summary `edge-sdk build` prints (or writes with --json).

The manifest says where the model came from, the target, the network input and outputs, the
decoder, the recommended precision, the graph before and after optimization, each variant's
accuracy against FP32, the preprocessing probe, and for INT8 the calibration (the image split,
coverage, the shipped tensors' format) and, per layer, its precision (INT8, or FP16 / FP32 where
it was kept out of INT8), FLOPs and INT8 sensitivity, with the INT8 share of the FLOPs. See
:mod:`edge_sdk.manifest` for how the runtime reads it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from edge_sdk import __version__
from edge_sdk.builder import bundle as bundle_mod
from edge_sdk.builder import graph as graph_mod
from edge_sdk.builder.images import BuildImages
from edge_sdk.builder.inputs import ModelInputs
from edge_sdk.builder.project import BuildConfig
from edge_sdk.builder.variants import Variants
from edge_sdk.fsutil import sha256_file
from edge_sdk.manifest import SCHEMA_VERSION, VARIANT_FILES, Bundle
from edge_sdk.precision import PRECISIONS
from edge_sdk.targets import Target


@dataclass
class Record:
    """The manifest and the files written beside it (see :func:`edge_sdk.builder.bundle.write_bundle`)."""

    manifest: Dict[str, Any]
    texts: Dict[str, str]  # bundle-relative path → text: the calibration cache, ranges.json
    tensors: List[np.ndarray]  # calibration tensors shipped for re-calibration on the device


def assemble(config: BuildConfig, target: Target, inputs: ModelInputs, graph: Dict[str, Any],
             images: Optional[BuildImages], variants: Variants, probe: Dict[str, Any], started: float) -> Record:
    """The bundle's manifest and extra files. `graph` is the graph step's record (statistics
    before and after optimization); `started` the build's start (time.perf_counter()), from
    which the manifest records how long the build took."""
    fp32, int8 = variants.models["fp32"], variants.int8
    manifest: Dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "model": {"name": inputs.name, "source_sha256": sha256_file(inputs.path), "source": inputs.source},
        "target": {"name": target.name, "sm": target.sm, "tensorrt": target.tensorrt, "quantization": target.quantization},
        "inputs": [inputs.spec.to_dict()],
        "outputs": [_output_entry(o) for o in fp32.graph.output],
        "decoder": inputs.decoder_spec or {},
        "provenance": inputs.provenance.to_dict(),
        "precision": variants.precision,
        "requested_precision": config.precision,
        "variants": sorted(variants.models, key=PRECISIONS.index),
        "graph": graph,
        "accuracy": variants.accuracy,
        "preprocess_probe": probe,
        "engine": {"dla_core": config.dla_core, "workspace_mib": config.workspace_mib},
        "builder": {"edge_sdk": __version__, "seconds": None},
    }
    texts: Dict[str, str] = {}
    kept: List[np.ndarray] = []
    if int8 is not None:
        assert images is not None  # an INT8 build reads images
        split = images.split
        manifest["calibration"] = {
            "algorithm": config.calib_method,
            "trt_calibrator": int8.algorithm,
            "percentile": config.percentile if config.calib_method == "percentile" else None,
            "samples": len(images.calibration),
            "held_back": len(images.gate),
            "folder": str(images.folder),
            "split": {
                "rule": split.describe(),
                "calibration": {"images": len(split.calibration)},
                "search": {"images": len(split.search), "reference_detections": int8.search_reference_detections},
                "gate": {"images": len(split.gate), "reference_detections": int8.gate_reference_detections},
            },
            "tensors_kept": min(len(images.calibration), config.calib_tensors_kept),
            "tensors": None,
            "coverage": {"clipped_fraction": {k: round(float(v), 6) for k, v in int8.coverage.items()},
                         "warn_above": config.coverage_warn},
        }
        manifest["int8"] = {"fp32_layers": int8.fp32_layers, "fallback_layers": int8.fallback_layers,
                            "layer_precisions": int8.layer_precisions, "int8_flop_share": int8.int8_flop_share,
                            "layers": int8.layers,
                            "search": int8.search, "search_target": int8.search_target, "search_f1": int8.search_f1}
        if int8.calib_cache is not None:
            texts[bundle_mod.CALIB_CACHE] = int8.calib_cache
        texts[bundle_mod.RANGES] = int8.ranges_json
        kept = _subset(images.calibration, config.calib_tensors_kept)
        manifest["calibration"]["tensors"] = bundle_mod.calib_tensor_format(kept, inputs.spec)
    if images is not None:  # the calibration folder's statistics: the daemon's calibration-drift reference
        from edge_sdk.builder.input_stats import input_stats

        manifest["input_stats"] = input_stats(images.split.calibration + images.split.search + images.split.gate)
    manifest["builder"]["seconds"] = round(time.perf_counter() - started, 1)
    return Record(manifest, texts, kept)


def summarize(bundle: Bundle, manifest: Dict[str, Any], engine: Optional[Path], engine_message: str,
              warnings: List[str]) -> Dict[str, Any]:
    """The build's summary: what `edge-sdk build` prints as a table, or as JSON with --json."""
    sizes = bundle_mod.file_sizes(bundle)
    accuracy = manifest["accuracy"]
    variants = {}
    for v in manifest["variants"]:
        a = accuracy.get(v, {})
        variants[v] = {
            "file": VARIANT_FILES[v],
            "bytes": sizes.get(VARIANT_FILES[v]),
            "f1_vs_fp32": a.get("f1_vs_fp32"),
            "cosine": a.get("cosine"),
            "max_abs_err": a.get("max_abs_err"),
        }
    return {
        "bundle": str(bundle.root),
        "hash": bundle.hash,
        "target": manifest["target"]["name"],
        "precision": manifest["precision"],
        "variants": variants,
        "gate": accuracy.get("int8", {}).get("gate"),
        "fp32_layers": (manifest.get("int8") or {}).get("fp32_layers", []),
        "fallback_layers": (manifest.get("int8") or {}).get("fallback_layers", {}),
        "int8_flop_share": (manifest.get("int8") or {}).get("int8_flop_share"),
        "split": (manifest.get("calibration") or {}).get("split"),
        "preprocess_probe": manifest.get("preprocess_probe"),
        "provenance": manifest.get("provenance"),
        "graph": manifest["graph"],
        "batch": manifest.get("batch"),
        "engine": str(engine) if engine else None,
        "engine_message": engine_message,
        "warnings": warnings,
    }


def _subset(tensors: Sequence[np.ndarray], k: int) -> List[np.ndarray]:
    """`k` of `tensors` spread evenly over them (all when there are no more)."""
    if len(tensors) <= k:
        return list(tensors)
    idx = np.linspace(0, len(tensors) - 1, k).round().astype(int)
    return [tensors[i] for i in idx]


def _output_entry(vi: Any) -> Dict[str, Any]:
    from onnx import helper

    dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
    return {"name": vi.name, "shape": graph_mod.input_dims(vi), "dtype": str(np.dtype(dtype))}
