"""The constant-velocity Kalman filter of SORT, DeepSORT and ByteTrack, in box space.

The state is (cx, cy, a, h, vcx, vcy, va, vh): the box centre, its aspect ratio w/h, its
height, and their velocities per frame. Process and measurement noise scale with the box height
(position 1/20, velocity 1/160 of it), so that a large near box and a small far one are equally
sure. One filter serves every track: the state of each track is its own (mean, covariance).
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

POSITION_WEIGHT = 1.0 / 20
VELOCITY_WEIGHT = 1.0 / 160


def xyxy_to_xyah(xyxy: np.ndarray) -> np.ndarray:
    """Boxes (N, 4) x1 y1 x2 y2 as (N, 4) centre x, centre y, aspect w/h, height."""
    xyxy = np.asarray(xyxy, dtype=np.float64).reshape(-1, 4)
    w = xyxy[:, 2] - xyxy[:, 0]
    h = np.maximum(xyxy[:, 3] - xyxy[:, 1], 1e-6)
    return np.stack([xyxy[:, 0] + w / 2, xyxy[:, 1] + h / 2, w / h, h], axis=1)


def xyah_to_xyxy(xyah: np.ndarray) -> np.ndarray:
    xyah = np.asarray(xyah, dtype=np.float64).reshape(-1, 4)
    w = xyah[:, 2] * xyah[:, 3]
    h = xyah[:, 3]
    return np.stack([xyah[:, 0] - w / 2, xyah[:, 1] - h / 2, xyah[:, 0] + w / 2, xyah[:, 1] + h / 2], axis=1)


class KalmanFilter:
    def __init__(self) -> None:
        self.motion = np.eye(8)
        self.motion[:4, 4:] = np.eye(4)  # x' = x + v (one frame)

    def initiate(self, xyah: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """(mean, covariance) of a new track from its first measurement, velocities 0."""
        mean = np.concatenate([xyah, np.zeros(4)])
        h = xyah[3]
        std = np.array([2 * POSITION_WEIGHT * h, 2 * POSITION_WEIGHT * h, 1e-2, 2 * POSITION_WEIGHT * h,
                        10 * VELOCITY_WEIGHT * h, 10 * VELOCITY_WEIGHT * h, 1e-5, 10 * VELOCITY_WEIGHT * h])
        return mean, np.diag(std ** 2)

    def predict(self, mean: np.ndarray, cov: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Means (N, 8) and covariances (N, 8, 8) one frame ahead."""
        h = mean[:, 3]
        ones = np.ones_like(h)
        std = np.stack([POSITION_WEIGHT * h, POSITION_WEIGHT * h, 1e-2 * ones, POSITION_WEIGHT * h,
                        VELOCITY_WEIGHT * h, VELOCITY_WEIGHT * h, 1e-5 * ones, VELOCITY_WEIGHT * h], axis=1)
        noise = np.zeros((len(h), 8, 8))
        noise[:, np.arange(8), np.arange(8)] = std ** 2
        mean = mean @ self.motion.T
        cov = self.motion @ cov @ self.motion.T + noise
        return mean, cov

    def update(self, mean: np.ndarray, cov: np.ndarray, xyah: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Means (N, 8) and covariances (N, 8, 8) corrected by the measurements `xyah` (N, 4)."""
        h = mean[:, 3]
        std = np.stack([POSITION_WEIGHT * h, POSITION_WEIGHT * h, np.full_like(h, 1e-1), POSITION_WEIGHT * h], axis=1)
        projected = mean[:, :4]  # H mean: the observation is the first four state entries
        pcov = cov[:, :4, :4].copy()  # H cov H^T + R
        pcov[:, np.arange(4), np.arange(4)] += std ** 2
        cross = cov[:, :, :4]  # cov H^T (N, 8, 4)
        gain = np.linalg.solve(pcov, cross.transpose(0, 2, 1)).transpose(0, 2, 1)  # cov H^T S^-1 (S symmetric)
        mean = mean + np.einsum("nij,nj->ni", gain, xyah - projected)
        cov = cov - gain @ pcov @ gain.transpose(0, 2, 1)
        return mean, cov
