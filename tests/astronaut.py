"""NASA's photo of Eileen Collins (scikit-image sample data, public domain) and her face,
annotated by hand on the 512 x 512 photo: the oracle of the real-model tests."""
from __future__ import annotations

import numpy as np
import pytest

# Skin from forehead to chin and cheek to cheek, (x1, y1, x2, y2) in pixels.
FACE = np.array([[180, 78, 272, 172]], np.float32)
# Pupils (her right, her left as seen), nose tip, mouth corners: (x, y) in pixels.
LANDMARKS = np.array([[202, 101], [247, 103], [223, 128], [206, 143], [243, 142]], np.float32)


def astronaut_bgr() -> np.ndarray:
    data = pytest.importorskip("skimage.data")
    return np.ascontiguousarray(data.astronaut()[:, :, ::-1])


def assert_finds_her_face(det, min_iou: float = 0.6, max_landmark_px: float = 8.0) -> None:
    """One face, overlapping the annotated box, its five landmarks each within a tenth of the face."""
    from edge_sdk.detections import box_iou

    assert len(det) == 1, det.xyxy
    assert box_iou(det.xyxy, FACE)[0, 0] >= min_iou, det.xyxy  # her face, not the flag or the helmet
    error = np.linalg.norm(det.data["landmarks"][0] - LANDMARKS, axis=1)
    assert error.max() <= max_landmark_px, (error, det.data["landmarks"][0])
