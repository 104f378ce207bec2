"""The one place heavy optional modules are imported.

Every other module asks here, so that `import edge_sdk` stays cheap and a missing package
raises :class:`MissingDependencyError` naming the extra that provides it.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from edge_sdk.errors import MissingDependencyError

_EXTRAS = {
    "onnx": ("host", ""),
    "onnxruntime": ("cpu", ""),
    "onnxslim": ("host", "graph fusion falls back to ONNX Runtime's optimizer without it"),
    "cv2": ("cpu", "on a Jetson use JetPack's OpenCV instead: sudo apt install python3-opencv"),
    "paho.mqtt.client": ("mqtt", ""),
    "jsonschema": ("mqtt", ""),
    "msgspec": ("mqtt", "consumers parse and validate in Python without it, several times slower"),
    "fastjsonschema": ("mqtt", "consumers validate with jsonschema without it, about 10 times slower"),
    "prometheus_client": ("mqtt", "needed by edge-sdk monitor --prometheus"),
    "matplotlib": ("report", ""),
    "jtop": ("jetson", "and start the jtop service: sudo systemctl start jtop.service"),
    "tensorrt": ("trt", "TensorRT comes with JetPack on a Jetson: sudo apt install python3-libnvinfer"),
    "pycuda.driver": ("trt", "on a Jetson: pip install pycuda (needs CUDA from JetPack)"),
    "cuda": ("trt", "pip install cuda-python"),
    "cuda.cudart": ("trt", "pip install cuda-python"),
    "cuda.bindings.runtime": ("trt", "pip install cuda-python"),
}


def require(name: str) -> ModuleType:
    """Import `name` or raise MissingDependencyError naming the extra to install."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        extra, hint = _EXTRAS.get(name, ("dev", ""))
        raise MissingDependencyError(name.split(".")[0], extra, hint) from exc


def available(name: str) -> bool:
    """True when `name` can be imported (imports it)."""
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def onnx() -> ModuleType:
    return require("onnx")


def ort() -> ModuleType:
    return require("onnxruntime")


def cv2() -> ModuleType:
    return require("cv2")


def tensorrt() -> ModuleType:
    return require("tensorrt")


def mqtt() -> ModuleType:
    return require("paho.mqtt.client")
