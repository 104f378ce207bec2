"""edge_sdk.manifest_check's bounds, each at its edge: lists of min..max entries, names of 1 to
MAX_NAME characters, integers and numbers within their closed ranges and finite, input shapes
of [1..64, 3, 1..16384, 1..16384] holding at most 2**27 values, a scale that is never 0, output
dims, and the model's inputs compared with the manifest (a symbolic dimension matches anything)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import pytest

from edge_sdk import manifest_check as mc
from edge_sdk.errors import BundleError
from edge_sdk.preprocess import InputSpec

AT = mc.At("m.json", "field")


def ok(check: Callable[..., Any], value: Any, *args: Any, **kw: Any) -> bool:
    try:
        check(value, AT, *args, **kw)
    except BundleError as exc:
        assert "m.json: field" in str(exc) and "rebuild the bundle" in str(exc)
        return False
    return True


def test_lists_hold_min_to_max_entries() -> None:
    assert ok(mc.lst, [1, 2], 2, 3) and ok(mc.lst, [1, 2, 3], 2, 3)
    assert ok(mc.lst, []) and ok(mc.obj, {})  # without bounds: from empty
    assert not ok(mc.lst, [1], 2, 3) and not ok(mc.lst, [1, 2, 3, 4], 2, 3) and not ok(mc.lst, (1, 2), 2, 3)
    assert ok(mc.obj, {"a": 1, "b": 2}, 2) and not ok(mc.obj, {"a": 1, "b": 2, "c": 3}, 2) and not ok(mc.obj, [], 2)
    assert ok(mc.each, [1, 2], lambda v, at: mc.integer(v, at, 0, 2), 2)
    assert not ok(mc.each, [1, 3], lambda v, at: mc.integer(v, at, 0, 2), 2)
    assert not ok(mc.each, [1, 1, 1], lambda v, at: mc.integer(v, at, 0, 2), 2)


def test_names_are_one_to_max_characters() -> None:
    assert ok(mc.text, "x" * mc.MAX_NAME) and not ok(mc.text, "x" * (mc.MAX_NAME + 1))
    assert ok(mc.text, "x") and not ok(mc.text, "") and ok(mc.text, "", empty=True)
    assert not ok(mc.text, 5) and ok(mc.text, "b", ("a", "b")) and not ok(mc.text, "c", ("a", "b"))
    assert ok(mc.text, "abcd", max_len=4) and not ok(mc.text, "abcde", max_len=4)


@pytest.mark.parametrize("value,expected", [(0, True), (10, True), (-1, False), (11, False), (True, False), (5.0, False)])
def test_integers_are_within_their_closed_range(value: Any, expected: bool) -> None:
    assert ok(mc.integer, value, 0, 10) is expected


@pytest.mark.parametrize("value,expected", [(0.0, True), (1.0, True), (-1e-9, False), (1.000001, False), (1, True),
                                            (float("nan"), False), (float("inf"), False), (True, False), ("0.5", False)])
def test_fractions_are_finite_and_within_zero_to_one(value: Any, expected: bool) -> None:
    assert ok(mc.fraction, value) is expected


def test_numbers_default_to_plus_minus_max_value() -> None:
    assert ok(mc.number, mc.MAX_VALUE) and ok(mc.number, -mc.MAX_VALUE)
    assert not ok(mc.number, mc.MAX_VALUE * 1.000001) and not ok(mc.number, -mc.MAX_VALUE * 1.000001)
    assert ok(mc.number, 1e300, 0.0, float("inf")) and not ok(mc.number, float("inf"), 0.0, float("inf"))


@pytest.mark.parametrize("shape,expected", [
    ([1, 3, 1, 1], True), ([64, 3, 8, 8], True), ([65, 3, 8, 8], False), ([0, 3, 8, 8], False),
    ([1, 3, mc.MAX_SIDE, 8], True), ([1, 3, mc.MAX_SIDE + 1, 8], False), ([1, 3, 8, mc.MAX_SIDE + 1], False),
    ([1, 1, 8, 8], False), ([1, 4, 8, 8], False), ([1, 3, 8], False), ([1, 3, 8, 8, 1], False), ([1, 3, 0, 8], False),
    ([2, 3, 4096, 5461], True),   # 134,209,536 values: the largest 2 x 3 x 4096 x W within 2**27
    ([2, 3, 4096, 5462], False),  # 134,234,112 values: beyond 2**27 = 134,217,728
    ([8, 3, 4096, 4096], False), ([1, 3, 1.0, 8], False), ([True, 3, 8, 8], False),
])
def test_input_shapes(shape: Any, expected: bool) -> None:
    assert ok(mc._shape, shape) is expected


@pytest.mark.parametrize("value,nonzero,expected", [
    ([1, 2, 3], True, True), ([1, 0, 3], True, False), ([1, 0, 3], False, True), (0.5, True, True), (0, True, False),
    ([1, 2], True, False), ([1, 2, 3, 4], True, False), ([mc.MAX_VALUE, 1, 1], True, True), ([2e6, 1, 1], True, False),
    ([True, 1, 1], True, False), ("1", True, False),
])
def test_per_channel_values(value: Any, nonzero: bool, expected: bool) -> None:
    assert ok(mc._per_channel(nonzero), value) is expected


@pytest.mark.parametrize("dims,expected", [
    ([1, 25200, 85], True), ([-1, "batch", None, 3], True), ([1 << 31], True), ([(1 << 31) + 1], False), ([-2], False),
    (list(range(8)), True), (list(range(9)), False), (["x" * 256], True), (["x" * 257], False), ([1.5], False),
])
def test_output_dims(dims: Any, expected: bool) -> None:
    assert ok(mc._dims, dims) is expected


def test_outputs_need_names_of_their_own_and_at_most_max_outputs() -> None:
    assert ok(mc._outputs, [{"name": "a"}, {"name": "b"}])
    assert not ok(mc._outputs, [{"name": "a"}, {"name": "a"}]) and not ok(mc._outputs, [{"shape": [1]}])
    assert ok(mc._outputs, [{"name": f"o{i}"} for i in range(mc.MAX_OUTPUTS)])
    assert not ok(mc._outputs, [{"name": f"o{i}"} for i in range(mc.MAX_OUTPUTS + 1)])


def test_variants_are_known_and_listed_once() -> None:
    assert ok(mc._variants, ["fp32", "fp16", "int8"]) and ok(mc._variants, [])
    assert not ok(mc._variants, ["fp32", "fp32"]) and not ok(mc._variants, ["int4"])


def test_sha256_is_64_lowercase_hex_digits() -> None:
    assert ok(mc.sha256, "a" * 64) and not ok(mc.sha256, "a" * 63) and not ok(mc.sha256, "A" * 64)
    assert not ok(mc.sha256, "g" * 64) and not ok(mc.sha256, "a" * 65)


def bundle(shape=(1, 3, 32, 48), dtype="float32", outputs=("heat", "box")) -> Any:
    spec = InputSpec(name="images", shape=list(shape), dtype=dtype)
    return SimpleNamespace(root="b", inputs=[spec], get=lambda key, default=None:
                           [{"name": n} for n in outputs] if key == "outputs" else default)


@pytest.mark.parametrize("shape,ok_", [
    ([1, 3, 32, 48], True), (["N", 3, "H", "W"], True), ([-1, 3, 32, 48], True), ([0, 3, 32, 48], True),
    ([1, 3, 48, 32], False),  # the non-square input turned round
    ([1, 3, 32], False), ([2, 3, 32, 48], False),
])
def test_the_models_input_shape_against_the_manifest(shape: Any, ok_: bool) -> None:
    call = lambda: mc.check_model_io(bundle(), ["images"], ["box", "heat"], "engine", {"images": shape})  # noqa: E731
    if ok_:
        call()
    else:
        with pytest.raises(BundleError, match="has shape"):
            call()


def test_outputs_in_another_order_are_the_same_outputs_but_other_names_are_not() -> None:
    mc.check_model_io(bundle(), ["images"], ["box", "heat"], "engine")
    with pytest.raises(BundleError, match="has outputs"):
        mc.check_model_io(bundle(), ["images"], ["box", "heat", "extra"], "engine")
    with pytest.raises(BundleError, match="has input"):
        mc.check_model_io(bundle(), ["input"], ["box", "heat"], "engine")
    with pytest.raises(BundleError, match="is float16"):
        mc.check_model_io(bundle(), ["images"], ["box", "heat"], "engine", input_dtypes={"images": "float16"})
    mc.check_model_io(bundle(outputs=()), ["images"], ["anything"], "engine")  # a manifest without outputs


def test_errors_name_the_entry_they_are_about() -> None:
    with pytest.raises(BundleError, match=r"m.json: field\[0\] must be in 1..64, got 65"):
        mc._shape([65, 3, 8, 8], AT)
    with pytest.raises(BundleError, match=r"field\[3\] must be in 1..16384"):
        mc._shape([1, 3, 8, 0], AT)
    long_key = "k" * 200
    with pytest.raises(BundleError) as info:
        mc.mapping(mc.text, lambda v, at: mc.text(v, at, ("fp32",)))({long_key: "int4"}, AT)
    assert f"field.{'k' * 80} must be one of" in str(info.value) and "k" * 81 not in str(info.value)
    with pytest.raises(BundleError) as info:
        mc.mapping(mc.text, mc.text)({"k" * 2000: "x"}, AT)  # the key itself too long: named by its first 80
    assert f"field.{'k' * 80} must be a string of 1 to {mc.MAX_NAME}" in str(info.value) and "k" * 81 not in str(info.value)


@pytest.mark.parametrize("section,key,lo,hi", [
    ("calibration", "samples", 0, 1 << 31), ("calibration", "held_back", 0, 1 << 31),
    ("calibration", "tensors_kept", 0, 1 << 31), ("engine", "dla_core", 0, 15), ("engine", "workspace_mib", 1, 1 << 20),
    ("reference", "images", 0, 1 << 16),
])
def test_integer_fields_are_within_their_closed_ranges(section: str, key: str, lo: int, hi: int) -> None:
    check = mc.FIELDS[section]
    for value, expected in ((lo, True), (hi, True), (lo - 1, False), (hi + 1, False)):
        assert ok(check, {key: value}) is expected, (key, value)


@pytest.mark.parametrize("section,key,lo,hi", [
    ("calibration", "percentile", 0.0, 100.0), ("int8", "int8_flop_share", 0.0, 1.0), ("reference", "min_f1", 0.0, 1.0),
])
def test_number_fields_are_within_their_closed_ranges(section: str, key: str, lo: float, hi: float) -> None:
    check = mc.FIELDS[section]
    for value, expected in ((lo, True), (hi, True), (lo - 1e-6, False), (hi + 1e-6, False), (None, True)):
        assert ok(check, {key: value}) is expected, (key, value)


@pytest.mark.parametrize("entry,expected", [
    ({"f1_vs_fp32": 1.0, "cosine": -1.0, "max_abs_err": 1e300}, True), ({"cosine": -1.01}, False),
    ({"max_abs_err": -0.1}, False), ({"gate": {"metric": "cosine", "value": -1.0, "threshold": 1.0, "passed": True}}, True),
    ({"gate": {"metric": "cosine", "value": 1.01, "threshold": 1.0, "passed": True}}, False),
    ({"gate": {"metric": "mse", "passed": True}}, False), ({"gate": {"passed": 1}}, False),
])
def test_accuracy_entries(entry: Any, expected: bool) -> None:
    assert ok(mc.FIELDS["accuracy"], {"int8": entry}) is expected


def test_a_model_batch_of_one_does_not_match_a_manifest_batch_of_two() -> None:
    with pytest.raises(BundleError, match="has shape"):
        mc.check_model_io(bundle(shape=(2, 3, 32, 48)), ["images"], ["box", "heat"], "engine", {"images": [1, 3, 32, 48]})
    mc.check_model_io(bundle(shape=(2, 3, 32, 48)), ["images"], ["box", "heat"], "engine", {"images": [-1, 3, 32, 48]})


def test_calibration_tensor_dtypes_list_at_most_three() -> None:
    check = mc.FIELDS["calibration"]
    assert ok(check, {"tensors": {"dtypes": ["uint8", "float16", "float32"]}})
    assert not ok(check, {"tensors": {"dtypes": ["uint8", "float16", "float32", "uint8"]}})
    assert not ok(check, {"tensors": {"dtypes": ["int4"]}})


# -- bounds as the README states them ------------------------------------------------------------------
def readme_bound(pattern: str) -> int:
    import re
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    return int(re.search(pattern, text).group(1))


def test_inputs_and_outputs_are_bounded_at_the_readmes_counts() -> None:
    """README, *Every manifest field is checked*: "the inputs (at most 16)", "output names (distinct, at most 64)"."""
    inputs, outputs = readme_bound(r"the inputs \(at most (\d+)\)"), readme_bound(r"output names \(distinct, at most (\d+)\)")
    entry = {"shape": [1, 3, 32, 48], "dtype": "float32"}
    assert ok(mc._inputs, [dict(entry, name=f"i{k}") for k in range(inputs)])
    assert not ok(mc._inputs, [dict(entry, name=f"i{k}") for k in range(inputs + 1)])
    assert ok(mc._outputs, [{"name": f"o{k}"} for k in range(outputs)])
    assert not ok(mc._outputs, [{"name": f"o{k}"} for k in range(outputs + 1)])


@pytest.mark.parametrize("batch,expected", [
    ({"min": 1, "opt": 1, "max": 1}, True), ({"min": 1, "opt": 8, "max": 64}, True),
    ({"min": 0, "opt": 1, "max": 1}, False), ({"min": 1, "opt": 1, "max": 65}, False),
    ({"min": 2, "opt": 1, "max": 4}, False), ({"min": 1, "opt": 5, "max": 4}, False),
])
def test_the_batch_range_is_the_readmes(batch: Any, expected: bool) -> None:
    """README: "the batch range (1 <= min <= opt <= max <= 64)"."""
    assert readme_bound(r"the batch range \(1 <= min <= opt <= max <= (\d+)\)") == 64
    assert ok(mc.FIELDS["batch"], batch) is expected


class Described:
    """A backend whose describe() gives its engine's batch range, with or without a bundle that has a root."""

    def __init__(self, batch: Any, bundle: Any = None) -> None:
        self.batch, self.bundle = batch, bundle

    def describe(self) -> Any:
        return {"batch": self.batch}


def test_the_engine_fix_names_the_bundle_folder_when_the_backend_knows_it() -> None:
    known = Described({"max": 4, "dynamic": True}, SimpleNamespace(root="/models/cf"))
    unknown = Described({"max": 4, "dynamic": True}, SimpleNamespace())  # a bundle object without a folder
    assert mc.batch_limit(known) == (4, "rebuild the engine with `edge-sdk engine /models/cf --max-batch N`")
    assert mc.batch_limit(unknown) == (4, "rebuild the engine with `edge-sdk engine BUNDLE --max-batch N`")
    assert mc.batch_limit(Described({"max": 4, "dynamic": True}))[1].endswith("engine BUNDLE --max-batch N`")


@pytest.mark.parametrize("wanted,accepted", [(1, True), (4, True), (0, False), (-1, False), (True, False),
                                             (2.0, False), ("2", False), (None, False)])
def test_check_batch_takes_whole_numbers_from_one_to_the_limit(wanted: Any, accepted: bool) -> None:
    from edge_sdk.errors import ConfigError

    if accepted:
        assert mc.check_batch({"max": 4}, wanted) == wanted
    else:
        with pytest.raises(ConfigError, match="the largest batch must be a whole number of inputs >= 1"):
            mc.check_batch({"max": 4}, wanted)
    with pytest.raises(ConfigError, match=r"batches up to 5 inputs, but .* takes at most 4: .*--max-batch 5"):
        mc.check_batch({"max": 4}, 5)


@pytest.mark.parametrize("key,longest", [("name", 1024), ("sm", 16), ("tensorrt", 64), ("quantization", 1024)])
def test_target_texts_are_one_to_their_longest(key: str, longest: int) -> None:
    base = {"name": "xavier-nx"}
    assert ok(mc.FIELDS["target"], dict(base, **{key: "x" * longest}))
    assert not ok(mc.FIELDS["target"], dict(base, **{key: "x" * (longest + 1)}))


class FixedInput:
    """An ONNX Runtime-like backend: no batch in describe(), its model's input shape."""

    input_names = ["images"]

    def __init__(self, shape: Any) -> None:
        self.shape = shape

    def input_shape(self, name: str) -> Any:
        assert name == "images"
        return self.shape


@pytest.mark.parametrize("shape,limit", [([2, 3, 32, 48], 2), ([1, 3, 64, 64], 1), (["batch", 3, 32, 48], None),
                                         ([None, 3, 32, 48], None), ([], None)])
def test_a_backends_fixed_first_dimension_is_its_batch_limit(shape: Any, limit: Any) -> None:
    got, fix = mc.batch_limit(FixedInput(shape))
    assert got == limit
    assert ("fixed batch" in fix) is (limit is not None)


class NamesOnly:
    input_names = ["images"]


class ShapeOnly:
    input_names: Any = []

    def input_shape(self, name: str) -> Any:
        raise AssertionError("no input to ask about")


@pytest.mark.parametrize("source", [NamesOnly(), ShapeOnly(), object()])
def test_a_backend_that_tells_no_input_shape_has_no_batch_limit(source: Any) -> None:
    assert mc.batch_limit(source) == (None, "")


@pytest.mark.parametrize("manifest", [{"decoder": {"type": "centerface"}}, {"inputs": [{"name": "x", "shape": [1, 3, 32, 32]}]},
                                      {"decoder": {}, "inputs": [{"name": "x", "shape": [1, 3, 32, 32]}]}, {}])
def test_the_decoder_is_fitted_only_when_the_manifest_has_both_a_decoder_and_inputs(manifest: Any) -> None:
    mc._decoder_fits(manifest, AT)  # nothing to fit: no error, whatever the other field holds
