"""docs/design.md §3 steps 4-5: the rolling mean and the window before the observed point."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .errors import JobError
from .job import Status


def rolling_series(values: np.ndarray, rolling: int) -> np.ndarray:
    """Rolling mean without its first `rolling-1` values, NaN filled with the raw series' mean.

    pandas' `s.rolling(rolling).mean()` to within rounding, in numpy: workers fork faster without pandas.
    """
    raw = np.asarray(values, dtype=float)
    numeric = ~np.isnan(raw)
    if not numeric.any():
        raise JobError(Status.INSUFFICIENT_DATA, "no numeric value in the series")
    if len(raw) < rolling:
        return np.empty(0)
    smoothed = sliding_window_view(raw, rolling).sum(axis=1) / rolling  # NaN where a window holds one
    smoothed[np.isnan(smoothed)] = raw[numeric].mean()
    return smoothed


def split_window(values: np.ndarray, rolling: int, window: int) -> tuple[np.ndarray, float]:
    """(inputs, observed): the `window` smoothed values before the last one, and the last one."""
    smoothed = rolling_series(values, rolling)
    if len(smoothed) < window + 1:
        raise JobError(Status.INSUFFICIENT_DATA,
                       f"{len(values)} values give {len(smoothed)} smoothed points; need {window + 1} "
                       f"(window {window} + 1 observed, rolling {rolling})")
    return smoothed[-window - 1:-1], float(smoothed[-1])
