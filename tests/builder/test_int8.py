"""The INT8 step's rules: where the layers kept out of INT8 run, the INT8 share of the FLOPs, the
minimum image count of a per-tensor search, and what a failed gate says (exit 6)."""
from __future__ import annotations

import pytest

from edge_sdk.builder import int8
from edge_sdk.builder.evaluate import GateResult, enforce
from edge_sdk.errors import AccuracyGateError, CalibrationError


@pytest.mark.parametrize("precision, kept_as", [("best", "fp16"), ("int8", "fp32")])
def test_fallback_layers_run_in_fp16_only_where_the_engine_has_fp16(precision: str, kept_as: str) -> None:
    assert int8.fallback_precision(precision) == kept_as


def test_int8_flop_share_counts_each_excluded_layer_once() -> None:
    flops = {"a": 600, "b": 300, "c": 100}
    assert int8.int8_flop_share(flops, []) == 1.0
    assert int8.int8_flop_share(flops, ["c", "c"]) == pytest.approx(0.9)
    assert int8.int8_flop_share(flops, ["a", "b", "c"]) == 0.0
    table = int8.layer_table(flops, {"a": 0.5}, ["c"], "fp16")
    assert table == {"a": {"precision": "int8", "flops": 600, "sensitivity": 0.5},
                     "b": {"precision": "int8", "flops": 300, "sensitivity": None},
                     "c": {"precision": "fp16", "flops": 100, "sensitivity": None}}


def test_a_per_tensor_search_on_too_few_images_names_the_minimum() -> None:
    need = int8.MIN_SEARCH_IMAGES["mse"]
    int8.check_calibration_count("mse", need)
    int8.check_calibration_count("minmax", 1)
    with pytest.raises(CalibrationError, match=f"needs at least {need} calibration images; got {need - 1}"):
        int8.check_calibration_count("mse", need - 1)


def test_a_failed_gate_exits_6_with_the_best_numbers_and_the_layers_holding_it_back() -> None:
    result = GateResult(False, "f1_vs_fp32", 0.9512, 0.97)
    with pytest.raises(AccuracyGateError) as info:
        enforce(result, "int8", allow_loss=False, fallback_tried=True, held_back=["Conv_533", "Conv_363"], share=0.874)
    message = str(info.value)
    assert info.value.exit_code == 6
    assert "f1_vs_fp32 = 0.9512 with 87.4% of the FLOPs in INT8 is below the gate 0.97" in message
    assert "layers holding it back: Conv_533, Conv_363" in message
    enforce(result, "int8", allow_loss=True, fallback_tried=True)  # kept with --allow-accuracy-loss
    assert int8.holding_back({"x": 0.1, "y": 0.9, "z": 0.5}, [], top=2) == ["y", "z"]
    assert int8.holding_back({}, [f"l{i}" for i in range(7)], top=5)[-1] == "… 2 more"
