"""Each set of names (precisions, backends, decoders) is declared once, in the module that owns
it, and imported everywhere else: a copy anywhere else in the package fails here, so the next
precision or backend cannot be added in one place and forgotten in another."""
from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Dict, FrozenSet, Iterator, List, Tuple

import pytest

import edge_sdk
from edge_sdk.decoders import DECODERS
from edge_sdk.precision import BUILD_PRECISIONS, PRECISIONS, RUNTIME_PRECISIONS
from edge_sdk.runtime.backends import BACKEND_NAMES

PACKAGE = Path(edge_sdk.__file__).parent

# name of the set -> (its names, the one file allowed to spell them out)
OWNED: Dict[str, Tuple[FrozenSet[str], str]] = {
    "precisions": (frozenset(PRECISIONS), "precision.py"),
    "build precisions": (frozenset(BUILD_PRECISIONS), "precision.py"),
    "runtime precisions": (frozenset(RUNTIME_PRECISIONS), "precision.py"),
    "backend names": (frozenset(BACKEND_NAMES), "runtime/backends/__init__.py"),
    "decoder names": (frozenset(DECODERS), "decoders/__init__.py"),
}


def literal_name_sets(tree: ast.AST) -> Iterator[Tuple[int, FrozenSet[str]]]:
    """(line, strings) of every literal that lists names: a tuple, list or set of strings, the
    string keys of a dict, and the string values assigned in a class body (an Enum of names)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.ClassDef):
            items = [s.value for s in node.body if isinstance(s, ast.Assign)]
        else:
            continue
        names = frozenset(i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str))
        if len(names) >= 2:
            yield node.lineno, names


def copies(source: str, rel: str) -> List[str]:
    """The declared sets that `source` (the file `rel` in the package) spells out again."""
    found = []
    for line, names in literal_name_sets(ast.parse(source)):
        for what, (owned, owner) in OWNED.items():
            if rel != owner and owned <= names:
                found.append(f"{rel}:{line} lists the {what} ({', '.join(sorted(owned))}); import them from edge_sdk/{owner}")
    return found


def test_no_set_of_names_is_declared_twice() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        found += copies(path.read_text(encoding="utf-8"), rel)
    assert found == []


@pytest.mark.parametrize(
    "source, caught",
    [
        ('PRECISIONS = ("fp32", "fp16", "int8")', ["precisions"]),
        ('P = ["int8", "fp16", "fp32", "best"]', ["precisions", "build precisions"]),
        ('P = {"auto", "fp32", "fp16", "int8"}', ["precisions", "runtime precisions"]),
        ('FILES = {"fp32": "model.onnx", "fp16": "model.fp16.onnx", "int8": "model.int8.qdq.onnx"}', ["precisions"]),
        ('class Precision(str, Enum):\n    fp32 = "fp32"\n    fp16 = "fp16"\n    int8 = "int8"', ["precisions"]),
        ('B = ("auto", "onnxruntime", "onnxruntime-cpu", "onnxruntime-cuda", "onnxruntime-tensorrt", "tensorrt")',
         ["backend names"]),
        ('D = ("centerface", "yolov5", "yolov8", "yolo11", "yolox", "ssd", "end2end")', ["decoder names"]),
        # subsets are how code asks about a few of them: allowed
        ('wants_int8 = precision in ("int8", "best")', []),
        ('on_gpu = ("onnxruntime-cuda", "onnxruntime-tensorrt", "tensorrt")', []),
    ],
)
def test_the_check_catches_a_copy(source: str, caught: List[str]) -> None:
    def kinds(found: List[str]) -> List[str]:
        return sorted(f.split(" lists the ")[1].split(" (")[0] for f in found)

    assert kinds(copies(source, "cli/somewhere.py")) == sorted(caught)
    # the owner may spell out its own set, and only its own
    assert kinds(copies(source, "precision.py")) == sorted(c for c in caught if "precisions" not in c)


def test_the_reload_command_schema_lists_the_runtime_precisions() -> None:
    """cmd.json is JSON, out of the AST check's reach: its enum is the runtime's set, in order."""
    schema = json.loads((PACKAGE / "schemas" / "cmd.json").read_text())
    enums = [
        branch["then"]["properties"]["args"]["properties"]["precision"]["enum"]
        for branch in schema["allOf"]
        if "precision" in branch.get("then", {}).get("properties", {}).get("args", {}).get("properties", {})
    ]
    assert enums == [list(RUNTIME_PRECISIONS)]
