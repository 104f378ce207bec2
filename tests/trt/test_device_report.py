"""A stored device report (`<key>.device_report.json`) is checked before the runtime follows it:
every field it reads, and that the chosen row is the one marked chosen, passed the gate and is
the fastest of those that passed (a tie is the fastest too). Table tests on hand-built reports."""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List

import pytest

from edge_sdk.trt.cache import EngineKey
from edge_sdk.trt.choice import MAX_CANDIDATES, REPORT_VERSION, reason, report_errors, summary

KEY = EngineKey("abc123", "8.5.2.2", "7.2", "best", None)


def row(precision: str, ms: float, passed: bool, chosen: bool = False, f1: Any = 1.0) -> Dict[str, Any]:
    return {"precision": precision, "median_ms": ms, "f1_vs_fp32": f1, "min_cosine": 0.99, "passed": passed,
            "chosen": chosen, "failures": [], "engine": f"/cache/{precision}.engine"}


def report() -> Dict[str, Any]:
    return {"version": REPORT_VERSION, "key": KEY.to_dict(), "chosen": "fp16", "path": "/cache/x.device_report.json",
            "created": "2026-01-01T00:00:00+0000",
            "candidates": [row("fp16", 2.0, True, chosen=True), row("int8", 1.0, False, f1=0.5)]}


def edited(change: Callable[[Dict[str, Any]], None]) -> Dict[str, Any]:
    r = copy.deepcopy(report())
    change(r)
    return r


def _set(path: List[Any], value: Any) -> Callable[[Dict[str, Any]], None]:
    def change(r: Dict[str, Any]) -> None:
        node = r
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
    return change


def _choose(precision: str) -> Callable[[Dict[str, Any]], None]:
    def change(r: Dict[str, Any]) -> None:
        r["chosen"] = precision
        for c in r["candidates"]:
            c["chosen"] = c["precision"] == precision
    return change


@pytest.mark.parametrize("change,error", [
    (lambda r: None, None),
    (_set(["candidates"], [row("fp16", 2.0, True, chosen=True)]), None),  # one row is a table
    (_set(["candidates", 1, "median_ms"], 2.0), None),  # int8 as fast, but failed: fp16 still the fastest that passed
    (lambda r: (_set(["candidates", 1, "passed"], True)(r), _set(["candidates", 1, "median_ms"], 2.0)(r)), None),  # a tie
    (_set(["candidates", 1, "passed"], True), "fp16 is not the fastest row that passed"),
    (_set(["version"], 2), "version 2 is not 1"),
    (_set(["key"], EngineKey("abc123", "8.5.2.2", "7.2", "best", 0).to_dict()), "another bundle, TensorRT, GPU or DLA core"),
    (_set(["chosen"], "best"), "chosen 'best' is not one of fp32, fp16, int8"),
    (_set(["candidates"], []), f"candidates must be a list of 1 to {MAX_CANDIDATES} rows"),
    (_set(["candidates"], [row("fp16", 2.0, True, chosen=True)] + [row("int8", 1.0, False)] * MAX_CANDIDATES),
     f"candidates must be a list of 1 to {MAX_CANDIDATES} rows"),
    (_set(["candidates"], {"fp16": 1}), "candidates must be a list"),
    (_set(["candidates", 1], "int8"), "candidates[1] is not an object"),
    (_set(["candidates", 1, "precision"], "fp16"), "candidates[1].precision 'fp16' is unknown or repeated"),
    (_set(["candidates", 1, "median_ms"], -1), "candidates[1].median_ms is not a number"),
    (_set(["candidates", 1, "median_ms"], None), "candidates[1].median_ms is not a number"),
    (_set(["candidates", 1, "f1_vs_fp32"], "0.5"), "candidates[1].f1_vs_fp32 is not null"),
    (_set(["candidates", 1, "chosen"], None), "candidates[1].chosen is not true or false"),
    (_set(["candidates", 1, "chosen"], True), "chosen 'fp16' is not the one row marked chosen"),
    (_set(["candidates", 0, "chosen"], False), "chosen 'fp16' is not the one row marked chosen"),
    (_choose("int8"), "the int8 row says passed: false"),
])
def test_a_report_is_checked_before_it_is_followed(change, error) -> None:
    errors = report_errors(edited(change), KEY)
    if error is None:
        assert errors == []
    else:
        assert errors and any(error in e for e in errors), errors


@pytest.mark.parametrize("raw", [None, [], "report", 3])
def test_a_report_that_is_not_an_object_is_refused(raw) -> None:
    assert report_errors(raw, KEY) == ["not a JSON object"]


def test_every_row_error_is_listed() -> None:
    def change(r: Dict[str, Any]) -> None:
        r["candidates"][0]["median_ms"] = "x"
        r["candidates"][1]["passed"] = "no"
    assert report_errors(edited(change), KEY) == ["candidates[0].median_ms is not a number of milliseconds",
                                                  "candidates[1].passed is not true or false"]


def test_summary_and_reason_say_what_was_chosen_and_why() -> None:
    r = report()
    assert summary(r) == {"chosen": "fp16", "created": "2026-01-01T00:00:00+0000", "report": "/cache/x.device_report.json",
                          "table": [{"precision": "fp16", "median_ms": 2.0, "f1_vs_fp32": 1.0, "passed": True, "chosen": True},
                                    {"precision": "int8", "median_ms": 1.0, "f1_vs_fp32": 0.5, "passed": False, "chosen": False}],
                          "frame_memory": None}  # no frame memory measured in this report
    assert reason(r) == ("chosen on this device by `edge-sdk engine` (fastest engine that passes the gate: "
                         "fp16 2.0 ms, f1_vs_fp32 1.0 passed; int8 1.0 ms, f1_vs_fp32 0.5 failed)")
