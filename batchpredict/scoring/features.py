"""docs/design.md §3 steps 4-5: the rolling mean, and the window before each scored point."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import JobError
from ..result import Status


def rolling_series(values: np.ndarray, rolling: int) -> np.ndarray:
    """Rolling mean without its first `rolling-1` values, NaN filled with the raw series' mean.

    pandas' `s.rolling(rolling).mean()` to within rounding, in numpy: workers fork faster without pandas.
    """
    raw, numeric = _numeric(values)
    smoothed = _rolling_means(raw, rolling)
    smoothed[np.isnan(smoothed)] = raw[numeric].mean()
    return smoothed


@dataclass(frozen=True)
class Windows:
    """scored_windows' points: `positions` (each one's index in the values) and `observed` (its own smoothed
    value) of them all; `inputs` makes the windows of only those the model is asked about."""

    positions: np.ndarray
    observed: np.ndarray
    means: np.ndarray  # the rolling means of the values
    cuts: np.ndarray   # per point, the index of its own mean in `means`
    fills: np.ndarray  # per point, what a NaN of its window's means becomes
    window: int
    raw: np.ndarray    # the values as floats
    rolling: int       # the values in each of `means`

    def inputs(self, at: int = 0) -> np.ndarray:
        """The `window` smoothed values before each point from the `at`-th on, one row per point."""
        smoothed = self.means[self.cuts[at:, None] + np.arange(-self.window, 0)]
        return np.where(np.isnan(smoothed), self.fills[at:, None], smoothed)

    def smoothed(self, count: int) -> np.ndarray:
        """Per point, the mean of the `count` values ending at it, filled as `observed` is where they hold a NaN
        or begin before the values: `observed` itself for the rolling mean's own count."""
        if count == self.rolling:
            return self.observed
        at = self.positions - count + 1  # where each point's mean begins; below 0 before the values
        own = np.full(len(at), np.nan)
        inside = at >= 0
        own[inside] = _rolling_means(self.raw, count)[at[inside]]
        return np.where(np.isnan(own), self.fills, own)


def scored_windows(values: np.ndarray, rolling: int, window: int, start: int, *,
                   before: tuple[float, int] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions, inputs, observed) of every point from index `start` on that has `window` smoothed
    values before it: its index in `values`, those values (one row per point) and its own smoothed
    value (windowed's, every window made)."""
    found = windowed(values, rolling, window, start, before=before)
    return found.positions, found.inputs(), found.observed


def windowed(values: np.ndarray, rolling: int, window: int, start: int, *,
             before: tuple[float, int] | None = None) -> Windows:
    """Every point from index `start` on that has `window` smoothed values before it: its index in `values`,
    its own smoothed value, and (Windows.inputs) the `window` smoothed values before it.

    Each point sees what a run on the series cut off at that point would see: a NaN of the rolling
    mean is filled with the mean of the raw values up to the point, not of the whole series. `before`:
    the sum and count of the numeric values the series began with before `values` (a night's history).
    """
    raw, numeric = _numeric(values, known=before is not None and before[1] > 0)
    means = _rolling_means(raw, rolling)
    ends = np.arange(max(window, start - rolling + 1), len(means)) + rolling  # each cut's length
    if not len(ends):
        raise JobError(Status.INSUFFICIENT_DATA,
                       f"{len(raw)} values give {len(means)} smoothed points; need {window + 1} "
                       f"(window {window} + 1 observed, rolling {rolling})")
    counts = np.cumsum(numeric)[ends - 1] + (before[1] if before else 0)
    ends, counts = ends[counts > 0], counts[counts > 0]  # a cut with no number at all is not scored
    numbers = np.where(numeric, raw, 0.0)
    # Summed in order from the earlier sum: the float a run over the whole series gets.
    sums = np.cumsum(numbers) if before is None else np.cumsum(np.concatenate([[before[0]], numbers]))[1:]
    fills = sums[ends - 1] / counts
    own = means[ends - rolling]
    return Windows(positions=ends - 1, observed=np.where(np.isnan(own), fills, own), means=means,
                   cuts=ends - rolling, fills=fills, window=window, raw=raw, rolling=rolling)


def _numeric(values: np.ndarray, known: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The values as floats and where they are numbers; none at all (nor `known` before them) is no data."""
    raw = np.asarray(values, dtype=float)
    numeric = ~np.isnan(raw)
    if not numeric.any() and not known:
        raise JobError(Status.INSUFFICIENT_DATA, "no numeric value in the series")
    return raw, numeric


def _rolling_means(raw: np.ndarray, rolling: int) -> np.ndarray:
    """Means of every `rolling` consecutive values; NaN where a window holds one."""
    if len(raw) < rolling:
        return np.empty(0)
    return sliding_window_view(raw, rolling).sum(axis=1) / rolling
