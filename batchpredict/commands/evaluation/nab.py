"""The NAB score (Numenta Anomaly Benchmark), as NAB's own scorer defines it (docs/evaluation.md).

Positions are counted in scored points, as NAB counts them in rows: a window of `width` points whose last
point is `right` gives its first detection at point `i` the relative position -(right - i + 1) / width
(-1 at the window's first point, -1/width at its last), and a false alarm `d` points after a window the
position d / (width - 1). The scaled sigmoid of that position weights the detection or the false alarm.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Profile:
    """NAB's cost matrix: the weight of a detected window, a false alarm and a missed window."""

    name: str = "standard"
    tp: float = 1.0
    fp: float = 0.11
    fn: float = 1.0


STANDARD = Profile()


def scaled_sigmoid(position: np.ndarray | float) -> np.ndarray:
    """2 / (1 + exp(5 x)) - 1, and -1 beyond 3 window widths: 0.9866 at -1, 0 at 0, -0.9866 at 1."""
    position = np.asarray(position, dtype=float)
    with np.errstate(over="ignore"):
        value = 2.0 / (1.0 + np.exp(5.0 * position)) - 1.0
    return np.where(position > 3.0, -1.0, value)


_EARLIEST = float(scaled_sigmoid(-1.0))


def detection_value(first: np.ndarray, right: np.ndarray, width: np.ndarray, profile: Profile = STANDARD
                    ) -> np.ndarray:
    """A window's worth when its first detection is point `first`: `profile.tp` at its first point, near 0 at
    its last."""
    position = -(np.asarray(right) - np.asarray(first) + 1) / np.asarray(width, dtype=float)
    return profile.tp * scaled_sigmoid(position) / _EARLIEST


def false_alarm_value(after: np.ndarray, width: np.ndarray, profile: Profile = STANDARD) -> np.ndarray:
    """A flag outside every window, `after` points past the end of the last window before it (of `width`
    points), or with no window before it where `after` < 0: -profile.fp, less just after a window.

    A window of one point has no width to scale by; NAB's earlier scorer placed any false alarm after one at
    position 2, and so does this one.
    """
    after = np.asarray(after, dtype=float)
    width = np.asarray(width, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        position = np.where(width > 1, after / (width - 1), 2.0)
    return np.where(after < 0, -profile.fp, profile.fp * scaled_sigmoid(position))


def normalised(raw: float, windows: int, profile: Profile = STANDARD) -> float:
    """100 (raw - null) / (perfect - null): 0 for no flag at all, 100 for each window flagged at its first
    point and nothing else. NaN without windows, where both detectors score the same."""
    null, perfect = -profile.fn * windows, profile.tp * windows
    return 100.0 * (raw - null) / (perfect - null) if perfect != null else float("nan")
