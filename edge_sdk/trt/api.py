"""What the installed TensorRT can do, read once from the module: its version and the API
generation it speaks.

* TensorRT 8.x (JetPack 5.1 ships 8.5.2): networks need the EXPLICIT_BATCH creation flag;
  FP16 and INT8 are builder flags; INT8 is *implicit*: a calibrator
  (IInt8EntropyCalibrator2 / IInt8MinMaxCalibrator) hands TensorRT the shipped calibration
  cache, or calibrates on the shipped tensors; layers the builder kept in FP32 become layer
  precision constraints (with OBEY_PRECISION_CONSTRAINTS).
* TensorRT >= 10: every network is explicit batch (the flag is deprecated), implicit INT8
  calibration is deprecated (10.1) and removed in 11, so INT8 comes from the bundle's Q/DQ
  model (`model.int8.qdq.onnx`, already FP32 where the builder kept layers in FP32). Where the
  FP16/INT8 builder flags are gone too (11), the network is strongly typed and the precision
  comes from the model itself (`model.fp16.onnx`, the Q/DQ model).

Which generation is present is read from `tensorrt.__version__` and from the attributes the
module has. The tests run this code against fakes in tests/fakes/ that enforce those API
differences: they prove this package's logic, not TensorRT's behaviour.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from edge_sdk.errors import BackendError


@dataclass(frozen=True)
class TrtApi:
    version: str  # tensorrt.__version__, e.g. "8.5.2.2"
    major: int
    weak_flags: bool  # BuilderFlag.FP16 / INT8 exist
    implicit_int8: bool  # calibrator-based INT8 is available (8.x)
    strongly_typed: bool  # strongly typed networks can be built (flag on 10, always on >= 11)
    strongly_typed_flag: bool = False  # NetworkDefinitionCreationFlag.STRONGLY_TYPED must be set to get one
    prefer_constraints: bool = False  # BuilderFlag.PREFER_PRECISION_CONSTRAINTS exists (< 11)

    @property
    def explicit_batch_flag(self) -> bool:
        """8.x must ask for an explicit-batch network; >= 10 networks always are."""
        return self.major < 10

    @property
    def always_strongly_typed(self) -> bool:
        """TensorRT 11: every network is strongly typed; STRONGLY_TYPED is deprecated and ignored."""
        return self.major >= 11

    @property
    def short_version(self) -> str:
        return ".".join(self.version.split(".")[:3])


def trt_api(trt: Any) -> TrtApi:
    version = str(getattr(trt, "__version__", ""))
    m = re.match(r"(\d+)\.", version)
    if not m:
        raise BackendError(f"cannot read the TensorRT version ({version!r}); reinstall TensorRT (python3-libnvinfer)")
    major = int(m.group(1))
    flags = trt.BuilderFlag
    weak = hasattr(flags, "FP16") and hasattr(flags, "INT8")
    has_flag = hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
    return TrtApi(
        version=version,
        major=major,
        weak_flags=weak,
        implicit_int8=major < 10 and weak and hasattr(trt, "IInt8EntropyCalibrator2"),
        strongly_typed=major >= 11 or has_flag,
        strongly_typed_flag=major < 11 and has_flag,
        prefer_constraints=hasattr(flags, "PREFER_PRECISION_CONSTRAINTS"),
    )
