"""ONNX graph preparation: load, fix the input, check, optimise, and count.

Each step is a small function from model to model, so the pipeline reads as a chain:
``model_from_path → fix_input → check_supported → optimize``; ``graph_stats`` counts nodes,
parameters and FLOPs at any point.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from edge_sdk import _imports
from edge_sdk.errors import ModelError

# The TensorRT 8.5 ONNX parser understands operator sets up to this version.
MAX_TRT_OPSET = 17
# Per-channel QuantizeLinear/DequantizeLinear needs opset 13.
MIN_OPSET = 13


@dataclass
class GraphStats:
    nodes: int
    parameters: int
    flops: int
    opset: int

    def to_dict(self) -> Dict[str, int]:
        return asdict(self)


def name_allocator(taken: Set[str]) -> Callable[[str], str]:
    """`fresh(base)` for names added to a graph: `base`, else `base_1`, `base_2`... the first not
    in `taken`, which it then joins (so no two calls return one name)."""

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in taken:
            name = f"{base}_{k}"
            k += 1
        taken.add(name)
        return name

    return fresh


def model_from_path(path: Path) -> Any:
    """Load an ONNX model with its external data; ModelError naming the file otherwise."""
    onnx = _imports.onnx()
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"model file {path} does not exist; pass the path of an .onnx file")
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError, ValueError, OSError... for a bad file
        raise ModelError(f"{path} is not a readable ONNX model ({type(exc).__name__}: {exc}); export the model to ONNX again") from exc
    if not len(model.graph.node):
        raise ModelError(f"{path} is not an ONNX model (its graph has no nodes); export the model to ONNX again")
    return model


def default_opset(model: Any) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 0


def real_inputs(model: Any) -> List[Any]:
    """Graph inputs that are not initializers (old exporters list weights as inputs)."""
    weights = {init.name for init in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in weights]


def input_dims(value_info: Any) -> List[Any]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in value_info.type.tensor_type.shape.dim]


def fix_input(model: Any, input_name: Optional[str], shape: Sequence[int]) -> Any:
    """Drop weights listed as inputs, set the real input dims, clear stale shapes, re-infer.

    Returns a new, checked, shape-inferred model. ModelError when the input does not exist or
    the model has more than one real input.
    """
    onnx = _imports.onnx()
    model = _copy(model)
    graph = model.graph
    weights = {init.name for init in graph.initializer}
    keep = [i for i in graph.input if i.name not in weights]
    if len(keep) != len(graph.input):
        del graph.input[:]
        graph.input.extend(keep)
    names = [i.name for i in graph.input]
    if input_name is None:
        if len(names) != 1:
            raise ModelError(f"the model has {len(names)} inputs ({', '.join(names)}); choose one with --input-name")
        input_name = names[0]
    if input_name not in names:
        raise ModelError(f"the model has no input {input_name!r}; its inputs are: {', '.join(names) or 'none'}. Fix --input-name")
    if len(names) != 1:
        raise ModelError(f"the model has {len(names)} inputs ({', '.join(names)}); only single-input models are supported")
    tensor_type = graph.input[0].type.tensor_type
    if tensor_type.elem_type != onnx.TensorProto.FLOAT:
        raise ModelError(f"input {input_name!r} is {onnx.TensorProto.DataType.Name(tensor_type.elem_type)}; a float32 image input is required")
    if len(tensor_type.shape.dim) not in (0, len(shape)):
        raise ModelError(f"input {input_name!r} has rank {len(tensor_type.shape.dim)}, expected {len(shape)} (NCHW)")
    del tensor_type.shape.dim[:]
    for v in shape:
        tensor_type.shape.dim.add().dim_value = int(v)
    # Shapes derived from the dummy input are wrong now: forget them and infer again.
    del graph.value_info[:]
    for out in graph.output:
        dims = out.type.tensor_type.shape.dim
        for i, d in enumerate(dims):
            d.Clear()
            d.dim_param = f"{out.name}_d{i}"
    inferred = check_and_infer(model)
    _outputs_from_value_info(inferred)
    return inferred


def symbolic_batch(model: Any, name: str = "batch") -> Any:
    """A copy of `model` whose input and outputs take any batch: their first dimension becomes the
    symbol `name`, the shapes inferred inside for batch 1 are dropped and inferred again. Whether
    the graph really computes each row on its own is for ONNX Runtime to show
    (:mod:`~edge_sdk.builder.batch`). ModelError when the result fails ONNX validation."""
    model = _copy(model)
    for value in list(real_inputs(model)) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if not len(dims):
            raise ModelError(f"{value.name!r} has no declared rank, so it has no batch dimension to make symbolic; "
                             "export the model with shaped inputs and outputs, or build with --max-batch 1")
        dims[0].Clear()
        dims[0].dim_param = name
    del model.graph.value_info[:]
    return check_and_infer(model)


def _outputs_from_value_info(model: Any) -> None:
    """Copy inferred shapes onto graph outputs whose declared dims are symbolic."""
    onnx = _imports.onnx()
    try:
        full = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception:  # already validated by check_and_infer; nothing more to learn
        return
    known = {vi.name: vi for vi in full.graph.value_info}
    for out in model.graph.output:
        src = known.get(out.name)
        if src is not None and all(d.HasField("dim_value") for d in src.type.tensor_type.shape.dim):
            out.type.tensor_type.shape.CopyFrom(src.type.tensor_type.shape)


def upgrade_opset(model: Any, minimum: int = MIN_OPSET, verify: bool = True) -> Any:
    """Convert to at least `minimum` (per-channel Q/DQ needs 13); unchanged when already there.

    With `verify`, a converted model must give the original's outputs in ONNX Runtime (one seeded
    random input, :func:`outputs_match`): ModelError otherwise, as for an operator whose meaning
    changed between the two opsets in a way the converter does not carry over."""
    source = default_opset(model)
    if source >= minimum:
        return model
    onnx = _imports.onnx()
    from onnx import version_converter

    try:
        converted = version_converter.convert_version(model, minimum)
    except Exception as exc:  # the converter raises RuntimeError/ConvertError per missing adapter
        raise ModelError(f"cannot upgrade the model from opset {source} to {minimum} ({exc}); export it with opset >= {minimum}") from exc
    if source < 11 <= minimum:
        _resize_as_before_11(converted.graph)
    del converted.graph.value_info[:]
    onnx.checker.check_model(converted)
    upgraded = check_and_infer(converted)
    if verify and not outputs_match(model, upgraded):
        raise ModelError(f"upgrading the model from opset {source} to {minimum} changed its outputs in ONNX Runtime; "
                         f"export the model with opset >= {minimum}")
    return upgraded


def _resize_as_before_11(graph: Any) -> None:
    """Resize nodes converted from opset 10 (or from an Upsample) get, in place, what opset 11
    must spell out: before 11, output pixel x read input x / scale (asymmetric) and, for nearest,
    the pixel below (floor); opset 11's defaults are half_pixel and round_prefer_floor, and the
    converter leaves the attributes out."""
    onnx = _imports.onnx()
    for node in graph.node:
        if node.op_type != "Resize":
            continue
        have = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if "coordinate_transformation_mode" not in have:
            node.attribute.append(onnx.helper.make_attribute("coordinate_transformation_mode", "asymmetric"))
        if have.get("mode", b"nearest") == b"nearest" and "nearest_mode" not in have:
            node.attribute.append(onnx.helper.make_attribute("nearest_mode", "floor"))


def check_and_infer(model: Any) -> Any:
    onnx = _imports.onnx()
    try:
        onnx.checker.check_model(model)
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as exc:  # checker/inference errors come as several onnx exception types
        raise ModelError(f"the model fails ONNX validation after fixing its input ({exc}); check --input-size and the model") from exc
    return inferred


def check_supported(model: Any, trt_major: Optional[int]) -> None:
    """ModelError for operators outside what ONNX Runtime (CPU) and the target's parser accept."""
    opset = default_opset(model)
    custom = sorted({f"{n.domain}::{n.op_type}" for n in model.graph.node if n.domain not in ("", "ai.onnx")})
    if custom:
        raise ModelError(f"unsupported operators from non-standard domains: {', '.join(custom)}; export the model with standard ONNX operators only")
    if trt_major is not None and trt_major < 10 and opset > MAX_TRT_OPSET:
        raise ModelError(
            f"the model uses opset {opset}; the TensorRT {trt_major}.x ONNX parser supports opset <= {MAX_TRT_OPSET}. "
            f"Export with opset {MAX_TRT_OPSET} or lower"
        )
    session_from_model(model)


def session_from_model(model: Any, optimization: str = "all") -> Any:
    """An ONNX Runtime CPU session; ModelError naming the operator it cannot run."""
    ort = _imports.ort()
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = {
        "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[optimization]
    try:
        return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own Fail/NotImplemented/InvalidGraph types
        raise ModelError(f"ONNX Runtime cannot run this model ({str(exc).strip().splitlines()[0][:300]}); it uses an unsupported operator or type") from exc


def random_feed(model: Any, seed: int = 0) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feed = {}
    for inp in real_inputs(model):
        dims = [d if isinstance(d, int) and d > 0 else 1 for d in input_dims(inp)]
        feed[inp.name] = rng.uniform(0, 255, size=dims).astype(np.float32)
    return feed


def outputs_match(a: Any, b: Any, rtol: float = 1e-3, atol: float = 1e-4, seed: int = 0) -> bool:
    """Run both models on the same random input; True when every output agrees."""
    feed = random_feed(a, seed)
    out_a = session_from_model(a, "none").run(None, feed)
    out_b = session_from_model(b, "none").run(None, feed)
    if len(out_a) != len(out_b):
        return False
    for x, y in zip(out_a, out_b):
        if x.shape != y.shape:
            return False
        scale = float(np.max(np.abs(x))) or 1.0
        if not np.allclose(x, y, rtol=rtol, atol=atol * scale):
            return False
    return True


def optimize(model: Any) -> Tuple[Any, str]:
    """Fold constants and fuse. Returns (model, method).

    Tries onnxslim (standard ONNX ops only), then ONNX Runtime's basic offline optimisation;
    each result is kept only when its outputs match the input model's on a random input.
    """
    candidates = []
    if _imports.available("onnxslim"):
        candidates.append(("onnxslim", _slim))
    candidates.append(("onnxruntime-basic", _ort_basic))
    for method, fn in candidates:
        try:
            optimized = fn(model)
        except ModelError:
            continue
        if optimized is not None and outputs_match(model, optimized):
            return optimized, method
    return model, "none"


def _slim(model: Any) -> Optional[Any]:
    onnxslim = _imports.require("onnxslim")
    try:
        slimmed = onnxslim.slim(_copy(model))
    except Exception as exc:  # onnxslim raises assorted errors on graphs it cannot handle
        raise ModelError(f"onnxslim failed: {exc}") from exc
    if slimmed is None or any(n.domain not in ("", "ai.onnx") for n in slimmed.graph.node):
        return None
    return check_and_infer(slimmed)


def _ort_basic(model: Any) -> Optional[Any]:
    import tempfile

    onnx = _imports.onnx()
    ort = _imports.ort()
    with tempfile.TemporaryDirectory(prefix="edge-sdk-opt-") as tmp:
        out = str(Path(tmp) / "optimized.onnx")
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.optimized_model_filepath = out
        try:
            ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # see session_from_model
            raise ModelError(f"ONNX Runtime optimisation failed: {exc}") from exc
        optimized = onnx.load(out)
    if any(n.domain not in ("", "ai.onnx") for n in optimized.graph.node):
        return None
    return check_and_infer(optimized)


def _copy(model: Any) -> Any:
    onnx = _imports.onnx()
    clone = onnx.ModelProto()
    clone.CopyFrom(model)
    return clone


# --- counting ---------------------------------------------------------------------------


def _shapes(model: Any) -> Dict[str, List[int]]:
    shapes: Dict[str, List[int]] = {}
    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        dims = input_dims(vi)
        if dims and all(isinstance(d, int) and d > 0 for d in dims):
            shapes[vi.name] = dims
    for init in model.graph.initializer:
        shapes[init.name] = list(init.dims)
    return shapes


def _attr(node: Any, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            if a.ints:
                return list(a.ints)
            return a.i
    return default


def graph_stats(model: Any) -> GraphStats:
    """Node count, parameter count (float initializer elements) and FLOPs (2 × MACs).

    FLOPs count Conv, ConvTranspose, Gemm and MatMul from the inferred shapes; a model
    without inferred shapes is inferred first.
    """
    onnx = _imports.onnx()
    if not len(model.graph.value_info):
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception:  # stats on an uninferable graph simply count fewer FLOPs
            pass
    shapes = _shapes(model)
    params = sum(int(np.prod(init.dims)) for init in model.graph.initializer if init.data_type in (1, 10, 11))
    for node in model.graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.t.data_type in (1, 10, 11):
                    params += int(np.prod(a.t.dims))
    macs = 0
    for node in model.graph.node:
        macs += _node_macs(node, shapes)
    return GraphStats(nodes=len(model.graph.node), parameters=params, flops=2 * macs, opset=default_opset(model))


def _node_macs(node: Any, shapes: Dict[str, List[int]]) -> int:
    op = node.op_type
    ins = [shapes.get(n) for n in node.input]
    out = shapes.get(node.output[0]) if node.output else None
    if op == "Conv" and out and len(ins) > 1 and ins[1]:
        w = ins[1]  # [Cout, Cin/group, k...]
        return int(np.prod(out)) * int(np.prod(w[1:]))
    if op == "ConvTranspose" and ins and ins[0] and len(ins) > 1 and ins[1]:
        w = ins[1]  # [Cin, Cout/group, k...]
        return int(np.prod(ins[0])) * int(np.prod(w[1:]))
    if op == "Gemm" and out and ins and ins[0]:
        k = ins[0][0] if _attr(node, "transA", 0) else ins[0][-1]
        return int(np.prod(out)) * int(k)
    if op == "MatMul" and out and ins and ins[0]:
        return int(np.prod(out)) * int(ins[0][-1])
    return 0


def layer_flops(model: Any) -> Dict[str, int]:
    """``{node name: FLOPs (2 × MACs)}`` for every Conv, ConvTranspose, Gemm and MatMul, from the
    inferred shapes (nodes without a name are skipped: name them first)."""
    onnx = _imports.onnx()
    if not len(model.graph.value_info):
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception:  # an uninferable graph simply counts 0 for the layers it cannot size
            pass
    shapes = _shapes(model)
    ops = ("Conv", "ConvTranspose", "Gemm", "MatMul")
    return {n.name: 2 * _node_macs(n, shapes) for n in model.graph.node if n.op_type in ops and n.name}
