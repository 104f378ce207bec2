"""The default bundle cached in the user folder is reused only while it is what building the
default today would give: same model file, input spec, decoder settings and calibration images."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from edge_sdk.builder.default_model import DEFAULT_MODEL
from edge_sdk import default_bundle
from edge_sdk.preprocess import InputSpec
from runtime_factories import CENTERFACE_DECODER, tiny_centerface_model, write_bundle


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("default-bundle")
    model = tiny_centerface_model(tmp / "tiny.onnx")
    return write_bundle(tmp / "bundle", model, InputSpec(name="input.1", shape=[1, 3, 32, 64]), CENTERFACE_DECODER)


def cached_default(tiny: Path, root: Path, input_changes: Optional[Dict[str, Any]] = None, decoder: Any = None,
                   model_sha256: str = DEFAULT_MODEL.sha256, int8: bool = False) -> Path:
    """A copy of the tiny bundle whose manifest says it was built from the default model, with
    the default's input spec (plus `input_changes`) and decoder (or `decoder`)."""
    shutil.copytree(tiny, root)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["model"] = dict(manifest.get("model") or {}, source_sha256=model_sha256)
    manifest["inputs"] = [dict(DEFAULT_MODEL.input_spec.to_dict(), **(input_changes or {}))]
    manifest["decoder"] = dict(DEFAULT_MODEL.decoder) if decoder is None else decoder
    if int8:  # the FP32 file stands in for the INT8 variant (same bytes, so the same checksum)
        shutil.copy(root / "model.onnx", root / "model.int8.qdq.onnx")
        manifest["files"]["model.int8.qdq.onnx"] = manifest["files"]["model.onnx"]
        manifest["variants"] = sorted(set(manifest.get("variants") or ["fp32"]) | {"int8"})
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


class FakeBuild:
    """Stands in for the builder: records each build and writes a current default bundle."""

    def __init__(self, tiny: Path) -> None:
        self.tiny = tiny
        self.calls: List[Any] = []

    def __call__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        self.calls.append(config)
        shutil.rmtree(config.out, ignore_errors=True)
        cached_default(self.tiny, Path(config.out), int8=config.precision != "fp32")


@pytest.fixture
def fake_build(tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeBuild:
    fake = FakeBuild(tiny)
    monkeypatch.setattr("edge_sdk.builder.pipeline.build", fake)
    calib = tmp_path / "calib"
    calib.mkdir()
    (calib / "a.jpg").write_bytes(b"first calibration image")
    monkeypatch.setattr(default_bundle, "default_calibration_folder", lambda: calib)
    return fake


def test_a_current_default_bundle_is_reused(tiny: Path, tmp_path: Path, fake_build: FakeBuild) -> None:
    cached = cached_default(tiny, tmp_path / "cache" / "default")
    assert default_bundle.ensure_default_bundle("fp32", root=cached) == cached
    assert fake_build.calls == []


@pytest.mark.host  # rebuilding needs the builder (onnx); a device only reuses
@pytest.mark.parametrize(
    "change, said",
    [
        (dict(input_changes={"color": "BGR"}), "color BGR → RGB"),  # what earlier versions built
        (dict(input_changes={"shape": [1, 3, 480, 640]}), r"shape \[1, 3, 480, 640\] → \[1, 3, 384, 640\]"),
        (dict(input_changes={"mean": [127.5, 127.5, 127.5]}), "mean"),
        (dict(decoder=dict(CENTERFACE_DECODER, score_threshold=0.3)), "decoder settings"),
        (dict(model_sha256="0" * 64), "another model file"),
    ],
)
def test_a_default_bundle_built_from_another_spec_is_rebuilt(tiny: Path, tmp_path: Path, fake_build: FakeBuild,
                                                             change: Dict[str, Any], said: str) -> None:
    import re

    cached = cached_default(tiny, tmp_path / "cache" / "default", **change)
    messages: List[str] = []
    assert default_bundle.ensure_default_bundle("fp32", root=cached, echo=messages.append) == cached
    assert len(fake_build.calls) == 1 and fake_build.calls[0].model is None and Path(fake_build.calls[0].out) == cached
    assert re.search(f"out of date.*{said}", messages[0]), messages
    assert json.loads((cached / "manifest.json").read_text())["inputs"][0]["color"] == "RGB"
    # and the rebuilt one is current: the next run reuses it
    assert default_bundle.ensure_default_bundle("fp32", root=cached) == cached
    assert len(fake_build.calls) == 1


@pytest.mark.host  # rebuilding needs the builder (onnx); a device only reuses
def test_an_int8_default_calibrated_on_other_images_is_rebuilt(tiny: Path, tmp_path: Path, fake_build: FakeBuild,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cache" / "default"
    default_bundle.ensure_default_bundle("int8", root=root)  # nothing cached: built, and its record kept
    assert len(fake_build.calls) == 1
    record = json.loads(default_bundle.build_record(root).read_text())
    assert record == default_bundle.default_build_key() and record["input"]["color"] == "RGB"
    default_bundle.ensure_default_bundle("int8", root=root)
    assert len(fake_build.calls) == 1  # same images: reused
    (default_bundle.default_calibration_folder() / "a.jpg").write_bytes(b"another calibration image")
    messages: List[str] = []
    default_bundle.ensure_default_bundle("int8", root=root, echo=messages.append)
    assert len(fake_build.calls) == 2 and "calibrated on other images" in messages[0]
    default_bundle.ensure_default_bundle("fp32", root=root)  # FP32 does not depend on the images
    assert len(fake_build.calls) == 2


@pytest.mark.host  # rebuilding needs the builder (onnx); a device only reuses
def test_an_int8_default_without_a_build_record_is_rebuilt(tiny: Path, tmp_path: Path, fake_build: FakeBuild) -> None:
    """Bundles cached before the record existed cannot say what they were calibrated on."""
    cached = cached_default(tiny, tmp_path / "cache" / "default", int8=True)
    default_bundle.ensure_default_bundle("int8", root=cached)
    assert len(fake_build.calls) == 1 and default_bundle.build_record(cached).is_file()


def test_a_stale_default_on_a_machine_without_the_builder_is_refused_not_reused(
        tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A device (no onnx) never runs a stale default silently: it says how to get a bundle."""
    from edge_sdk import _imports
    from edge_sdk.errors import BundleError

    real = _imports.available
    monkeypatch.setattr(_imports, "available", lambda name: False if name == "onnx" else real(name))
    cached = cached_default(tiny, tmp_path / "cache" / "default", input_changes={"color": "BGR"})
    with pytest.raises(BundleError, match="host extra"):
        default_bundle.ensure_default_bundle("fp32", root=cached)


@pytest.mark.host  # rebuilding needs the builder (onnx)
def test_the_build_record_leaves_the_bundle_folder_replaceable(tiny: Path, tmp_path: Path, fake_build: FakeBuild) -> None:
    """The record must not sit inside the bundle: `build --out` replaces only folders that hold
    nothing but their manifest's files, so a record inside would make every later rebuild fail."""
    from edge_sdk.builder.bundle import check_output_dir

    cached = cached_default(tiny, tmp_path / "cache" / "default", input_changes={"color": "BGR"})
    default_bundle.ensure_default_bundle("int8", root=cached)
    assert default_bundle.build_record(cached).is_file()
    check_output_dir(cached)  # the real guard the next rebuild runs first: raises on foreign files


def test_auto_reuses_a_current_default_whatever_variants_it_holds(tiny: Path, tmp_path: Path, fake_build: FakeBuild) -> None:
    """Precision auto picks among the variants the bundle holds (choose_precision), so any
    current default serves it: an FP32-only one is not rebuilt."""
    cached = cached_default(tiny, tmp_path / "cache" / "default")
    assert default_bundle.ensure_default_bundle("auto", root=cached) == cached
    assert fake_build.calls == []


@pytest.mark.host  # building needs the builder (onnx)
def test_auto_builds_every_variant_once(tiny: Path, tmp_path: Path, fake_build: FakeBuild) -> None:
    root = tmp_path / "cache" / "default"
    messages: List[str] = []
    assert default_bundle.ensure_default_bundle("auto", root=root, echo=messages.append) == root
    assert [c.precision for c in fake_build.calls] == ["best"] and "building the default bundle" in messages[0]
    default_bundle.ensure_default_bundle("auto", root=root)
    default_bundle.ensure_default_bundle("int8", root=root)  # the "best" build holds int8 too
    assert len(fake_build.calls) == 1
