"""Class names: one string per class id, from a model's metadata or a labels file.

* :func:`check_labels` is the one check of a list of names, wherever it comes from (a manifest's
  `decoder.labels`, a file, ONNX metadata): a list of at most MAX_LABELS non-empty strings of at
  most MAX_LABEL_CHARS printable characters.
* :func:`parse_names_literal` reads the `names` Ultralytics writes into ONNX metadata, a Python
  dict literal such as ``{0: 'person', 1: 'bicycle'}`` (or a list literal), with
  ``ast.literal_eval`` on bounded text; never ``eval``.
* :func:`read_labels_file` reads `--labels FILE`: one name per line, or a dataset YAML (as
  Ultralytics' `coco.yaml`) whose top-level `names` is a list or a mapping of class id to name.
  Only that key is read, in the subset of YAML such files use; no YAML library is needed.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Dict, List, Optional, Type

from edge_sdk.errors import ConfigError, EdgeSdkError

MAX_LABELS = 10000  # LVIS has 1203 classes, Objects365 365: far above any detector's
MAX_LABEL_CHARS = 128
MAX_LITERAL_CHARS = 1024 * 1024  # the `names` metadata of a 10000-class model fits well within it
MAX_FILE_BYTES = 2 * 1024 * 1024


def check_labels(value: Any, what: str, error: Type[EdgeSdkError] = ConfigError) -> List[str]:
    """`value` as a list of class names, or `error` naming `what` and the fault."""
    if not isinstance(value, (list, tuple)):
        raise error(f"{what} must be a list of class names (index = class id), got {type(value).__name__}")
    if not value:
        raise error(f"{what} is empty; give one name per class, or leave labels out")
    if len(value) > MAX_LABELS:
        raise error(f"{what} has {len(value)} names; at most {MAX_LABELS} are accepted")
    for i, name in enumerate(value):
        if not isinstance(name, str):
            raise error(f"{what}[{i}] must be a string, got {type(name).__name__} {name!r:.40}")
        if not name.strip() or len(name) > MAX_LABEL_CHARS or not name.isprintable():
            raise error(
                f"{what}[{i}] = {name!r:.60} is not a class name: names are 1 to {MAX_LABEL_CHARS} printable "
                "characters, not blank"
            )
    return [str(name) for name in value]


def names_from_mapping(names: Any, what: str, error: Type[EdgeSdkError] = ConfigError) -> List[str]:
    """A list of names, or a mapping {class id: name} with ids 0..N-1 (in any order), as a list."""
    if isinstance(names, dict):
        ids = list(names)
        if not all(isinstance(k, int) and not isinstance(k, bool) for k in ids):
            raise error(f"{what} maps class ids to names, so its keys must be integers; got {ids[:5]!r}")
        if sorted(ids) != list(range(len(ids))):
            raise error(f"{what} must name every class id from 0 to {len(ids) - 1} once; got ids {sorted(ids)[:10]!r}")
        names = [names[k] for k in range(len(ids))]
    return check_labels(names, what, error)


def parse_names_literal(text: Any, what: str, error: Type[EdgeSdkError] = ConfigError) -> List[str]:
    """The names of a Python literal such as ``{0: 'person', 1: 'bicycle'}`` or ``['a', 'b']``."""
    if not isinstance(text, str):
        raise error(f"{what} must be text, got {type(text).__name__}")
    if len(text) > MAX_LITERAL_CHARS:
        raise error(f"{what} is {len(text)} characters long; at most {MAX_LITERAL_CHARS} are read")
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise error(f"{what} is not a list or a mapping of class names ({type(exc).__name__}): {text!r:.80}") from None
    return names_from_mapping(value, what, error)


def read_labels_file(path: Path) -> List[str]:
    """The class names in a labels file (see the module docstring); ConfigError naming the file."""
    path = Path(path)
    what = f"labels file {path}"
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} ({exc.strerror or exc}); give a text file with one class name per line") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"{what} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB; a labels file has one class name per line")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{what} is not UTF-8 text; save it as UTF-8 with one class name per line") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        return _yaml_names(text, what)
    names = [line.strip() for line in text.splitlines()]
    while names and not names[-1]:
        names.pop()
    for i, name in enumerate(names):
        if not name:
            raise ConfigError(f"{what}: line {i + 1} is empty; every line up to the last names one class (its id is the line number - 1)")
    return check_labels(names, what)


# -- the part of YAML a dataset file's `names` is written in -------------------------------------
def _yaml_names(text: str, what: str) -> List[str]:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("names:") or line.startswith("names :"):
            rest = _strip_comment(line.split(":", 1)[1]).strip()
            if rest:
                return _flow(rest, f"{what}: line {i + 1}")
            return _block(lines[i + 1:], i + 2, what)
    raise ConfigError(f"{what} has no top-level `names:` key; give `names:` as a list or a mapping of class id to name, "
                      "or use a text file with one class name per line")


def _block(lines: List[str], first: int, what: str) -> List[str]:
    """`names:` followed by indented `- name` items or `id: name` pairs."""
    listed: List[str] = []
    mapped: Dict[int, str] = {}
    for k, line in enumerate(lines):
        where = f"{what}: line {first + k}"
        body = _strip_comment(line)
        if not body.strip():
            continue
        if not body[:1].isspace() and not body.startswith("-"):
            break  # the next top-level key
        item = body.strip()
        if item.startswith("- ") or item == "-":
            listed.append(_scalar(item[1:].strip(), where))
        elif ":" in item:
            key, value = item.split(":", 1)
            try:
                cid = int(key.strip())
            except ValueError:
                raise ConfigError(f"{where}: expected `ID: name` under names, got {item!r:.60}") from None
            if cid in mapped:
                raise ConfigError(f"{where}: class id {cid} is named twice")
            mapped[cid] = _scalar(value.strip(), where)
        else:
            raise ConfigError(f"{where}: expected `- name` or `ID: name` under names, got {item!r:.60}")
    if listed and mapped:
        raise ConfigError(f"{what}: names mixes `- name` items and `ID: name` pairs; use one form")
    if not listed and not mapped:
        raise ConfigError(f"{what}: names lists no class")
    return names_from_mapping(mapped if mapped else listed, f"{what} names")


def _flow(text: str, where: str) -> List[str]:
    """`[a, 'b c']` or `{0: a, 1: b}` on one line."""
    if not (text.startswith("[") and text.endswith("]")) and not (text.startswith("{") and text.endswith("}")):
        raise ConfigError(f"{where}: names must be a list [..], a mapping {{..}} or an indented block, got {text!r:.60}")
    items = _split_flow(text[1:-1], where)
    if text.startswith("["):
        return check_labels([_scalar(item, where) for item in items], f"{where} names")
    mapped: Dict[int, str] = {}
    for item in items:
        key, sep, value = item.partition(":")
        try:
            cid = int(key.strip())
        except ValueError:
            raise ConfigError(f"{where}: expected `ID: name` pairs in names, got {item!r:.60}") from None
        if not sep or cid in mapped:
            raise ConfigError(f"{where}: expected one `ID: name` pair per class id, got {item!r:.60}")
        mapped[cid] = _scalar(value.strip(), where)
    return names_from_mapping(mapped, f"{where} names")


def _split_flow(text: str, where: str) -> List[str]:
    """Comma-separated items, commas inside quotes kept."""
    items, current, quote = [], "", None  # type: List[str], str, Optional[str]
    for ch in text:
        if quote is not None:
            current += ch
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            current += ch
        elif ch == ",":
            items.append(current.strip())
            current = ""
        elif ch in "[]{}":
            raise ConfigError(f"{where}: nested lists or mappings are not class names")
        else:
            current += ch
    if quote is not None:
        raise ConfigError(f"{where}: a quote is not closed")
    if current.strip():
        items.append(current.strip())
    return items


def _scalar(text: str, where: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        inner = text[1:-1]
        return inner.replace("''", "'") if text[0] == "'" else inner
    if text[:1] in ("[", "{", "&", "*", "!", "|", ">"):
        raise ConfigError(f"{where}: {text!r:.40} is not a plain class name; quote it")
    return text


def _strip_comment(line: str) -> str:
    """The line without a `#` comment outside quotes."""
    quote = None
    for k, ch in enumerate(line):
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k]
    return line
