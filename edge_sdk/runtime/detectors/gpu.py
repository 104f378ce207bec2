"""Mode ``full`` with preprocessing on the GPU: frame -> GpuPreprocessor -> backend -> decoder.

    detector = make_gpu_detector(model)   # model.backend.capabilities().on_stream (tensorrt)
    found = detector.detect(frame)    # a Frame; its device_ptr: the capture ring's upload, read in place

The preprocessor (edge_sdk.cuda.preprocess.GpuPreprocessor) queues its kernel on the backend's
own stream and the backend is fed the device tensor it fills, so nothing goes back to the host
between them: frame (mapped capture memory on a Jetson, read in place; or the slot's device copy
at `device_ptr` on a discrete GPU) -> network input in device memory -> TensorRT -> outputs. The
preprocessor replays a CUDA graph per frame geometry, the backend one per input; both on the one
stream, in order.

Stage latencies: `preprocess` and `infer` are GPU times from CUDA events recorded around each
stage's work on the stream; `decode` is host time. A Detector whose `preprocess_device` is "gpu"
tells the pipeline not to prepare inputs on the CPU (`prepared_spec` is None).
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from edge_sdk.errors import ConfigError
from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime.backends.base import Backend
from edge_sdk.runtime.detectors.base import DecoderDetector, check_input, clock, model_decoder
from edge_sdk.runtime.frame import Frame
from edge_sdk.runtime.types import FrameDetections


class GpuFullFrameDetector(DecoderDetector):
    """The whole frame, letterboxed on the GPU into the backend's input, one inference, decode.

    `backend` must run on a CUDA stream (its `capabilities().on_stream`: the CudaApi and the
    stream its `infer` runs on) and accept a device tensor as input: the TensorRT backend does. `cache`: the kernel cache
    (edge_sdk.cuda.compiler.KernelCache; default location when None).
    """

    mode = "full"
    preprocess_device = "gpu"
    prepared_spec: Optional[InputSpec] = None

    def __init__(self, backend: Backend, decoder: Any, input_spec: InputSpec, cache: Any = None, use_graphs: bool = True,
                 frame_memory: Optional[str] = None) -> None:
        from edge_sdk.cuda.preprocess import GpuPreprocessor

        caps = backend.capabilities()
        if not caps.on_stream:
            raise ConfigError(f"the GPU detector needs a backend that runs on a CUDA stream (tensorrt, activated); "
                              f"{backend.name} has none: use the CPU detector")
        api, stream = caps.cuda, caps.stream
        check_input(backend, input_spec)
        self.backend = backend
        self.decoder = decoder
        self.input_spec = input_spec
        self.cuda = api
        self.stream = stream
        self.preprocessor = GpuPreprocessor(input_spec, api, batch=1, stream=stream, cache=cache, use_graphs=use_graphs,
                                            frame_memory=frame_memory)
        self._feed = {input_spec.name: self.preprocessor.tensor[:1]}  # one view, bound once by the backend
        self._before = api.create_event()
        self._after = api.create_event()
        self._stage = ""
        self.frames = 0

    def detect(self, frame: Frame) -> FrameDetections:
        """Where the frame's `device_ptr` is set, its pixels are at that device address already,
        queued on the backend's stream (the capture ring's `upload(slot, backend.stream)`); else
        the preprocessor copies them from `image`. A `prepared` input is never used: this
        detector prepares on the GPU."""
        api, stream = self.cuda, self.stream
        self._stage = "preprocess"
        api.record(self._before, stream)
        transform = self.preprocessor.fill(frame.image, 0, device_ptr=frame.device_ptr)
        api.record(self._after, stream)
        self._stage = "infer"
        outputs = self.backend.infer(self._feed)  # waits for its outputs: the events above are complete too
        self._stage = "decode"
        t0 = clock()
        detections = self.decoder(outputs, (transform,))[0]
        latency = {"decode": (clock() - t0) * 1000.0}
        latency["preprocess"] = float(api.elapsed_ms(self._before, self._after))
        gpu_ms = self.backend.gpu_ms()
        latency["infer"] = float(gpu_ms) if gpu_ms is not None else 0.0
        latency["merge"] = 0.0
        self._stage = ""
        self.frames += 1
        return FrameDetections(detections, latency)

    @property
    def stage(self) -> str:
        return self._stage or "decode"

    def describe(self) -> Dict[str, Any]:
        return dict(super().describe(), **self.preprocessor.describe())

    def close(self) -> None:
        """Free the preprocessor's device buffers and the events (before the backend is
        deactivated). Idempotent."""
        self.preprocessor.close()
        for event in (self._before, self._after):
            if event is not None:
                self.cuda.destroy_event(event)
        self._before = self._after = None


def make_gpu_detector(model: Any, thresholds: Optional[Mapping[str, Any]] = None, cache: Any = None,
                      use_graphs: bool = True) -> GpuFullFrameDetector:
    """The GPU full-frame detector over a loaded Model whose backend runs on a CUDA stream.
    `thresholds` (score_threshold, nms_iou) override the bundle's decoder settings."""
    return build_gpu(model, model_decoder(model, thresholds), cache=cache, use_graphs=use_graphs)


def build_gpu(model: Any, decoder: Any, roi: Any = None, cache: Any = None, use_graphs: bool = True) -> GpuFullFrameDetector:
    """The registry's builder of mode ``full`` on a backend that runs on a CUDA stream (`roi` is
    not used: one pass over the whole frame)."""
    from edge_sdk.cuda.frames import measured_choice

    return GpuFullFrameDetector(model.backend, decoder, model.input_spec, cache=cache, use_graphs=use_graphs,
                                frame_memory=measured_choice(measured_frame_memory(model.backend)))


def measured_frame_memory(backend: Optional[Backend]) -> Any:
    """What `edge-sdk engine` measured of frame memory on this device, as the backend carries it
    whatever precision runs (edge_sdk.trt.choice.frame_memory), or None (no backend, or no
    measurement)."""
    memory = backend.frame_memory if backend is not None else None
    return memory if isinstance(memory, dict) else None
