"""Host health figures: CPU and memory (psutil if installed, else /proc), and on a Jetson GPU
load, temperatures, power rails and nvpmodel through jetson-stats. What cannot be measured is
left out of the result, never guessed."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Dict, Optional

from edge_sdk import _imports

log = logging.getLogger(__name__)


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
