"""DESIGN §2 steps 1-2: the rolling mean and the window before the observed point."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import JobError
from .job import Status


def rolling_series(values: np.ndarray, rolling: int) -> np.ndarray:
    """Rolling mean without its first `rolling-1` values, NaN filled with the raw series' mean."""
    raw = pd.Series(np.asarray(values, dtype=float))
    if raw.notna().sum() == 0:
        raise JobError(Status.INSUFFICIENT_DATA, "no numeric value in the series")
    smoothed = raw.rolling(rolling).mean().iloc[rolling - 1:]
    return smoothed.fillna(raw.mean()).to_numpy()


def split_window(values: np.ndarray, rolling: int, window: int) -> tuple[np.ndarray, float]:
    """(inputs, observed): the `window` smoothed values before the last one, and the last one."""
    smoothed = rolling_series(values, rolling)
    if len(smoothed) < window + 1:
        raise JobError(Status.INSUFFICIENT_DATA,
                       f"{len(values)} values give {len(smoothed)} smoothed points; need {window + 1} "
                       f"(window {window} + 1 observed, rolling {rolling})")
    return smoothed[-window - 1:-1], float(smoothed[-1])
