"""edge-sdk: build, run and watch vision models on NVIDIA Jetson and other embedded devices.

Importing this package is cheap: no TensorRT, CUDA, ONNX Runtime, OpenCV or MQTT module is
loaded until a command or object that needs it is used.
"""
from __future__ import annotations

__version__ = "0.1.0"

from edge_sdk.errors import EdgeSdkError

__all__ = ["EdgeSdkError", "__version__"]
