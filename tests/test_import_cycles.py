"""No import cycle between edge_sdk's packages, counting imports inside functions.

Each package below edge_sdk (runtime, roi, daemon, telemetry, builder, cli, cuda, trt,
decoders) and each top-level module (manifest, preprocess, ...) is one node; an import anywhere
in a file (module level, inside a function, under TYPE_CHECKING) is an edge from the file's node
to the imported one. The source is read with `ast`, nothing is imported, so a lazy import that
closes a loop is caught as surely as a module-level one.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Optional, Set

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "edge_sdk"


def node_of(module: str) -> Optional[str]:
    """edge_sdk.runtime.pipeline -> "runtime"; edge_sdk.manifest -> "manifest"; others None."""
    parts = module.split(".")
    if parts[0] != "edge_sdk":
        return None
    return parts[1] if len(parts) > 1 else None


def module_name(path: Path, root: Path = PACKAGE) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = PACKAGE) -> Set[str]:
    """Every edge_sdk module `path` imports, wherever the import statement is."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    out: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            # `from edge_sdk import roi` imports the package edge_sdk.roi (not so `__version__`)
            out.update(f"{target}.{alias.name}" for alias in node.names if target == "edge_sdk"
                       and ((root / alias.name).is_dir() or (root / f"{alias.name}.py").is_file()))
    return {m for m in out if m == "edge_sdk" or m.startswith("edge_sdk.")}


def package_graph(root: Path = PACKAGE) -> Dict[str, Set[str]]:
    graph: Dict[str, Set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        source = node_of(module_name(path, root))
        if source is None:
            continue
        edges = graph.setdefault(source, set())
        for target in imports_of(path, root):
            dest = node_of(target)
            if dest is not None and dest != source:
                edges.add(dest)
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One cycle as [a, b, ..., a], or None (depth-first search, white/grey/black)."""
    colour: Dict[str, int] = {}
    stack: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        colour[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if colour.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if colour.get(nxt) is None:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        colour[node] = 2
        return None

    for node in sorted(graph):
        if colour.get(node) is None:
            found = visit(node)
            if found:
                return found
    return None


def test_no_cycle_between_edge_sdk_packages() -> None:
    cycle = find_cycle(package_graph())
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle or [])


def test_roi_is_pure_strategy_and_geometry() -> None:
    graph = package_graph()
    assert "runtime" not in graph["roi"] and "daemon" not in graph["roi"], graph["roi"]


def test_telemetry_does_not_import_the_daemon() -> None:
    graph = package_graph()
    assert "daemon" not in graph.get("telemetry", set()), graph.get("telemetry")


@pytest.mark.parametrize("lazy", [False, True])
def test_the_walker_sees_a_cycle_through_an_import_inside_a_function(tmp_path: Path, lazy: bool) -> None:
    pkg = tmp_path / "edge_sdk"
    for sub in ("a", "b"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from edge_sdk.b.y import thing\n")
    body = "def f():\n    from ..a import x\n" if lazy else "import edge_sdk.a.x\n"
    (pkg / "b" / "y.py").write_text(body)
    cycle = find_cycle(package_graph(pkg))
    assert cycle is not None and set(cycle) == {"a", "b"}
