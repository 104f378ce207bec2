"""What an engine build is asked for, in one value: `build_engine(bundle_dir, BuildOptions(...))`.

The defaults are those of `edge-sdk engine BUNDLE` with no option: precision best, on the GPU,
no workspace limit, the default engine cache, the engine taken from the cache when it is there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from edge_sdk.fsutil import PathLike
from edge_sdk.precision import BEST
from edge_sdk.targets import Target
from edge_sdk.trt.device import GpuInfo
from edge_sdk.trt.profiles import BatchRange


@dataclass(frozen=True)
class BuildOptions:
    """Options of one engine build.

    precision: fp32, fp16, int8 or best (every variant, INT8 where it passed the gate). dla_core:
    build for that DLA core with GPU fallback (None: the GPU). workspace_mib: the builder's
    workspace limit (None: TensorRT's default). timing_cache: a timing cache file to start from
    and save to. cache_dir: the engine cache (None: the default one). recalibrate: calibrate INT8
    again on the device. force: build even when the cache holds the engine. target, require: with
    require, a target whose GPU or TensorRT differs from this machine's is a TargetError. gpu: this
    machine's GPU (None: detected). allocate: how calibration batch buffers are made (None: the
    SDK's CUDA layer). progress: called with what the build is doing. batch: the batch range of the
    optimization profile for a model whose batch is dynamic (None: `batch_range()`, from the ROI
    settings). workspace_limit: called once a build is due (never for an engine from the cache),
    the largest workspace in MiB free memory allows then (None: no bound), or raises with the
    figures when the build cannot fit (a reload beside a running model: edge_sdk.daemon.shadow).
    """

    precision: str = BEST
    dla_core: Optional[int] = None
    workspace_mib: Optional[int] = None
    timing_cache: Optional[PathLike] = None
    cache_dir: Optional[PathLike] = None
    recalibrate: bool = False
    force: bool = False
    target: Union[None, str, Target] = None
    require: bool = False
    gpu: Optional[GpuInfo] = None
    allocate: Optional[Callable[[int], Any]] = None
    progress: Optional[Callable[[str], None]] = None
    batch: Optional[BatchRange] = None
    workspace_limit: Optional[Callable[[], Optional[int]]] = None
