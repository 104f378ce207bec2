"""Make the default calibration set in calibrate/images/ from photos in the scikit-image wheel.

Most of those photos contain no face, and CenterFace (the default model) must see faces for
its calibration and accuracy gate to mean anything. So besides the photos themselves, this
script makes scenes: the colour crops of real face photos shipped in edge_sdk/assets/faces.npz
(the ones synthetic://faces uses) pasted at varied sizes, positions, brightness and white
balance onto the real photos. Deterministic (fixed seed); run with

    python calibrate/make_default_set.py

Sources and licences: calibrate/LICENSES.md.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Tuple

import cv2
import numpy as np
from skimage import data

from edge_sdk.runtime.synthetic import FaceCrops, face_crops

SEED = 20240611
OUT = Path(__file__).resolve().parent / "images"
SIZES = [(640, 384), (640, 480), (800, 450)]  # (width, height) of the scenes
JPEG_QUALITY = 85
SCENES = 44
FACES_PER_SCENE = (24, 32)  # pasted per scene (drawn uniformly); more faces per scene is cheaper than more images
FACE_PX = (22, 64)  # height of a pasted face (its face box) in scene pixels; its crop is 1.2-1.8 times that

# name in skimage.data -> short file stem
PHOTOS = {
    "astronaut": "astronaut",
    "camera": "camera",
    "coffee": "coffee",
    "chelsea": "chelsea",
    "rocket": "rocket",
    "hubble_deep_field": "hubble",
    "brick": "brick",
    "grass": "grass",
    "gravel": "gravel",
    "coins": "coins",
    "moon": "moon",
    "immunohistochemistry": "ihc",
}


def load_photo(name: str) -> np.ndarray:
    """A scikit-image photo as BGR uint8."""
    img = getattr(data, name)()
    if img.dtype != np.uint8:
        img = (np.clip(img, 0, 1) * 255).astype(np.uint8) if img.dtype.kind == "f" else img.astype(np.uint8)
    if img.ndim == 2:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    return cv2.cvtColor(img[..., :3], cv2.COLOR_RGB2BGR)


def background(photo: np.ndarray, size: Tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """A random crop of the photo with the scene's aspect ratio, resized to `size`."""
    w, h = size
    ph, pw = photo.shape[:2]
    aspect = w / h
    cw = int(min(pw, ph * aspect) * rng.uniform(0.6, 1.0))
    ch = int(cw / aspect)
    x = int(rng.integers(0, pw - cw + 1))
    y = int(rng.integers(0, ph - ch + 1))
    crop = photo[y : y + ch, x : x + cw]
    out = cv2.resize(crop, (w, h), interpolation=cv2.INTER_AREA if cw > w else cv2.INTER_LINEAR)
    gain = rng.uniform(0.6, 1.3)
    return np.clip(out.astype(np.float32) * gain, 0, 255).astype(np.uint8)


def paste_faces(scene: np.ndarray, faces: FaceCrops, count: int, rng: np.random.Generator) -> int:
    """Paste `count` colour face crops without overlap; returns how many fitted."""
    h, w = scene.shape[:2]
    boxes: List[Tuple[int, int, int]] = []
    for _ in range(count * 20):
        if len(boxes) == count:
            break
        k = int(rng.integers(0, len(faces.boxes)))
        face_px = int(rng.integers(FACE_PX[0], FACE_PX[1] + 1))
        size = int(round(face_px / float(faces.heights[k]) * faces.cell))  # side of the pasted crop
        if size >= min(w, h):
            continue
        x = int(rng.integers(0, w - size))
        y = int(rng.integers(0, h - size))
        if any(x < bx + bs + 4 and bx < x + size + 4 and y < by + bs + 4 and by < y + size + 4 for bx, by, bs in boxes):
            continue
        crop = faces.images[k][:, ::-1] if rng.random() < 0.5 else faces.images[k]
        inter = cv2.INTER_AREA if size < faces.cell else cv2.INTER_CUBIC
        patch = cv2.resize(crop, (size, size), interpolation=inter).astype(np.float32)
        balance = rng.uniform(0.9, 1.1, size=3).astype(np.float32)  # a different camera's white balance
        gain = rng.uniform(0.7, 1.3)
        patch = np.clip(patch * balance * gain, 0, 255)
        # Feather the border so the crop does not sit on the scene like a sticker.
        mask = np.ones((size, size), np.float32)
        edge = max(2, size // 16)
        ramp = np.linspace(0, 1, edge, dtype=np.float32)
        mask[:edge] *= ramp[:, None]
        mask[-edge:] *= ramp[::-1, None]
        mask[:, :edge] *= ramp[None, :]
        mask[:, -edge:] *= ramp[None, ::-1]
        region = scene[y : y + size, x : x + size].astype(np.float32)
        scene[y : y + size, x : x + size] = (region * (1 - mask[..., None]) + patch * mask[..., None]).astype(np.uint8)
        boxes.append((x, y, size))
    return len(boxes)


def make(out: Path = OUT, scenes: int = SCENES, seed: int = SEED) -> List[Path]:
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    photos = {stem: load_photo(name) for name, stem in PHOTOS.items()}
    faces = face_crops()
    written = []
    # The photos themselves (the astronaut photo has a real face of its own).
    for stem, photo in photos.items():
        path = out / f"photo_{stem}.jpg"
        cv2.imwrite(str(path), photo, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
        written.append(path)
    stems = list(photos)
    for i in range(scenes):
        stem = stems[(i + i // 4) % len(stems)]  # every 4th scene (held back) gets a different photo
        size = SIZES[int(rng.integers(0, len(SIZES)))]
        scene = background(photos[stem], size, rng)
        paste_faces(scene, faces, int(rng.integers(FACES_PER_SCENE[0], FACES_PER_SCENE[1] + 1)), rng)
        path = out / f"scene_{i:02d}_{stem}.jpg"
        cv2.imwrite(str(path), scene, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--scenes", type=int, default=SCENES)
    args = parser.parse_args()
    paths = make(args.out, args.scenes)
    total = sum(p.stat().st_size for p in paths)
    print(f"{len(paths)} images, {total / 1e6:.2f} MB in {args.out}")


if __name__ == "__main__":
    main()
