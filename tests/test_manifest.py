"""Bundle.load trusts nothing: every model and calibration file listed and verified (sha256 and
size), no entry reaching outside the bundle, no NaN in the manifest, no empty `files`."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from edge_sdk.errors import BundleError
from edge_sdk.manifest import SCHEMA_VERSION, Bundle

MODEL = b"onnx model bytes " * 64
OTHER = b"a different model " * 64


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_bundle(root: Path, files: Optional[Dict[str, bytes]] = None, listed: Any = "all", sizes: bool = True,
                **manifest: Any) -> Path:
    """A bundle folder holding `files` (default: model.onnx); `listed` is the manifest's `files`
    ("all": every file with its sha256 and size, or plain digests with sizes=False)."""
    files = {"model.onnx": MODEL} if files is None else files
    root.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    if listed == "all":
        listed = {rel: {"sha256": digest(d), "size": len(d)} if sizes else digest(d) for rel, d in files.items()}
    body = {"schema_version": SCHEMA_VERSION, "inputs": [{"name": "input", "shape": [1, 3, 32, 32]}],
            "decoder": {"type": "centerface", "score_threshold": 0.5}, "precision": "fp32", "files": listed}
    body.update(manifest)
    (root / "manifest.json").write_text(json.dumps(body))
    return root


def test_a_listed_and_intact_bundle_loads(tmp_path: Path) -> None:
    files = {"model.onnx": MODEL, "model.int8.qdq.onnx": OTHER, "calib.cache": b"TRT-8502-EntropyCalibration2\n",
             "calib/0000.npz": b"npz0", "calib/0001.npz": b"npz1", "ranges.json": b"{}"}
    bundle = Bundle.load(make_bundle(tmp_path / "b", files, variants=["fp32", "int8"],
                                     calibration={"tensors": {"count": 2}}))
    assert bundle.variants() == ["fp32", "int8"]
    assert bundle.model_path("int8") == tmp_path / "b" / "model.int8.qdq.onnx"


def test_plain_digests_of_schema_1_bundles_still_load(tmp_path: Path) -> None:
    assert Bundle.load(make_bundle(tmp_path / "b", sizes=False, schema_version=1)).variants() == ["fp32"]


@pytest.mark.parametrize("files", [{}, None, [], "model.onnx"])
def test_a_manifest_without_files_is_refused(tmp_path: Path, files: Any) -> None:
    """`"files": {}` used to skip every check: a swapped model loaded, and the bundle hash was
    the sha256 of nothing, shared by every such bundle (and the engine cache keys on it)."""
    root = make_bundle(tmp_path / "b", {"model.onnx": OTHER}, listed=files)
    with pytest.raises(BundleError, match="lists no files"):
        Bundle.load(root)


@pytest.mark.parametrize(
    "unlisted",
    ["model.onnx", "model.fp16.onnx", "model.int8.qdq.onnx", "calib.cache", "calib/0007.npz", "calib/extra/x.npy"],
)
def test_every_file_the_runtime_reads_must_be_listed(tmp_path: Path, unlisted: str) -> None:
    listed = {"model.fp16.onnx": MODEL} if unlisted == "model.onnx" else {"model.onnx": MODEL}
    root = make_bundle(tmp_path / "b", listed, sizes=False, precision="fp16" if unlisted == "model.onnx" else "fp32")
    (root / unlisted).parent.mkdir(parents=True, exist_ok=True)
    (root / unlisted).write_bytes(OTHER)  # dropped in without the manifest knowing
    with pytest.raises(BundleError, match=f"holds {unlisted}, which its manifest does not list"):
        Bundle.load(root)


def test_a_variant_the_manifest_names_must_be_listed(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"model.onnx": MODEL}, sizes=False, variants=["fp32", "fp16"])
    with pytest.raises(BundleError, match=r"names model\.fp16\.onnx .*`files` does not list it"):
        Bundle.load(root)


def test_a_listing_without_a_model_is_refused(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"ranges.json": b"{}"}, precision=None)
    with pytest.raises(BundleError, match="lists no model file"):
        Bundle.load(root)


def test_the_announced_calibration_tensors_must_all_be_listed(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"model.onnx": MODEL, "calib/0000.npz": b"npz"}, sizes=False,
                       calibration={"tensors": {"count": 16}})
    with pytest.raises(BundleError, match="announces 16 calibration tensors but `files` lists 1"):
        Bundle.load(root)


def test_a_swapped_model_is_refused(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", sizes=False)
    (root / "model.onnx").write_bytes(MODEL[:-4] + b"evil")
    with pytest.raises(BundleError, match="fails its sha256 check"):
        Bundle.load(root)


def test_a_size_mismatch_is_refused_before_hashing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_bundle(tmp_path / "b")
    (root / "model.onnx").write_bytes(MODEL + b"\0" * 1024)

    def no_hashing(path: Any, chunk: int = 0) -> str:
        raise AssertionError(f"hashed {path}")

    monkeypatch.setattr("edge_sdk.manifest.sha256_file", no_hashing)
    with pytest.raises(BundleError, match=f"has {len(MODEL) + 1024} bytes, the manifest says {len(MODEL)}"):
        Bundle.load(root)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file beside the bundle that an entry tries to reach (listed with its true sha256, so
    only the path check can stop it)."""
    path = tmp_path / "secret.key"
    path.write_bytes(OTHER)
    return path


@pytest.mark.parametrize("entry", ["{abs}", "../secret.key", "calib/../../secret.key", "./model.onnx", "calib//x", "C:/x",
                                   "model.onnx\\..\\..\\secret.key", "manifest.json", ""])
def test_entries_that_leave_the_bundle_are_refused_unread(tmp_path: Path, outside: Path, entry: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    entry = entry.replace("{abs}", str(outside))
    listed = {"model.onnx": digest(MODEL), entry: digest(OTHER)}
    root = make_bundle(tmp_path / "b", listed=listed)
    read = []
    monkeypatch.setattr("edge_sdk.manifest.sha256_file", lambda path, chunk=0: read.append(path) or digest(MODEL))
    with pytest.raises(BundleError, match="files entry"):
        Bundle.load(root)
    assert read == []


@pytest.mark.parametrize("rel", ["model.onnx", "calib/0000.npz"])
def test_a_symbolic_link_out_of_the_bundle_is_refused(tmp_path: Path, outside: Path, rel: str) -> None:
    root = make_bundle(tmp_path / "b", {"model.onnx": OTHER} if rel != "model.onnx" else {}, sizes=False)
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, root / rel)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"][rel] = digest(OTHER)  # the true digest of the outside file
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="leads outside the bundle"):
        Bundle.load(root)


def test_a_symbolic_link_inside_the_bundle_is_fine(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"model.onnx": MODEL, "store/model.bin": MODEL})
    (root / "model.onnx").unlink()
    os.symlink("store/model.bin", root / "model.onnx")
    assert Bundle.load(root).variants() == ["fp32"]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_in_the_manifest_are_refused(tmp_path: Path, literal: str) -> None:
    root = make_bundle(tmp_path / "b")
    text = (root / "manifest.json").read_text().replace('"score_threshold": 0.5', f'"score_threshold": {literal}')
    assert literal in text
    (root / "manifest.json").write_text(text)
    with pytest.raises(BundleError, match="manifest.json"):
        Bundle.load(root)


@pytest.mark.parametrize("content", ["[" * 100_000 + "]" * 100_000, "[1, 2]", '"text"', "{", '{"schema_version": true}',
                                     '{"schema_version": 99}'])
def test_hostile_manifests_are_a_bundle_error(tmp_path: Path, content: str) -> None:
    root = make_bundle(tmp_path / "b")
    (root / "manifest.json").write_text(content)
    with pytest.raises(BundleError, match="manifest.json"):
        Bundle.load(root)


@pytest.mark.parametrize("value", [{"sha256": "0" * 63, "size": 1}, {"sha256": "A" * 64, "size": 1},
                                   {"sha256": "0" * 64, "size": -1}, {"sha256": "0" * 64, "size": True},
                                   {"sha256": "0" * 64}, {"sha256": "0" * 64, "size": 1, "x": 2}, 42])
def test_malformed_entries_are_refused(tmp_path: Path, value: Any) -> None:
    root = make_bundle(tmp_path / "b", listed={"model.onnx": value})
    with pytest.raises(BundleError, match="files.model.onnx"):
        Bundle.load(root)


def test_the_bundle_hash_follows_the_content(tmp_path: Path) -> None:
    a = Bundle.load(make_bundle(tmp_path / "a")).hash
    assert Bundle.load(make_bundle(tmp_path / "a2")).hash == a  # same content, another folder
    assert Bundle.load(make_bundle(tmp_path / "a1", sizes=False, schema_version=1)).hash == a  # engine caches stay valid
    assert Bundle.load(make_bundle(tmp_path / "b", {"model.onnx": OTHER})).hash != a
    assert Bundle.load(make_bundle(tmp_path / "c", {"model.onnx": MODEL, "calib.cache": b"x"})).hash != a
    assert len(a) == 16 and a != hashlib.sha256(b"").hexdigest()[:16]


@pytest.mark.parametrize("field, value", [
    ("decoder", {"type": "centerface", "score_threshold": 0.9}),
    ("inputs", [{"name": "input", "shape": [1, 3, 32, 32], "mean": [1, 2, 3]}]),
    ("int8", {"fallback_layers": {"conv_0": "fp32"}}),
    ("calibration", {"algorithm": "minmax"}),
])
def test_a_changed_manifest_is_another_bundle_and_another_engine(tmp_path: Path, field: str, value: Any) -> None:
    """The same files under a manifest that says something else (a tampered threshold, mean,
    fallback layer, calibration algorithm) get another hash, so another engine cache entry."""
    from edge_sdk.trt.cache import EngineKey

    a = Bundle.load(make_bundle(tmp_path / "a"))
    b = Bundle.load(make_bundle(tmp_path / "b", **{field: value}))
    assert b.files == a.files and b.hash != a.hash
    assert EngineKey(a.hash, "8.5.2.2", "7.2", "fp16").filename != EngineKey(b.hash, "8.5.2.2", "7.2", "fp16").filename
    # the same content written with other key order and spacing is the same bundle
    data = json.loads((tmp_path / "b" / "manifest.json").read_text())
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(dict(reversed(list(data.items()))), indent=4))
    assert Bundle.load(tmp_path / "b").hash == b.hash


@pytest.mark.parametrize("field, value", [
    ("builder", {"edge_sdk": "0.1.0", "seconds": 87.3}),
    ("preprocess_probe", {"verdict": "configured", "seconds": 6.91}),
    ("provenance", {"input": {"color": "preset: ultralytics"}, "decoder": {}, "preset": {"name": "ultralytics"}}),
])
def test_a_rebuild_that_only_took_another_time_keeps_the_hash(tmp_path: Path, field: str, value: Any) -> None:
    """A rebuild of the same model with the same settings records another build duration; the
    device must not compile its engines again for that."""
    a = Bundle.load(make_bundle(tmp_path / "a"))
    b = Bundle.load(make_bundle(tmp_path / "b", **{field: value}))
    assert b.hash == a.hash
