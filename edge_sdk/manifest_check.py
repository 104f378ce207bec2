"""Every field of a bundle manifest checked when the bundle loads, before anything uses it.

    check_fields(manifest, origin)     # BundleError naming the field and the file, or nothing

One entry per top-level field in FIELDS (and per input key in INPUT_FIELDS): a small function
`check(value, at)` that raises through `at.fail(...)`. A field the builder adds gets its entry
here; a field not listed is kept but never read by the runtime. Checks cover types, ranges and
sizes (a huge shape or a pad value of 300 fails here, not inside a frame loop), and consistency
between fields: the decoder is built for the input (so its thresholds and keys are checked by the
decoder's own code), its output names are outputs the manifest lists, the calibration's tensors
have the input's channels. The files themselves (sha256, sizes) are edge_sdk.manifest's; the
model's own inputs and outputs are compared with the manifest when a backend opens it
(:func:`check_model_io`).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from edge_sdk.errors import BundleError, ConfigError, EdgeSdkError
from edge_sdk.precision import BUILD_PRECISIONS, PRECISIONS, RUNTIME_PRECISIONS

MAX_NAME = 1024  # characters in a tensor, layer or model name
MAX_LIST = 100_000  # entries in a list or object of the manifest (layers of a large model: a few thousand)
MAX_SIDE = 16384  # network input height / width
MAX_BATCH = 64
MAX_INPUT_ELEMENTS = 1 << 27  # batch * 3 * height * width: 512 MiB of float32
MAX_OUTPUTS = 64
MAX_VALUE = 1e6  # |mean|, |scale|
PIN_PRECISIONS = ("fp16", "fp32")
LAYER_PRECISIONS = PRECISIONS  # what a layer runs in
CALIB_DTYPES = ("uint8", "float16", "float32")
CALIB_ALGORITHMS = ("entropy", "percentile", "minmax")  # edge_sdk.trt.calibrator.CALIBRATORS
OUTPUT_DTYPES = ("float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool")


class At:
    """Where a value lies: the manifest file and the field's path (`inputs[0].pad_value`)."""

    def __init__(self, origin: str, path: str) -> None:
        self.origin, self.path = origin, path

    def key(self, name: str) -> "At":
        return At(self.origin, f"{self.path}.{name}")

    def item(self, index: int) -> "At":
        return At(self.origin, f"{self.path}[{index}]")

    def fail(self, what: str) -> BundleError:
        return BundleError(f"{self.origin}: {self.path} {what}; rebuild the bundle")


Check = Callable[[Any, At], None]


# -- the small checks every field is made of -------------------------------------------------------
def _shown(value: Any) -> str:
    return f"{value!r:.80}"


def obj(value: Any, at: At, max_len: int = MAX_LIST) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise at.fail(f"must be a JSON object, got {_shown(value)}")
    if len(value) > max_len:
        raise at.fail(f"has {len(value)} entries (at most {max_len})")
    return value


def lst(value: Any, at: At, min_len: int = 0, max_len: int = MAX_LIST) -> List[Any]:
    if not isinstance(value, list):
        raise at.fail(f"must be a list, got {_shown(value)}")
    if not min_len <= len(value) <= max_len:
        raise at.fail(f"has {len(value)} entries (expected {min_len} to {max_len})")
    return value


def text(value: Any, at: At, choices: Optional[Sequence[str]] = None, max_len: int = MAX_NAME, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise at.fail(f"must be a string, got {_shown(value)}")
    if choices is not None and value not in choices:
        raise at.fail(f"must be one of {', '.join(map(repr, choices))}, got {_shown(value)}")
    if len(value) > max_len or (not value and not empty):
        raise at.fail(f"must be a string of 1 to {max_len} characters")
    return value


def integer(value: Any, at: At, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise at.fail(f"must be an integer, got {_shown(value)}")
    if not lo <= value <= hi:
        raise at.fail(f"must be in {lo}..{hi}, got {value}")
    return value


def number(value: Any, at: At, lo: float = -MAX_VALUE, hi: float = MAX_VALUE) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise at.fail(f"must be a number, got {_shown(value)}")
    if not (math.isfinite(value) and lo <= value <= hi):
        raise at.fail(f"must be a finite number in [{lo:g}, {hi:g}], got {_shown(value)}")
    return float(value)


def fraction(value: Any, at: At) -> float:
    return number(value, at, 0.0, 1.0)


def boolean(value: Any, at: At) -> None:
    if not isinstance(value, bool):
        raise at.fail(f"must be true or false, got {_shown(value)}")


def optional(check: Check) -> Check:
    """`check`, or nothing for null."""
    def run(value: Any, at: At) -> None:
        if value is not None:
            check(value, at)
    return run


def each(value: Any, at: At, check: Check, max_len: int = MAX_LIST) -> None:
    """A list whose every entry passes `check`."""
    for i, v in enumerate(lst(value, at, 0, max_len)):
        check(v, at.item(i))


def names(value: Any, at: At) -> None:
    each(value, at, text)


def any_object(value: Any, at: At) -> None:
    obj(value, at)


def keys(table: Mapping[str, Check]) -> Check:
    """An object whose listed keys pass their checks (keys not listed are kept, unread)."""
    def run(value: Any, at: At) -> None:
        for key, v in obj(value, at).items():
            check = table.get(key)
            if check is not None:
                check(v, at.key(key))
    return run


def mapping(key_check: Check, value_check: Check) -> Check:
    def run(value: Any, at: At) -> None:
        for key, v in obj(value, at).items():
            key_check(key, at.key(str(key)[:80]))
            value_check(v, at.key(str(key)[:80]))
    return run


def sha256(value: Any, at: At) -> None:
    if not (isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)):
        raise at.fail(f"must be a sha256 (64 lowercase hex digits), got {_shown(value)}")


# -- inputs -------------------------------------------------------------------------------------------
def _shape(value: Any, at: At) -> None:
    dims = lst(value, at, 4, 4)
    batch, channels, height, width = (integer(d, at.item(i), 1, MAX_SIDE) for i, d in enumerate(dims))
    if channels != 3:
        raise at.fail(f"must be [batch, 3, height, width], got {dims}")
    integer(batch, at.item(0), 1, MAX_BATCH)
    if batch * channels * height * width > MAX_INPUT_ELEMENTS:
        raise at.fail(f"{dims} holds more than {MAX_INPUT_ELEMENTS} values")


def _per_channel(nonzero: bool) -> Check:
    def run(value: Any, at: At) -> None:
        values = [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else lst(value, at, 3, 3)
        for i, v in enumerate(values):
            if number(v, at.item(i)) == 0.0 and nonzero:
                raise at.item(i).fail("must not be 0")
    return run


# One entry per key of an input spec (edge_sdk.preprocess.InputSpec); InputSpec.from_dict runs after.
INPUT_FIELDS: Dict[str, Check] = {
    "name": text,
    "shape": _shape,
    "dtype": lambda v, at: text(v, at, ("float32", "float16")),
    "layout": lambda v, at: text(v, at, ("NCHW",)),
    "color": lambda v, at: text(v, at, ("BGR", "RGB")),
    "mean": _per_channel(nonzero=False),
    "scale": _per_channel(nonzero=True),
    "resize": text,
    "interpolation": text,
    "pad_value": lambda v, at: integer(v, at, 0, 255),
    "placement": text,
}


def _inputs(value: Any, at: At) -> None:
    from edge_sdk.preprocess import InputSpec

    for i, entry in enumerate(lst(value, at, 1, 16)):
        where = at.item(i)
        keys(INPUT_FIELDS)(entry, where)
        for key in ("name", "shape"):
            if key not in entry:
                raise where.fail(f"has no {key}")
        try:
            InputSpec.from_dict(entry)
        except (ConfigError, TypeError, ValueError) as exc:
            raise where.fail(f"is not a valid input: {exc}") from None


# -- outputs --------------------------------------------------------------------------------------------
def _dim(value: Any, at: At) -> None:
    if value is None or isinstance(value, str):
        text(value or "?", at, max_len=256)
    else:
        integer(value, at, -1, 1 << 31)


def _dims(value: Any, at: At) -> None:
    each(value, at, _dim, 8)


OUTPUT_FIELDS: Dict[str, Check] = {
    "name": text,
    "shape": _dims,
    "dtype": lambda v, at: text(v, at, OUTPUT_DTYPES),
}


def _outputs(value: Any, at: At) -> None:
    seen = set()
    for i, entry in enumerate(lst(value, at, 0, MAX_OUTPUTS)):
        keys(OUTPUT_FIELDS)(entry, at.item(i))
        name = entry.get("name")
        if name is None or name in seen:
            raise at.item(i).fail("needs a name of its own" if name is None else f"repeats the output name {name!r}")
        seen.add(name)


# -- the rest ---------------------------------------------------------------------------------------------
def _variants(value: Any, at: At) -> None:
    listed = lst(value, at, 0, len(PRECISIONS))
    for i, v in enumerate(listed):
        text(v, at.item(i), PRECISIONS)
    if len(set(listed)) != len(listed):
        raise at.fail(f"repeats a variant: {listed}")


_GATE: Dict[str, Check] = {
    "metric": lambda v, at: text(v, at, ("f1_vs_fp32", "cosine")),
    "passed": boolean,
    "value": optional(lambda v, at: number(v, at, -1.0, 1.0)),
    "threshold": fraction,
}

_ACCURACY_ENTRY: Dict[str, Check] = {
    "f1_vs_fp32": optional(fraction),
    "precision": optional(fraction),
    "recall": optional(fraction),
    "cosine": optional(lambda v, at: number(v, at, -1.0, 1.0)),
    "max_abs_err": optional(lambda v, at: number(v, at, 0.0, math.inf)),
    "mean_abs_err": optional(lambda v, at: number(v, at, 0.0, math.inf)),
    "gate": optional(keys(_GATE)),
    "outputs": any_object,
}

_TENSORS: Dict[str, Check] = {
    "count": lambda v, at: integer(v, at, 0, MAX_LIST),
    "dtype": optional(lambda v, at: text(v, at, CALIB_DTYPES)),
    "dtypes": lambda v, at: each(v, at, lambda d, a: text(d, a, CALIB_DTYPES), 3),
    "mean": _per_channel(nonzero=False),
    "scale": _per_channel(nonzero=True),
}

_CALIBRATION: Dict[str, Check] = {
    "algorithm": lambda v, at: text(v, at, CALIB_ALGORITHMS),
    "trt_calibrator": optional(text),
    "percentile": optional(lambda v, at: number(v, at, 0.0, 100.0)),
    "samples": lambda v, at: integer(v, at, 0, 1 << 31),
    "held_back": lambda v, at: integer(v, at, 0, 1 << 31),
    "tensors_kept": lambda v, at: integer(v, at, 0, 1 << 31),
    "tensors": optional(keys(_TENSORS)),
    "split": any_object,
    "coverage": any_object,
}

_INT8: Dict[str, Check] = {
    "fp32_layers": names,
    "fallback_layers": mapping(text, lambda v, at: text(v, at, PIN_PRECISIONS)),
    "layer_precisions": mapping(text, lambda v, at: text(v, at, LAYER_PRECISIONS)),
    "int8_flop_share": optional(fraction),
}

_ENGINE: Dict[str, Check] = {
    "dla_core": optional(lambda v, at: integer(v, at, 0, 15)),
    "workspace_mib": optional(lambda v, at: integer(v, at, 1, 1 << 20)),
}

_TARGET: Dict[str, Check] = {
    "name": text,
    "sm": optional(lambda v, at: text(v, at, max_len=16)),
    "tensorrt": optional(lambda v, at: text(v, at, max_len=64)),
    "quantization": optional(text),
}

_MODEL: Dict[str, Check] = {
    "name": text,
    "source_sha256": sha256,
}

_REFERENCE: Dict[str, Check] = {
    "file": text,
    "images": lambda v, at: integer(v, at, 0, 1 << 16),
    "min_f1": optional(fraction),
}


def _batch(value: Any, at: At) -> None:
    """The batch range the variants take (edge_sdk.builder.batch): 1 <= min <= opt <= max <= MAX_BATCH."""
    entry = obj(value, at)
    low, opt, high = (integer(entry.get(k), at.key(k), 1, MAX_BATCH) for k in ("min", "opt", "max"))
    if not low <= opt <= high:
        raise at.fail(f"must satisfy min <= opt <= max, got min {low}, opt {opt}, max {high}")
    if entry.get("dim") is not None:
        text(entry["dim"], at.key("dim"))


def _decoder(value: Any, at: At) -> None:
    """Checked where it is used: built by its decoder's own code for the manifest's input."""
    obj(value, at)


# One entry per top-level field. Checks across fields run after (CROSS_CHECKS).
# -- provenance -----------------------------------------------------------------------------------------
# Where a build's input and decoder settings come from (edge_sdk.builder.presets.Provenance).
PROVENANCE_KINDS = ("metadata", "preset", "edge.toml", "flag", "graph", "default", "embedded model", "model head",
                    "--labels")


def _source(value: Any, at: At) -> None:
    if not text(value, at).startswith(PROVENANCE_KINDS):
        raise at.fail(f"must name its source ({', '.join(PROVENANCE_KINDS)}), got {_shown(value)}")


def _preset(value: Any, at: At) -> None:
    keys({"name": optional(text)})(value, at)


_PROVENANCE: Dict[str, Check] = {
    "input": mapping(text, _source),
    "decoder": mapping(text, _source),
    "preset": _preset,
}


FIELDS: Dict[str, Check] = {
    "model": keys(_MODEL),
    "target": keys(_TARGET),
    "inputs": _inputs,
    "outputs": _outputs,
    "decoder": optional(_decoder),
    "requested_precision": lambda v, at: text(v, at, tuple(dict.fromkeys(BUILD_PRECISIONS + RUNTIME_PRECISIONS))),
    "variants": _variants,
    "precision": lambda v, at: text(v, at, BUILD_PRECISIONS),  # a variant, or "best" (every one)
    "accuracy": mapping(text, keys(_ACCURACY_ENTRY)),
    "reference": keys(_REFERENCE),
    "calibration": keys(_CALIBRATION),
    "int8": keys(_INT8),
    "engine": keys(_ENGINE),
    "batch": _batch,
    "provenance": keys(_PROVENANCE),
    "graph": any_object,
    "preprocess_probe": any_object,
    "builder": any_object,
}


def _decoder_fits(manifest: Dict[str, Any], at: At) -> None:
    """The decoder, built for the first input by its own code; its output names among the outputs."""
    decoder, inputs = manifest.get("decoder"), manifest.get("inputs")
    if not decoder or not inputs:
        return
    from edge_sdk.decoders import make_decoder
    from edge_sdk.preprocess import InputSpec

    where = at.key("decoder")
    try:
        make_decoder(decoder, InputSpec.from_dict(inputs[0]))
    except (EdgeSdkError, TypeError, ValueError, OverflowError, KeyError) as exc:
        raise where.fail(f"is refused by its decoder: {exc}") from None
    outputs = [o["name"] for o in manifest.get("outputs") or []]
    wanted = decoder.get("output_names")
    missing = [n for n in wanted or [] if n not in outputs]
    if outputs and missing:
        raise where.key("output_names").fail(f"names {missing}, which are not among the outputs {outputs}")


def _calibration_fits(manifest: Dict[str, Any], at: At) -> None:
    tensors = (manifest.get("calibration") or {}).get("tensors") or {}
    dtype, dtypes = tensors.get("dtype"), tensors.get("dtypes")
    if dtype is not None and dtypes is not None and dtype not in dtypes:
        raise at.key("calibration.tensors.dtype").fail(f"{dtype!r} is not among dtypes {dtypes}")


def _precision_fits(manifest: Dict[str, Any], at: At) -> None:
    variants, precision = manifest.get("variants"), manifest.get("precision")
    if variants is not None and precision is not None and precision not in variants:
        raise at.key("precision").fail(f"{precision!r} is not among the variants {variants}")


def _has_inputs(manifest: Dict[str, Any], at: At) -> None:
    """Every bundle describes its network input: without it no preprocessor can be built."""
    if manifest.get("inputs") is None:
        raise at.key("inputs").fail("is missing: a bundle names its network input(s)")


CROSS_CHECKS: List[Callable[[Dict[str, Any], At], None]] = [_has_inputs, _decoder_fits, _calibration_fits]


def check_fields(manifest: Dict[str, Any], origin: str) -> None:
    """Every field in FIELDS that the manifest has, then the checks across fields. Null counts as
    absent for a top-level field. BundleError naming the field and `origin` otherwise."""
    root = At(origin, "manifest")
    for key, check in FIELDS.items():
        value = manifest.get(key)
        if value is not None:
            check(value, At(origin, key))
    for cross in CROSS_CHECKS:
        cross(manifest, root)


def check_model_io(bundle: Any, input_names: Sequence[str], output_names: Sequence[str], where: str,
                   input_shapes: Optional[Mapping[str, Sequence[Any]]] = None,
                   input_dtypes: Optional[Mapping[str, Any]] = None) -> None:
    """The model a backend opened against the manifest: the same input names (and, where the
    backend tells them, shapes — a symbolic dimension matches anything — and element types)
    and, where the manifest lists outputs, the same output names. BundleError naming both
    sides otherwise."""
    manifest = f"the manifest of {bundle.root}"
    fix = "; the model is not the one this manifest describes: rebuild the bundle"
    specs = bundle.inputs
    listed = [s.name for s in specs]
    if list(input_names) != listed:
        raise BundleError(f"{where} has input(s) {list(input_names)}, {manifest} lists {listed}{fix}")
    for spec in specs:
        shape = list((input_shapes or {}).get(spec.name) or [])
        if shape and (len(shape) != len(spec.shape) or any(isinstance(d, int) and d > 0 and d != w
                                                           for d, w in zip(shape, spec.shape))):
            raise BundleError(f"{where}: input {spec.name!r} has shape {shape}, {manifest} says {spec.shape}{fix}")
        dtype = (input_dtypes or {}).get(spec.name)
        if dtype is not None and str(dtype) != spec.dtype:
            raise BundleError(f"{where}: input {spec.name!r} is {dtype}, {manifest} says {spec.dtype}{fix}")
    outputs = [o.get("name") for o in bundle.get("outputs") or [] if isinstance(o, dict)]
    if outputs and sorted(outputs) != sorted(output_names):
        raise BundleError(f"{where} has outputs {sorted(output_names)}, {manifest} lists {sorted(outputs)}{fix}")


# -- the largest batch a bundle, an engine or a backend takes ------------------------------------------------
def batch_limit(source: Any) -> Tuple[Optional[int], str]:
    """The largest batch `source` runs, and what to run for a larger one. `source` is a Bundle (its
    models take the manifest's `batch` range; a bundle without one has a fixed batch of 1), a
    batch range of an engine's optimization profile (an object with int `min`/`opt`/`max`, as
    edge_sdk.trt.profiles.BatchRange, or such a dict), or a backend: its `describe()["batch"]`
    where it gives one (TensorRT: the engine's profile, or its fixed batch), else its model's input
    shape (ONNX Runtime: a fixed first dimension, or None: any batch)."""
    if isinstance(getattr(source, "manifest", None), dict) and hasattr(source, "root"):
        entry = source.manifest.get("batch")
        high = entry.get("max") if isinstance(entry, dict) else 1
        return int(high), f"rebuild the bundle with `edge-sdk build --max-batch N` (then `edge-sdk engine {source.root} --max-batch N`)"
    engine_fix = "rebuild the engine with `edge-sdk engine BUNDLE --max-batch N`"
    if isinstance(source, Mapping) and "max" in source:
        return int(source["max"]), engine_fix
    if all(isinstance(getattr(source, k, None), int) for k in ("min", "opt", "max")):
        return int(source.max), engine_fix
    described = source.describe() if callable(getattr(source, "describe", None)) else {}
    batch = described.get("batch") if isinstance(described, dict) else None
    bundle = getattr(source, "bundle", None)
    where = str(bundle.root) if bundle is not None and hasattr(bundle, "root") else "BUNDLE"
    if isinstance(batch, dict) and isinstance(batch.get("max"), int):
        if batch.get("dynamic"):
            return batch["max"], f"rebuild the engine with `edge-sdk engine {where} --max-batch N`"
        return batch["max"], (f"its model has a fixed batch: rebuild the bundle with `edge-sdk build --max-batch N`, then "
                              f"`edge-sdk engine {where} --max-batch N`")
    names = getattr(source, "input_names", None) or []
    shape = source.input_shape(names[0]) if names and callable(getattr(source, "input_shape", None)) else None
    first = shape[0] if shape else None
    if isinstance(first, int) and not isinstance(first, bool) and first > 0:
        return first, "its model has a fixed batch: rebuild the bundle with `edge-sdk build --max-batch N`"
    return None, ""


def check_batch(source: Any, wanted_max: int) -> int:
    """Refuse (ConfigError naming the fix) a configuration whose largest batch `wanted_max` is more
    than `source` (see :func:`batch_limit`) takes; returns `wanted_max`."""
    if isinstance(wanted_max, bool) or not isinstance(wanted_max, int) or wanted_max < 1:
        raise ConfigError(f"the largest batch must be a whole number of inputs >= 1, got {wanted_max!r}")
    limit, fix = batch_limit(source)
    if limit is not None and wanted_max > limit:
        fix = fix.replace("--max-batch N", f"--max-batch {wanted_max}")
        raise ConfigError(f"the configuration batches up to {wanted_max} inputs, but the {_batch_owner(source)} takes at "
                          f"most {limit}: {fix}, or lower the configuration's max batch to {limit}")
    return wanted_max


def _batch_owner(source: Any) -> str:
    if isinstance(getattr(source, "manifest", None), dict):
        return f"bundle {source.root}"
    if isinstance(source, Mapping) or hasattr(source, "opt"):
        return "engine's optimization profile"
    return f"{getattr(source, 'name', type(source).__name__)} backend"
