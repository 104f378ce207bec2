"""The runtime reads a backend through its interface (edge_sdk.runtime.backends.base.Backend:
capabilities(), input_shape(), gpu_ms(), describe()...), never by probing it for attributes: no
getattr/hasattr on a backend in edge_sdk/runtime outside the backends themselves."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import List

RUNTIME = Path(__file__).resolve().parents[1] / "edge_sdk" / "runtime"


def probes(source: str) -> List[str]:
    """`getattr(...)`/`hasattr(...)` calls whose object mentions a backend, as source text."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and node.args and "backend" in (ast.get_source_segment(source, node.args[0]) or "").lower():
            found.append(ast.get_source_segment(source, node) or "")
    return found


def test_the_runtime_does_not_probe_backends() -> None:
    hits = {}
    for path in sorted(RUNTIME.rglob("*.py")):
        if "backends" in path.relative_to(RUNTIME).parts:
            continue
        found = probes(path.read_text(encoding="utf-8"))
        if found:
            hits[path.relative_to(RUNTIME.parent).as_posix()] = found
    assert not hits, f"read backends through the Backend interface, not by probing: {hits}"


def test_the_scan_finds_a_probe() -> None:
    assert probes('x = getattr(self.backend, "cpu_bound", False)\nif hasattr(model.backend, "cuda"): pass') == [
        'getattr(self.backend, "cpu_bound", False)', 'hasattr(model.backend, "cuda")']
    assert probes('getattr(self.decoder, "nms_iou")') == []
