"""Factories for runtime and CLI tests: tiny ONNX models, bundles, videos and fake sources."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from edge_sdk.fsutil import sha256_file
from edge_sdk.manifest import MANIFEST, SCHEMA_VERSION
from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime.sources import Source

CENTERFACE_SPEC = InputSpec(name="input.1", shape=[1, 3, 384, 640], color="BGR", resize="letterbox")
CENTERFACE_DECODER = {"type": "centerface", "score_threshold": 0.5, "nms_iou": 0.3}


def tiny_centerface_model(path: Path, height: int = 32, width: int = 64) -> Path:
    """A tiny model with CenterFace's four outputs: the heatmap is sigmoid((mean of a 4x4 cell
    of the image - 128) / 4), so bright cells light up; boxes are 4x4 px (scale 0), no offset.
    Written without the `onnx` package (tests/onnx_proto.py), so the device test set has it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(tiny_centerface_bytes(height, width))
    return path


def tiny_centerface_bytes(height: int = 32, width: int = 64, batch: Union[int, str] = 1) -> bytes:
    """The tiny model's bytes; `batch` is its batch dimension (a str: symbolic, any batch runs)."""
    from onnx_proto import make_graph, make_model, make_node, make_tensor, value_info

    h4, w4 = height // 4, width // 4
    nodes = [
        make_node("AveragePool", ["input.1"], ["pooled"], kernel_shape=[4, 4], strides=[4, 4]),
        make_node("ReduceMean", ["pooled"], ["gray"], axes=[1], keepdims=1),
        make_node("Sub", ["gray", "c128"], ["centred"]),
        make_node("Mul", ["centred", "c025"], ["logit"]),
        make_node("Sigmoid", ["logit"], ["537"]),
        make_node("Mul", ["pooled", "zero"], ["z3"]),
        make_node("Concat", ["z3", "z3"], ["z6"], axis=1),
        make_node("Slice", ["z6", "s0", "s2", "s_axis"], ["538"]),
        make_node("Slice", ["z6", "s0", "s2", "s_axis"], ["539"]),
        make_node("Concat", ["z6", "z3", "z3"], ["z12"], axis=1),
        make_node("Slice", ["z12", "s0", "s10", "s_axis"], ["540"]),
    ]
    inits = [
        make_tensor("c128", np.array(128.0, np.float32)),
        make_tensor("c025", np.array(0.25, np.float32)),
        make_tensor("zero", np.array(0.0, np.float32)),
        make_tensor("s0", np.array([0], np.int64)),
        make_tensor("s2", np.array([2], np.int64)),
        make_tensor("s10", np.array([10], np.int64)),
        make_tensor("s_axis", np.array([1], np.int64)),
    ]
    outs = [value_info(name, [batch, c, h4, w4]) for name, c in (("537", 1), ("538", 2), ("539", 2), ("540", 10))]
    graph = make_graph(nodes, "tiny_centerface", [value_info("input.1", [batch, 3, height, width])], outs, inits)
    return make_model(graph, opset=13, ir_version=7)


def write_bundle(root: Path, model: Path, spec: InputSpec, decoder: Dict[str, Any], schema_version: int = SCHEMA_VERSION,
                 extra_variants: Sequence[str] = ()) -> Path:
    """A bundle folder Bundle.load accepts: model.onnx (+ variants as copies) and manifest.json."""
    root.mkdir(parents=True, exist_ok=True)
    files = {"model.onnx": model.read_bytes()}
    names = {"fp16": "model.fp16.onnx", "int8": "model.int8.qdq.onnx"}
    for variant in extra_variants:
        files[names[variant]] = files["model.onnx"]
    for rel, data in files.items():
        (root / rel).write_bytes(data)
    manifest = {
        "schema_version": schema_version,
        "model": {"name": model.stem, "source_sha256": sha256_file(model)},
        "target": {"name": "host", "sm": None, "tensorrt": None},
        "inputs": [spec.to_dict()],
        "outputs": [],
        "decoder": decoder,
        "precision": "fp32",
        "files": {rel: sha256_file(root / rel) for rel in files},
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return root


def scene(index: int, width: int = 128, height: int = 96, square: int = 16) -> np.ndarray:
    """A dark frame with a bright square whose position depends on `index`; pixel (0,0) = index % 256."""
    frame = np.full((height, width, 3), 20, np.uint8)
    x = (index * 8) % (width - square)
    y = (index * 4) % (height - square)
    frame[y : y + square, x : x + square] = 250
    frame[0, 0] = index % 256
    return frame


def write_video(path: Path, frames: int, width: int = 128, height: int = 96, fps: float = 10.0, fourcc: str = "MJPG") -> Path:
    import cv2

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), fps, (width, height))
    assert writer.isOpened(), f"this OpenCV cannot write {fourcc} to {path.suffix}"
    for i in range(frames):
        writer.write(scene(i, width, height))
    writer.release()
    return path


class FakeCamera(Source):
    """A live source that delivers numbered frames and fails in scripted ways.

    `fail_reads`: frame counts after which one read raises (the camera vanished);
    `fail_opens`: how many reopen attempts fail after each loss before it comes back.
    `stop_after`: after this many frames every read returns None and opens fail (gone for good).
    """

    live = True

    def __init__(self, width: int = 64, height: int = 48, fail_reads: Sequence[int] = (), fail_opens: int = 0,
                 stop_after: Optional[int] = None, channels: int = 3) -> None:
        self.name = "fake://camera"
        self.width, self.height, self.channels = width, height, channels
        self.fail_reads = set(fail_reads)
        self.fail_opens = fail_opens
        self.stop_after = stop_after
        self.delivered = 0
        self.opens = 0
        self.is_open = False
        self._opens_to_fail = 0
        self.gate: Optional[threading.Semaphore] = None  # when set, each read waits for a permit

    def open(self) -> None:
        self.opens += 1
        if self._opens_to_fail > 0 or (self.stop_after is not None and self.delivered >= self.stop_after):
            self._opens_to_fail -= 1
            raise OSError("camera not found")
        self.is_open = True

    def read(self, out: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
        if self.gate is not None:
            self.gate.acquire()
        if not self.is_open:
            raise OSError("read from a closed camera")
        if self.stop_after is not None and self.delivered >= self.stop_after:
            return None
        if self.delivered in self.fail_reads:
            self.fail_reads.discard(self.delivered)
            self._opens_to_fail = self.fail_opens
            raise OSError("camera vanished")
        frame = scene(self.delivered, self.width, self.height)
        self.delivered += 1
        if self.channels == 1:
            return frame[:, :, 0].copy()
        return frame

    def close(self) -> None:
        self.is_open = False


class ListSource(Source):
    """A finite source over a list of frames (any shape/channels), or raising at an index."""

    def __init__(self, frames: List[Any], live: bool = False) -> None:
        self.name = "list://"
        self.frames = frames
        self.live = live
        self.frame_count = len(frames)
        self._i = 0

    def open(self) -> None:
        self._i = 0

    def read(self, out: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
        if self._i >= len(self.frames):
            return None
        item = self.frames[self._i]
        self._i += 1
        if isinstance(item, BaseException):
            raise item
        return item


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class RecordingEvent(threading.Event):
    """A stop Event whose waits advance a fake clock instead of sleeping, and are recorded."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.waits: List[float] = []

    def wait(self, timeout=None) -> bool:  # type: ignore[override]
        self.waits.append(round(timeout, 6))
        self.clock.now += timeout
        return False


def drain(capture: Any, events: Optional[List[Dict[str, Any]]] = None, in_flight: int = 0) -> List[int]:
    """Consume a Capture to the end; the pixel (0, 0) of each frame holds its source number.
    `events`: collects the frames' events; `in_flight`: frames the consumer holds before it
    gives the oldest back."""
    got: List[int] = []
    held: List[Any] = []
    while True:
        slot = capture.get(timeout=10)
        if slot is None:
            for old in held:
                capture.release(old)
            return got
        got.append(int(slot.frame[0, 0, 0]))
        if events is not None:
            events.extend(slot.events)
        held.append(slot)
        while len(held) > in_flight:
            capture.release(held.pop(0))


def fake_tensorrt_model(root: Path, cuda: Any, spec: InputSpec, monkeypatch: Any) -> Any:
    """A Model on the TensorRT backend over the fake TensorRT runtime (tests/fakes) on the fake
    CUDA `cuda`, activated: its engine computes what tiny_centerface_model does. The caller
    deactivates `model.backend`."""
    import sys

    from edge_sdk.manifest import Bundle
    from edge_sdk.runtime.backends.tensorrt import TensorRTBackend
    from edge_sdk.runtime.model import Model
    from fakes.fake_tensorrt import fake_model
    from fakes.fake_tensorrt_runtime import FakeTensorRTRuntime85

    monkeypatch.setitem(sys.modules, "tensorrt", FakeTensorRTRuntime85(cuda=cuda))
    model_file = root / "fake.json"
    root.mkdir(parents=True, exist_ok=True)
    model_file.write_bytes(fake_model("model.onnx", "fp32", [{"name": spec.name, "shape": list(spec.shape)}]))
    bundle = Bundle.load(write_bundle(root / "trt-bundle", model_file, spec, CENTERFACE_DECODER))
    backend = TensorRTBackend.from_bundle(bundle, "fp32", cuda=cuda, cache_dir=root / "engines")
    backend.activate()
    return Model(backend, spec, dict(bundle.decoder), bundle)


def stream_model(cuda: Any, spec: InputSpec, infer: Any) -> Any:
    """A loaded Model's stand-in whose backend runs on a stream of `cuda` (what make_detector looks
    at to preprocess on the GPU), answering `infer(x)` with CenterFace's outputs for input x."""
    from edge_sdk.runtime.backends.base import Backend, Capabilities

    class StreamBackend(Backend):
        name = "tensorrt"

        def __init__(self) -> None:
            super().__init__()
            self.input_names = [spec.name]
            self.cuda, self.stream = cuda, cuda.create_stream()

        def capabilities(self) -> Capabilities:
            return Capabilities(device="gpu", cuda=self.cuda, stream=self.stream)

        def infer(self, feed: Any) -> List[np.ndarray]:
            return infer(feed[spec.name])

    model = type("Model", (), {})()
    model.backend, model.input_spec = StreamBackend(), spec
    model.decoder_spec = {"type": "centerface", "score_threshold": 0.5, "nms_iou": 0.3}
    return model
