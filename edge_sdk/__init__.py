"""edge-sdk: build, run and watch vision models on NVIDIA Jetson and other embedded devices.

    import edge_sdk

    with edge_sdk.Pipeline("csi://0", bundle="bundle") as pipe:
        for result in pipe:
            edge_sdk.draw(result.frame, result)

Importing this package is cheap: no TensorRT, CUDA, ONNX Runtime, OpenCV or MQTT module is
loaded until a command or object that needs it is used; `Pipeline` and `draw` (edge_sdk.api)
load the runtime when first used. The records of the SDK's loggers are redacted of
credentials from import on (edge_sdk.redact).
"""
from __future__ import annotations

__version__ = "0.1.0"

from edge_sdk.errors import EdgeSdkError
from edge_sdk.redact import install_log_redaction

install_log_redaction()  # no camera password in a record of the SDK's loggers (edge_sdk.redact)

__all__ = ["EdgeSdkError", "Pipeline", "__version__", "draw"]

_LAZY = ("Pipeline", "draw")  # edge_sdk.api's names, loaded on first use (typing is not imported here either)


def __getattr__(name: str) -> object:
    if name in _LAZY:
        from edge_sdk import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'edge_sdk' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))
