"""device_images/provision.sh on a fake root: files go under --root, and the system commands it
runs (dpkg-query, apt-get, python3/pip, systemctl, getent, useradd, usermod, id, nvpmodel) are
fakes first on PATH that keep their state in a folder and log every command that changes
something. Idempotency is then checked on the whole state: a second run logs nothing, changes no
file and says so."""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "device_images" / "provision.sh"
VERSION = next(line.split('"')[1] for line in (ROOT / "pyproject.toml").read_text().splitlines()
               if line.startswith("version = "))

if shutil.which("bash") is None:
    pytest.skip("provision.sh needs bash", allow_module_level=True)

XAVIER_MODES = """\
< POWER_MODEL ID=0 NAME=MODE_15W_2CORE >
< POWER_MODEL ID=2 NAME=MODE_15W_6CORE >
< POWER_MODEL ID=5 NAME=MODE_10W_DESKTOP >
< POWER_MODEL ID=8 NAME=MODE_20W_6CORE >
"""
ORIN_NANO_MODES = "< POWER_MODEL ID=0 NAME=15W >\n< POWER_MODEL ID=1 NAME=7W >\n"

# Each fake: $STATE holds the system's state, $LOG gets one line per changing command.
FAKES = {
    "dpkg-query": r'''
pkg="${@: -1}"
[ -e "$STATE/dpkg/$pkg" ] || exit 1
printf 'install ok installed'
''',
    "apt-get": r'''
echo "apt-get $*" >> "$LOG"
for a in "$@"; do case "$a" in -*|install) ;; *) touch "$STATE/dpkg/$a" ;; esac; done
''',
    "python3": r'''
here=$(dirname "$0")
if [ "$1 $2" = "-m venv" ]; then
  dir="${@: -1}"; echo "venv $dir" >> "$LOG"
  mkdir -p "$dir/bin"; cp "$0" "$dir/bin/python"; touch "$dir/bin/.venv"
elif [ "$1 $2 $3" = "-m pip install" ]; then
  echo "pip($([ -e "$here/.venv" ] && echo venv || echo system)) ${*:4}" >> "$LOG"
  if [ -e "$here/.venv" ]; then
    printf '#!/bin/bash\necho "edge-sdk %s"\n' "$FAKE_EDGE_SDK_VERSION" > "$here/edge-sdk"; chmod +x "$here/edge-sdk"
  else
    case "$*" in *jetson-stats*) printf '#!/bin/bash\n' > "$FAKEBIN/jtop"; chmod +x "$FAKEBIN/jtop"
                                 echo "jtop:x:" >> "$STATE/group" ;; esac
  fi
else
  echo "fake python3: unexpected $*" >&2; exit 99
fi
''',
    "systemctl": r'''
args=(); for a in "$@"; do [ "$a" = --quiet ] || args+=("$a"); done
verb=${args[0]}; unit=${args[${#args[@]}-1]}
case "$verb" in
  is-active) [ -e "$STATE/active/$unit" ] ;;
  is-enabled) [ -e "$STATE/enabled/$unit" ] ;;
  enable) echo "systemctl ${args[*]}" >> "$LOG"; touch "$STATE/enabled/$unit"
          [ "${args[1]}" = --now ] && touch "$STATE/active/$unit"; true ;;
  start) echo "systemctl ${args[*]}" >> "$LOG"; touch "$STATE/active/$unit" ;;
  daemon-reload) echo "systemctl daemon-reload" >> "$LOG" ;;
  *) echo "fake systemctl: unexpected $*" >&2; exit 99 ;;
esac
''',
    "getent": r'''
grep -q "^$2:" "$STATE/$1"
''',
    "useradd": r'''
echo "useradd $*" >> "$LOG"
name="${@: -1}"; echo "$name:x:" >> "$STATE/passwd"; echo "$name:x:" >> "$STATE/group"
''',
    "usermod": r'''
echo "usermod $*" >> "$LOG"
echo "$2 $3" >> "$STATE/members"
''',
    "id": r'''
if [ "$1" = -nG ]; then
  grep -q "^$2:" "$STATE/passwd" || exit 1
  groups="$2"; while read -r g u; do [ "$u" = "$2" ] && groups="$groups $g"; done < "$STATE/members"
  echo "$groups"
else
  exec /usr/bin/id "$@"
fi
''',
    "nvpmodel": r'''
case "$1" in
  -q) echo "NV Power Mode: $(cat "$STATE/nvpmodel")"; echo 0 ;;
  -m) echo "nvpmodel -m $2" >> "$LOG"
      sed -n "s/^< *POWER_MODEL *ID=$2 *NAME=\([^ ]*\) *>.*/\1/p" "$FAKEROOT/etc/nvpmodel.conf" > "$STATE/nvpmodel" ;;
esac
''',
}


class FakeSystem:
    def __init__(self, base: Path, release: str = "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64",
                 modes: str = XAVIER_MODES, mode: str = "MODE_10W_DESKTOP") -> None:
        self.root = base / "root"
        self.state = base / "state"
        self.bin = base / "bin"
        self.log = base / "log"
        for folder in (self.root / "etc", self.state / "dpkg", self.state / "active", self.state / "enabled", self.bin):
            folder.mkdir(parents=True, exist_ok=True)
        if release:
            (self.root / "etc" / "nv_tegra_release").write_text(release + "\n")
        (self.root / "etc" / "nvpmodel.conf").write_text(modes)
        (self.state / "nvpmodel").write_text(mode + "\n")
        (self.state / "passwd").write_text("root:x:\n")
        (self.state / "group").write_text("root:x:\nvideo:x:\n")
        (self.state / "members").write_text("")
        (self.state / "dpkg" / "python3-opencv").touch()  # JetPack's; the rest is missing
        self.log.write_text("")
        for name, body in FAKES.items():
            path = self.bin / name
            path.write_text("#!/bin/bash\n" + body.lstrip("\n"))
            path.chmod(0o755)

    def run(self, *args: str, target: str = "xavier-nx") -> subprocess.CompletedProcess:
        return self.run_bare("--target", target, "--root", str(self.root), *args)

    def run_bare(self, *args: str) -> subprocess.CompletedProcess:
        """provision.sh with exactly these arguments (the fakes first on PATH)."""
        env = dict(os.environ, PATH=f"{self.bin}:{os.environ['PATH']}", STATE=str(self.state), LOG=str(self.log),
                   FAKEBIN=str(self.bin), FAKEROOT=str(self.root), PYTHON=str(self.bin / "python3"),
                   FAKE_EDGE_SDK_VERSION=VERSION)
        return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120)

    def snapshot(self) -> Dict[str, Tuple[int, str]]:
        """Every file and folder under the fake root and the fake state: mode and content hash."""
        out: Dict[str, Tuple[int, str]] = {}
        for top in (self.root, self.state):
            for path in sorted(top.rglob("*")):
                st = path.lstat()
                digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
                out[str(path)] = (stat.S_IMODE(st.st_mode), digest)
        return out

    def logged(self) -> List[str]:
        return self.log.read_text().splitlines()


def test_provisioning_twice_changes_nothing_the_second_time(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    first = system.run("--device-id", "cam-1", "--broker", "mqtts://broker.lan:8883")
    assert first.returncode == 0, first.stderr + first.stdout
    log = system.logged()
    assert "apt-get install -y --no-install-recommends python3-pip python3-venv python3-libnvinfer" in log
    assert "pip(system) jetson-stats==4.3.2" in log
    assert "systemctl enable --now jtop.service" in log
    assert any(line.startswith("useradd --system") and line.endswith(" edge-sdk") for line in log)
    assert "usermod -aG video edge-sdk" in log and "usermod -aG jtop edge-sdk" in log
    assert any(line.startswith("pip(venv) ") and "[mqtt,jetson,pycuda]" in line for line in log)
    assert "nvpmodel -m 8" in log  # MODE_20W_6CORE, found by name in nvpmodel.conf
    assert log.count("systemctl daemon-reload") == 1
    assert "systemctl enable edge-sdk.service" in log and "systemctl enable edge-sdk-clocks.service" in log
    assert "systemctl start edge-sdk-clocks.service" in log
    assert "systemctl start edge-sdk.service" not in log  # not before a bundle is there
    unit = system.root / "etc/systemd/system/edge-sdk.service"
    assert unit.read_bytes() == (ROOT / "device_images/edge-sdk.service").read_bytes()
    secrets = system.root / "etc/edge-sdk/edge-sdk.env"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    before = system.snapshot()

    second = system.run("--device-id", "cam-1", "--broker", "mqtts://broker.lan:8883")
    assert second.returncode == 0, second.stderr
    assert system.logged() == log, "the second run ran a changing command"
    assert system.snapshot() == before, "the second run changed a file"
    assert second.stdout.strip().splitlines()[-1] == "nothing to change: xavier-nx is provisioned"
    assert not any(line.startswith(("change", "would")) for line in second.stdout.splitlines())


def test_the_device_config_it_writes_loads_and_is_never_overwritten(tmp_path: Path, monkeypatch) -> None:
    from edge_sdk.daemon import load_daemon_config

    system = FakeSystem(tmp_path)
    assert system.run("--device-id", "cam-7", "--broker", "mqtts://broker.lan:8883").returncode == 0
    config = system.root / "etc/edge-sdk/device.toml"
    secret = (system.root / "etc/edge-sdk/edge-sdk.env").read_text().split("EDGE_SDK_CMD_SECRET=")[1].strip()
    assert len(secret) == 64 and int(secret, 16) >= 0
    monkeypatch.setenv("EDGE_SDK_CMD_SECRET", secret)
    certs = tmp_path / "certs"  # the config checks that its certificate files exist: put them elsewhere
    certs.mkdir()
    for name in ("ca.pem", "device.pem", "device.key"):
        (certs / name).write_text("not read here")
    copy = tmp_path / "device.toml"
    copy.write_text(config.read_text().replace("/etc/edge-sdk/certs/", f"{certs}/"))
    cfg = load_daemon_config(copy)
    assert cfg.device.id == "cam-7" and cfg.mqtt is not None and cfg.mqtt.url == "mqtts://broker.lan:8883"
    assert cfg.mqtt.cert_file == f"{certs}/device.pem" and cfg.pipeline.source.uri == "csi://0"
    assert cfg.device.hmac_secret_env == "EDGE_SDK_CMD_SECRET" and cfg.pipeline.bundle == "/var/lib/edge-sdk/bundles/default"

    config.write_text(config.read_text().replace('uri = "csi://0"', 'uri = "v4l2:///dev/video0"'))
    edited = config.read_bytes()
    again = system.run("--device-id", "other", "--broker", "mqtts://elsewhere:8883")
    assert again.returncode == 0 and config.read_bytes() == edited
    assert "(kept as it is)" in again.stdout


def test_without_a_broker_the_config_has_no_mqtt_table(tmp_path: Path, monkeypatch) -> None:
    from edge_sdk.daemon import load_daemon_config

    system = FakeSystem(tmp_path)
    assert system.run("--device-id", "cam-1", "--no-install", "--no-power").returncode == 0
    monkeypatch.setenv("EDGE_SDK_CMD_SECRET", "x")
    cfg = load_daemon_config(system.root / "etc/edge-sdk/device.toml")
    assert cfg.mqtt is None and cfg.device.id == "cam-1"
    assert not any(line.startswith(("pip(venv)", "venv", "nvpmodel")) for line in system.logged())


def test_dry_run_changes_nothing_and_lists_what_it_would_do(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    before = system.snapshot()
    dry = system.run("--dry-run", "--device-id", "cam-1")
    assert dry.returncode == 0, dry.stderr
    assert system.logged() == [] and system.snapshot() == before
    lines = dry.stdout.splitlines()
    assert "would   power mode MODE_20W_6CORE: nvpmodel -m 8 (was MODE_10W_DESKTOP)" in lines
    assert any(line.startswith("would   install ") and line.endswith("edge-sdk.service") for line in lines)
    assert lines[-1].endswith("change(s) to make (dry run: nothing changed)")
    assert system.run("--device-id", "cam-1").returncode == 0
    assert system.run("--dry-run").stdout.strip().splitlines()[-1] == "nothing to change: xavier-nx is provisioned"


def test_an_edited_unit_is_restored_and_systemd_reloaded_once(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    assert system.run("--device-id", "cam-1").returncode == 0
    unit = system.root / "etc/systemd/system/edge-sdk.service"
    unit.write_text(unit.read_text().replace("WatchdogSec=60", "WatchdogSec=0"))
    count = len(system.logged())
    again = system.run("--device-id", "cam-1")
    assert again.returncode == 0
    assert system.logged()[count:] == ["systemctl daemon-reload"]
    assert unit.read_bytes() == (ROOT / "device_images/edge-sdk.service").read_bytes()


@pytest.mark.parametrize("release,target,needle", [
    ("# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t186ref", "xavier-nx", "L4T R32.7.1"),
    ("# R35 (release), REVISION: 1.0, GCID: 31346300, BOARD: t186ref", "xavier-nx", "L4T R35.1.0"),  # JetPack 5.0.2
    ("# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref", "orin-nano", "needs L4T R36.4.0"),
    ("garbage", "xavier-nx", "cannot read the L4T release"),
    (None, "xavier-nx", "this is not a Jetson"),
])
def test_a_board_on_the_wrong_release_is_refused_before_anything_changes(tmp_path: Path, release: Optional[str],
                                                                          target: str, needle: str) -> None:
    system = FakeSystem(tmp_path, release=release or "")
    before = system.snapshot()
    result = system.run("--device-id", "cam-1", target=target)
    assert result.returncode == 7 and needle in result.stderr and "SDK Manager" in result.stderr
    assert system.logged() == [] and system.snapshot() == before


def test_orin_nano_on_jetpack_6_provisions_with_its_own_power_mode(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path, release="# R36 (release), REVISION: 4.0, GCID: 37537400, BOARD: generic",
                        modes=ORIN_NANO_MODES, mode="7W")
    result = system.run("--device-id", "nano-1", target="orin-nano")
    assert result.returncode == 0, result.stderr
    assert "nvpmodel -m 0" in system.logged()
    assert system.run("--device-id", "nano-1", target="orin-nano").stdout.strip().endswith("orin-nano is provisioned")


@pytest.mark.parametrize("args,message", [
    (["--target", "jetson-tx1"], "no target 'jetson-tx1': choose one of"),
    (["--device-id", "cam/1"], "--device-id 'cam/1'"),
    (["--broker", "tcp://x"], "--broker 'tcp://x'"),
    (["--frobnicate"], "unknown option --frobnicate"),
])
def test_bad_options_are_refused_with_the_fix(tmp_path: Path, args: List[str], message: str) -> None:
    system = FakeSystem(tmp_path)
    result = system.run(*args)
    assert result.returncode == 2 and message in result.stderr
    assert system.logged() == []


def test_a_target_outside_device_images_is_never_read(tmp_path: Path) -> None:
    """`--target ../x` used to source x/target.env (as root under sudo) before any other check."""
    system = FakeSystem(tmp_path)
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "sourced"
    (evil / "target.env").write_text((ROOT / "device_images/xavier-nx/target.env").read_text()
                                     + f"touch {marker}\n")
    before = system.snapshot()
    for target in (os.path.relpath(evil, SCRIPT.parent), str(evil), "xavier-nx/../xavier-nx", ".", ""):
        result = system.run("--device-id", "cam-1", target=target)
        assert result.returncode == 2, (target, result.stdout, result.stderr)
        assert f"no target '{target}': choose one of orin-nano xavier-nx" in result.stderr
    assert not marker.exists()
    assert system.logged() == [] and system.snapshot() == before


@pytest.mark.parametrize("broker", [
    "mqtts://broker|lan:8883",  # the sed delimiter
    "mqtts://broker\\1:8883",  # a back-reference sed refuses, after the steps before it ran
    "mqtts://broker&lan:8883",  # sed's "the whole match"
    'mqtts://broker"lan:8883',  # ends the TOML string
    "mqtts://broker'lan:8883",
    "mqtts://broker.lan:99999",
    "mqtts://broker.lan:0",
    "mqtts://broker.lan:",
    "mqtts://-broker.lan:8883",
    "mqtts://user@broker.lan:8883",
])
def test_a_broker_url_that_could_break_the_files_is_refused_before_anything_changes(tmp_path: Path, broker: str) -> None:
    system = FakeSystem(tmp_path)
    before = system.snapshot()
    result = system.run("--device-id", "cam-1", "--broker", broker)
    assert result.returncode == 2 and f"--broker '{broker}' must look like mqtts://host:8883" in result.stderr
    assert system.logged() == [] and system.snapshot() == before


@pytest.mark.parametrize("broker", ["mqtts://broker.lan:8883", "mqtt://10.0.0.7:1883", "mqtts://broker.lan",
                                    "mqtts://[fd00::7]:8883", "mqtts://b:65535"])
def test_every_good_broker_url_is_written_as_given(tmp_path: Path, broker: str) -> None:
    system = FakeSystem(tmp_path)
    result = system.run("--device-id", "cam-1", "--broker", broker, "--no-install", "--no-power")
    assert result.returncode == 0, result.stderr
    assert f'url = "{broker}"' in (system.root / "etc/edge-sdk/device.toml").read_text().splitlines()


def test_a_host_name_that_cannot_be_a_device_id_is_refused_first(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    (system.bin / "hostname").write_text("#!/bin/bash\necho 'cam \"1\"'\n")
    (system.bin / "hostname").chmod(0o755)
    before = system.snapshot()
    result = system.run()
    assert result.returncode == 2 and "give one with --device-id" in result.stderr
    assert system.logged() == [] and system.snapshot() == before
    assert system.run("--device-id", "cam-1", "--no-install", "--no-power").returncode == 0


@pytest.mark.parametrize("args,message", [
    (["--broker"], "--broker needs a URL"),
    (["--target", "--dry-run"], "--target needs a name"),
    (["--package", "--index-url=http://elsewhere/simple"], "--package needs a pip requirement"),
    (["--package", "-e /elsewhere"], "--package '-e /elsewhere' must be one pip requirement"),
    (["--root", "/no/such/folder"], "--root '/no/such/folder' is not a folder"),
])
def test_more_bad_options_are_refused_with_the_fix(tmp_path: Path, args: List[str], message: str) -> None:
    system = FakeSystem(tmp_path)
    # the fake root first (a later --root replaces it), the option under test last
    result = system.run_bare("--root", str(system.root), "--device-id", "cam-1", *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert system.logged() == []


def test_a_secrets_file_others_can_read_is_made_root_only_and_kept(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    secrets = system.root / "etc/edge-sdk/edge-sdk.env"
    secrets.parent.mkdir(parents=True)
    secrets.write_text("EDGE_SDK_CMD_SECRET=" + "ab" * 32 + "\n")
    secrets.chmod(0o644)
    dry = system.run("--device-id", "cam-1", "--dry-run")
    assert f"would   chmod 600 {secrets} (it was 644" in dry.stdout and stat.S_IMODE(secrets.stat().st_mode) == 0o644
    result = system.run("--device-id", "cam-1")
    assert result.returncode == 0, result.stderr
    assert f"change  chmod 600 {secrets} (it was 644" in result.stdout
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert secrets.read_text() == "EDGE_SDK_CMD_SECRET=" + "ab" * 32 + "\n"  # the operators' secret stays
    assert f"ok      {secrets} (kept as it is)" in system.run("--device-id", "cam-1").stdout


def test_a_secrets_file_that_is_a_link_is_refused_before_anything_changes(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    secrets = system.root / "etc/edge-sdk/edge-sdk.env"
    secrets.parent.mkdir(parents=True)
    target = tmp_path / "elsewhere.env"
    target.write_text("")
    secrets.symlink_to(target)
    before = system.snapshot()
    result = system.run("--device-id", "cam-1")
    assert result.returncode == 2 and "is not a plain file" in result.stderr
    assert system.logged() == [] and system.snapshot() == before and target.read_text() == ""
