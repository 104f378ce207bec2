"""The real CenterFace model, run by ONNX Runtime on a real photo, through the real decoder."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.decoders import CENTERFACE_DEFAULT, make_decoder
from edge_sdk.detections import box_iou
from edge_sdk.preprocess import InputSpec, Preprocessor

ort = pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")
skimage_data = pytest.importorskip("skimage.data")

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
    return np.ascontiguousarray(skimage_data.astronaut()[:, :, ::-1])


def test_finds_the_one_face_in_the_astronaut_photo(detect, astronaut) -> None:
    det = detect(astronaut)
    assert len(det) == 1
    assert det.confidence[0] > 0.7
    x1, y1, x2, y2 = det.xyxy[0]
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    assert 190 < cx < 260 and 90 < cy < 150, det.xyxy  # her face, not the flag or the helmet
    assert 50 < x2 - x1 < 130 and 70 < y2 - y1 < 160
    eyes, nose, mouth = det.data["landmarks"][0, :2], det.data["landmarks"][0, 2], det.data["landmarks"][0, 3:]
    inside = (det.data["landmarks"][0] >= det.xyxy[0, :2]) & (det.data["landmarks"][0] <= det.xyxy[0, 2:])
    assert inside.all(), det.data["landmarks"]
    assert eyes[0, 0] < eyes[1, 0] and mouth[0, 0] < mouth[1, 0]  # left before right
    assert eyes[:, 1].max() < nose[1] < mouth[:, 1].min()  # eyes above nose above mouth


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
