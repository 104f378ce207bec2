"""Bundle writing: atomic, checksummed, readable by the runtime, never partial."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest
from detector_factory import make_detector

from edge_sdk.builder.bundle import CALIB_KEY, calib_tensor_format, check_output_dir, encode_calib_tensor, write_bundle
from edge_sdk.errors import BundleError, ConfigError
from edge_sdk.fsutil import sha256_file
from edge_sdk.manifest import Bundle
from edge_sdk.preprocess import InputSpec

pytestmark = pytest.mark.host

MANIFEST = {
    "schema_version": 1,
    "model": {"name": "tiny", "source_sha256": "0" * 64},
    "inputs": [{"name": "input.1", "shape": [1, 3, 64, 96]}],
    "decoder": {"type": "centerface"},
    "precision": "fp32",
}


def stored(path: Path) -> np.ndarray:
    with np.load(path) as data:
        assert list(data.keys()) == [CALIB_KEY]
        return data[CALIB_KEY]


def test_writes_files_with_checksums_and_loads(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    tensors = [np.full((1, 3, 4, 4), i, np.float32) for i in range(3)]
    bundle = write_bundle(out, MANIFEST, {"fp32": make_detector()}, {"calib.cache": "TRT-8502-EntropyCalibration2\n"}, tensors)
    files = json.loads((out / "manifest.json").read_text())["files"]
    assert sorted(files) == ["calib.cache", "calib/0000.npz", "calib/0001.npz", "calib/0002.npz", "model.onnx"]
    assert all(entry == {"sha256": sha256_file(out / rel), "size": (out / rel).stat().st_size} for rel, entry in files.items())
    assert stored(out / "calib" / "0002.npz").tolist() == tensors[2].tolist()
    assert bundle.model_path("fp32") == out / "model.onnx"
    assert Bundle.load(out).inputs[0].name == "input.1"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def _pixels(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (1, 3, 8, 12)).astype(np.float32)


@pytest.mark.parametrize(
    "make, dtype",
    [
        (lambda: _pixels(), np.uint8),  # raw 0..255 pixels (mean 0, scale 1)
        (lambda: (_pixels() - 127.5) / 128.0, np.float16),  # exact in float16
        (lambda: _pixels() / 255.0, np.float32),  # 1/255 steps round in float16
        (lambda: _pixels() + 0.5, np.float16),  # not integers, but halves are exact in float16
        (lambda: np.full((1, 3, 2, 2), 300.0, np.float32), np.float16),  # integers above 255
        (lambda: np.full((1, 3, 2, 2), 0.1234567, np.float32), np.float32),
    ],
)
def test_calibration_tensors_are_stored_in_the_smallest_exact_dtype(tmp_path: Path, make, dtype) -> None:
    tensor = make().astype(np.float32)
    assert encode_calib_tensor(tensor).dtype == dtype
    write_bundle(tmp_path / "b", MANIFEST, {"fp32": make_detector()}, calib_tensors=[tensor])
    back = stored(tmp_path / "b" / "calib" / "0000.npz")
    assert back.dtype == dtype
    assert np.array_equal(back.astype(np.float32), tensor)  # the device's float32 cast rebuilds it bit for bit


def test_uint8_pixels_take_a_quarter_of_float32_or_less(tmp_path: Path) -> None:
    tensor = np.zeros((1, 3, 96, 160), np.float32)
    tensor[..., 20:70, :] = _pixels(1)[..., :1, :1]  # letterbox-like: flat bands compress
    write_bundle(tmp_path / "b", MANIFEST, {"fp32": make_detector()}, calib_tensors=[tensor])
    assert (tmp_path / "b" / "calib" / "0000.npz").stat().st_size <= tensor.nbytes / 4


def test_calib_tensor_format_tells_the_device_how_to_rebuild() -> None:
    spec = InputSpec(name="input.1", shape=[1, 3, 8, 12])
    fmt = calib_tensor_format([_pixels(), _pixels() / 255.0], spec)
    assert (fmt["count"], fmt["dtype"], fmt["dtypes"]) == (2, "float32", ["uint8", "float32"])
    assert (fmt["mean"], fmt["scale"]) == ([0.0] * 3, [1.0] * 3) and "cast to float32" in fmt["values"]


def test_failure_leaves_no_partial_bundle_and_keeps_the_old_one(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    write_bundle(out, MANIFEST, {"fp32": make_detector()})
    before = sha256_file(out / "manifest.json")

    class Exploding:
        def SerializeToString(self) -> bytes:
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_bundle(out, dict(MANIFEST, precision="fp16"), {"fp32": make_detector(), "fp16": Exploding()})
    assert sha256_file(out / "manifest.json") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_unknown_variant_is_rejected_before_writing(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="unknown model variants"):
        write_bundle(tmp_path / "b", MANIFEST, {"int4": make_detector()})
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("kind", ["file", "foreign folder"])
def test_output_that_is_not_a_bundle_is_refused(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("x")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="--out"):
        check_output_dir(out)
    assert out.exists()


NOBODY = 65534  # the conventional unprivileged uid/gid; no passwd entry is needed to take it


def as_unprivileged(fn: Callable[[], None]) -> str:
    """Run `fn` as an unprivileged user and return "ok" or "ExceptionType: message".

    Not root: runs here. Root (as in CI) can write anywhere, so a forked child gives up root
    for uid/gid 65534 first; it keeps the imported modules, so it needs to read no file."""
    if os.geteuid() != 0:
        return _outcome(fn)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write, _outcome(fn).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        outcome = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the unprivileged child failed: {status}"
    return outcome


def _outcome(fn: Callable[[], None]) -> str:
    try:
        fn()
    except Exception as exc:  # reported to the parent as text
        return f"{type(exc).__name__}: {exc}"
    return "ok"


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder an unprivileged user can reach (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="edge-sdk-perm-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in [folder, *folder.rglob("*")]:
            if path.is_dir():
                path.chmod(0o700)
        shutil.rmtree(folder)


def test_unwritable_parent_is_refused(shared_tmp: Path) -> None:
    locked, open_ = shared_tmp / "locked", shared_tmp / "open"
    locked.mkdir(mode=0o555)
    locked.chmod(0o555)  # read and enter, not write: for root-owned files, as for anyone's
    open_.mkdir()
    open_.chmod(0o777)
    # control: the unprivileged user may build into a folder it can write
    assert as_unprivileged(lambda: check_output_dir(open_ / "bundle")) == "ok"
    outcome = as_unprivileged(lambda: check_output_dir(locked / "bundle"))
    assert outcome.startswith(f"ConfigError: cannot write the bundle to {locked / 'bundle'}: {locked} is not writable"), outcome
    assert outcome.endswith("choose another --out"), outcome
    assert list(locked.iterdir()) == [] and list(open_.iterdir()) == []


def test_parent_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="not a folder|is a file"):
        check_output_dir(tmp_path / "f" / "bundle")


def test_existing_bundle_or_empty_folder_may_be_replaced(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    check_output_dir(tmp_path / "empty")
    write_bundle(tmp_path / "b", MANIFEST, {"fp32": make_detector()})
    check_output_dir(tmp_path / "b")


def web_project(root: Path) -> Path:
    """A folder that happens to hold a manifest.json (a web app's), and the owner's work."""
    (root / "src").mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps({"name": "app", "start_url": "/", "icons": []}))
    (root / "important.txt").write_text("precious")
    (root / "src" / "app.js").write_text("console.log('hi')")
    return root


def tree(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_folder_with_some_manifest_json_is_not_replaced(tmp_path: Path) -> None:
    out = web_project(tmp_path / "site")
    before = tree(out)
    with pytest.raises(ConfigError, match=r"--out .*site is not a bundle folder .*manifest.json is not an edge-sdk bundle manifest"):
        check_output_dir(out)
    with pytest.raises(ConfigError, match="not a bundle folder"):
        write_bundle(out, MANIFEST, {"fp32": make_detector()})
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


@pytest.mark.parametrize("extra", ["notes.txt", "calib/mine.png", "src/"])
def test_a_bundle_with_files_of_its_own_is_not_replaced(tmp_path: Path, extra: str) -> None:
    out = tmp_path / "b"
    write_bundle(out, MANIFEST, {"fp32": make_detector()}, calib_tensors=[np.zeros((1, 3, 2, 2), np.float32)])
    path = out / extra.rstrip("/")
    if extra.endswith("/"):
        path.mkdir()
    else:
        path.write_text("mine")
    before = tree(out)
    with pytest.raises(ConfigError, match=f"it holds {extra}, which its manifest.json does not list"):
        write_bundle(out, MANIFEST, {"fp32": make_detector()})
    assert tree(out) == before and path.exists()


def test_a_bundle_of_an_earlier_schema_is_replaced(tmp_path: Path) -> None:
    out = tmp_path / "b"
    out.mkdir()
    (out / "model.onnx").write_bytes(b"old model")
    (out / "manifest.json").write_text(json.dumps({"schema_version": 1, "files": {"model.onnx": sha256_file(out / "model.onnx")}}))
    write_bundle(out, MANIFEST, {"fp32": make_detector()})
    assert Bundle.load(out).manifest["schema_version"] == 2 and (out / "model.onnx").read_bytes() != b"old model"


def test_a_bundle_whose_fields_this_version_refuses_is_still_replaced(tmp_path: Path) -> None:
    out = tmp_path / "b"
    out.mkdir()
    (out / "model.onnx").write_bytes(b"old model")
    (out / "manifest.json").write_text(json.dumps({"schema_version": 2, "inputs": [{"name": "x", "pad_value": 300}],
                                                   "files": {"model.onnx": sha256_file(out / "model.onnx")}}))
    with pytest.raises(BundleError, match=r"inputs\[0\]\.pad_value"):
        Bundle.load(out)
    write_bundle(out, MANIFEST, {"fp32": make_detector()})
    assert (out / "model.onnx").read_bytes() != b"old model"


def test_a_mount_point_is_refused_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "usb"
    out.mkdir()
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == out)
    with pytest.raises(ConfigError, match=r"--out .*usb is a mount point.*use a folder inside it \(e\.g\. --out .*usb/bundle\)"):
        check_output_dir(out)
    check_output_dir(out / "bundle")


def test_a_symbolic_link_as_out_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ConfigError, match="is a symbolic link"):
        check_output_dir(tmp_path / "link")


def test_a_swap_refused_by_the_filesystem_leaves_the_old_bundle_and_no_partial(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A mount point that os.path.ismount does not see (a bind mount) answers EBUSY at the swap."""
    import errno

    from edge_sdk import fsutil

    out = tmp_path / "bundle"
    write_bundle(out, MANIFEST, {"fp32": make_detector()})
    before = tree(out)
    real_replace = os.replace

    def replace(src, dst):
        if Path(src) == out:
            raise OSError(errno.EBUSY, "Device or resource busy", str(src))
        return real_replace(src, dst)

    monkeypatch.setattr(fsutil.os, "replace", replace)
    with pytest.raises(ConfigError, match="mount point or in use; use a folder inside it"):
        write_bundle(out, dict(MANIFEST, precision="fp16"), {"fp32": make_detector(), "fp16": make_detector()})
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_a_stale_partial_is_removed_when_the_next_build_checks_its_output(tmp_path: Path) -> None:
    stale = tmp_path / ".bundle.999999-abcd1234.partial"  # a build killed mid-write (nobody holds its lock)
    (stale / "calib").mkdir(parents=True)
    (stale / "calib" / "0000.npz").write_bytes(b"x" * 4096)
    check_output_dir(tmp_path / "bundle")
    assert not stale.exists()


def test_a_non_finite_number_is_never_written_into_a_manifest(tmp_path: Path) -> None:
    out = tmp_path / "b"
    with pytest.raises(BundleError, match=r"accuracy\.int8\.f1_vs_fp32 = nan, which JSON cannot carry"):
        write_bundle(out, dict(MANIFEST, accuracy={"int8": {"f1_vs_fp32": float("nan")}}), {"fp32": make_detector()})
    assert sorted(p.name for p in tmp_path.iterdir()) == []
