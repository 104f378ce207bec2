"""Class names from ONNX metadata literals and labels files (text, dataset YAML)."""
from __future__ import annotations

from pathlib import Path

import pytest

from edge_sdk.errors import ConfigError, ModelError
from edge_sdk.labels import parse_names_literal, read_labels_file

COCO3 = ["person", "bicycle", "car"]


@pytest.mark.parametrize("text", [
    "{0: 'person', 1: 'bicycle', 2: 'car'}",  # as Ultralytics writes it
    "{2: 'car', 0: 'person', 1: 'bicycle'}",
    "['person', 'bicycle', 'car']",
])
def test_metadata_literals(text: str) -> None:
    assert parse_names_literal(text, "names") == COCO3


@pytest.mark.parametrize("text, message", [
    ("__import__('os').getcwd()", r"not a list or a mapping of class names"),
    ("{0: 'a', 2: 'b'}", r"every class id from 0 to 1 once"),
    ("{'0': 'a'}", r"keys must be integers"),
    ("{0: 1}", r"\[0\] must be a string"),
    ("[" * 100000, r"not a list or a mapping"),
    ("'person'", r"must be a list"),
])
def test_bad_metadata_literals_are_typed_errors(text: str, message: str) -> None:
    with pytest.raises(ModelError, match=message):
        parse_names_literal(text, "names", ModelError)


def test_an_oversized_literal_is_not_parsed() -> None:
    with pytest.raises(ConfigError, match=r"at most 1048576 are read"):
        parse_names_literal("[" + "'a'," * 300000 + "]", "names")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name, text", [
    ("labels.txt", "person\nbicycle\ncar\n\n"),
    ("labels.names", "\ufeffperson\r\nbicycle\r\ncar"),
    ("coco.yaml", "# COCO\npath: ../datasets/coco  # root\ntrain: images/train\n\nnames:\n  0: person\n  1: bicycle\n  2: car\n\ndownload: |\n  x\n"),
    ("coco.yaml", "names:\n- person\n- 'bicycle'\n- \"car\"  # a comment\nnc: 3\n"),
    ("data.yml", "nc: 3\nnames: ['person', bicycle, \"car\"]\n"),
    ("data.yaml", "names: {0: person, 1: bicycle, 2: car}  # inline\n"),
])
def test_labels_files(tmp_path: Path, name: str, text: str) -> None:
    assert read_labels_file(write(tmp_path, name, text)) == COCO3


def test_yaml_quotes_keep_commas_and_hashes(tmp_path: Path) -> None:
    path = write(tmp_path, "d.yaml", "names: ['car, parked', \"no #1\", 'it''s']\n")
    assert read_labels_file(path) == ["car, parked", "no #1", "it's"]


@pytest.mark.parametrize("name, text, message", [
    ("l.txt", "a\n\nb\n", r"line 2 is empty"),
    ("l.txt", "", r"is empty"),
    ("d.yaml", "nc: 2\n", r"no top-level `names:` key"),
    ("d.yaml", "names:\n  0: a\n  0: b\n", r"class id 0 is named twice"),
    ("d.yaml", "names:\n  0: a\n  - b\n", r"mixes"),
    ("d.yaml", "names:\n  zero: a\n", r"expected `ID: name`"),
    ("d.yaml", "names: [a, [b]]\n", r"nested lists"),
    ("d.yaml", "names: person\n", r"must be a list"),
    ("d.yaml", "names:\n  0: a\n  2: b\n", r"every class id from 0 to 1 once"),
    ("d.yaml", "names:\nnc: 2\n", r"names lists no class"),
])
def test_bad_labels_files_name_the_fault(tmp_path: Path, name: str, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_labels_file(write(tmp_path, name, text))


def test_missing_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read labels file"):
        read_labels_file(tmp_path / "nope.txt")
    path = tmp_path / "b.txt"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match=r"is not UTF-8 text"):
        read_labels_file(path)
