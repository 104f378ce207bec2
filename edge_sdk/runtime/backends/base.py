"""The runner interface every backend implements (activate / infer / deactivate), apart from the
registry in the package's face so that a backend module imports it without importing the registry
that imports the backend."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from edge_sdk.errors import BackendError

if TYPE_CHECKING:  # numpy only for annotations: runtime.config imports the package, and stays light
    import numpy as np

DEVICES = ("cpu", "gpu")
NOT_ACTIVE = "the backend is not active; call activate() or use it as a context manager"


def device_pointer(value: Any) -> Optional[int]:
    """The device address of a device tensor (`__cuda_array_interface__`, or an int `.ptr` with
    no host array interface), else None (a host array)."""
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    if hasattr(value, "__array_interface__"):
        return None
    ptr = getattr(value, "ptr", None)
    return int(ptr) if isinstance(ptr, int) else None


class TensorSpec:
    """What a backend knows of one input, for `Backend.infer` to check a feed against: the shape
    (an int per fixed dimension, None where any size goes), the element type, and how a host array
    of another type may be cast on its way in (numpy's `casting`; a device tensor is bound as it
    is, so its type must match). `shown` is the shape as the error message prints it, `what` the
    word for the model ("model", "engine")."""

    __slots__ = ("shape", "dtype", "casting", "shown", "what", "_tail")

    def __init__(self, shape: Sequence[Any], dtype: Any, casting: str = "same_kind", shown: Optional[Sequence[Any]] = None,
                 what: str = "model") -> None:
        self.shape = tuple(d if isinstance(d, int) and not isinstance(d, bool) and d >= 0 else None for d in shape)
        self.dtype = dtype
        self.casting = casting
        self.shown = list(shape if shown is None else shown)
        self.what = what
        # the common case, one free batch dimension, compares as one tuple (infer runs per frame)
        free_batch = self.shape[:1] == (None,) and None not in self.shape[1:]
        self._tail = self.shape[1:] if free_batch else None

    def check(self, name: str, value: Any) -> None:
        """BackendError naming the input, what it is and what the model expects."""
        shape = getattr(value, "shape", None)
        if shape is None:  # a nested list: what numpy makes of it
            import numpy as np

            value = np.asarray(value)
            shape = value.shape
        want, tail = self.shape, self._tail
        fits = (shape == want or (tail is not None and len(shape) == len(want) and shape[1:] == tail)
                or (len(shape) == len(want) and all(d is None or d == s for d, s in zip(want, shape))))
        if not fits:
            raise BackendError(f"input {name!r} has shape {[int(s) for s in shape]}, the {self.what} expects {self.shown}")
        given = getattr(value, "dtype", None)
        if given is self.dtype or given is None or self.dtype is None or given == self.dtype:
            return
        import numpy as np

        given = np.dtype(given)
        if device_pointer(value) is not None or not np.can_cast(given, self.dtype, casting=self.casting):
            raise BackendError(f"input {name!r} is {given.name}, the {self.what} expects {np.dtype(self.dtype).name}")


@dataclass(frozen=True)
class Capabilities:
    """What a backend tells the pipeline about where its work runs, in one value: the pipeline's
    execution plan is worked out from it, never from probing the backend's attributes.

    `device` "cpu": inference runs on this machine's CPU cores (and owns `threads` of them while it
    runs; 0: the runtime's default, every core). "gpu": it runs on an accelerator; when it runs on
    a CUDA stream, `cuda` is the CudaApi it uses and `stream` that stream, and a GPU preprocessor
    may queue its kernels there and feed it a device tensor.
    """

    device: str
    threads: int = 0
    cuda: Any = None
    stream: Any = None

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 0:
            raise ValueError(f"threads must be an int >= 0, got {self.threads!r}")

    @property
    def cpu_bound(self) -> bool:
        """Inference runs on the CPU's cores: the capture thread keeps out of its way."""
        return self.device == "cpu"

    @property
    def on_stream(self) -> bool:
        """Inference runs on a CUDA stream a GPU preprocessor can queue on."""
        return self.cuda is not None and self.stream is not None


class Backend:
    """The runner interface every backend implements, in the shape of Polygraphy's BaseRunner:
    `infer` is defined here once. It refuses a backend that is not active and a feed that lacks
    an input or gives one of the wrong shape or type (`input_specs`, filled by `activate`), then
    calls the backend's `_infer_impl` with a feed that has passed those checks."""

    name = "backend"

    def __init__(self) -> None:
        self.input_names: List[str] = []
        self.output_names: List[str] = []
        self.is_active = False
        self.precision: Optional[str] = None  # the bundle variant that runs (None: a model file given directly)
        self.precision_reason = ""  # why that variant: see choose_precision
        self.device_choice: Optional[Dict[str, Any]] = None  # the precision choice measured on this device (TensorRT)
        # the frame memory measured on this device (TensorRT: `edge-sdk engine`'s report), whatever the precision
        self.frame_memory: Optional[Dict[str, Any]] = None
        self.input_specs: Dict[str, TensorSpec] = {}  # what infer checks each input against (set by activate)

    def activate(self) -> None:
        raise NotImplementedError

    def infer(self, feed: Mapping[str, Any]) -> List[np.ndarray]:
        """Run one batch. Outputs are in `output_names` order. They may be buffers the backend
        reuses: valid until the next `infer` call; copy what must outlive it.

        A BackendError, before anything runs, when the backend is not active, an input is missing,
        or an input's shape or type is not the one its TensorSpec allows."""
        if not self.is_active:
            raise BackendError(NOT_ACTIVE)
        specs = self.input_specs
        for name in self.input_names:
            if name not in feed:
                missing = [n for n in self.input_names if n not in feed]
                raise BackendError(f"missing model inputs {missing}; the model's inputs are {self.input_names}")
            spec = specs.get(name)
            if spec is not None:
                spec.check(name, feed[name])
        return self._infer_impl(feed)

    def _infer_impl(self, feed: Mapping[str, Any]) -> List[np.ndarray]:
        """Run one batch of a checked feed (see `infer`)."""
        raise NotImplementedError

    def deactivate(self) -> None:
        raise NotImplementedError

    def input_shape(self, name: str) -> Optional[List[Any]]:
        """The shape the opened model gives input `name` (a str for a symbolic dimension), or
        None where the backend cannot tell: the model is checked against its manifest with it."""
        return None

    def input_dtype(self, name: str) -> Any:
        """The numpy dtype of input `name` in the opened model, or None where the backend cannot tell."""
        return None

    def batch_range(self, name: str) -> Optional[Tuple[int, int]]:
        """(fewest, most) rows one call of input `name` takes where the opened model says so
        itself (TensorRT: the engine's optimization profile); None: read it from `input_shape`."""
        return None

    def gpu_ms(self) -> Optional[float]:
        """GPU time of the last `infer` in milliseconds, for backends that time their work on the
        device with events; None for the others (their infer latency is host time)."""
        return None

    def describe(self) -> Dict[str, Any]:
        """What is running, for logs and telemetry: the backend's name, the variant and why it was
        chosen, and what the backend adds (providers, threads, model...)."""
        return {"backend": self.name, "precision": self.precision, "precision_reason": self.precision_reason}

    @property
    def cpu_bound(self) -> bool:
        """True when inference runs on the CPU's cores (and so owns them while it runs): the
        pipeline then keeps its capture thread out of the inference threads' way."""
        return False

    def capabilities(self) -> Capabilities:
        """Where this backend's work runs (see Capabilities): a backend on an accelerator says
        "gpu" (and gives its CUDA stream once active), one on the CPU says how many threads."""
        return Capabilities(device="cpu" if self.cpu_bound else "gpu")

    def __enter__(self) -> "Backend":
        if not self.is_active:
            self.activate()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.is_active:
            self.deactivate()
