"""Typed errors. Every message says what went wrong and what to do about it."""
from __future__ import annotations


class EdgeSdkError(Exception):
    """Base class of every error edge-sdk raises on purpose."""

    exit_code = 1


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGINT asked a long-running command to stop (edge_sdk.cli._stop). It is raised
    in the main thread as Ctrl-C raises KeyboardInterrupt, so every `finally` and every
    `except KeyboardInterrupt` that cleans up on Ctrl-C cleans up on SIGTERM too. `forced`: a
    second signal came while the command was still stopping from the first."""

    def __init__(self, signum: int, forced: bool = False) -> None:
        super().__init__(signum)
        self.signum = int(signum)
        self.forced = forced

    @property
    def name(self) -> str:
        import signal

        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"

    def __str__(self) -> str:
        return f"stopped by {self.name}" + (" again, before the first stop ended" if self.forced else "")


class MissingDependencyError(EdgeSdkError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    exit_code = 3

    def __init__(self, module: str, extra: str, hint: str = "") -> None:
        self.module = module
        self.extra = extra
        msg = f"'{module}' is not installed. Install it with: pip install \"edge-sdk[{extra}]\""
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)


class ConfigError(EdgeSdkError, ValueError):
    """A configuration value is invalid. The message names the key and, where known, the file."""

    exit_code = 2


class ModelError(EdgeSdkError):
    """A model file is missing, corrupt, or not what the configuration says it is."""

    exit_code = 4


class CalibrationError(EdgeSdkError):
    """Calibration data is missing, unreadable or unusable."""

    exit_code = 5


class AccuracyGateError(EdgeSdkError):
    """A quantized variant lost more accuracy than allowed."""

    exit_code = 6


class TargetError(EdgeSdkError):
    """Unknown target, or a request the target cannot honour (such as a foreign GPU's engine)."""

    exit_code = 7


class BundleError(EdgeSdkError):
    """A bundle is missing files, fails its checksums or is from a newer schema."""

    exit_code = 8


class SourceError(EdgeSdkError):
    """A video source cannot be opened or stopped delivering frames."""

    exit_code = 9


class BackendError(EdgeSdkError):
    """An inference backend cannot be created or cannot run the model."""

    exit_code = 10


class OutputError(EdgeSdkError):
    """A video output (RTSP server, H.264 file, display) cannot start or its encoder died; the
    message names the package to install or the setting to change."""

    exit_code = 12


class RolloutFailed(EdgeSdkError):
    """A device failed a rollout's gate, refused its command or rolled itself back: the rollout
    stopped and the devices it had promoted went back to their previous bundle."""

    exit_code = 6


class RolloutTimeout(EdgeSdkError):
    """Devices stayed offline or busy past the rollout's timeout: it stopped where it was, and
    the same command goes on from there."""

    exit_code = 13


class RolloutUndecided(EdgeSdkError):
    """A device's shadow compared enough frames but its scene held too few detections to decide
    a gate on detections (a dark or empty scene: a blind candidate agrees with nothing):
    nothing was promoted in the step, its shadows were aborted, and the same command tries again."""

    exit_code = 15


class CudaError(BackendError):
    """The CUDA layer cannot run: no device or driver, a kernel that does not compile, no memory.

    A BackendError, so the CLI exits with the backend's code; the message names cause and fix.
    """


class KernelUnavailableError(CudaError):
    """A GPU kernel cannot be compiled or loaded here: no nvcc in the image (pycuda), a CUDA header
    missing (NVRTC), an image the driver refuses, a GPU the compiler does not know. GPU
    preprocessing gives way to the CPU preprocessor; the message names cause and fix."""


class KernelArchitectureError(KernelUnavailableError):
    """The kernel compiler does not know the GPU's architecture (NVRTC 11.8 stops at sm_90):
    GPU preprocessing gives way to the CPU preprocessor."""
