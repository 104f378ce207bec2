"""Bundle and manifest promises at their edges: the hash is the documented sha256 of the
canonical JSON (computed here with hashlib), schema versions up to this runtime's, byte counts
from 0, the manifest's size bound, the accuracy note's wording, the chosen variant only when the
bundle holds it."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from edge_sdk.errors import BundleError
from edge_sdk.manifest import MANIFEST_MAX_BYTES, SCHEMA_VERSION, Bundle, parse_manifest
from test_manifest import MODEL, OTHER, digest, make_bundle


def test_the_hash_is_sha256_of_the_documented_canonical_json(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"model.onnx": MODEL, "calib.cache": b"cache"}, decoder={"type": "centerface",
                                                                                               "labels": ["visage"]})
    manifest = json.loads((root / "manifest.json").read_text())
    said = {k: v for k, v in manifest.items() if k not in ("files", "schema_version")}
    files = {rel: entry["sha256"] for rel, entry in manifest["files"].items()}
    text = json.dumps({"files": files, "manifest": said}, sort_keys=True, separators=(",", ":"))
    assert Bundle.load(root).hash == hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.mark.parametrize("version,ok", [(1, True), (SCHEMA_VERSION, True), (SCHEMA_VERSION + 1, False), (True, False),
                                        (2.0, False), ("2", False), (None, False)])
def test_schema_versions_up_to_this_runtimes_load(tmp_path: Path, version: Any, ok: bool) -> None:
    root = make_bundle(tmp_path / "b", sizes=version != 1, schema_version=version)
    if ok:
        assert Bundle.load(root).variants() == ["fp32"]
    else:
        with pytest.raises(BundleError, match="schema_version"):
            Bundle.load(root)


@pytest.mark.parametrize("size,ok", [(0, True), (-1, False), (True, False), (1.0, False), ("0", False)])
def test_a_listed_size_is_a_byte_count_from_zero(tmp_path: Path, size: Any, ok: bool) -> None:
    listed = {"model.onnx": {"sha256": digest(MODEL), "size": len(MODEL)},
              "calib.cache": {"sha256": digest(b""), "size": size}}
    root = make_bundle(tmp_path / "b", {"model.onnx": MODEL, "calib.cache": b""}, listed=listed)
    if ok:
        assert Bundle.load(root).files["calib.cache"].size == 0
    else:
        with pytest.raises(BundleError, match="byte count"):
            Bundle.load(root)


def test_a_size_off_by_one_byte_is_refused(tmp_path: Path) -> None:
    for delta in (-1, 1):
        listed = {"model.onnx": {"sha256": digest(MODEL), "size": len(MODEL) + delta}}
        with pytest.raises(BundleError, match=f"has {len(MODEL)} bytes"):
            Bundle.load(make_bundle(tmp_path / f"b{delta}", listed=listed))


def test_the_manifest_is_read_up_to_its_size_bound(tmp_path: Path) -> None:
    base = json.dumps({"schema_version": SCHEMA_VERSION, "files": {"model.onnx": digest(MODEL)}, "note": ""})
    at = base.replace('"note": ""', '"note": "' + "x" * (MANIFEST_MAX_BYTES - len(base)) + '"').encode()
    assert len(at) == MANIFEST_MAX_BYTES
    assert parse_manifest(at, "m", fields=False)["note"].startswith("x")
    with pytest.raises(BundleError, match="larger"):
        parse_manifest(at[:-2] + b'x"}', "m", fields=False)
    root = tmp_path / "b"
    make_bundle(root)
    (root / "manifest.json").write_bytes(at[:-2] + b'x"}')
    with pytest.raises(BundleError, match="larger"):
        Bundle.load(root)


@pytest.mark.parametrize("entry,note", [
    ({"f1_vs_fp32": 0.98154, "gate": {"metric": "f1_vs_fp32", "value": 0.98154, "threshold": 0.97, "passed": True}},
     "f1_vs_fp32 0.9815 >= 0.97 on the gate images"),
    ({"gate": {"metric": "cosine", "value": 0.9, "threshold": 0.99, "passed": False}}, "cosine 0.9000 < 0.99 on the gate images"),
    ({"gate": {"metric": "mse", "value": 0.9, "threshold": 0.99, "passed": False}, "cosine": 0.5}, "cosine 0.5000"),
    ({"gate": {"metric": "cosine", "value": True, "threshold": 0.99, "passed": False}}, ""),
    ({"gate": {"metric": "cosine", "value": 0.9, "threshold": 0.99, "passed": 1}}, ""),
    ({"f1_vs_fp32": 1}, "f1_vs_fp32 1.0000"),
    ({"f1_vs_fp32": True}, ""),
    ("text", ""),
])
def test_the_accuracy_note_says_what_the_manifest_records(tmp_path: Path, entry: Any, note: str) -> None:
    bundle = Bundle(tmp_path, {"accuracy": {"int8": entry}})
    assert bundle.accuracy_note("int8") == note
    assert bundle.accuracy_note("fp16") == ""


def test_the_chosen_precision_only_when_the_bundle_holds_it(tmp_path: Path) -> None:
    files = {"model.onnx": MODEL, "model.fp16.onnx": OTHER}
    bundle = Bundle.load(make_bundle(tmp_path / "b", files, precision="fp16", variants=["fp32", "fp16"]))
    assert bundle.gated_precision == "fp16" and bundle.variants() == ["fp32", "fp16"]
    (tmp_path / "b" / "model.fp16.onnx").unlink()
    assert bundle.gated_precision is None and bundle.variants() == ["fp32"]
    with pytest.raises(BundleError, match="no fp16 variant"):
        bundle.model_path("fp16")
    with pytest.raises(BundleError, match="unknown precision"):
        bundle.model_path("int4")


@pytest.mark.parametrize("variants", ["fp32", ["fp32", 5], [None], {"fp32": 1}])
def test_variants_must_be_a_list_of_names_before_any_file_is_read(variants: Any) -> None:
    body = {"schema_version": SCHEMA_VERSION, "files": {"model.onnx": digest(MODEL)}, "variants": variants}
    with pytest.raises(BundleError, match="variants must be a list of variant names"):
        parse_manifest(json.dumps(body).encode(), "m", fields=False)


def test_unlisted_runtime_files_are_named_three_at_a_time(tmp_path: Path) -> None:
    files = {"model.onnx": MODEL, "calib/0.npz": b"0", "calib/1.npz": b"1", "calib/2.npz": b"2", "calib/3.npz": b"3",
             "calib/4.npz": b"4"}
    root = make_bundle(tmp_path / "b", files, listed={"model.onnx": {"sha256": digest(MODEL), "size": len(MODEL)}})
    with pytest.raises(BundleError) as info:
        Bundle.load(root)
    message = str(info.value)
    assert "calib/0.npz, calib/1.npz, calib/2.npz and 2 more" in message and "calib/3.npz" not in message


def test_the_manifest_bound_is_eight_mib() -> None:
    assert MANIFEST_MAX_BYTES == 8 * 1024 * 1024


@pytest.mark.parametrize("inputs", [5, "abc", [1], [None], [{"name": "x"}, "y"], {"name": "x"}])
def test_inputs_that_are_not_a_list_of_objects_are_named_so(inputs: Any) -> None:
    from edge_sdk.manifest import input_specs

    with pytest.raises(BundleError, match=r"^m\.json: inputs must be a list of objects; rebuild the bundle$"):
        input_specs({"inputs": inputs}, "m.json")
