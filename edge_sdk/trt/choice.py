"""The on-device precision choice as stored: `<key>.device_report.json` beside the cached engines
(EngineCache.device_report_path, the key's precision being "best"), written by
:mod:`edge_sdk.precision_choice` (`edge-sdk engine --precision best`) and read here by the
runtime: precision `auto` on the TensorRT backend runs the engine it names (:func:`engine_precision`
reads it and the cache for the policy, edge_sdk.precision.choose_engine_precision), and the
backend's describe() reports it.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from edge_sdk.manifest import Bundle
from edge_sdk.precision import AUTO, BEST, PRECISIONS, EngineChoice, Measured, choose_engine_precision, fastest_passing
from edge_sdk.trt.cache import EngineCache, EngineKey

REPORT_VERSION = 1
MAX_CANDIDATES = 8  # rows a report may hold (fp16, int8, fp32 today)
log = logging.getLogger(__name__)


def report_key(bundle: Bundle, tensorrt: str, sm: str, dla_core: Optional[int]) -> EngineKey:
    """The key whose device_report_path holds the choice for this bundle, TensorRT, GPU and DLA core."""
    return EngineKey(bundle.hash, tensorrt, sm, BEST, dla_core)


def _number(value: Any, low: float, high: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high


def report_errors(report: Any, key: EngineKey) -> List[str]:
    """What makes a stored report unusable for `key` ([] for a usable one). A report is a file on
    disk: every field the runtime reads is checked, and the chosen precision must be a row that
    passed the gate and is the fastest of those that did (what `edge-sdk engine` chooses)."""
    if not isinstance(report, dict):
        return ["not a JSON object"]
    errors = []
    if report.get("version") != REPORT_VERSION:
        errors.append(f"version {report.get('version')!r} is not {REPORT_VERSION}")
    if report.get("key") != key.to_dict():
        errors.append("it describes another bundle, TensorRT, GPU or DLA core")
    chosen = report.get("chosen")
    if chosen not in PRECISIONS:
        errors.append(f"chosen {chosen!r} is not one of {', '.join(PRECISIONS)}")
    rows = report.get("candidates")
    if not isinstance(rows, list) or not 1 <= len(rows) <= MAX_CANDIDATES:
        return errors + [f"candidates must be a list of 1 to {MAX_CANDIDATES} rows"]
    seen = set()
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            errors.append(f"candidates[{i}] is not an object")
            continue
        precision = row.get("precision")
        if precision not in PRECISIONS or precision in seen:
            errors.append(f"candidates[{i}].precision {precision!r} is unknown or repeated")
        seen.add(precision)
        if not _number(row.get("median_ms"), 0.0, 3.6e6):
            errors.append(f"candidates[{i}].median_ms is not a number of milliseconds")
        f1 = row.get("f1_vs_fp32")
        if f1 is not None and not _number(f1, 0.0, 1.0):
            errors.append(f"candidates[{i}].f1_vs_fp32 is not null or a number in [0, 1]")
        for flag in ("passed", "chosen"):
            if not isinstance(row.get(flag), bool):
                errors.append(f"candidates[{i}].{flag} is not true or false")
    if errors:
        return errors
    marked = [r for r in rows if r["chosen"]]
    if len(marked) != 1 or marked[0]["precision"] != chosen:
        return [f"chosen {chosen!r} is not the one row marked chosen"]
    if marked[0]["passed"] is not True:
        return [f"the {chosen} row says passed: false (it failed the accuracy gate)"]
    fastest = fastest_passing(rows, passed=lambda r: r["passed"], median_ms=lambda r: r["median_ms"])
    if fastest is None or marked[0]["median_ms"] > fastest["median_ms"]:
        return [f"{chosen} is not the fastest row that passed"]
    return []


def read_device_report(cache: EngineCache, key: EngineKey) -> Optional[Dict[str, Any]]:
    """The stored choice for `key` (precision "best"), or None when there is none or it is not
    usable (report_errors; said in a warning). EngineCacheError when the cache folder is not trusted."""
    path = cache.device_report_path(key)
    raw = cache.read_json(path)  # no link followed, bounded, untrusted JSON
    if raw is None:
        return None
    errors = report_errors(raw, key)
    if errors:
        log.warning("ignoring the device report %s: %s", path, "; ".join(errors[:3]))
        return None
    return raw


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


def engine_precision(bundle: Bundle, precision: str, tensorrt: str, sm: str, dla_core: Optional[int],
                     cache_dir: Any = None) -> EngineChoice:
    """The native TensorRT backend's choice for the runtime's `precision` on this TensorRT and GPU:
    the precision policy (edge_sdk.precision.choose_engine_precision) given what is stored here,
    the device report (its choice for `auto`; its frame memory measurement for any precision)
    and which engines the cache holds."""
    cache = EngineCache(cache_dir)
    report = read_device_report(cache, report_key(bundle, tensorrt, sm, dla_core))
    memory = frame_memory(report) if report is not None else None
    if precision != AUTO:
        return choose_engine_precision(precision, bundle)._replace(frame_memory=memory)
    measured = Measured(report["chosen"], reason(report), summary(report)) if report is not None else None

    def cached(engine: str) -> bool:
        return cache.get(EngineKey(bundle.hash, tensorrt, sm, engine, dla_core)) is not None

    return choose_engine_precision(precision, bundle, measured, cached)._replace(frame_memory=memory)
