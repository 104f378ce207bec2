"""The real CenterFace model, run by ONNX Runtime on a real photo, through the real decoder."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.decoders import CENTERFACE_DEFAULT, make_decoder
from edge_sdk.detections import box_iou
from edge_sdk.preprocess import InputSpec, Preprocessor
from astronaut import assert_finds_her_face, astronaut_bgr

pytestmark = pytest.mark.host  # fixing the model's input size needs onnx
ort = pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")

SPEC = InputSpec(name="input.1", shape=[1, 3, 384, 640], color="BGR", resize="letterbox")


@pytest.fixture(scope="module")
def detect(centerface_384x640_path):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(centerface_384x640_path), options, providers=["CPUExecutionProvider"])
    pre = Preprocessor(SPEC)
    decoder = make_decoder(CENTERFACE_DEFAULT, SPEC)

    def run(frame_bgr: np.ndarray):
        tensor, transform = pre(frame_bgr)
        return decoder(session.run(None, {"input.1": tensor}), [transform])[0]

    return run


@pytest.fixture(scope="module")
def astronaut() -> np.ndarray:
    """Eileen Collins (NASA, public domain): one face, 512 x 512."""
    return astronaut_bgr()


def test_finds_the_one_face_in_the_astronaut_photo(detect, astronaut) -> None:
    det = detect(astronaut)
    assert det.confidence[0] > 0.7
    assert_finds_her_face(det)


@pytest.mark.parametrize("scale, pad", [(2.0, (0, 0)), (1.0, (300, 40)), (0.75, (100, 0))])
def test_the_box_follows_the_face_into_other_frames(detect, astronaut, scale: float, pad) -> None:
    """Resize and pad the photo into a larger frame: the box moves and scales with the face."""
    ref = detect(astronaut)
    face = cv2.resize(astronaut, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
    px, py = pad
    frame = np.zeros((face.shape[0] + 2 * py, face.shape[1] + 2 * px, 3), np.uint8)
    frame[py : py + face.shape[0], px : px + face.shape[1]] = face
    det = detect(frame)
    assert len(det) == 1
    expected = ref.xyxy * scale + np.array([px, py, px, py], np.float32)
    assert box_iou(det.xyxy, expected)[0, 0] > 0.8, (det.xyxy, expected)
