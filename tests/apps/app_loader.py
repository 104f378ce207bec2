"""Load an app (apps/<name>/<name>.py: scripts, not a package) as a module."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

APPS = Path(__file__).resolve().parents[2] / "apps"


def load_app(name: str) -> ModuleType:
    path = APPS / name / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"app_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
