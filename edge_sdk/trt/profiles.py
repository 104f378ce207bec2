"""The batch dimension of an engine: the range written as an optimization profile when the
network's batch is dynamic, and the fixed-shape profile INT8 calibration runs at."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from edge_sdk.errors import BackendError, ConfigError, ModelError


@dataclass(frozen=True)
class BatchRange:
    """The batch dimension of the optimization profile written into the engine: ROI crops run
    up to `max` at a time; TensorRT picks its kernels for `opt`."""

    min: int
    opt: int
    max: int

    def __post_init__(self) -> None:
        values = (self.min, self.opt, self.max)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in values) or not 1 <= self.min <= self.opt <= self.max:
            raise ConfigError(
                f"the engine's batch range must satisfy 1 <= min <= opt <= max, got min {self.min}, opt {self.opt}, "
                f"max {self.max}: check --opt-batch / --max-batch (or roi.max_fine_inputs)"
            )

    @property
    def static(self) -> bool:
        return self.min == self.opt == self.max

    def to_dict(self) -> Dict[str, int]:
        return {"min": self.min, "opt": self.opt, "max": self.max}


def batch_range(max_batch: Optional[int] = None, opt_batch: Optional[int] = None, dla: bool = False,
                recorded: Optional[Mapping[str, Any]] = None) -> BatchRange:
    """min 1; max from `max_batch`, else the bundle's range (`recorded`: the manifest's `batch`
    entry, what `edge-sdk build --max-batch` checked), else the ROI settings' `max_fine_inputs`
    (fine-pass model inputs per frame); opt from `opt_batch`, else the bundle's preferred batch
    (where it lies within max), else max (the fullest fine pass is the one that bounds a frame's
    latency). On the DLA (`dla`) the engine runs exactly `opt` inputs at a time (static shapes
    only), so opt defaults to 1 there: the default mode, full, runs one frame."""
    recorded = recorded if isinstance(recorded, Mapping) else None
    if max_batch is None and recorded is not None:
        max_batch = int(recorded["max"])
    if max_batch is None:
        from edge_sdk.roi.config import RoiConfig

        max_batch = max(1, RoiConfig().max_fine_inputs)
    if opt_batch is None and not dla and recorded is not None and int(recorded["opt"]) <= max_batch:
        opt_batch = int(recorded["opt"])
    if opt_batch is None:
        opt_batch = 1 if dla else max_batch
    return BatchRange(1, opt_batch, max_batch)


def add_batch_profile(
    trt: Any, builder: Any, network: Any, config: Any, batch: BatchRange, input_shapes: Mapping[str, Sequence[int]]
) -> Tuple[Optional[Dict[str, List[List[int]]]], Any, str]:
    """Write an optimization profile on the batch dimension when the network's batch is dynamic.

    Returns ({input: [min, opt, max]} or None, the profile or None, a note). Other dynamic dims
    take the manifest's value; an input with no manifest shape and a dynamic dim other than the
    batch is a ModelError.
    """
    inputs = [network.get_input(i) for i in range(network.num_inputs)]
    dynamic = [t for t in inputs if any(int(d) < 0 for d in t.shape)]
    if not dynamic:
        fixed = ", ".join(f"{t.name} {list(t.shape)}" for t in inputs)
        return None, None, f"the model's batch is fixed ({fixed}): built without an optimization profile"
    profile = builder.create_optimization_profile()
    shapes: Dict[str, List[List[int]]] = {}
    for t in inputs:
        dims = [int(d) for d in t.shape]
        known = list(input_shapes.get(t.name) or [])
        rest = []
        for k, d in enumerate(dims[1:], start=1):
            if d >= 0:
                rest.append(d)
            elif k < len(known) and int(known[k]) > 0:
                rest.append(int(known[k]))
            else:
                raise ModelError(
                    f"input {t.name} has dynamic dimension {k} ({dims}) and the manifest gives no size for it; "
                    "rebuild the bundle with a fixed input size"
                )
        if dims and dims[0] < 0:
            low, mid, high = ([b] + rest for b in (batch.min, batch.opt, batch.max))
        else:
            low = mid = high = dims[:1] + rest
        try:
            profile.set_shape(t.name, low, mid, high)
        except (RuntimeError, ValueError, TypeError) as exc:
            raise BackendError(f"TensorRT refused the optimization profile of {t.name} ({low}, {mid}, {high}): {exc}") from exc
        shapes[t.name] = [low, mid, high]
    if config.add_optimization_profile(profile) < 0:
        raise BackendError(f"TensorRT refused the optimization profile {shapes}")
    names = ", ".join(t.name for t in dynamic)
    return shapes, profile, f"dynamic batch on {names}: optimization profile batch {batch.min}..{batch.max}, tuned for {batch.opt}"


def dynamic_batch(network: Any) -> bool:
    return any(len(t.shape) and int(t.shape[0]) < 0 for t in (network.get_input(i) for i in range(network.num_inputs)))


def calibration_profile(trt: Any, builder: Any, network: Any, config: Any, input_shapes: Mapping[str, Sequence[int]]) -> bool:
    """On a dynamic-shape network, calibrate at the manifest's shape (what the calibration
    tensors were made for): a profile with min = opt = max. False where the API has none."""
    if not hasattr(config, "set_calibration_profile"):
        return False
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        t = network.get_input(i)
        shape = [int(v) for v in input_shapes.get(t.name) or t.shape]
        profile.set_shape(t.name, shape, shape, shape)
    config.set_calibration_profile(profile)
    return True
