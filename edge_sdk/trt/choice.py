"""The on-device precision choice as stored: `<key>.device_report.json` beside the cached engines
(EngineCache.device_report_path, the key's precision being "best"), written by
:mod:`edge_sdk.precision_choice` (`edge-sdk engine --precision best`) and read here by the
runtime: precision `auto` on the TensorRT backend runs the engine it names
(edge_sdk.runtime.backends.tensorrt.engine_precision), and the backend's describe() reports it.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from edge_sdk.manifest import Bundle
from edge_sdk.precision import BEST, PRECISIONS
from edge_sdk.trt.cache import EngineCache, EngineKey

REPORT_VERSION = 1


def report_key(bundle: Bundle, tensorrt: str, sm: str, dla_core: Optional[int]) -> EngineKey:
    """The key whose device_report_path holds the choice for this bundle, TensorRT, GPU and DLA core."""
    return EngineKey(bundle.hash, tensorrt, sm, BEST, dla_core)


def read_device_report(cache: EngineCache, key: EngineKey) -> Optional[Dict[str, Any]]:
    """The stored choice for `key` (precision "best"), or None when there is none or it does not
    describe this key (a report is a file on disk: its fields are checked, not trusted)."""
    from edge_sdk.validate import UntrustedInput, loads_untrusted

    path = cache.device_report_path(key)
    try:
        with open(path, "rb") as f:
            report = loads_untrusted(f.read(1 << 20), 1 << 20, what=str(path))
    except (OSError, UntrustedInput):
        return None
    if not isinstance(report, dict) or report.get("key") != key.to_dict():
        return None
    chosen = report.get("chosen")
    rows = report.get("candidates")
    if chosen not in PRECISIONS or not isinstance(rows, list):
        return None
    if not any(isinstance(r, dict) and r.get("precision") == chosen and r.get("chosen") is True for r in rows):
        return None
    return report


def summary(report: Dict[str, Any]) -> Dict[str, Any]:
    """What the backend's describe() (and the daemon's status) says of a stored choice."""
    rows = [r for r in report.get("candidates", []) if isinstance(r, dict)]
    return {
        "chosen": report.get("chosen"),
        "created": report.get("created"),
        "report": report.get("path"),
        "table": [{k: r.get(k) for k in ("precision", "median_ms", "f1_vs_fp32", "passed", "chosen")} for r in rows],
        "frame_memory": frame_memory(report),
    }


FRAME_MEMORY_KINDS = ("mapped", "pinned")


def frame_memory(report: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The frame memory measured on the device (edge_sdk.cuda.measure), checked: {"chosen":
    "mapped" | "pinned", "gpu_ms": {path: ms}}, or None when absent or malformed (the runtime
    then keeps its documented default)."""
    value = report.get("frame_memory")
    if not isinstance(value, dict) or value.get("chosen") not in FRAME_MEMORY_KINDS:
        return None
    times = value.get("gpu_ms")
    if not isinstance(times, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            for k, v in times.items()) or value["chosen"] not in times:
        return None
    return {"chosen": value["chosen"], "gpu_ms": dict(times), "frame": str(value.get("frame", "")),
            "input": str(value.get("input", ""))}


def reason(report: Dict[str, Any]) -> str:
    """precision_reason for a variant picked from a device report."""
    parts = []
    for r in report.get("candidates", []):
        if isinstance(r, dict):
            f1 = r.get("f1_vs_fp32")
            verdict = "passed" if r.get("passed") else "failed"
            parts.append(f"{r.get('precision')} {r.get('median_ms')} ms, f1_vs_fp32 {f1} {verdict}")
    return "chosen on this device by `edge-sdk engine` (fastest engine that passes the gate: " + "; ".join(parts) + ")"
