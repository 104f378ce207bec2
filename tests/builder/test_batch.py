"""Bundles for batches (`edge-sdk build --max-batch N`): the real CenterFace built at N = 4 on a few
images, its variants run in ONNX Runtime on four inputs at once against what the build recorded at
batch 1; graphs that fix their batch refused with the reason; N = 1 leaves the bundle as it was."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
from detector_factory import TINY_DECODER, TINY_HW, make_detector, write_images
from typer.testing import CliRunner

from edge_sdk.builder import batch as batch_mod
from edge_sdk.builder import pipeline
from edge_sdk.builder.images import default_calib_dir
from edge_sdk.builder.project import BuildConfig, make_config
from edge_sdk.cli import app
from edge_sdk.errors import BundleError, ConfigError, ModelError
from edge_sdk.manifest import MANIFEST, VARIANT_FILES, Bundle
from edge_sdk.manifest_check import check_batch
from edge_sdk.preprocess import InputSpec

pytestmark = pytest.mark.host
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

CALIB_IMAGES = 16  # the fewest an INT8 build takes with a gate of four images


def _session(path: Path) -> Any:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _first_dim(path: Path) -> Any:
    dim = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim[0]
    return dim.dim_param if dim.dim_param else dim.dim_value


@pytest.fixture(scope="module")
def centerface_batch4(tmp_path_factory: pytest.TempPathFactory, centerface_model_path: Path) -> Tuple[Path, Dict[str, Any]]:
    """The real default model built to INT8 at --max-batch 4 --opt-batch 2 on 16 of the
    repository's calibration images (no probe, no fallback search: kept short)."""
    root = tmp_path_factory.mktemp("batch4")
    calib = root / "calib"
    calib.mkdir()
    for path in sorted(default_calib_dir().iterdir())[:CALIB_IMAGES]:
        shutil.copy(path, calib / path.name)
    out = root / "bundle"
    result = CliRunner().invoke(app, ["build", str(centerface_model_path), "--out", str(out), "--input-size", "640x384",
                                      "--decoder", "centerface", "--calib", str(calib), "--max-batch", "4",
                                      "--opt-batch", "2", "--no-probe", "--int8-fallback", "off", "--json"])
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def test_every_variant_takes_a_batch_of_four_with_the_batch_one_results(centerface_batch4) -> None:
    """The oracle is reference.npz: FP32's outputs on the gate images, each run alone at batch 1
    while the build gated the variants. The bundle's model.onnx on the four at once gives them."""
    out, summary = centerface_batch4
    bundle = Bundle.load(out)
    assert bundle.manifest["batch"]["min"] == 1 and bundle.manifest["batch"]["opt"] == 2
    assert bundle.manifest["batch"]["max"] == 4 and summary["batch"] == bundle.manifest["batch"]
    ref = np.load(out / "reference.npz")
    inputs = ref["inputs"].astype(np.float32)
    assert inputs.shape[0] == 4  # four gate images: one batch of four distinct inputs
    outputs = _session(out / "model.onnx").run(None, {"input.1": inputs})
    for k, got in enumerate(outputs):
        want = ref[f"output_{k}"].astype(np.float32)  # stored as float16 where that keeps the detections
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * float(np.abs(want).max()))
    for variant in ("fp16", "int8"):
        path = out / VARIANT_FILES[variant]
        assert _first_dim(path) == batch_mod.BATCH_DIM
        session = _session(path)
        together = session.run(None, {"input.1": inputs})
        for i in range(4):
            alone = session.run(None, {"input.1": inputs[i:i + 1]})
            for a, b in zip(together, alone):
                np.testing.assert_allclose(a[i], b[0], rtol=1e-5, atol=1e-5)


def test_the_gates_still_ran_at_batch_one_and_the_check_is_recorded(centerface_batch4) -> None:
    out, _ = centerface_batch4
    m = Bundle.load(out).manifest
    assert m["accuracy"]["int8"]["gate"]["passed"] is True and m["accuracy"]["fp16"]["f1_vs_fp32"] >= 0.97
    assert m["inputs"][0]["shape"] == [1, 3, 384, 640]  # what the preprocessor makes: one frame
    check = m["batch"]["check"]
    assert check["rows"] == 4 and check["inputs"] == "gate images"
    assert set(check["max_abs_diff"]) == {"fp32", "fp16", "int8"}
    assert all(v <= 1e-3 for v in check["max_abs_diff"].values())
    assert [o["shape"][0] for o in m["outputs"]] == [batch_mod.BATCH_DIM] * 4


def test_check_batch_reads_the_bundle_range(centerface_batch4) -> None:
    out, _ = centerface_batch4
    bundle = Bundle.load(out)
    assert check_batch(bundle, 4) == 4
    with pytest.raises(ConfigError, match=r"takes at most 4: rebuild the bundle with `edge-sdk build --max-batch 5`"):
        check_batch(bundle, 5)


def test_the_ort_backend_on_the_batched_variant_runs_the_configured_batch(centerface_batch4) -> None:
    from edge_sdk.runtime.backends.onnxruntime import OnnxRuntimeBackend

    out, _ = centerface_batch4
    with OnnxRuntimeBackend(out / "model.int8.qdq.onnx", provider="cpu") as backend:
        assert check_batch(backend, 4) == 4  # a symbolic batch: ONNX Runtime takes any
        x = np.load(out / "reference.npz")["inputs"].astype(np.float32)
        assert [o.shape[0] for o in backend.infer({"input.1": x})] == [4] * 4


# --- graphs that fix their batch -------------------------------------------------------------------

def _model(nodes: List[Any], inits: List[Any], out_shape: List[int]) -> Any:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


SPEC = InputSpec(name="x", shape=[1, 3, 4, 4])


def test_a_reshape_to_a_fixed_batch_is_refused_with_the_reason() -> None:
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, 48])
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])], [shape], [1, 48])
    with pytest.raises(ModelError, match=r"fp32 model cannot run a batch of 3 .*fixes its batch.*--max-batch 1"):
        batch_mod.check_fp32(model, SPEC, 3)


def test_rows_that_depend_on_each_other_are_refused() -> None:
    """Each row minus the batch's mean: 0 at batch 1, something else for every row of a batch."""
    mean = helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1)
    model = _model([mean, helper.make_node("Sub", ["x", "m"], ["y"])], [], [1, 3, 4, 4])
    with pytest.raises(ModelError, match=r"output 'y' differs by .* between row 0 of a batch of 2 .*not computed on their own"):
        batch_mod.check_fp32(model, SPEC, 2)


def test_an_output_of_one_row_for_a_batch_is_refused() -> None:
    """A sum over the batch keeps the shape [1, ...] whatever the batch: not one row per input."""
    model = _model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)],
                   [helper.make_tensor("axes", TensorProto.INT64, [1], [0])], [1, 3, 4, 4])
    with pytest.raises(ModelError, match=r"output 'y' has shape \[1, 3, 4, 4\] for a batch of 2 inputs"):
        batch_mod.check_fp32(model, SPEC, 2)


def _fixed_batch_detector(path: Path) -> Path:
    """The tiny detector with its first output flattened to a constant [1, H*W / 16]: the batch is
    fixed inside the graph."""
    detector = make_detector()
    graph = detector.graph
    first = graph.output[0]
    cells = (TINY_HW[0] // 4) * (TINY_HW[1] // 4)
    graph.initializer.append(helper.make_tensor("flat", TensorProto.INT64, [2], [1, cells]))
    graph.node.append(helper.make_node("Reshape", [first.name, "flat"], ["flat_heat"]))
    del graph.output[0]
    graph.output.insert(0, helper.make_tensor_value_info("flat_heat", TensorProto.FLOAT, [1, cells]))
    onnx.save(detector, str(path))
    return path


def test_the_cli_refuses_a_fixed_batch_graph_with_exit_4_and_the_fix(tmp_path: Path) -> None:
    path = _fixed_batch_detector(tmp_path / "fixed.onnx")
    out = tmp_path / "bundle"
    result = CliRunner().invoke(app, ["build", str(path), "--out", str(out), "--input-size", f"{TINY_HW[1]}x{TINY_HW[0]}",
                                      "--decoder", "centerface", "--precision", "fp32", "--max-batch", "2"])
    assert result.exit_code == ModelError.exit_code == 4
    assert "cannot run a batch of 2" in result.output and "--max-batch 1" in result.output
    assert not out.exists()


def test_a_build_of_a_fixed_batch_graph_fails_before_the_long_steps_and_writes_nothing(tmp_path: Path) -> None:
    path = _fixed_batch_detector(tmp_path / "fixed.onnx")
    calib = write_images(tmp_path / "calib", 16)
    config = BuildConfig(model=path, out=tmp_path / "bundle", precision="int8", calib=calib, max_batch=2,
                         input_size=(TINY_HW[1], TINY_HW[0]), decoder=dict(TINY_DECODER), probe=False)
    progress = TaskLog()
    with pytest.raises(ModelError, match="cannot run a batch of 2"):
        pipeline.build(config, progress)
    assert progress.tasks == []  # refused before the images, the calibration and the gates
    assert not (tmp_path / "bundle").exists()


class TaskLog(pipeline.BuildProgress):
    """A quiet BuildProgress that keeps the description of every task the build starts."""

    def __init__(self) -> None:
        super().__init__(quiet=True)
        self.tasks: List[str] = []

    def task(self, description: str, total: int) -> Any:
        self.tasks.append(description)
        return super().task(description, total)


def test_rows_beyond_the_images_are_the_images_mirrored() -> None:
    """Two gate images for a batch of five: no two rows are the same input (a row that takes its
    neighbour's result would go unseen between two copies of one image)."""
    a, b = (np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4) + k for k in (0, 100))
    rows = batch_mod.image_rows([a, b], 5)
    np.testing.assert_array_equal(rows, np.concatenate([a, b, a[..., ::-1], b[..., ::-1], a]))
    assert len({r.tobytes() for r in rows[:4]}) == 4


# --- batch 1, the default ----------------------------------------------------------------------------

def test_without_max_batch_the_variants_keep_their_fixed_batch_of_one(tmp_path: Path, detector_path: Path) -> None:
    config = BuildConfig(model=detector_path, out=tmp_path / "bundle", precision="fp16",
                         calib=write_images(tmp_path / "calib", 16), input_size=(TINY_HW[1], TINY_HW[0]),
                         decoder=dict(TINY_DECODER), probe=False)
    bundle = pipeline.build(config).bundle
    assert "batch" not in bundle.manifest
    assert [_first_dim(bundle.root / VARIANT_FILES[v]) for v in ("fp32", "fp16")] == [1, 1]
    with pytest.raises(ConfigError, match=r"bundle .* takes at most 1: rebuild the bundle with `edge-sdk build --max-batch 2`"):
        check_batch(bundle, 2)
    from edge_sdk.runtime.backends.onnxruntime import OnnxRuntimeBackend

    with OnnxRuntimeBackend(bundle.root / "model.onnx", provider="cpu") as backend:
        assert check_batch(backend, 1) == 1
        with pytest.raises(ConfigError, match=r"onnxruntime backend takes at most 1: its model has a fixed batch: "
                                              r"rebuild the bundle with `edge-sdk build --max-batch 3`"):
            check_batch(backend, 3)


def test_an_fp32_build_checks_its_batch_on_seeded_inputs(tmp_path: Path, detector_path: Path) -> None:
    config = BuildConfig(model=detector_path, out=tmp_path / "bundle", precision="fp32", max_batch=3,
                         input_size=(TINY_HW[1], TINY_HW[0]), decoder=dict(TINY_DECODER), probe=False)
    bundle = pipeline.build(config).bundle
    assert bundle.manifest["batch"]["opt"] == bundle.manifest["batch"]["max"] == 3  # opt defaults to max
    assert bundle.manifest["batch"]["check"]["inputs"] == "seeded random inputs"
    x = np.random.default_rng(1).uniform(0, 255, (3, 3) + TINY_HW).astype(np.float32)
    together = _session(bundle.root / "model.onnx").run(None, {"input.1": x})
    fixed = onnx.load(str(bundle.root / "model.onnx"))
    dims = fixed.graph.input[0].type.tensor_type.shape.dim
    dims[0].Clear()
    dims[0].dim_value = 1
    for out in fixed.graph.output:
        out.type.tensor_type.shape.dim[0].Clear()
        out.type.tensor_type.shape.dim[0].dim_value = 1
    del fixed.graph.value_info[:]
    single = ort.InferenceSession(fixed.SerializeToString(), providers=["CPUExecutionProvider"])
    for i in range(3):
        for a, b in zip(together, single.run(None, {"input.1": x[i:i + 1]})):
            np.testing.assert_allclose(a[i], b[0], rtol=1e-6, atol=1e-6)


# --- settings --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("values, message", [
    ({"max_batch": 0}, "max_batch must be a batch size 1..64, got 0"),
    ({"max_batch": 65}, "max_batch must be a batch size 1..64, got 65"),
    ({"max_batch": 4, "opt_batch": 5}, "opt_batch 5 is larger than max_batch 4"),
    ({"opt_batch": 2}, "opt_batch 2 is larger than max_batch 1"),
])
def test_a_bad_batch_setting_is_a_config_error(values: Dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BuildConfig(**values)


def test_the_build_table_of_edge_toml_sets_the_batch(tmp_path: Path) -> None:
    (tmp_path / "edge.toml").write_text("[build]\nmax_batch = 8\nopt_batch = 4\n")
    config = make_config({}, tmp_path)
    assert (config.max_batch, config.preferred_batch) == (8, 4)
    assert make_config({"max_batch": 4, "opt_batch": None}, tmp_path).max_batch == 4  # the flag wins
    (tmp_path / "edge.toml").write_text("[build]\nmax_batch = \"8\"\n")
    with pytest.raises(ConfigError, match="max_batch must be an integer"):
        make_config({}, tmp_path)


@pytest.mark.parametrize("entry, message", [
    ({"min": 1, "opt": 5, "max": 4}, "batch must satisfy min <= opt <= max"),
    ({"min": 1, "opt": 1, "max": 65}, r"batch.max"),
    ({"min": 1, "opt": 1}, r"batch.max"),
])
def test_a_manifest_with_a_bad_batch_range_is_refused(tmp_path: Path, detector_path: Path, entry, message) -> None:
    config = BuildConfig(model=detector_path, out=tmp_path / "bundle", precision="fp32",
                         input_size=(TINY_HW[1], TINY_HW[0]), decoder=dict(TINY_DECODER), probe=False)
    root = pipeline.build(config).bundle.root
    manifest = json.loads((root / MANIFEST).read_text())
    manifest["batch"] = entry
    (root / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=message):
        Bundle.load(root)
