"""Flags measured against labelled windows, per IP and in total (docs/evaluation.md).

`place` lays the scored points of every IP against the windows once; `score` then measures one set of
flags in a few vectorised passes, so a sweep over thresholds costs one pass per threshold.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...errors import UsageError
from ...io.events import runs, sigma
from ...scoring.method import median_gap
from .labels import NAT, Labels, parse_times
from .nab import STANDARD, Profile, detection_value, false_alarm_value, normalised

TOTAL = "(total)"  # the ip cell of the totals row; never a valid IP id
METRICS = ["ip", "points", "days", "windows", "windows_outside", "detected", "recall", "flagged_points",
           "false_alarm_points", "false_alarm_points_per_day", "events", "false_alarm_events",
           "false_alarm_events_per_day", "precision", "point_precision", "f1", "mean_delay_minutes",
           "nab_raw", "nab_score"]
WINDOW_COLUMNS = ["ip", "start", "end", "points", "detected", "first_flag", "delay_minutes", "delay_points"]
_NS_PER_MINUTE, _NS_PER_DAY = 60 * 10**9, 86400 * 10**9


@dataclass
class Scored:
    """Scored points in output order (each IP's rows together, in time order) placed against the windows."""

    frame: pd.DataFrame       # ip, timestamp, observed, predicted, std, severity; index 0..n-1
    ips: list[str]
    code: np.ndarray          # per row: index into ips
    time: np.ndarray          # per row: ns since the epoch, UTC
    sigma: np.ndarray         # per row: |observed - predicted| / std
    window: np.ndarray        # per row: index of its window, -1 outside every window
    detection: np.ndarray     # per row in a window: the window's NAB value if this is its first flag
    false_alarm: np.ndarray   # per row outside windows: its NAB value if flagged
    win_ip: np.ndarray        # per window: index into ips
    win_first: np.ndarray     # per window: its first row
    win_last: np.ndarray      # per window: its last row
    win_bounds: np.ndarray    # per window: labelled (start, end), ns
    days: np.ndarray          # per IP: the scored span
    outside: np.ndarray       # per IP: labelled windows with no scored point
    profile: Profile = STANDARD


def order_points(frame: pd.DataFrame, what: str) -> tuple[pd.DataFrame, np.ndarray]:
    """The rows grouped by IP in order of first appearance and sorted by time, and their times.

    UsageError for a timestamp that is not a date or an (ip, timestamp) given twice.
    """
    time = parse_times(frame["timestamp"])
    if (time == NAT).any():
        bad = frame["timestamp"].iloc[int(np.argmax(time == NAT))]
        raise UsageError(f"{what}: timestamp {bad!r} is not a date; evaluate compares dates with the labels")
    code = pd.factorize(frame["ip"])[0]
    order = np.lexsort((time, code))
    frame, time = frame.iloc[order].reset_index(drop=True), time[order]
    twice = (np.diff(code[order]) == 0) & (np.diff(time) == 0)
    if twice.any():
        row = frame.iloc[int(np.argmax(twice))]
        raise UsageError(f"{what}: ip {row['ip']} has timestamp {row['timestamp']!r} twice")
    return frame, time


def place(frame: pd.DataFrame, labels: Labels, profile: Profile = STANDARD) -> Scored:
    """Lay the scored points against the labels' windows; an IP without labels has none."""
    frame, time = order_points(frame, "results")
    codes, uniques = pd.factorize(frame["ip"])
    ips = [str(ip) for ip in uniques]
    n = len(frame)
    bounds = np.flatnonzero(np.diff(codes, prepend=-1, append=-1))  # each IP's first row, then n
    window = np.full(n, -1)
    found: list[tuple[int, int, int, np.ndarray]] = []  # (ip, first row, last row, labelled bounds)
    days, outside = np.zeros(len(ips)), np.zeros(len(ips), dtype=int)
    for k, ip in enumerate(ips):
        lo, hi = bounds[k], bounds[k + 1]
        times = time[lo:hi]
        days[k] = (times[-1] - times[0] + median_gap(times)) / _NS_PER_DAY
        spans = labels.windows.get(ip, np.empty((0, 2), np.int64))
        first = lo + np.searchsorted(times, spans[:, 0], side="left")
        last = lo + np.searchsorted(times, spans[:, 1], side="right") - 1
        inside = last >= first
        outside[k] = int((~inside).sum())
        for a, b, span in zip(first[inside], last[inside], spans[inside], strict=True):
            window[a:b + 1] = len(found)
            found.append((k, a, b, span))
    win_ip, win_first, win_last = (np.array([w[i] for w in found], dtype=int) for i in range(3))

    rows = np.arange(n)
    in_window = window >= 0
    width = np.ones(n, dtype=int)  # per row in a window: the window's width in points
    width[in_window] = (win_last - win_first + 1)[window[in_window]]
    right_edge = np.full(n, -1)
    right_edge[win_last] = win_last
    last_right = np.maximum.accumulate(right_edge) if n else right_edge  # the last window end at or before
    before = (last_right >= bounds[codes]) & ~in_window                   # ... within the same IP
    after = np.where(before, rows - last_right, -1)
    detection = np.zeros(n)
    detection[in_window] = detection_value(rows[in_window], win_last[window[in_window]], width[in_window], profile)
    return Scored(frame=frame, ips=ips, code=codes, time=time, sigma=sigma(frame), window=window,
                  detection=detection,
                  false_alarm=false_alarm_value(after, width[np.maximum(last_right, 0)], profile),
                  win_ip=win_ip, win_first=win_first, win_last=win_last,
                  win_bounds=np.array([w[3] for w in found], dtype=np.int64).reshape(-1, 2), days=days,
                  outside=outside, profile=profile)


def flags(scored: Scored, threshold: float) -> np.ndarray:
    """Points more than `threshold` stds from their prediction: the product's own verdict at that sigma."""
    with np.errstate(invalid="ignore"):
        return scored.sigma > threshold


def score(scored: Scored, flagged: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(METRICS per IP then the totals row, WINDOW_COLUMNS per counted window) for these flags."""
    n_ips, n_windows = len(scored.ips), len(scored.win_ip)
    code, window = scored.code, scored.window

    def per_ip(mask: np.ndarray, of: np.ndarray = code, weights: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(of[mask], weights=None if weights is None else weights[mask], minlength=n_ips)

    inside = window >= 0
    alarm = flagged & ~inside
    hits = np.flatnonzero(flagged & inside)
    hit_windows, first_index = np.unique(window[hits], return_index=True)
    first = np.full(n_windows, -1)
    first[hit_windows] = hits[first_index]
    detected = first >= 0
    delay = np.full(n_windows, np.nan)
    delay[detected] = (scored.time[first[detected]] - scored.time[scored.win_first[detected]]) / _NS_PER_MINUTE

    starts, ends, _ = runs(code, flagged)
    in_window_so_far = np.concatenate([[0], np.cumsum(inside)])
    lonely = in_window_so_far[ends + 1] == in_window_so_far[starts]  # no point of the run in a window

    detected_value = np.where(detected, scored.detection[np.maximum(first, 0)], -scored.profile.fn)
    counts = pd.DataFrame({
        "ip": scored.ips,
        "points": per_ip(np.ones(len(code), dtype=bool)),
        "days": scored.days,
        "windows": per_ip(np.ones(n_windows, dtype=bool), scored.win_ip),
        "windows_outside": scored.outside,
        "detected": per_ip(detected, scored.win_ip),
        "flagged_points": per_ip(flagged),
        "false_alarm_points": per_ip(alarm),
        "events": per_ip(np.ones(len(starts), dtype=bool), code[starts]),
        "false_alarm_events": per_ip(lonely, code[starts]),
        "delay_sum": per_ip(detected, scored.win_ip, np.nan_to_num(delay)),
        "nab_raw": (per_ip(np.ones(n_windows, dtype=bool), scored.win_ip, detected_value)
                    + per_ip(alarm, weights=scored.false_alarm)),
    })
    total = counts.drop(columns="ip").sum().to_frame().T.assign(ip=TOTAL)
    metrics = _ratios(pd.concat([counts, total], ignore_index=True), scored.profile)

    windows = pd.DataFrame({
        "ip": [scored.ips[k] for k in scored.win_ip],
        "start": _iso(scored.win_bounds[:, 0]), "end": _iso(scored.win_bounds[:, 1]),
        "points": scored.win_last - scored.win_first + 1,
        "detected": detected,
        "first_flag": np.where(detected, scored.frame["timestamp"].to_numpy()[np.maximum(first, 0)], None),
        "delay_minutes": delay,
        "delay_points": np.where(detected, first - scored.win_first, -1),
    }, columns=WINDOW_COLUMNS)
    return metrics, windows


def _ratios(counts: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    def div(a: str, b: str) -> pd.Series:
        return counts[a] / counts[b].where(counts[b] > 0)

    out = counts.copy()
    for column in ["points", "windows", "windows_outside", "detected", "flagged_points", "false_alarm_points",
                   "events", "false_alarm_events"]:
        out[column] = out[column].astype(int)
    out["recall"] = div("detected", "windows")
    out["false_alarm_points_per_day"] = div("false_alarm_points", "days")
    out["false_alarm_events_per_day"] = div("false_alarm_events", "days")
    out["precision"] = (counts["events"] - counts["false_alarm_events"]) / counts["events"].where(counts["events"] > 0)
    out["point_precision"] = (counts["flagged_points"] - counts["false_alarm_points"]) / counts[
        "flagged_points"].where(counts["flagged_points"] > 0)
    both = out["precision"] + out["recall"]
    out["f1"] = (2 * out["precision"] * out["recall"] / both.where(both > 0)).where(both != 0, 0.0)
    out["mean_delay_minutes"] = div("delay_sum", "detected")
    out["nab_score"] = [normalised(raw, int(w), profile) for raw, w in zip(out["nab_raw"], out["windows"], strict=True)]
    return out[METRICS]


def _iso(ns: np.ndarray) -> list[str]:
    return [str(pd.Timestamp(int(v))) for v in ns]
