"""Write the data files behind `synthetic://faces` into edge_sdk/assets/.

    python apps/make_synthetic_assets.py [--out edge_sdk/assets] [--sdist face_recognition-1.3.0.tar.gz]

* faces.npz   - 84 colour face crops (64 x 64) with the exact face box inside each, cut from six
                public-domain photos of real faces (US federal government and NASA works):
                - biden.jpg, obama.jpg, obama2.jpg, obama3.jpg: White House photos by Pete Souza,
                  from the tests of the `face_recognition==1.3.0` sdist on PyPI (fetched with
                  `pip download`, or given with --sdist);
                - grace_hopper.jpg: US Navy portrait of Grace Hopper, in matplotlib's sample data;
                - `skimage.data.astronaut()`: Eileen Collins, NASA.
* coffee.jpg  - `skimage.data.coffee()`, CC0 (Rachel Michetti).
* rocket.jpg  - `skimage.data.rocket()`, public domain (SpaceX).

Provenance and licences: edge_sdk/assets/README.md. Each source file is checked against its
sha256, and each hand-drawn face box against OpenCV's Haar face detector (an independent
method) before any crop is cut.

Each crop is the source photo mirrored or not, rotated by up to 12 degrees, scaled so that the
face fills 55-85 % of the crop height, shifted inside the crop, and given its own brightness,
gamma and white balance. The face box of a crop is the hand-drawn box moved and scaled by the
same transform (upright, same aspect). The crops are stored as one JPEG (4:4:4, quality 92)
inside the .npz, next to their boxes. The output is deterministic for a given OpenCV version.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import cv2
import numpy as np
from skimage import data

from edge_sdk.fsutil import atomic_write_bytes

JPEG_QUALITY = 92
CELL = 64  # side of a stored crop, pixels
PER_PHOTO = 14  # crops per source photo
SEED = 20251130
FACE_HEIGHT = (0.55, 0.85)  # face box height / crop side
ROTATION_DEG = 12.0
GAIN = (0.75, 1.25)  # brightness
GAMMA = (0.8, 1.25)
WHITE_BALANCE = (0.88, 1.12)  # red and blue gain relative to green
SDIST = "face_recognition==1.3.0"
SDIST_SHA256 = "5e5efdd1686aa566af0d3cc1313b131e4b197657a8ffd03669e6d3fad92705ec"

Box = Tuple[int, int, int, int]


@dataclass(frozen=True)
class FacePhoto:
    """A source photo and its one face, boxed by hand (hairline to chin, cheek to cheek)."""

    name: str
    origin: str  # "sdist:<member>", "matplotlib:<sample file>" or "skimage:<function>"
    sha256: str  # of the file; of the decoded RGB array for skimage
    face: Box  # xyxy in photo pixels
    keep: Optional[Box] = None  # crops take pixels from this region only (other people lie outside)


PHOTOS = [
    FacePhoto("biden", "sdist:face_recognition-1.3.0/tests/test_images/biden.jpg",
              "3c17508bb91554c637a2eabddfae790e5bb1caba93130814fc2ac50be9760c4c", (416, 235, 715, 556)),
    FacePhoto("obama", "sdist:face_recognition-1.3.0/tests/test_images/obama.jpg",
              "0930e3aa8cae5920329c0c8cbc6a2ab70f47b0e67b432875beaa95cbf7e741f6", (366, 85, 613, 425)),
    FacePhoto("obama2", "sdist:face_recognition-1.3.0/tests/test_images/obama2.jpg",
              "a7efcc907375274796f39646510704aa86672d59f6d5469d69af3c85590976a6", (206, 232, 475, 635),
              keep=(0, 0, 560, 1200)),  # a woman's face enters at the right edge
    FacePhoto("obama3", "sdist:face_recognition-1.3.0/tests/test_images/obama3.jpg",
              "76ac6bf97c36dc2da0ad16a537d6a5ac1b10f48d49aac29a0cca9a17cdbc3ca3", (631, 282, 910, 626),
              keep=(0, 0, 1250, 2333)),  # another person at the right edge
    FacePhoto("hopper", "matplotlib:grace_hopper.jpg",
              "a8ca6d734765703b09728ab47fe59f473d93ae3967fc24c7c0288c3c7adb7130", (170, 137, 359, 317)),
    FacePhoto("astronaut", "skimage:astronaut",
              "a8c429c18afa7b0fd5673e598d73a21225d94c864a71bbb3885126fdecb41071", (182, 73, 269, 174)),
]
HAAR_MIN_IOU = 0.5  # each hand-drawn box must overlap a Haar detection at least this much


def fetch_sdist(dest: Path) -> Path:
    """`pip download` the face_recognition sdist (its tests hold the White House photos)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--disable-pip-version-check",
           SDIST, "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(dest.glob("face_recognition-*.tar.gz"))
    if proc.returncode != 0 or not found:
        raise SystemExit(f"pip could not download {SDIST}: {(proc.stderr or proc.stdout).strip()[-400:]}; "
                         "download it elsewhere and pass --sdist PATH")
    return found[0]


def _check(name: str, digest: str, expected: str) -> None:
    if digest != expected:
        raise SystemExit(f"{name} has sha256 {digest}, expected {expected}; the source changed, so the face box may be wrong")


def load_photos(sdist: Path) -> Dict[str, np.ndarray]:
    """Every source photo as BGR uint8, after its sha256 check."""
    import matplotlib

    _check(sdist.name, hashlib.sha256(sdist.read_bytes()).hexdigest(), SDIST_SHA256)
    out: Dict[str, np.ndarray] = {}
    with tarfile.open(sdist) as tar:
        for photo in PHOTOS:
            kind, where = photo.origin.split(":", 1)
            if kind == "sdist":
                member = tar.extractfile(where)
                if member is None:
                    raise SystemExit(f"{sdist} has no {where}")
                raw = member.read()
            elif kind == "matplotlib":
                raw = (Path(matplotlib.get_data_path()) / "sample_data" / where).read_bytes()
            else:
                rgb = np.ascontiguousarray(getattr(data, where)())
                _check(photo.name, hashlib.sha256(rgb.tobytes()).hexdigest(), photo.sha256)
                out[photo.name] = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
                continue
            _check(photo.name, hashlib.sha256(raw).hexdigest(), photo.sha256)
            out[photo.name] = cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR)
    return out


def iou(a: Box, b: Box) -> float:
    w = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    return inter / float((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def check_face_boxes(photos: Dict[str, np.ndarray]) -> Dict[str, float]:
    """Each hand-drawn box against OpenCV's Haar cascade: it must overlap a Haar face."""
    cascade = cv2.CascadeClassifier(cv2.data.haarcascades + "haarcascade_frontalface_default.xml")
    overlaps = {}
    for photo in PHOTOS:
        gray = cv2.cvtColor(photos[photo.name], cv2.COLOR_BGR2GRAY)
        found = cascade.detectMultiScale(gray, scaleFactor=1.05, minNeighbors=6, minSize=(60, 60))
        best = max((iou(photo.face, (int(x), int(y), int(x + w), int(y + h))) for x, y, w, h in found), default=0.0)
        if best < HAAR_MIN_IOU:
            raise SystemExit(f"{photo.name}: the hand-drawn face box {photo.face} overlaps no Haar detection "
                             f"(best IoU {best:.2f} < {HAAR_MIN_IOU}); check the box")
        overlaps[photo.name] = best
    return overlaps


def crop(photo: np.ndarray, spec: FacePhoto, rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
    """One CELL x CELL crop of the face and its face box (xyxy, crop pixels)."""
    h_img, w_img = photo.shape[:2]
    x1, y1, x2, y2 = spec.face
    fw, fh = float(x2 - x1), float(y2 - y1)
    centre = np.array([(x1 + x2) / 2.0, (y1 + y2) / 2.0])
    keep = spec.keep or (0, 0, w_img, h_img)
    for _ in range(1000):
        scale = rng.uniform(*FACE_HEIGHT) * CELL / fh
        bw, bh = fw * scale, fh * scale
        if bw > CELL - 2:
            continue
        angle = np.deg2rad(rng.uniform(-ROTATION_DEG, ROTATION_DEG))
        mirror = bool(rng.integers(0, 2))
        shift = rng.uniform(-0.8, 0.8, 2) * np.array([(CELL - bw) / 2 - 1, (CELL - bh) / 2 - 1])
        target = CELL / 2.0 + shift
        # source -> crop: mirror about the face centre, rotate, scale, move the centre to target
        flip = np.diag([-1.0 if mirror else 1.0, 1.0])
        rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        linear = scale * rot @ flip
        forward = np.hstack([linear, (target - linear @ centre)[:, None]])
        corners = np.array([[0, 0], [CELL, 0], [0, CELL], [CELL, CELL]], np.float64)
        inverse = cv2.invertAffineTransform(forward)
        src = corners @ inverse[:, :2].T + inverse[:, 2]
        if (src[:, 0].min() < keep[0] or src[:, 1].min() < keep[1]
                or src[:, 0].max() > keep[2] - 1 or src[:, 1].max() > keep[3] - 1):
            continue  # the crop would reach outside the usable part of the photo
        break
    else:
        raise SystemExit(f"{spec.name}: no crop fits inside {keep}")
    # Shrink with area averaging first (no aliasing), then rotate and place at that scale.
    # OpenCV maps pixel centres: photo p = (small q + 0.5) / scale - 0.5.
    small = cv2.resize(photo, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    rest = forward[:, :2] / scale
    place = np.hstack([rest, (forward[:, 2] + forward[:, :2] @ np.full(2, 0.5 / scale - 0.5))[:, None]])
    patch = cv2.warpAffine(small, place, (CELL, CELL), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT101)
    box = np.array([target[0] - bw / 2, target[1] - bh / 2, target[0] + bw / 2, target[1] + bh / 2], np.float32)
    return _colour(patch, rng), box


def _colour(patch: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Brightness, gamma and white balance, as different cameras and lights give them."""
    gain = rng.uniform(*GAIN)
    gamma = rng.uniform(*GAMMA)
    balance = np.array([rng.uniform(*WHITE_BALANCE), 1.0, rng.uniform(*WHITE_BALANCE)], np.float32)  # B, G, R
    x = (patch.astype(np.float32) / 255.0) ** gamma * 255.0 * gain * balance
    return np.clip(np.round(x), 0, 255).astype(np.uint8)


def make_faces(photos: Dict[str, np.ndarray], seed: int = SEED) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(crops (N, CELL, CELL, 3) BGR, boxes (N, 4) float32, photo index (N,)), photo by photo."""
    rng = np.random.default_rng(seed)
    crops, boxes, index = [], [], []
    for k, spec in enumerate(PHOTOS):
        for _ in range(PER_PHOTO):
            patch, box = crop(photos[spec.name], spec, rng)
            crops.append(patch)
            boxes.append(box)
            index.append(k)
    return np.stack(crops), np.stack(boxes), np.asarray(index, np.int16)


def atlas(crops: np.ndarray, columns: int = 12) -> np.ndarray:
    """The crops side by side in rows of `columns` (unused cells black)."""
    n = len(crops)
    rows = -(-n // columns)
    out = np.zeros((rows * CELL, columns * CELL, 3), np.uint8)
    for i, c in enumerate(crops):
        r, q = divmod(i, columns)
        out[r * CELL : (r + 1) * CELL, q * CELL : (q + 1) * CELL] = c
    return out


def jpeg(bgr: np.ndarray, full_chroma: bool = False) -> bytes:
    params = [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY]
    if full_chroma:  # 4:4:4: no colour bleeding between neighbouring crops
        params += [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444]
    ok, buf = cv2.imencode(".jpg", bgr, params)
    if not ok:
        raise RuntimeError("OpenCV could not encode a JPEG")
    return buf.tobytes()


def faces_npz(crops: np.ndarray, boxes: np.ndarray, index: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(
        buf,
        atlas=np.frombuffer(jpeg(atlas(crops), full_chroma=True), np.uint8),
        cell=np.int32(CELL),
        boxes=boxes.astype(np.float32),
        photo=index,
        photos=np.asarray([p.name for p in PHOTOS]),
    )
    return buf.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "edge_sdk" / "assets"))
    parser.add_argument("--sdist", type=Path, help=f"a local copy of the {SDIST} sdist (default: pip download it)")
    parser.add_argument("--preview", type=Path, help="also write a PNG of the crops with their face boxes")
    args = parser.parse_args()
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="edge-sdk-assets-") as tmp:
        sdist = args.sdist or fetch_sdist(Path(tmp))
        photos = load_photos(sdist)
    overlaps = check_face_boxes(photos)
    print("hand-drawn face box vs Haar detection, IoU: " + ", ".join(f"{k} {v:.2f}" for k, v in overlaps.items()))
    crops, boxes, index = make_faces(photos)
    atomic_write_bytes(out / "faces.npz", faces_npz(crops, boxes, index))
    atomic_write_bytes(out / "coffee.jpg", jpeg(cv2.cvtColor(data.coffee(), cv2.COLOR_RGB2BGR)))
    atomic_write_bytes(out / "rocket.jpg", jpeg(cv2.cvtColor(data.rocket(), cv2.COLOR_RGB2BGR)))
    for name in ("faces.npz", "coffee.jpg", "rocket.jpg"):
        (out / name).chmod(0o644)  # package data: readable by everyone (temporary files are 0600)
        print(f"{out / name}: {(out / name).stat().st_size} bytes")
    if args.preview:
        shown = crops.copy()
        for c, (x1, y1, x2, y2) in zip(shown, boxes):
            cv2.rectangle(c, (int(round(x1)), int(round(y1))), (int(round(x2)) - 1, int(round(y2)) - 1), (0, 255, 0), 1)
        cv2.imwrite(str(args.preview), cv2.resize(atlas(shown), None, fx=2, fy=2, interpolation=cv2.INTER_NEAREST))


if __name__ == "__main__":
    main()
