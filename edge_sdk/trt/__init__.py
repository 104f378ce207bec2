"""TensorRT engines: built on the machine that runs them, cached under a key of
(bundle hash, TensorRT version, GPU SM, precision, DLA core).

Importing this package does not import TensorRT or CUDA; the loaders do, when called.
"""
from __future__ import annotations

from edge_sdk.trt.cache import EngineCache, EngineKey, default_cache_dir
from edge_sdk.trt.device import GpuInfo, detect_gpu
from edge_sdk.trt.engine import EngineResult, build_engine, maybe_build_engine
from edge_sdk.trt.loaders import CreateConfig, EngineBytesFromNetwork, NetworkFromOnnxPath, SaveEngine
from edge_sdk.trt.profiles import BatchRange, batch_range

__all__ = [
    "BatchRange",
    "CreateConfig",
    "EngineBytesFromNetwork",
    "EngineCache",
    "EngineKey",
    "EngineResult",
    "GpuInfo",
    "NetworkFromOnnxPath",
    "SaveEngine",
    "batch_range",
    "build_engine",
    "default_cache_dir",
    "detect_gpu",
    "maybe_build_engine",
]
