"""A loaded model: a bundle, its activated backend, its input spec and its decoder settings.

    model = load_model("bundle", backend="auto", precision="auto", threads=1)
    detector = make_detector("full", model)          # edge_sdk.runtime.detectors.factory
    ...
    model.close()                                     # once no detector uses it any more

`load_model` does every step that can fail before anyone uses the model: the bundle's checks
(sha256 of each file, every manifest field), one input, the decoder built for it, the backend
activated, its inputs and outputs compared with the manifest's, and a warm-up inference decoded, so a model whose outputs do not fit its decoder fails here. The
pipeline loads its model this way, and so does the daemon's hot reload.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Union

import numpy as np

from edge_sdk.errors import BundleError
from edge_sdk.preprocess import InputSpec
from edge_sdk.runtime.backends.base import Backend


@dataclass
class Model:
    """An activated backend and what a detector needs around it."""

    backend: Backend  # activated
    input_spec: InputSpec
    decoder_spec: Dict[str, Any] = field(default_factory=dict)  # the bundle's "decoder" entry
    bundle: Any = None  # edge_sdk.manifest.Bundle; None for a backend injected without one
    precision: str = "fp32"  # the variant that runs
    precision_reason: str = ""  # why that variant (precision "auto"), for describe() and telemetry

    @property
    def bundle_hash(self) -> Optional[str]:
        return self.bundle.hash if self.bundle is not None else None

    def describe(self) -> Dict[str, Any]:
        """Bundle, backend and variant, for logs, the detect summary and telemetry."""
        backend = self.backend.describe()
        target = (self.bundle.get("target") or {}).get("name") if self.bundle is not None else None
        out = {
            "bundle_hash": self.bundle_hash,
            "target": target,
            "backend": str(backend.get("backend", type(self.backend).__name__)),
            "precision": self.precision,
            "precision_reason": self.precision_reason,
        }
        if backend.get("device_choice") is not None:  # the precision choice made on this device (TensorRT)
            out["device_choice"] = backend["device_choice"]
        return out

    def close(self) -> None:
        """Deactivate the backend (idempotent)."""
        if self.backend.is_active:
            self.backend.deactivate()


def load_model(
    bundle: Union[str, Path, Any],
    backend: str = "auto",
    precision: str = "auto",
    threads: int = 0,
    verify: bool = True,
    warm_runs: int = 2,
    progress: Optional[Callable[[str], None]] = None,
    workspace_limit: Optional[Callable[[], Optional[int]]] = None,
) -> Model:
    """Bundle folder (or a loaded Bundle) -> an activated, warmed Model.

    `progress(message)` hears each step of a TensorRT engine build (none when the engine is in
    the cache, or on ONNX Runtime); `workspace_limit()` bounds that build's workspace (MiB) when
    one is due (edge_sdk.trt.options.BuildOptions).

    Raises BundleError for a bundle that fails its checks or has other than one input,
    ConfigError for decoder settings the decoder refuses, BackendError when the backend
    cannot run the variant; nothing stays active after a failure.
    """
    from edge_sdk.decoders import make_decoder
    from edge_sdk.manifest import Bundle
    from edge_sdk.runtime.backends import select_backend

    if not isinstance(bundle, Bundle):
        bundle = Bundle.load(Path(bundle), verify=verify)
    specs = bundle.inputs
    if len(specs) != 1:
        raise BundleError(f"bundle {bundle.root} has {len(specs)} inputs; the runtime runs single-input models")
    spec = specs[0]
    decoder = make_decoder(bundle.decoder, spec)  # bad decoder settings fail before the backend loads
    options: Dict[str, Any] = {"progress": progress} if progress is not None else {}
    if workspace_limit is not None:
        options["workspace_limit"] = workspace_limit
    runner = select_backend(backend, bundle=bundle, precision=precision, threads=threads, **options)
    runner.activate()
    model = Model(runner, spec, dict(bundle.decoder), bundle,
                  precision=str(runner.precision), precision_reason=str(runner.precision_reason or ""))
    try:
        check_io(model)
        warm(model, decoder, warm_runs)
    except BaseException:
        model.close()
        raise
    return model


def check_io(model: Model) -> None:
    """The model the backend opened has the inputs (names, fixed dims) and the outputs (names)
    its manifest lists: BundleError otherwise (edge_sdk.manifest_check.check_model_io)."""
    from edge_sdk.manifest_check import check_model_io

    backend = model.backend

    names = backend.input_names
    where = f"the {model.precision} model of {model.bundle.root}"
    # what the backend tells of its inputs (None where it cannot tell: not checked)
    check_model_io(model.bundle, names, backend.output_names, where, {name: backend.input_shape(name) for name in names},
                   {name: backend.input_dtype(name) for name in names})


def warm(model: Model, decoder: Any = None, runs: int = 2) -> None:
    """Run the model on a blank input and decode it, so the first real frame pays no set-up
    cost and a model whose outputs do not fit its decoder fails now, before it is used."""
    from edge_sdk.decoders import make_decoder
    from edge_sdk.geometry import Placement

    spec = model.input_spec
    decoder = decoder if decoder is not None else make_decoder(model.decoder_spec, spec)
    tensor = np.zeros(spec.shape, dtype=np.dtype(spec.dtype))
    transform = Placement.affine(1.0, 1.0, 0.0, 0.0, spec.width, spec.height)
    for _ in range(runs):
        outputs = model.backend.infer({spec.name: tensor})
        decoder(outputs, [transform] * spec.batch)
