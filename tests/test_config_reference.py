"""docs/configuration.md is what tools/config_reference.py writes from the config dataclasses."""
from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "tools" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_committed_reference_matches_the_config_types() -> None:
    tool = _tool()
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == tool.render(), "docs/configuration.md is out of date: run python tools/config_reference.py"


def test_every_field_of_every_table_is_documented_with_its_default() -> None:
    tool = _tool()
    text = tool.render()
    for table, cls, _ in tool.sections():
        section = text.split(f"\n## {table}\n", 1)[1].split("\n## ", 1)[0]
        for f in dataclasses.fields(cls):
            if (cls.__name__, f.name) in tool.NOT_KEYS:
                continue
            assert f"| `{f.name}` |" in section, (table, f.name)
    assert "| `drift_distance` | `float` | `0.4` | [0, 1] | calibration drift" in text  # the comment beside the field
    assert "| `backend` | `str` | `\"auto\"` | auto | onnxruntime" not in text  # pipes inside a cell are escaped
