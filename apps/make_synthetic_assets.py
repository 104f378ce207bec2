"""Write the data files behind `synthetic://faces` into edge_sdk/assets/.

    python apps/make_synthetic_assets.py [--out edge_sdk/assets]

Needs scikit-image (the `dev` extra), whose sample data holds every source image:

* faces.npz   - the 100 face crops of `skimage.data.lfw_subset()` (the first 100 of its 200
                images; the other 100 are background patches), 25x25, grayscale uint8.
* coffee.jpg  - `skimage.data.coffee()`, CC0 (Rachel Michetti).
* rocket.jpg  - `skimage.data.rocket()`, public domain (SpaceX).

The output is deterministic for a given scikit-image and OpenCV version.
"""
from __future__ import annotations

import argparse
import io
from pathlib import Path

import cv2
import numpy as np
from skimage import data

from edge_sdk.fsutil import atomic_write_bytes

FACES = 100  # lfw_subset(): images [0, 100) are faces, [100, 200) are not
JPEG_QUALITY = 92


def faces() -> np.ndarray:
    crops = np.asarray(data.lfw_subset())[:FACES]
    if crops.dtype != np.uint8:
        crops = np.clip(np.round(crops * 255.0), 0, 255).astype(np.uint8)
    return crops


def jpeg(rgb: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise RuntimeError("OpenCV could not encode a JPEG")
    return buf.tobytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "edge_sdk" / "assets"))
    out = Path(parser.parse_args().out)
    buf = io.BytesIO()
    np.savez_compressed(buf, faces=faces())
    atomic_write_bytes(out / "faces.npz", buf.getvalue())
    atomic_write_bytes(out / "coffee.jpg", jpeg(data.coffee()))
    atomic_write_bytes(out / "rocket.jpg", jpeg(data.rocket()))
    for name in ("faces.npz", "coffee.jpg", "rocket.jpg"):
        print(f"{out / name}: {(out / name).stat().st_size} bytes")


if __name__ == "__main__":
    main()
