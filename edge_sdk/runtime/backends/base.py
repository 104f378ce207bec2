"""The runner interface every backend implements (activate / infer / deactivate), apart from the
registry in the package's face so that a backend module imports it without importing the registry
that imports the backend."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional

if TYPE_CHECKING:  # numpy only for annotations: runtime.config imports the package, and stays light
    import numpy as np

DEVICES = ("cpu", "gpu")


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
    """The runner interface every backend implements."""

    name = "backend"

    def __init__(self) -> None:
        self.input_names: List[str] = []
        self.output_names: List[str] = []
        self.is_active = False
        self.precision: Optional[str] = None  # the bundle variant that runs (None: a model file given directly)
        self.precision_reason = ""  # why that variant: see choose_precision
        self.device_choice: Optional[Dict[str, Any]] = None  # the precision choice measured on this device (TensorRT)

    def activate(self) -> None:
        raise NotImplementedError

    def infer(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        """Run one batch. Outputs are in `output_names` order. They may be buffers the backend
        reuses: valid until the next `infer` call; copy what must outlive it."""
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
