"""What this machine offers the SDK, and how to fix what is missing (`edge-sdk doctor`).

Each probe is a small function `probe(env, plan) -> Check` that looks at one thing and never
raises: an error inside it becomes a `missing` row that names the error. Files are read under
`env.root` (a temporary folder standing in for `/` in tests: `etc/nv_tegra_release`,
`dev/video0`, `run/jtop.sock`...), commands run through `env.run`, modules are imported through
`env.module`, the GPU is asked through `env.gpu_probes`: all injectable.

What is *needed* comes from the device config (`plan_for`): its backend, source, broker and
bundle. Without a config the plan is the documented deployment — a Jetson running the TensorRT
backend — so on a PC without any of it the doctor says what is missing and exits 1.

    checks = diagnose(Env(), plan_for(config))
    ready = all(c.ok for c in checks if c.needed)
"""
from __future__ import annotations

import importlib
import re
import shutil
import socket
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

from edge_sdk.errors import EdgeSdkError

OK, MISSING, INFO = "ok", "missing", "info"
MIN_FREE_MB = 500  # the engine cache: an engine and the builder's temporary files
CONNECT_TIMEOUT_S = 3.0
COMMAND_TIMEOUT_S = 5.0

# L4T release (major, minor) -> JetPack release, for the releases the SDK meets (NVIDIA's tables).
JETPACK: Dict[str, str] = {
    "32.7": "4.6.x", "35.1": "5.0.2", "35.2": "5.1", "35.3": "5.1.1", "35.4": "5.1.2", "35.5": "5.1.3",
    "35.6": "5.1.4", "36.2": "6.0 DP", "36.3": "6.0", "36.4": "6.1/6.2",
}
_RELEASE = re.compile(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)")

APT_TRT = "sudo apt install python3-libnvinfer (JetPack); in a virtualenv create it with --system-site-packages"
APT_CV = ("pip uninstall opencv-python opencv-python-headless; sudo apt install python3-opencv "
          "(JetPack's OpenCV has GStreamer)")


@dataclass
class Check:
    """One row of the table: `status` ok / missing / info, what was `found`, and the `fix`."""

    key: str
    name: str
    status: str
    found: str
    fix: str = ""
    needed: bool = False

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _run_command(cmd: Sequence[str], timeout_s: float) -> Optional[str]:
    """stdout of `cmd`, or None when it is not installed, fails or takes longer than `timeout_s`."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _import(name: str) -> Optional[Any]:
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a broken install (ImportError, OSError of a missing .so) is "absent"
        return None


def _connect(host: str, port: int, timeout_s: float, tls: Optional[Dict[str, Any]]) -> None:
    """A TCP connection, and with `tls` a TLS handshake (ca_file, cert_file, key_file, insecure)."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        if tls is None:
            return
        import ssl

        ctx = ssl.create_default_context(cafile=tls.get("ca_file"))
        if tls.get("cert_file"):
            ctx.load_cert_chain(tls["cert_file"], tls.get("key_file"))
        if tls.get("insecure"):
            ctx.check_hostname = False
        with ctx.wrap_socket(sock, server_hostname=host) as wrapped:
            wrapped.do_handshake()


def _default_gpu_probes(root: Path) -> List[Callable[[], Any]]:
    from edge_sdk.trt import device

    return [device.probe_cuda_python, device.probe_pycuda, device.probe_nvidia_smi, lambda: device.probe_jetson(root)]


@dataclass
class Env:
    """What the probes may touch; every part can be replaced in tests."""

    root: Path = Path("/")
    run: Callable[[Sequence[str], float], Optional[str]] = _run_command
    module: Callable[[str], Optional[Any]] = _import
    connect: Callable[[str, int, float, Optional[Dict[str, Any]]], None] = _connect
    gpu_probes: Optional[List[Callable[[], Any]]] = None  # None: edge_sdk.trt.device's, with `root`

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")


@dataclass
class Plan:
    """What the config asks of the machine: which checks must pass, and their parameters."""

    needed: Set[str]
    source: str = ""
    broker: Any = None  # BrokerConfig
    bundle: Optional[str] = None
    cache_dir: Optional[Path] = None
    config: Optional[str] = None  # the file, for the report
    config_error: str = ""
    models_dir: Optional[str] = None  # where reload by name reads and reload by URL writes


# Without a config: the documented deployment, a Jetson with the TensorRT backend.
DEFAULT_NEEDS = {"l4t", "tensorrt", "cuda", "gpu", "opencv", "disk"}


def plan_for(config: Any = None, path: Optional[Path] = None, error: str = "") -> Plan:
    """The checks a DaemonConfig needs (see the module docstring); `error` when it did not load."""
    if config is None:
        needed = set(DEFAULT_NEEDS) | ({"config"} if error else set())
        return Plan(needed, config=str(path) if path else None, config_error=error)
    p = config.pipeline
    needed = {"opencv"}
    backend = p.backend
    if backend == "tensorrt":
        needed |= {"tensorrt", "cuda", "gpu", "disk"}
    elif backend in ("onnxruntime-cuda", "onnxruntime-tensorrt"):
        needed |= {"onnxruntime", "gpu"}
    elif backend in ("onnxruntime", "onnxruntime-cpu"):
        needed |= {"onnxruntime"}
    else:
        needed |= {"backend"}
    uri = p.source.uri or ""
    if uri.startswith("csi://"):
        needed |= {"gstreamer", "camera", "l4t"}
    elif uri.startswith("v4l2://"):
        needed |= {"camera"}
    elif uri.startswith("rtsp://") and str(p.source.options.get("api", "")) == "gstreamer":
        needed |= {"gstreamer"}
    if config.mqtt is not None:
        needed |= {"broker", "paho"}
    if p.bundle:
        needed |= {"bundle"}
    models = getattr(getattr(config, "device", None), "models_dir", None)
    if models:
        needed |= {"models"}
    return Plan(needed, source=uri, broker=config.mqtt, bundle=p.bundle, config=str(path) if path else None,
                models_dir=models)


# -- probes ------------------------------------------------------------------------------------
def probe_config(env: Env, plan: Plan) -> Check:
    if plan.config_error:
        return Check("config", "device config", MISSING, plan.config_error, "fix the key the message names")
    if plan.config:
        return Check("config", "device config", OK, plan.config)
    return Check("config", "device config", INFO, "none given: checked against a Jetson with the TensorRT backend",
                 "pass --config device.toml to check what that config needs")


def probe_l4t(env: Env, plan: Plan) -> Check:
    name = "L4T / JetPack"
    fix = "flash JetPack 5.1.x (L4T R35) with NVIDIA SDK Manager; Xavier NX has no JetPack 6"
    release = env.path("/etc/nv_tegra_release")
    if not release.is_file():
        return Check("l4t", name, MISSING, f"no {release}: not a Jetson (or not mounted into the container)",
                     fix + "; in a container mount /etc/nv_tegra_release read-only")
    text = release.read_text(errors="replace")
    m = _RELEASE.search(text)
    if not m:
        return Check("l4t", name, MISSING, f"{release} is not an L4T release line: {text[:60]!r}", fix)
    major, revision = m.group(1), m.group(2)
    minor = revision.split(".")[0]
    jetpack = JETPACK.get(f"{major}.{minor}", "unknown")
    model = env.path("/proc/device-tree/model")
    board = model.read_bytes().rstrip(b"\x00").decode("utf-8", "replace").strip() if model.is_file() else ""
    found = f"L4T R{major}.{revision} (JetPack {jetpack})" + (f", {board}" if board else "")
    if major != "35":
        return Check("l4t", name, MISSING, found + ": the SDK targets L4T R35 (JetPack 5.1.x)", fix)
    return Check("l4t", name, OK, found)


def probe_tensorrt(env: Env, plan: Plan) -> Check:
    trt = env.module("tensorrt")
    if trt is None:
        return Check("tensorrt", "TensorRT (Python)", MISSING, "import tensorrt fails", APT_TRT)
    version = str(getattr(trt, "__version__", "?"))
    if not version.startswith("8.5"):
        return Check("tensorrt", "TensorRT (Python)", OK, f"{version} (JetPack 5.1 ships 8.5.2; engines are tied to it)")
    return Check("tensorrt", "TensorRT (Python)", OK, version)


def _version_of(dist: str) -> str:
    try:
        from importlib.metadata import version
    except ImportError:  # pragma: no cover - Python 3.8 has importlib.metadata
        return "?"
    try:
        return version(dist)
    except Exception:  # noqa: BLE001 - not installed as a distribution (JetPack's apt packages)
        return "?"


def probe_cuda(env: Env, plan: Plan) -> Check:
    found = []
    if env.module("cuda") is not None:
        found.append(f"cuda-python {_version_of('cuda-python')}")
    if env.module("pycuda") is not None:
        found.append(f"pycuda {_version_of('pycuda')}")
    if not found:
        return Check("cuda", "CUDA bindings", MISSING, "neither cuda-python nor pycuda imports",
                     'pip install "edge-sdk[cuda]" (cuda-python 11.x for JetPack 5), or pip install pycuda on the device')
    return Check("cuda", "CUDA bindings", OK, ", ".join(found))


def probe_gpu(env: Env, plan: Plan) -> Check:
    probes = env.gpu_probes if env.gpu_probes is not None else _default_gpu_probes(env.root)
    from edge_sdk.trt.device import detect_gpu

    info = detect_gpu(probes)
    if info is None:
        return Check("gpu", "GPU and SM", MISSING, "no NVIDIA GPU found (cuda-python, pycuda, nvidia-smi, device tree)",
                     "run on the Jetson (or with --runtime nvidia in a container); the CPU backend needs none")
    note = "" if info.sm == "7.2" else " (Xavier NX is 7.2: an engine built here runs only on SM " + info.sm + ")"
    return Check("gpu", "GPU and SM", OK, f"{info.name}, SM {info.sm} ({info.source}){note}")


def probe_dla(env: Env, plan: Plan) -> Check:
    nodes = sorted(p.name for p in env.path("/dev").glob("nvhost-nvdla*")) if env.path("/dev").is_dir() else []
    cores = [n for n in nodes if re.fullmatch(r"nvhost-nvdla\d+", n)]
    if cores:
        return Check("dla", "DLA cores", OK, f"{len(cores)} ({', '.join(cores)})")
    return Check("dla", "DLA cores", INFO, "none (/dev/nvhost-nvdla*): layers run on the GPU",
                 "Xavier NX and Orin NX have 2; engine.dla_core needs one")


def probe_onnxruntime(env: Env, plan: Plan) -> Check:
    ort = env.module("onnxruntime")
    if ort is None:
        return Check("onnxruntime", "ONNX Runtime", MISSING, "import onnxruntime fails", 'pip install "edge-sdk[cpu]"')
    providers = ort.get_available_providers() if hasattr(ort, "get_available_providers") else []
    return Check("onnxruntime", "ONNX Runtime", OK, f"{getattr(ort, '__version__', '?')} ({', '.join(providers)})")


def probe_backend(env: Env, plan: Plan) -> Check:
    """backend = "auto": TensorRT or ONNX Runtime, whichever is there."""
    if env.module("tensorrt") is not None:
        return Check("backend", "backend (auto)", OK, "tensorrt")
    if env.module("onnxruntime") is not None:
        return Check("backend", "backend (auto)", OK, "onnxruntime (no TensorRT here)")
    return Check("backend", "backend (auto)", MISSING, "neither TensorRT nor ONNX Runtime imports",
                 APT_TRT + '; or pip install "edge-sdk[cpu]" for the CPU backend')


def probe_opencv(env: Env, plan: Plan) -> Check:
    cv2 = env.module("cv2")
    if cv2 is None:
        return Check("opencv", "OpenCV", MISSING, "import cv2 fails", "on a Jetson: sudo apt install python3-opencv; "
                     'elsewhere pip install "edge-sdk[cpu]"')
    return Check("opencv", "OpenCV", OK, str(getattr(cv2, "__version__", "?")))


def probe_gstreamer(env: Env, plan: Plan) -> Check:
    name = "OpenCV with GStreamer"
    cv2 = env.module("cv2")
    if cv2 is None:
        return Check("gstreamer", name, MISSING, "no OpenCV", APT_CV)
    for line in cv2.getBuildInformation().splitlines():
        if line.strip().startswith("GStreamer:"):
            value = line.split(":", 1)[1].strip()
            if "YES" in value:
                return Check("gstreamer", name, OK, value)
            break
    return Check("gstreamer", name, MISSING, "this OpenCV has no GStreamer (a pip wheel): csi:// cameras cannot open", APT_CV)


def probe_camera(env: Env, plan: Plan) -> Check:
    dev = env.path("/dev")
    videos = sorted(p.name for p in dev.glob("video*")) if dev.is_dir() else []
    argus = env.path("/usr/sbin/nvargus-daemon").exists()
    running = _process_running(env, "nvargus-daemon")
    parts = [("/dev/" + ", /dev/".join(videos)) if videos else "no /dev/video*",
             "nvargus-daemon " + ("running" if running else "installed, not running" if argus else "absent")]
    found = "; ".join(parts)
    uri = plan.source
    if uri.startswith("csi://"):
        if running and videos:
            return Check("camera", "cameras", OK, found)
        return Check("camera", "cameras", MISSING, found + f": {uri} needs a CSI camera and the Argus daemon",
                     "connect the camera (power off first), sudo systemctl restart nvargus-daemon; in a container "
                     "mount /tmp/argus_socket and --device /dev/video0")
    if uri.startswith("v4l2://"):
        wanted = uri[len("v4l2://"):] or "/dev/video0"
        if env.path(wanted).exists():
            return Check("camera", "cameras", OK, found)
        return Check("camera", "cameras", MISSING, found + f": {wanted} is not there",
                     f"plug the camera in (ls /dev/video*); in a container pass --device {wanted}")
    return Check("camera", "cameras", OK if videos or running else INFO, found,
                 "" if videos or running else "connect a CSI or USB camera for csi:// or v4l2:// sources")


def _process_running(env: Env, name: str) -> bool:
    proc = env.path("/proc")
    if not proc.is_dir():
        return False
    for comm in proc.glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == name:
                return True
        except OSError:
            continue
    return False


def probe_jtop(env: Env, plan: Plan) -> Check:
    sock = env.path("/run/jtop.sock")
    module = env.module("jtop")
    fix = ('pip install "edge-sdk[jetson]"; sudo systemctl enable --now jtop.service; in a container mount '
           "-v /run/jtop.sock:/run/jtop.sock")
    if not sock.exists():
        return Check("jtop", "jtop service", INFO, f"no {sock}: telemetry omits GPU load, temperatures and power", fix)
    if module is None:
        return Check("jtop", "jtop service", INFO, f"{sock} is there but jetson-stats is not installed", fix)
    return Check("jtop", "jtop service", OK, f"{sock}, jetson-stats {_version_of('jetson-stats')}")


def probe_paho(env: Env, plan: Plan) -> Check:
    if env.module("paho.mqtt.client") is None:
        return Check("paho", "MQTT client", MISSING, "import paho.mqtt.client fails", 'pip install "edge-sdk[mqtt]"')
    return Check("paho", "MQTT client", OK, f"paho-mqtt {_version_of('paho-mqtt')}")


def probe_broker(env: Env, plan: Plan) -> Check:
    cfg = plan.broker
    if cfg is None:
        return Check("broker", "broker", INFO, "no [mqtt] in the config: telemetry goes to stdout",
                     "add [mqtt] url = \"mqtts://broker:8883\" to the device config")
    where = cfg.redacted_url()
    tls = {"ca_file": cfg.ca_file, "cert_file": cfg.cert_file, "key_file": cfg.key_file,
           "insecure": cfg.tls_insecure} if cfg.tls else None
    try:
        env.connect(cfg.host, cfg.port, CONNECT_TIMEOUT_S, tls)
    except OSError as exc:  # refused, unreachable, timeout, TLS handshake (ssl.SSLError is an OSError)
        return Check("broker", "broker", MISSING, f"{where}: {type(exc).__name__}: {exc}",
                     "start the broker or fix [mqtt] url; check the firewall, and ca_file for mqtts")
    return Check("broker", "broker", OK, f"{where} reachable" + (" (TLS handshake ok)" if tls else ""))


def probe_disk(env: Env, plan: Plan) -> Check:
    from edge_sdk.trt.cache import EngineCache, EngineCacheError

    cache = EngineCache(plan.cache_dir)
    folder = cache.root
    try:
        cache.check()
    except EngineCacheError as exc:
        return Check("disk", "engine cache disk", MISSING, f"{folder}: refused (others could plant an engine)", str(exc))
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free_mb = shutil.disk_usage(str(probe)).free / 2 ** 20
    found = f"{free_mb:,.0f} MiB free for {folder}"
    if free_mb < MIN_FREE_MB:
        return Check("disk", "engine cache disk", MISSING, found + f" (needs {MIN_FREE_MB} MiB)",
                     "free disk space, or point EDGE_SDK_ENGINE_CACHE at a larger volume")
    return Check("disk", "engine cache disk", OK, found)


def probe_power(env: Env, plan: Plan) -> Check:
    mode = env.run(["nvpmodel", "-q"], COMMAND_TIMEOUT_S)
    clocks = env.run(["jetson_clocks", "--show"], COMMAND_TIMEOUT_S)
    fix = "sudo nvpmodel -m 8 (Xavier NX 20 W, 6 cores) and sudo jetson_clocks for steady clocks"
    if mode is None and clocks is None:
        return Check("power", "power mode and clocks", INFO, "nvpmodel and jetson_clocks absent (not a Jetson)", fix)
    parts = []
    if mode is not None:
        m = re.search(r"NV Power Mode:\s*(\S+)", mode)
        parts.append(m.group(1) if m else mode.strip().splitlines()[0] if mode.strip() else "nvpmodel: no answer")
    if clocks is not None:
        gpu = re.search(r"GPU\s+MinFreq=(\d+)\s+MaxFreq=(\d+)\s+CurrentFreq=(\d+)", clocks)
        if gpu:
            pinned = gpu.group(1) == gpu.group(2)
            parts.append(f"GPU {int(gpu.group(3)) / 1e6:.0f} MHz ({'pinned' if pinned else 'scaling'})")
    return Check("power", "power mode and clocks", OK if parts else INFO, ", ".join(parts) or "unknown", fix)


def probe_bundle(env: Env, plan: Plan) -> Check:
    if not plan.bundle:
        return Check("bundle", "bundle", INFO, "none in the config", "set bundle = \"/opt/models/bundle\"")
    from edge_sdk.manifest import Bundle

    try:
        bundle = Bundle.load(plan.bundle)
    except EdgeSdkError as exc:
        return Check("bundle", "bundle", MISSING, str(exc), "copy the bundle built by `edge-sdk build` there")
    target = (bundle.get("target") or {}).get("name")
    drift = "input_stats recorded" if bundle.input_stats is not None else "no input_stats (no drift alerts)"
    return Check("bundle", "bundle", OK, f"{plan.bundle}: {bundle.hash}, target {target}, {drift}")


def probe_models(env: Env, plan: Plan) -> Check:
    """The model folder: reload by URL and rollouts download into it, so the daemon's user must
    be able to write there (under the unit's ProtectSystem=strict only its state directory is)."""
    from edge_sdk.fsutil import write_problem

    if not plan.models_dir:
        return Check("models", "model folder", INFO, "no models_dir: reload by name or URL is off",
                     'set models_dir = "/var/lib/edge-sdk/bundles" in [device]')
    problem = write_problem(plan.models_dir)
    if problem is not None:
        return Check("models", "model folder", MISSING, problem + " (reload by URL and rollouts --url fail)",
                     "run the daemon's check as its user (sudo -u edge-sdk edge-sdk doctor --config ...); use "
                     "/var/lib/edge-sdk/bundles, the unit's state directory, or make the folder writable by that user")
    return Check("models", "model folder", OK, f"{plan.models_dir}: writable")


PROBES: Sequence[Callable[[Env, Plan], Check]] = (
    probe_config, probe_l4t, probe_tensorrt, probe_cuda, probe_gpu, probe_dla, probe_onnxruntime, probe_backend,
    probe_opencv, probe_gstreamer, probe_camera, probe_jtop, probe_paho, probe_broker, probe_disk, probe_power,
    probe_bundle, probe_models,
)
_NAMES = {"config": "device config", "l4t": "L4T / JetPack", "tensorrt": "TensorRT (Python)", "cuda": "CUDA bindings",
          "gpu": "GPU and SM", "dla": "DLA cores", "onnxruntime": "ONNX Runtime", "backend": "backend (auto)",
          "opencv": "OpenCV", "gstreamer": "OpenCV with GStreamer", "camera": "cameras", "jtop": "jtop service",
          "paho": "MQTT client", "broker": "broker", "disk": "engine cache disk", "power": "power mode and clocks",
          "bundle": "bundle", "models": "model folder"}


def safe(probe: Callable[[Env, Plan], Check], env: Env, plan: Plan) -> Check:
    """Run one probe; any exception becomes a `missing` row naming it (the doctor never raises)."""
    key = probe.__name__[len("probe_"):]
    try:
        check = probe(env, plan)
    except Exception as exc:  # noqa: BLE001 - a probe that fails says so in its row
        check = Check(key, _NAMES.get(key, key), MISSING, f"the check failed: {type(exc).__name__}: {exc}")
    check.needed = check.key in plan.needed
    return check


def diagnose(env: Optional[Env] = None, plan: Optional[Plan] = None) -> List[Check]:
    env = env or Env()
    plan = plan or plan_for()
    return [safe(probe, env, plan) for probe in PROBES]


def ready(checks: Sequence[Check]) -> bool:
    """True when every check the plan needs passed."""
    return all(c.ok for c in checks if c.needed)
