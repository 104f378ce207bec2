"""The layer report: what the engine really runs (precision and device per layer, pinned
layers honoured or not, tensors left out of INT8, TensorRT's build warnings), read from the
engine inspector."""
from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from edge_sdk.trt import log as trt_log


_MISSING_SCALE = re.compile(r"Missing scale and zero-point for tensor (.+?), expect fall back", re.IGNORECASE)


def _precision_of(fmt: str) -> str:
    """TensorRT's 'Format/Datatype' text -> INT8 | FP16 | FP32 | INT32 | other (as TensorRT
    Engine Explorer reads it: tools/experimental/trt-engine-explorer/trex/activations.py)."""
    low = fmt.lower()
    if "int8" in low:
        return "INT8"
    if "fp16" in low or "half" in low:
        return "FP16"
    if "fp32" in low or "float" in low:
        return "FP32"
    if "int32" in low:
        return "INT32"
    return "other"


def inspect_engine(trt: Any, data: bytes, dla_core: Optional[int] = None) -> Tuple[Optional[List[Any]], str]:
    """(layers of the engine inspector's JSON, "") or (None, why not). TensorRT >= 8.2:
    `engine.create_engine_inspector().get_engine_information(LayerInformationFormat.JSON)`.
    An engine built for DLA core `dla_core` is deserialized with `Runtime.DLA_core` set to it
    (a new runtime's is -1, unset: TensorRT does not deserialize a DLA engine then)."""
    runtime_cls = getattr(trt, "Runtime", None)
    fmt = getattr(getattr(trt, "LayerInformationFormat", None), "JSON", None)
    if runtime_cls is None or fmt is None:
        return None, f"TensorRT {getattr(trt, '__version__', '?')} has no engine inspector (TensorRT >= 8.2 has)"
    try:
        with trt_log.listen() as tail:
            runtime = trt_log.create(trt, "Runtime", tail)
            if dla_core is not None:
                runtime.DLA_core = int(dla_core)
            engine = runtime.deserialize_cuda_engine(data)
        if engine is None or not hasattr(engine, "create_engine_inspector"):
            return None, "the engine did not deserialize for inspection" + trt_log.log_tail(tail, 2)
        text = engine.create_engine_inspector().get_engine_information(fmt)
    except Exception as exc:  # the report is information: a failed inspection is said in it, the engine stands
        return None, f"the engine inspector failed: {type(exc).__name__}: {exc}"
    try:
        doc = json.loads(text)
    except (TypeError, ValueError):
        return None, "the engine inspector's answer is not JSON"
    layers = doc.get("Layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list):
        return None, "the engine inspector lists no layers"
    return layers, ""


def summarize_layers(
    layers: Optional[List[Any]],
    why: str,
    warnings: Sequence[str],
    dla: bool,
    pinned: Mapping[str, str],
    dla_core: Optional[int] = None,
) -> Dict[str, Any]:
    """The layer report: how many layers run INT8 / FP16 / FP32, on the DLA or the GPU; which
    pinned layers got their precision; tensors the calibration cache had no scale for; the
    warnings TensorRT printed during the build.

    A layer's precision is that of its first output. Reformat and no-op layers are counted
    apart. With `dla`, a foreign node (`{ForeignNode[...]}`, or a layer type naming the DLA) is
    a DLA subgraph: it counts as one layer on the DLA.
    """
    missing: List[str] = []
    for message in warnings:
        m = _MISSING_SCALE.search(message)
        if m and m.group(1) not in missing:
            missing.append(m.group(1))
    report: Dict[str, Any] = {
        "detailed": False,
        "precisions": {"INT8": 0, "FP16": 0, "FP32": 0, "INT32": 0, "other": 0},
        "devices": {"GPU": 0, "DLA": 0},
        "reformats": 0,
        "layers": [],
        "pinned": {"requested": dict(pinned), "honoured": [], "not_honoured": {}, "not_found": []},
        "missing_scales": missing,
        "warnings": list(dict.fromkeys(warnings)),
        "note": why or None,
    }
    if dla:
        report["dla"] = {"core": dla_core, "subgraphs": 0, "gpu_layers": 0}
    if layers is None:
        report["pinned"]["not_found"] = sorted(pinned)
        return report
    report["detailed"] = bool(layers) and all(isinstance(l, dict) for l in layers)
    if not report["detailed"]:
        report["note"] = "the engine has layer names only (built without ProfilingVerbosity.DETAILED): precisions unknown"
        report["layers"] = [{"name": str(l if isinstance(l, str) else l.get("Name"))} for l in layers]
        report["pinned"]["not_found"] = sorted(pinned)
        return report
    found: Dict[str, str] = {}
    for layer in layers:
        name = str(layer.get("Name", ""))
        kind = str(layer.get("LayerType", ""))
        outputs = layer.get("Outputs") or layer.get("Inputs") or []
        fmt = str(outputs[0].get("Format/Datatype", "")) if outputs and isinstance(outputs[0], dict) else ""
        precision = _precision_of(fmt)
        on_dla = dla and (name.startswith("{ForeignNode") or "dla" in kind.lower())
        if kind.lower() in ("reformat", "noop", "no-op"):
            report["reformats"] += 1
            continue
        report["precisions"][precision] += 1
        report["devices"]["DLA" if on_dla else "GPU"] += 1
        report["layers"].append({"name": name, "type": kind, "precision": precision, "device": "DLA" if on_dla else "GPU"})
        for part in name.split(" + "):
            found.setdefault(part.strip(), precision)
    if dla:
        report["dla"].update(subgraphs=report["devices"]["DLA"], gpu_layers=report["devices"]["GPU"])
    for name, want in sorted(pinned.items()):
        got = found.get(name)
        if got is None:
            report["pinned"]["not_found"].append(name)
        elif got == want.upper():
            report["pinned"]["honoured"].append(name)
        else:
            report["pinned"]["not_honoured"][name] = got
    return report


def report_lines(report: Dict[str, Any]) -> List[str]:
    """The layer report as short lines for a terminal (`edge-sdk engine`)."""
    lines: List[str] = []
    if report.get("detailed"):
        p, d = report["precisions"], report["devices"]
        counts = ", ".join(f"{p[k]} {k}" for k in ("INT8", "FP16", "FP32") if p.get(k)) or "none"
        where = f"GPU {d['GPU']}" + (f", DLA {d['DLA']} (subgraphs)" if d.get("DLA") else "")
        lines.append(f"layers: {counts} ({where}; {report.get('reformats', 0)} reformat(s))")
    elif report.get("note"):
        lines.append(f"layers: {report['note']}")
    dla = report.get("dla")
    if dla and report.get("detailed") and not dla["subgraphs"]:
        lines.append(f"DLA core {dla['core']}: no layer runs on it; all {dla['gpu_layers']} run on the GPU")
    pinned = report.get("pinned") or {}
    if pinned.get("requested"):
        bad = pinned.get("not_honoured") or {}
        lines.append(
            f"pinned layers: {len(pinned.get('honoured', []))} of {len(pinned['requested'])} run in the precision asked"
            + (": not honoured " + ", ".join(f"{k} (ran {v})" for k, v in list(bad.items())[:8]) if bad else "")
            + (f"; {len(pinned.get('not_found', []))} not found in the engine (fused)" if pinned.get("not_found") else "")
        )
    return lines


def report_warnings(report: Dict[str, Any]) -> List[str]:
    """What the user must hear: tensors left out of INT8, and TensorRT's build warnings."""
    out: List[str] = []
    missing = report.get("missing_scales") or []
    if missing:
        out.append(
            f"{len(missing)} tensor(s) have no scale in the calibration cache, so TensorRT left their layers out of INT8: "
            + ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
            + " (run `edge-sdk engine BUNDLE --recalibrate` to calibrate every tensor on the device)"
        )
    dla = report.get("dla")
    if dla and report.get("detailed") and not dla["subgraphs"]:
        out.append(
            f"no layer runs on DLA core {dla['core']}: TensorRT moved all {dla['gpu_layers']} to the GPU (GPU fallback); "
            "check the build warnings for why, or leave --dla-core out"
        )
    others = [w for w in report.get("warnings") or [] if not _MISSING_SCALE.search(w)]
    if others:
        out.append(f"TensorRT printed {len(others)} warning(s) during the build: " + " | ".join(others[:5])
                   + (" ..." if len(others) > 5 else ""))
    return out
