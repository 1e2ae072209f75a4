"""The rolling z-score baseline: the same points, the same smoothing and thresholds, no model.

Each point's "prediction" is the mean of the `window` smoothed values before it and its "std" their
standard deviation (population, ddof 0), so sigma() of a baseline row is its z-score.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from ...errors import JobError, UsageError
from ...io.events import sigma
from ...io.table import Series
from ...job import Params
from ...result import Severity
from ...scoring.features import rolling_series

log = logging.getLogger("batchpredict")


def zscore_points(points: pd.DataFrame, table: list[Series], params: Params) -> pd.DataFrame:
    """ip, timestamp, observed, predicted, std, severity for each (ip, timestamp) of `points`, in its order.

    UsageError when the table lacks an IP or a timestamp of the points: it is not the table they scored.
    A point with fewer than `window` smoothed values before it gets no z-score (never flagged).
    """
    series = {s.ip: s for s in table}
    observed, mean, std = (np.full(len(points), np.nan) for _ in range(3))
    unscored = 0  # points too early in their series for a window
    for ip, rows in points.groupby("ip", sort=False).indices.items():
        if ip not in series:
            raise UsageError(f"--data has no IP {ip}, which the results scored; give the table predict read")
        try:
            smoothed = rolling_series(series[ip].values, params.rolling)
        except JobError as exc:
            log.warning("baseline: %s: %s; its points get no z-score", ip, exc)
            continue
        position = {label: p for p, label in enumerate(series[ip].labels[params.rolling - 1:])}
        stamps = points["timestamp"].to_numpy()[rows]
        at = np.array([position.get(stamp, -1) for stamp in stamps], dtype=int)
        if (at < 0).any():
            raise UsageError(f"--data has no timestamp {stamps[at < 0][0]!r} for IP {ip}, which the results "
                             f"scored; give the table predict read, with the same --rolling")
        observed[rows] = smoothed[at]
        enough = at >= params.window
        unscored += int((~enough).sum())
        if enough.any():
            before = sliding_window_view(smoothed[:-1], params.window)[at[enough] - params.window]
            mean[rows[enough]], std[rows[enough]] = before.mean(axis=1), before.std(axis=1)
    if unscored:
        log.warning("baseline: %d points have fewer than %d smoothed values before them; no z-score",
                    unscored, params.window)
    frame = pd.DataFrame({"ip": points["ip"].to_numpy(), "timestamp": points["timestamp"].to_numpy(),
                          "observed": observed, "predicted": mean, "std": std})
    frame["severity"] = severities(frame, params.sigmas)
    return frame


def severities(frame: pd.DataFrame, sigmas: tuple[float, float]) -> np.ndarray:
    """normal / warning / critical by sigma, as anomaly.assess grades a point; None without a sigma."""
    z = sigma(frame)
    with np.errstate(invalid="ignore"):
        graded = np.where(z > sigmas[1], Severity.CRITICAL.value,
                          np.where(z > sigmas[0], Severity.WARNING.value, Severity.NORMAL.value))
    return np.where(np.isnan(z), np.array(None, dtype=object), graded)
