"""Every decoder on inputs the defaults never build: non-square networks and frames, every
resize mode and placement (letterbox centred and top-left, stretch), outputs listed in another
order. A box is chosen in frame pixels, placed into the network input by the letterbox written
out here from its documented rule (independent of edge_sdk.preprocess), encoded the way each
model format documents it, decoded, and must come back where it was in the frame."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_sdk.decoders import make_decoder
from edge_sdk.preprocess import InputSpec, plan_transform

MODES = [("letterbox", "center"), ("letterbox", "top-left"), ("stretch", "center")]


def placement(fw: int, fh: int, nw: int, nh: int, resize: str, where: str) -> Tuple[float, float, float, float]:
    """(scale_x, scale_y, pad_x, pad_y) with net = frame * scale + pad, from the docs: letterbox
    keeps the aspect (r = min(nw/fw, nh/fh)), the content is round(f * r) pixels and centred
    (floor of half the slack) or truncated int(f * r) at the top-left (YOLOX); stretch fills."""
    if resize == "stretch":
        return nw / fw, nh / fh, 0.0, 0.0
    r = min(nw / fw, nh / fh)
    if where == "center":
        w, h = min(nw, max(1, int(round(fw * r)))), min(nh, max(1, int(round(fh * r))))
        return w / fw, h / fh, float((nw - w) // 2), float((nh - h) // 2)
    w, h = min(nw, max(1, int(fw * r))), min(nh, max(1, int(fh * r)))
    return w / fw, h / fh, 0.0, 0.0


@st.composite
def scenes(draw: Any) -> Dict[str, Any]:
    nw, nh = draw(st.sampled_from([(320, 192), (192, 320), (640, 384), (256, 512), (416, 224)]))
    fw = draw(st.integers(64, 2000))
    fh = draw(st.integers(64, 2000))
    resize, where = draw(st.sampled_from(MODES))
    sx, sy, px, py = placement(fw, fh, nw, nh, resize, where)
    # a box of at least 12 network pixels a side, inside the frame
    min_w, min_h = min(fw, 12 / sx), min(fh, 12 / sy)
    bw = draw(st.floats(min_w, max(min_w, fw * 0.6)))
    bh = draw(st.floats(min_h, max(min_h, fh * 0.6)))
    x1 = draw(st.floats(0, fw - bw))
    y1 = draw(st.floats(0, fh - bh))
    frame_box = np.array([x1, y1, x1 + bw, y1 + bh])
    net_box = frame_box * [sx, sy, sx, sy] + [px, py, px, py]
    return {"net": (nw, nh), "frame": (fw, fh), "resize": resize, "placement": where, "frame_box": frame_box,
            "net_box": net_box, "scale": (sx, sy), "pad": (px, py)}


def spec_for(scene: Dict[str, Any]) -> InputSpec:
    nw, nh = scene["net"]
    return InputSpec(shape=[1, 3, nh, nw], resize=scene["resize"], placement=scene["placement"])


def decode(scene: Dict[str, Any], decoder_spec: Dict[str, Any], outputs: List[np.ndarray]):
    nw, nh = scene["net"]
    fw, fh = scene["frame"]
    transform, _ = plan_transform(fw, fh, nw, nh, scene["resize"], scene["placement"])
    got = make_decoder(decoder_spec, spec_for(scene))(outputs, [transform])
    assert len(got) == 1
    return got[0]


def assert_box(det: Any, scene: Dict[str, Any], class_id: int = 0) -> None:
    assert len(det.xyxy) == 1, det.xyxy
    tol = 0.02 / min(scene["scale"]) + 1e-4 * max(scene["frame"])
    np.testing.assert_allclose(det.xyxy[0], scene["frame_box"], atol=tol)
    assert int(det.class_id[0]) == class_id


def assert_points(points: np.ndarray, scene: Dict[str, Any], marks: Sequence[Tuple[float, float]]) -> None:
    """`points` (one detection's landmarks or keypoints) where `marks` (fractions of the true box,
    from its top-left) put them in frame pixels."""
    fb = scene["frame_box"]
    expected = np.array([[fb[0] + fx * (fb[2] - fb[0]), fb[1] + fy * (fb[3] - fb[1])] for fx, fy in marks])
    tol = 0.02 / min(scene["scale"]) + 1e-4 * max(scene["frame"])
    np.testing.assert_allclose(points, expected, atol=tol)


def cxcywh(box: np.ndarray) -> Tuple[float, float, float, float]:
    return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2, box[2] - box[0], box[3] - box[1]


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scene=scenes(), row=st.integers(0, 49), cls=st.integers(0, 2))
def test_yolov5(scene: Dict[str, Any], row: int, cls: int) -> None:
    out = np.zeros((1, 50, 8), np.float32)
    out[0, row, :4] = cxcywh(scene["net_box"])
    out[0, row, 4] = 0.9
    out[0, row, 5 + cls] = 0.95
    assert_box(decode(scene, {"type": "yolov5"}, [out]), scene, cls)


@SETTINGS
@given(scene=scenes(), col=st.integers(0, 99), cls=st.integers(0, 2),
       layout=st.sampled_from(["channels_first", "boxes_first", "auto"]))
def test_yolov8_in_either_layout(scene: Dict[str, Any], col: int, cls: int, layout: str) -> None:
    out = np.zeros((1, 7, 100), np.float32)
    out[0, :4, col] = cxcywh(scene["net_box"])
    out[0, 4 + cls, col] = 0.8
    if layout == "boxes_first":
        out = np.ascontiguousarray(out.transpose(0, 2, 1))
    assert_box(decode(scene, {"type": "yolov8", "layout": layout}, [out]), scene, cls)


@SETTINGS
@given(scene=scenes(), level=st.integers(0, 2))
def test_yolox_undecoded_rows_on_a_non_square_grid(scene: Dict[str, Any], level: int) -> None:
    nw, nh = scene["net"]
    strides = [8, 16, 32]
    sizes = [(nh // s, nw // s) for s in strides]
    out = np.zeros((1, sum(h * w for h, w in sizes), 6), np.float32)
    cx, cy, w, h = cxcywh(scene["net_box"])
    s = strides[level]
    gx, gy = min(int(cx // s), nw // s - 1), min(int(cy // s), nh // s - 1)
    row = sum(a * b for a, b in sizes[:level]) + gy * (nw // s) + gx  # row-major over (H/s) x (W/s)
    out[0, row] = [cx / s - gx, cy / s - gy, math.log(w / s), math.log(h / s), 0.9, 0.9]
    assert_box(decode(scene, {"type": "yolox"}, [out]), scene, 0)


@SETTINGS
@given(scene=scenes(), fmt=st.sampled_from(["xyxy", "yxyx"]), normalized=st.booleans(),
       order=st.sampled_from([("boxes", "scores"), ("scores", "boxes")]), named=st.booleans(), cls=st.integers(1, 4))
def test_ssd_formats_and_output_order(scene: Dict[str, Any], fmt: str, normalized: bool, order: Tuple[str, str],
                                      named: bool, cls: int) -> None:
    nw, nh = scene["net"]
    x1, y1, x2, y2 = scene["net_box"]
    if normalized:
        x1, x2, y1, y2 = x1 / nw, x2 / nw, y1 / nh, y2 / nh
    boxes = np.zeros((1, 30, 4), np.float32)
    scores = np.zeros((1, 30, 5), np.float32)  # five classes: only the boxes have a last axis of 4
    scores[0, :, 0] = 0.99  # background everywhere: never reported
    boxes[0, 7] = [x1, y1, x2, y2] if fmt == "xyxy" else [y1, x1, y2, x2]
    scores[0, 7, cls] = 0.9
    outputs = [boxes, scores] if order == ("boxes", "scores") else [scores, boxes]
    spec = {"type": "ssd", "box_format": fmt, "normalized": normalized}
    if named:
        spec["outputs"] = list(order)
    assert_box(decode(scene, spec, outputs), scene, cls)


@SETTINGS
@given(scene=scenes(), order=st.permutations(["heatmap", "scale", "offset", "landmarks"]),
       marks=st.lists(st.tuples(st.floats(0.05, 0.95), st.floats(0.05, 0.95)), min_size=5, max_size=5))
def test_centerface_non_square_any_output_order_with_landmarks(scene: Dict[str, Any], order: List[str],
                                                                marks: List[Tuple[float, float]]) -> None:
    nw, nh = scene["net"]
    gw, gh = nw // 4, nh // 4
    arrays = {"heatmap": np.zeros((1, 1, gh, gw), np.float32), "scale": np.zeros((1, 2, gh, gw), np.float32),
              "offset": np.zeros((1, 2, gh, gw), np.float32), "landmarks": np.zeros((1, 10, gh, gw), np.float32)}
    cx, cy, w, h = cxcywh(scene["net_box"])
    x, y = min(int(cx // 4), gw - 1), min(int(cy // 4), gh - 1)
    arrays["heatmap"][0, 0, y, x] = 0.9
    arrays["scale"][0, :, y, x] = [math.log(h / 4), math.log(w / 4)]
    arrays["offset"][0, :, y, x] = [cy / 4 - 0.5 - y, cx / 4 - 0.5 - x]  # dy, dx
    for j, (fx, fy) in enumerate(marks):  # (dy, dx) pairs as fractions of the box, from its top-left
        arrays["landmarks"][0, 2 * j:2 * j + 2, y, x] = [fy, fx]
    det = decode(scene, {"type": "centerface", "outputs": list(order)}, [arrays[r] for r in order])
    assert_box(det, scene, 0)
    assert_points(det.data["landmarks"][0], scene, marks)


@SETTINGS
@given(scene=scenes(), perm=st.permutations([0, 1, 2, 3]), named=st.booleans(), cls=st.integers(0, 5))
def test_end2end_efficient_nms_outputs_in_any_order(scene: Dict[str, Any], perm: List[int], named: bool, cls: int) -> None:
    count = np.array([[2]], np.int32)
    boxes = np.zeros((1, 10, 4), np.float32)
    scores = np.zeros((1, 10), np.float32)
    classes = np.zeros((1, 10), np.int32)
    boxes[0, 0] = scene["net_box"]
    scores[0, 0], classes[0, 0] = 0.8, cls
    boxes[0, 1], scores[0, 1] = scene["net_box"], 0.1  # below the threshold
    boxes[0, 2], scores[0, 2] = scene["net_box"], 0.9  # padding beyond num_dets
    by_role = {"count": count, "boxes": boxes, "scores": scores, "classes": classes}
    roles = [["count", "boxes", "scores", "classes"][k] for k in perm]
    spec: Dict[str, Any] = {"type": "end2end", "score_threshold": 0.25}
    if named:
        spec.update(format="count_boxes_scores_classes", outputs=roles)
    assert_box(decode(scene, spec, [by_role[r] for r in roles]), scene, cls)


@SETTINGS
@given(scene=scenes(), fmt=st.sampled_from(["xyxy", "yxyx", "cxcywh"]), normalized=st.booleans(), cls=st.integers(0, 3))
def test_end2end_rows_every_box_format(scene: Dict[str, Any], fmt: str, normalized: bool, cls: int) -> None:
    nw, nh = scene["net"]
    x1, y1, x2, y2 = scene["net_box"]
    if normalized:
        x1, x2, y1, y2 = x1 / nw, x2 / nw, y1 / nh, y2 / nh
    box = {"xyxy": [x1, y1, x2, y2], "yxyx": [y1, x1, y2, x2],
           "cxcywh": [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]}[fmt]
    rows = np.zeros((1, 20, 6), np.float32)
    rows[0, 3] = box + [0.7, cls]
    spec = {"type": "end2end", "format": "rows", "box_format": fmt, "normalized": normalized}
    assert_box(decode(scene, spec, [rows]), scene, cls)


@SETTINGS
@given(scene=scenes(), order=st.permutations(["boxes", "scores", "indices"]), cls=st.integers(0, 2))
def test_end2end_selected_indices_in_any_order(scene: Dict[str, Any], order: List[str], cls: int) -> None:
    boxes = np.zeros((1, 40, 4), np.float32)
    scores = np.zeros((1, 3, 40), np.float32)
    x1, y1, x2, y2 = scene["net_box"]
    boxes[0, 11] = [y2, x2, y1, x1]  # NonMaxSuppression: any diagonal pair of corners, yxyx
    scores[0, cls, 11] = 0.6
    indices = np.array([[0, cls, 11], [0, (cls + 1) % 3, 5]], np.int64)  # the second scores 0
    by_role = {"boxes": boxes, "scores": scores, "indices": indices}
    spec = {"type": "end2end", "format": "selected_indices", "box_format": "yxyx", "outputs": list(order)}
    assert_box(decode(scene, spec, [by_role[r] for r in order]), scene, cls)


@pytest.mark.parametrize("resize,where", MODES)
@pytest.mark.parametrize("frame,net", [((1920, 1080), (320, 192)), ((480, 640), (640, 384)), ((1000, 300), (192, 320))])
def test_plan_transform_is_the_documented_placement(frame: Tuple[int, int], net: Tuple[int, int], resize: str,
                                                    where: str) -> None:
    transform, region = plan_transform(*frame, *net, resize, where)
    sx, sy, px, py = placement(*frame, *net, resize, where)
    assert (transform.scale_x, transform.scale_y, transform.x, transform.y) == pytest.approx((sx, sy, px, py))
    assert region == (int(px), int(py), round(frame[0] * sx), round(frame[1] * sy))
    # boxes outside the frame are clipped to its edges, [0, W] x [0, H]
    out = transform.inverse(np.array([[-50.0, -50.0, net[0] + 50.0, net[1] + 50.0]]), clip=True)
    np.testing.assert_allclose(out[0], [0, 0, frame[0], frame[1]])


@SETTINGS
@given(scene=scenes(), col=st.integers(0, 59), marks=st.lists(st.tuples(st.floats(0.05, 0.95), st.floats(0.05, 0.95)),
                                                             min_size=3, max_size=3),
       layout=st.sampled_from(["channels_first", "boxes_first"]))
def test_yolov8_pose_keypoints_come_back_to_the_frame(scene: Dict[str, Any], col: int, marks, layout: str) -> None:
    """keypoints [3, 3] (x, y, visibility) after one class score: 4 + 1 + 9 channels."""
    out = np.zeros((1, 14, 60), np.float32)
    nb = scene["net_box"]
    out[0, :4, col] = cxcywh(nb)
    out[0, 4, col] = 0.9
    for j, (fx, fy) in enumerate(marks):
        out[0, 5 + 3 * j: 8 + 3 * j, col] = [nb[0] + fx * (nb[2] - nb[0]), nb[1] + fy * (nb[3] - nb[1]), 0.5]
    if layout == "boxes_first":
        out = np.ascontiguousarray(out.transpose(0, 2, 1))
    det = decode(scene, {"type": "yolov8", "head": "pose", "keypoints": [3, 3], "layout": layout}, [out])
    assert_box(det, scene, 0)
    assert_points(det.data["keypoints"][0], scene, marks)


@SETTINGS
@given(scene=scenes(), col=st.integers(0, 59), protos_first=st.booleans(), cls=st.integers(0, 1))
def test_yolov8_segment_with_its_prototypes_on_either_side(scene: Dict[str, Any], col: int, protos_first: bool,
                                                           cls: int) -> None:
    pred = np.zeros((1, 4 + 2 + 32, 60), np.float32)
    pred[0, :4, col] = cxcywh(scene["net_box"])
    pred[0, 4 + cls, col] = 0.7
    pred[0, 6:, col] = 0.3  # mask coefficients: never read as scores
    protos = np.zeros((1, 32, 8, 8), np.float32)
    outputs = [protos, pred] if protos_first else [pred, protos]
    assert_box(decode(scene, {"type": "yolov8", "head": "segment", "num_classes": 2}, outputs), scene, cls)
