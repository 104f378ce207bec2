"""Host health figures: CPU and memory (psutil if installed, else /proc), and on a Jetson GPU
load, temperatures, power rails and nvpmodel through jetson-stats. What cannot be measured is
left out of the result, never guessed."""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Dict, Optional

from edge_sdk import _imports

log = logging.getLogger(__name__)

JETSON_STATS = "4.3.2"  # the jetson-stats the `jetson` extra pins and device_images/*/target.env install


def is_jetson() -> bool:
    return Path("/etc/nv_tegra_release").exists() or Path("/sys/module/tegra_fuse").exists()


class SystemStats:
    """Call `read()` from the reporter thread; `close()` when done."""

    def __init__(self, use_jtop: Optional[bool] = None) -> None:
        self._psutil: Any = None
        self._proc: Any = None
        if _imports.available("psutil"):
            import psutil  # light, pure C extension; optional

            self._psutil = psutil
            self._proc = psutil.Process()
            psutil.cpu_percent(None)  # prime the counter
        self._cpu_prev: Optional[tuple] = None
        self._jtop: Any = None
        if use_jtop is None:
            use_jtop = is_jetson()
        if use_jtop:
            self._jtop = self._open_jtop()

    @staticmethod
    def _open_jtop() -> Any:
        jtop_mod = _imports.require("jtop")
        j = jtop_mod.jtop()
        try:
            j.start()
        except jtop_mod.JtopException as exc:
            mismatch = jtop_mismatch(str(exc))
            if mismatch is not None:
                log.error("%s", mismatch)
            else:
                log.warning("jetson-stats unavailable (%s); GPU, temperature and power fields are omitted", exc)
            return None
        return j

    def close(self) -> None:
        if self._jtop is not None:
            self._jtop.close()
            self._jtop = None

    def read(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        if self._psutil is not None:
            ps = self._psutil
            out["cpu_percent"] = round(float(ps.cpu_percent(None)), 1)
            vm = ps.virtual_memory()
            out["memory_percent"] = round(float(vm.percent), 1)
            out["memory_used_mb"] = round((vm.total - vm.available) / 2**20, 1)
            out["process_rss_mb"] = round(self._proc.memory_info().rss / 2**20, 1)
        else:
            out.update(_proc_stats(self))
        if hasattr(os, "getloadavg"):
            out["load_1m"] = round(os.getloadavg()[0], 2)
        if self._jtop is not None and self._jtop.ok():
            out.update(jtop_fields(self._jtop.stats))
        return out


def _proc_stats(state: SystemStats) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        values = [int(v) for v in fields]
        idle, total = values[3] + (values[4] if len(values) > 4 else 0), sum(values)
        prev = state._cpu_prev
        state._cpu_prev = (idle, total)
        if prev is not None and total > prev[1]:
            out["cpu_percent"] = round(100.0 * (1 - (idle - prev[0]) / (total - prev[1])), 1)
        mem: Dict[str, int] = {}
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            mem[key] = int(rest.split()[0])
        if "MemTotal" in mem and "MemAvailable" in mem:
            used = mem["MemTotal"] - mem["MemAvailable"]
            out["memory_used_mb"] = round(used / 1024, 1)
            out["memory_percent"] = round(100.0 * used / mem["MemTotal"], 1)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["process_rss_mb"] = round(int(line.split()[1]) / 1024, 1)
    except OSError:  # not Linux: leave the fields out
        return out
    return out


# jetson-stats 4.x (jtop/jtop.py, jtop.start): the client refuses a service of another version.
_JTOP_MISMATCH = re.compile(r"jtop service: \[(?P<service>[^\]]*)\] and client: \[(?P<client>[^\]]*)\]")


def jtop_mismatch(message: str) -> Optional[str]:
    """What to say at start-up when jtop's client (jetson-stats in this environment) and the
    host's jtop service are of different versions; None for any other jtop error. jtop's own
    message advises restarting the service, which does not help when the two installs differ."""
    m = _JTOP_MISMATCH.search(message)
    if m is None:
        return None
    service, client = m.group("service"), m.group("client")
    return (
        f"the jtop service runs jetson-stats {service}, this environment has jetson-stats {client}: jtop refuses to "
        "connect, so telemetry omits GPU load, temperatures and power. Install the service's version here: "
        f'pip install "jetson-stats=={service}" (edge-sdk[jetson] pins {JETSON_STATS}, what device_images/provision.sh '
        f'installs), or put the host on {client}: sudo pip3 install "jetson-stats=={client}" && '
        "sudo systemctl restart jtop.service"
    )


def jtop_fields(stats: Dict[str, Any]) -> Dict[str, Any]:
    """Map jetson-stats' `jtop.stats` keys onto the telemetry schema's `system` block."""
    out: Dict[str, Any] = {}
    temps: Dict[str, float] = {}
    power: Dict[str, float] = {}
    for key, value in stats.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if key == "GPU":
            out["gpu_percent"] = float(value)
        elif key.startswith("Temp "):
            if value > -200:  # jtop reports -256 for an offline sensor
                temps[key[5:]] = float(value)
        elif key.startswith("Power "):
            power[key[6:]] = float(value)
    if temps:
        out["temperature_c"] = temps
        out["temperature_max_c"] = max(temps.values())
    if power:
        out["power_mw"] = power
    model = stats.get("nvp model")
    if isinstance(model, str):
        out["nvpmodel"] = model
    clocks = stats.get("jetson_clocks")
    if isinstance(clocks, str):
        out["jetson_clocks"] = clocks.upper() == "ON"
    elif isinstance(clocks, bool):
        out["jetson_clocks"] = clocks
    return out
