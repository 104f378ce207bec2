#!/usr/bin/env bash
# Provision a Jetson for edge-sdk (docs/jetson.md, step 2). Idempotent: every step checks first
# and acts only when something differs, so a second run changes nothing and says so.
#
#   sudo device_images/provision.sh --target xavier-nx --broker mqtts://broker.lan:8883
#
# What it does, in order:
#   1. checks the L4T release against device_images/<target>/target.env (exit 7 when wrong);
#   2. installs the apt packages the runtime uses from JetPack (TensorRT's and OpenCV's Python
#      bindings, pip, venv) and jetson-stats (the jtop service) when missing;
#   3. creates the system user edge-sdk, in the groups video and jtop;
#   4. installs edge-sdk into /opt/edge-sdk/venv (with JetPack's packages visible);
#   5. writes /etc/edge-sdk/device.toml and /etc/edge-sdk/edge-sdk.env once (never overwrites;
#      an edge-sdk.env others can read is set back to mode 600);
#   6. sets the target's power mode (nvpmodel) and pins the clocks at boot (jetson_clocks);
#   7. installs and enables the systemd units (it does not start edge-sdk: that needs a bundle).
#
# Every option is checked before anything is read or changed; a bad one exits 2 and changes nothing.
# Options:
#   --target NAME     a folder of device_images/ holding a target.env (default: xavier-nx)
#   --device-id ID    the device id written into a new device.toml (default: the host name)
#   --broker URL      mqtts://HOST[:PORT] (or mqtt://) for a new device.toml, HOST a name or address;
#                     without it telemetry goes to the journal
#   --package SPEC    what pip installs (default: this checkout with the mqtt, jetson, pycuda extras)
#   --no-install      skip step 4 (e.g. when the daemon runs in the Dockerfile.l4t container)
#   --no-power        skip step 6
#   --dry-run         say what would change, change nothing
#   --root DIR        write files under DIR instead of / (tests, image builds). The commands it
#                     runs (apt-get, useradd, usermod, systemctl, nvpmodel, python3) still act on
#                     the running system: the tests put fakes of them first on PATH.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
target=xavier-nx
device_id=""
broker=""
package=""
install=1
power=1
dry=0
root=""
user=edge-sdk
python=${PYTHON:-python3}
changes=0
units_changed=0

die() {  # die CODE MESSAGE
  echo "error: $2" >&2
  exit "$1"
}
need() {  # need OPTION VALUE-COUNT WHAT: the option's value is there and is not another option
  if [ "$2" -lt 2 ] || [[ "$3" == --* ]]; then die 2 "$1 needs $4 (see --help)"; fi
}

# Every argument is checked before anything is read from it or changed: a bad one changes nothing.
while [ "$#" -gt 0 ]; do
  case "$1" in
    --target) need "$1" "$#" "${2-}" "a name"; target=$2; shift 2 ;;
    --device-id) need "$1" "$#" "${2-}" "an id"; device_id=$2; shift 2 ;;
    --broker) need "$1" "$#" "${2-}" "a URL"; broker=$2; shift 2 ;;
    --package) need "$1" "$#" "${2-}" "a pip requirement"; package=$2; shift 2 ;;
    --no-install) install=0; shift ;;
    --no-power) power=0; shift ;;
    --dry-run) dry=1; shift ;;
    --root) need "$1" "$#" "${2-}" "a folder"; root=${2%/}; shift 2 ;;
    -h|--help) sed -n '2,/^# shellcheck/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die 2 "unknown option $1 (see --help)" ;;
  esac
done

# --target: the name of a folder of device_images/ that holds a target.env (no path, no link)
known=""
for f in "$here"/*/target.env; do
  [ -f "$f" ] && [ ! -L "$f" ] && known="$known $(basename "$(dirname "$f")")"
done
if ! [[ "$target" =~ ^[a-z0-9][a-z0-9-]*$ ]] || [[ " $known " != *" $target "* ]]; then
  die 2 "no target '$target': choose one of$known"
fi
env_file="$here/$target/target.env"
if [ -n "$device_id" ] && ! [[ "$device_id" =~ ^[A-Za-z0-9._-]+$ ]]; then
  die 2 "--device-id '$device_id': use letters, digits, '-', '_' and '.' only (it is part of MQTT topics)"
fi
# --broker: mqtt(s)://HOST[:PORT], HOST a DNS name, an IPv4 address or a bracketed IPv6 address
host_re='([A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])'
if [ -n "$broker" ]; then
  if ! [[ "$broker" =~ ^mqtts?://${host_re}(:([0-9]{1,5}))?$ ]] \
     || { [ -n "${BASH_REMATCH[4]}" ] && { [ "${BASH_REMATCH[4]}" -lt 1 ] || [ "${BASH_REMATCH[4]}" -gt 65535 ]; }; }; then
    die 2 "--broker '$broker' must look like mqtts://host:8883 (or mqtt://host:1883): a host name or address and a port from 1 to 65535, nothing else"
  fi
fi
if [ -n "$package" ] && { [[ "$package" == -* ]] || [[ "$package" =~ [[:space:][:cntrl:]] ]]; }; then
  die 2 "--package '$package' must be one pip requirement (a name, path or URL), not an option"
fi
if [ -n "$root" ] && [ ! -d "$root" ]; then
  die 2 "--root '$root' is not a folder"
fi
[ -n "$root" ] || [ "$dry" = 1 ] || [ "$EUID" -eq 0 ] || die 2 "run it as root (sudo), or with --dry-run"
secrets="$root/etc/edge-sdk/edge-sdk.env"
if [ -L "$secrets" ] || { [ -e "$secrets" ] && [ ! -f "$secrets" ]; }; then
  die 2 "$secrets is not a plain file (a link?): remove it, and run this again to write a new secret"
fi
# The device config is rendered now, so that nothing is left to fail half-way (it is installed in step 5).
config="$root/etc/edge-sdk/device.toml"
rendered=""
if [ ! -e "$config" ]; then
  id_value=${device_id:-$(hostname)}
  if ! [[ "$id_value" =~ ^[A-Za-z0-9._-]{1,64}$ ]]; then
    die 2 "the host name '$id_value' cannot be the device id (letters, digits, '-', '_' and '.' only): give one with --device-id"
  fi
  rendered=$(mktemp)
  trap 'rm -f "$rendered"' EXIT
  # the values are checked above: no '|', '&', '\' or quote reaches sed or the TOML file
  if [ -n "$broker" ]; then
    sed -e "s|@DEVICE_ID@|$id_value|" -e "s|@BROKER_URL@|$broker|" -e '/@MQTT_BEGIN@/d; /@MQTT_END@/d' \
      "$here/device.toml" > "$rendered"
  else
    sed -e "s|@DEVICE_ID@|$id_value|" -e '/@MQTT_BEGIN@/,/@MQTT_END@/d' "$here/device.toml" > "$rendered"
  fi
fi
# shellcheck source=xavier-nx/target.env
. "$env_file"

say() { printf '%-7s %s\n' "$1" "$2"; }
ok() { say ok "$1"; }
change() {  # change DESCRIPTION COMMAND...: run it, or with --dry-run only say so
  local what=$1
  shift
  changes=$((changes + 1))
  if [ "$dry" = 1 ]; then
    say would "$what"
  else
    say change "$what"
    "$@"
  fi
}

# -- 1. the release -----------------------------------------------------------------------------
release_file="$root/etc/nv_tegra_release"
[ -r "$release_file" ] || die 7 "no $release_file: this is not a Jetson running L4T; flash JetPack $JETPACK.x with NVIDIA SDK Manager"
line=$(head -n 1 "$release_file")
if ! [[ "$line" =~ R([0-9]+)\ \(release\),\ REVISION:\ ([0-9]+)\.([0-9]+) ]]; then
  die 7 "cannot read the L4T release from $release_file: '$line' (JetPack writes '# R35 (release), REVISION: 4.1, ...'); if it is damaged, reflash with NVIDIA SDK Manager"
fi
board_major=${BASH_REMATCH[1]}
rev_major=${BASH_REMATCH[2]}
rev_minor=${BASH_REMATCH[3]}
min_major=${L4T_MIN_REVISION%%.*}
min_minor=${L4T_MIN_REVISION#*.}
if [ "$board_major" != "$L4T_MAJOR" ] || [ "$rev_major" -lt "$min_major" ] \
   || { [ "$rev_major" -eq "$min_major" ] && [ "$rev_minor" -lt "$min_minor" ]; }; then
  die 7 "this board runs L4T R$board_major.$rev_major.$rev_minor; $target needs L4T R$L4T_MAJOR.$L4T_MIN_REVISION or a newer R$L4T_MAJOR (JetPack $JETPACK.x): flash it with NVIDIA SDK Manager"
fi
ok "L4T R$board_major.$rev_major.$rev_minor: JetPack $JETPACK.x, as $target needs"

# -- 2. packages ----------------------------------------------------------------------------------
missing=()
for pkg in python3-pip python3-venv python3-opencv python3-libnvinfer; do
  if [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" = "install ok installed" ]; then
    ok "package $pkg"
  else
    missing+=("$pkg")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  change "apt-get install ${missing[*]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi
if command -v jtop >/dev/null 2>&1; then
  ok "jetson-stats (jtop)"
else
  change "install jetson-stats==$JETSON_STATS_VERSION (the jtop service)" \
    "$python" -m pip install "jetson-stats==$JETSON_STATS_VERSION"
fi
if systemctl is-active --quiet jtop.service; then
  ok "jtop.service active"
else
  change "enable and start jtop.service" systemctl enable --now jtop.service
fi

# -- 3. the service user ------------------------------------------------------------------------
if getent passwd "$user" >/dev/null; then
  ok "user $user"
else
  change "create system user $user" useradd --system --user-group --home-dir /var/lib/edge-sdk \
    --no-create-home --shell /usr/sbin/nologin "$user"
fi
for group in video jtop; do
  if ! getent group "$group" >/dev/null; then
    say skip "group $group does not exist (yet): run again once it does"
  elif id -nG "$user" 2>/dev/null | tr ' ' '\n' | grep -qx "$group"; then
    ok "user $user in group $group"
  else
    change "add user $user to group $group" usermod -aG "$group" "$user"
  fi
done

# -- 4. edge-sdk in a venv ------------------------------------------------------------------------
venv="$root/opt/edge-sdk/venv"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml" | head -n 1)
install_venv() {
  [ -x "$venv/bin/python" ] || "$python" -m venv --system-site-packages "$venv"
  PATH="/usr/local/cuda/bin:$PATH" "$venv/bin/python" -m pip install "${package:-${repo}[mqtt,jetson,pycuda]}" \
    "jetson-stats==$JETSON_STATS_VERSION"
}
if [ "$install" = 0 ]; then
  say skip "installing edge-sdk (--no-install)"
elif [ -x "$venv/bin/edge-sdk" ] && { [ -n "$package" ] || [ "$("$venv/bin/edge-sdk" --version 2>/dev/null)" = "edge-sdk $version" ]; }; then
  ok "edge-sdk ${package:-$version} in $venv"
else
  change "install edge-sdk ${package:-$version} into $venv (pycuda compiles: minutes)" install_venv
fi

# -- 5. files ----------------------------------------------------------------------------------------
ensure_dir() {  # ensure_dir PATH MODE
  if [ -d "$1" ] && [ "$(stat -c %a "$1")" = "$2" ]; then
    ok "$1/"
  else
    change "directory $1 (mode $2)" install -d -m "$2" "$1"
  fi
}
install_file() {  # install_file SRC DEST MODE; sets units_changed for unit files
  if [ -f "$2" ] && cmp -s "$1" "$2" && [ "$(stat -c %a "$2")" = "$3" ]; then
    ok "$2"
  else
    change "install $2" install -D -m "$3" "$1" "$2"
    case "$2" in *.service) units_changed=1 ;; esac
  fi
}
ensure_dir "$root/etc/edge-sdk" 755
# The bundles live in the unit's state directory (models_dir: reload by URL downloads there);
# systemd gives it to the service user at start, bundles copied in as root included.
ensure_dir "$root/var/lib/edge-sdk" 750
ensure_dir "$root/var/lib/edge-sdk/bundles" 750

if [ -z "$rendered" ]; then
  ok "$config (kept as it is)"
else
  install_file "$rendered" "$config" 644
fi

write_secrets() {
  umask 077
  {
    echo "# Read by systemd (EnvironmentFile) before it drops privileges; root only."
    echo "# Commands must be signed with this secret: give it to the operators (edge-sdk monitor)."
    echo "EDGE_SDK_CMD_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
  } > "$secrets"
}
secrets_mode=$([ -e "$secrets" ] && stat -c %a "$secrets" || true)
if [ -z "$secrets_mode" ]; then
  change "write $secrets with a new command secret" write_secrets
elif [ "$secrets_mode" != 600 ]; then
  # the secret signs commands: readable by others, anyone on the board could sign them
  change "chmod 600 $secrets (it was $secrets_mode: the command secret is root's only; kept as it is otherwise)" \
    chmod 600 "$secrets"
else
  ok "$secrets (kept as it is)"
fi

# -- 6. power ----------------------------------------------------------------------------------------
if [ "$power" = 0 ]; then
  say skip "power mode and clocks (--no-power)"
else
  pm_conf="$root/etc/nvpmodel.conf"
  mode_id=$(sed -n "s/^< *POWER_MODEL *ID=\([0-9]*\) *NAME=$NVPMODEL_NAME *>.*/\1/p" "$pm_conf" 2>/dev/null | head -n 1)
  [ -n "$mode_id" ] || die 7 "power mode $NVPMODEL_NAME is not in $pm_conf: is this a $target?"
  current=$(nvpmodel -q 2>/dev/null | sed -n 's/^NV Power Mode: *//p' | head -n 1)
  if [ "$current" = "$NVPMODEL_NAME" ]; then
    ok "power mode $NVPMODEL_NAME"
  else
    # nvpmodel may ask for a reboot (a mode with other CPU cores): reboot, then run this again.
    change "power mode $NVPMODEL_NAME: nvpmodel -m $mode_id (was ${current:-unknown})" nvpmodel -m "$mode_id"
  fi
  if [ "$PIN_CLOCKS" = 1 ]; then
    install_file "$here/edge-sdk-clocks.service" "$root/etc/systemd/system/edge-sdk-clocks.service" 644
  fi
fi

# -- 7. systemd --------------------------------------------------------------------------------------
install_file "$here/edge-sdk.service" "$root/etc/systemd/system/edge-sdk.service" 644
if [ "$units_changed" = 1 ]; then
  change "systemctl daemon-reload" systemctl daemon-reload
fi
units=(edge-sdk.service)
if [ "$power" = 1 ] && [ "$PIN_CLOCKS" = 1 ]; then
  units+=(edge-sdk-clocks.service)
fi
for unit in "${units[@]}"; do
  if systemctl is-enabled --quiet "$unit" 2>/dev/null; then
    ok "$unit enabled"
  else
    change "enable $unit" systemctl enable "$unit"
  fi
done
if [ "$power" = 1 ] && [ "$PIN_CLOCKS" = 1 ]; then
  if systemctl is-active --quiet edge-sdk-clocks.service; then
    ok "clocks pinned (edge-sdk-clocks.service active)"
  else
    change "pin the clocks now (start edge-sdk-clocks.service)" systemctl start edge-sdk-clocks.service
  fi
fi

if [ "$changes" = 0 ]; then
  echo "nothing to change: $target is provisioned"
elif [ "$dry" = 1 ]; then
  echo "$changes change(s) to make (dry run: nothing changed)"
else
  echo "$changes change(s) made. Next: copy a bundle to /var/lib/edge-sdk/bundles/default and"
  echo "  sudo systemctl start edge-sdk   (the first start builds the TensorRT engine: docs/jetson.md)"
fi
