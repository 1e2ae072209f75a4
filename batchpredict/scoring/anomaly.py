"""docs/design.md §3 steps 7-8: the std each point is judged by, the bands around the prediction, the verdict."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import JobError
from ..result import SEVERITIES, Severity
from ..status import Status

STD_KINDS = ("store", "rolling", "mad")
MAD_TO_STD = 1.4826  # the median absolute deviation of normal noise, times this, is its std
# Windows of residuals reduced at once: a long --since run never holds all of them twice, and a std's temporaries
# (128 x N floats) stay in memory the worker has, where a night's 1,548 windows of 96 were 1.2 MB of new pages
# in a fresh worker (~0.6 ms). Each window's std and median are its own: the same bits whatever the block.
_BLOCK = 128


def std_mode(text: str) -> tuple[str, int]:
    """--std as (kind, N): `store` (0), `rolling:N` or `mad:N`; ValueError saying what is accepted."""
    kind, _, count = text.partition(":")
    if kind == "store" and not count:
        return kind, 0
    if kind in STD_KINDS[1:] and count.isdecimal() and int(count) >= 2:
        return kind, int(count)
    raise ValueError(f"--std takes store, rolling:N or mad:N with N >= 2, not {text!r}")


def point_stds(residuals: np.ndarray, store_std: float, kind: str, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The std each point is judged by, and where it came from: true where from the --std mode, not the store.

    `rolling:N`: the std (ddof 1, as `train` computes the store's) of the N residuals (observed -
    predicted) before the point; `mad:N`: 1.4826 x the median of their absolute values, not centred
    on their median, so a model that drifts off the series widens its own bands instead of flagging
    every point. A point with fewer than N residuals before it, or N that do not vary, takes the
    store's std.
    """
    stds = np.full(len(residuals), store_std, dtype=float)
    rolled = np.zeros(len(residuals), dtype=bool)
    if kind != "store" and len(residuals) > count:
        windows = sliding_window_view(residuals[:-1], count)  # windows[i]: the N before point i + N
        scales = np.concatenate([_scale(windows[at:at + _BLOCK], kind) for at in range(0, len(windows), _BLOCK)])
        usable = np.flatnonzero(scales > 0)
        stds[usable + count], rolled[usable + count] = scales[usable], True
    return stds, rolled


def _scale(windows: np.ndarray, kind: str) -> np.ndarray:
    if kind == "rolling":
        return windows.std(axis=1, ddof=1)
    return MAD_TO_STD * np.median(np.abs(windows), axis=1)


def verdicts(observed: np.ndarray, predicted: np.ndarray, std: np.ndarray, sigmas: tuple[float, float]
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lowers, uppers, anomaly, severity) of every point at once: the bands one row per sigma, the severity
    as codes into result.SEVERITIES. The observed value is compared, not the prediction: the original
    script's `predicted < lower` could never be true. JobError where a band is infinite (a std near the
    largest float): every point would be `ok` between bands of ±inf."""
    with np.errstate(over="ignore"):  # an overflow is the JobError below, not a warning on the worker's stderr
        spread = np.multiply.outer(np.asarray(sigmas, dtype=float), std)
        lowers, uppers = predicted - spread, predicted + spread
    overflown = np.isinf(lowers) | np.isinf(uppers)  # a NaN std stays NaN bands: no point is outside them
    if overflown.any():
        row, point = np.argwhere(overflown)[0]
        raise JobError(Status.ERROR, f"std {std[point]:g}: its ±{sigmas[row]:g}σ band around the prediction "
                                     f"{predicted[point]:g} is not finite")
    outside = (observed < lowers) | (observed > uppers)
    return lowers, uppers, outside[0], np.where(outside[1], 2, outside[0].astype(np.uint8)).astype(np.uint8)


def assess(observed: float, predicted: float, std: float, sigmas: tuple[float, float]
           ) -> tuple[tuple[float, ...], tuple[float, ...], bool, Severity]:
    """verdicts() of one point: (lowers, uppers, anomaly, severity)."""
    lowers, uppers, anomaly, severity = verdicts(np.array([observed]), np.array([predicted]), np.array([std]), sigmas)
    return (tuple(lowers[:, 0].tolist()), tuple(uppers[:, 0].tolist()), bool(anomaly[0]),
            SEVERITIES[int(severity[0])])
