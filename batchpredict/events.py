"""Alert events: a contiguous run of flagged points of one IP is one event (issue 15).

Pure and vectorised: a results frame of a million scored points collapses in well under a second.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .job import Severity

EVENT_COLUMNS = ["ip", "start", "end", "points", "peak_severity", "peak_sigma", "open"]
_RANK = {Severity.NORMAL.value: 0, Severity.WARNING.value: 1, Severity.CRITICAL.value: 2}
_BY_RANK = np.array([Severity.NORMAL.value, Severity.WARNING.value, Severity.CRITICAL.value], dtype=object)


def sigma(frame: pd.DataFrame) -> np.ndarray:
    """|observed - predicted| / std per row: how many stds the point lies from its prediction.

    NaN where a value is missing, not a number, or std is negative. std == 0 is a band of zero width,
    which `anomaly.assess` crosses at any sigma: a point off its prediction is then inf (flagged at every
    threshold) and a point on it 0 (never flagged).
    """
    observed, predicted, std = (pd.to_numeric(frame[c], errors="coerce").to_numpy(dtype=float)
                                for c in ("observed", "predicted", "std"))
    distance = np.abs(observed - predicted)
    with np.errstate(divide="ignore", invalid="ignore"):
        result = distance / std
    result[(std == 0) & (distance == 0)] = 0.0
    result[std < 0] = np.nan
    return result


def runs(ips: np.ndarray, flagged: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first rows, last rows) of each run of flagged rows of one IP, and a mask of each IP's last row."""
    n = len(ips)
    new_ip = np.ones(n, dtype=bool)
    new_ip[1:] = ips[1:] != ips[:-1]
    last_of_ip = np.ones(n, dtype=bool)
    last_of_ip[:-1] = new_ip[1:]
    before, after = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    before[1:], after[:-1] = flagged[:-1], flagged[1:]
    return (np.flatnonzero(flagged & (new_ip | ~before)), np.flatnonzero(flagged & (last_of_ip | ~after)),
            last_of_ip)


def collapse(points: pd.DataFrame, flagged: np.ndarray) -> pd.DataFrame:
    """One row per event, in the points' order: EVENT_COLUMNS.

    `points` are scored rows in output order (each IP's rows together, in time order); a run of flagged
    rows ends at a row not flagged or at a change of IP. `open` is true when the run reaches the IP's last
    row in `points`: the event may still be going on. `peak_sigma` is NaN when no row of the run has one.
    """
    flagged = np.asarray(flagged, dtype=bool)
    if len(flagged) != len(points):
        raise ValueError(f"flagged has {len(flagged)} values for {len(points)} points")
    ips = points["ip"].astype(str).to_numpy()
    run_start, run_end, last_of_ip = runs(ips, flagged)

    rows = np.flatnonzero(flagged)             # each run is a contiguous slice of these
    first = np.searchsorted(rows, run_start)   # where each run starts within `rows`

    rank = points["severity"].map(_RANK).fillna(-1).to_numpy(dtype=int)[rows]
    peak_rank = np.maximum.reduceat(rank, first)
    peak_sigma = np.fmax.reduceat(sigma(points)[rows], first)
    timestamps = points["timestamp"].to_numpy()
    return pd.DataFrame({
        "ip": ips[run_start],
        "start": timestamps[run_start],
        "end": timestamps[run_end],
        "points": run_end - run_start + 1,
        "peak_severity": np.where(peak_rank >= 0, _BY_RANK[np.clip(peak_rank, 0, 2)], None),
        "peak_sigma": peak_sigma,
        "open": last_of_ip[run_end],
    })
