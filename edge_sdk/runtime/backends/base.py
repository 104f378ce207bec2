"""The runner interface every backend implements (activate / infer / deactivate), apart from the
registry in the package's face so that a backend module imports it without importing the registry
that imports the backend."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional

if TYPE_CHECKING:  # numpy only for annotations: runtime.config imports the package, and stays light
    import numpy as np


class Backend:
    """The runner interface every backend implements."""

    name = "backend"

    def __init__(self) -> None:
        self.input_names: List[str] = []
        self.output_names: List[str] = []
        self.is_active = False
        self.precision: Optional[str] = None  # the bundle variant that runs (None: a model file given directly)
        self.precision_reason = ""  # why that variant: see choose_precision

    def activate(self) -> None:
        raise NotImplementedError

    def infer(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        """Run one batch. Outputs are in `output_names` order. They may be buffers the backend
        reuses: valid until the next `infer` call; copy what must outlive it."""
        raise NotImplementedError

    def deactivate(self) -> None:
        raise NotImplementedError

    def describe(self) -> Dict[str, Any]:
        """What is running, for logs and telemetry: the backend's name, the variant and why it was
        chosen, and what the backend adds (providers, threads, model...)."""
        return {"backend": self.name, "precision": self.precision, "precision_reason": self.precision_reason}

    @property
    def cpu_bound(self) -> bool:
        """True when inference runs on the CPU's cores (and so owns them while it runs): the
        pipeline then keeps its capture thread out of the inference threads' way."""
        return False

    def __enter__(self) -> "Backend":
        if not self.is_active:
            self.activate()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.is_active:
            self.deactivate()
