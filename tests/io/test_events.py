"""events.py: sigma per row and flagged runs collapsed into events."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from batchpredict.io.events import EVENT_COLUMNS, collapse, sigma


def points(rows: list[tuple]) -> pd.DataFrame:
    """(ip, timestamp, observed, predicted, std, severity) rows."""
    return pd.DataFrame(rows, columns=["ip", "timestamp", "observed", "predicted", "std", "severity"])


def test_sigma_is_the_distance_in_stds_and_nan_where_it_cannot_be_computed():
    frame = points([("a", "t1", 12.0, 10.0, 1.0, "warning"), ("a", "t2", 7.0, 10.0, 0.5, "critical"),
                    ("a", "t3", "", 10.0, 1.0, ""), ("a", "t4", 10.0, 10.0, 0.0, "normal"),
                    ("a", "t5", 11.0, 10.0, 0.0, "critical"), ("a", "t6", 11.0, 10.0, -1.0, ""),
                    ("a", "t7", 11.0, None, 1.0, "")])
    got = sigma(frame)
    assert got[:2].tolist() == [2.0, 6.0]
    assert np.isnan(got[2]) and np.isnan(got[5]) and np.isnan(got[6])
    assert got[3] == 0.0 and got[4] == np.inf  # a zero-width band: on it never flagged, off it always


def test_runs_break_at_gaps_and_ip_boundaries_and_open_means_the_ip_last_point():
    frame = points([
        ("a", "t1", 13, 10, 1, "critical"),  # a: run t1-t2, then a gap, then t4 alone to the end: open
        ("a", "t2", 12, 10, 1, "warning"),
        ("a", "t3", 10, 10, 1, "normal"),
        ("a", "t4", 12.5, 10, 1, "warning"),
        ("b", "t1", 15, 10, 1, "critical"),  # b: starts flagged right after a's flagged tail: a new event
        ("b", "t2", 10, 10, 1, "normal"),
        ("c", "t1", 10, 10, 1, "normal"),    # c: nothing flagged
    ])
    flagged = np.array([True, True, False, True, True, False, False])
    events = collapse(frame, flagged)
    assert list(events.columns) == EVENT_COLUMNS
    assert events.to_dict("records") == [
        {"ip": "a", "start": "t1", "end": "t2", "points": 2, "peak_severity": "critical", "peak_sigma": 3.0,
         "open": False},
        {"ip": "a", "start": "t4", "end": "t4", "points": 1, "peak_severity": "warning", "peak_sigma": 2.5,
         "open": True},
        {"ip": "b", "start": "t1", "end": "t1", "points": 1, "peak_severity": "critical", "peak_sigma": 5.0,
         "open": False},
    ]


def test_all_flagged_is_one_open_event_per_ip():
    frame = points([("a", 1, 12, 10, 1, "warning"), ("a", 2, 14, 10, 1, "critical"),
                    ("b", 1, 11, 10, 0.1, "critical")])
    events = collapse(frame, np.ones(3, dtype=bool))
    assert events[["ip", "start", "end", "points", "open"]].values.tolist() == [["a", 1, 2, 2, True],
                                                                               ["b", 1, 1, 1, True]]
    assert events["peak_sigma"].tolist() == pytest.approx([4.0, 10.0])


def test_none_flagged_and_no_points_give_an_empty_frame_with_the_columns():
    frame = points([("a", 1, 12, 10, 1, "warning")])
    for rows, flags in ((frame, np.zeros(1, dtype=bool)), (frame.iloc[:0], np.zeros(0, dtype=bool))):
        events = collapse(rows, flags)
        assert list(events.columns) == EVENT_COLUMNS and len(events) == 0


def test_a_flag_of_its_own_choosing_keeps_the_product_severity_and_a_missing_sigma():
    # A threshold sweep flags rows the product called normal; peak_severity still reports the product's.
    frame = points([("a", 1, 11, 10, 1, "normal"), ("a", 2, "", 10, 1, "")])
    events = collapse(frame, np.array([True, True]))
    assert events["peak_severity"].tolist() == ["normal"] and events["peak_sigma"].tolist() == [1.0]
    alone = collapse(frame.iloc[1:], np.array([True]))
    assert alone["peak_severity"].tolist() == [None] and np.isnan(alone["peak_sigma"].iloc[0])


def test_the_mask_must_match_the_points():
    with pytest.raises(ValueError, match="2 values for 1 points"):
        collapse(points([("a", 1, 11, 10, 1, "normal")]), np.array([True, False]))


def random_points(n: int, ips: int, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    names = np.repeat([f"10.0.{i // 256}.{i % 256}" for i in range(ips)], n // ips)
    frame = pd.DataFrame({"ip": names, "timestamp": np.tile(np.arange(n // ips), ips),
                          "observed": rng.normal(0, 1, n), "predicted": 0.0, "std": 1.0,
                          "severity": np.where(rng.random(n) < 0.5, "warning", "critical")})
    return frame, rng.random(n) < 0.3


def test_random_flags_match_a_plain_loop():
    frame, flagged = random_points(20_000, 40, seed=1)
    ips, expected, run = frame["ip"].tolist(), [], None
    for i in range(len(ips)):
        if flagged[i] and run is not None and ips[i] == ips[run[0]] and run[1] == i - 1:
            run[1] = i
            continue
        if run is not None:
            expected.append(tuple(run))
            run = None
        if flagged[i]:
            run = [i, i]
    if run is not None:
        expected.append(tuple(run))
    events = collapse(frame, flagged)
    assert list(zip(events["ip"], events["start"], events["end"])) == [
        (ips[a], frame["timestamp"].iloc[a], frame["timestamp"].iloc[b]) for a, b in expected]
    assert events["points"].tolist() == [b - a + 1 for a, b in expected]
    assert events["open"].tolist() == [b + 1 == len(ips) or ips[b + 1] != ips[b] for _, b in expected]


def test_a_million_points_collapse_in_about_a_second():
    frame, flagged = random_points(1_000_000, 1000, seed=0)
    started = time.perf_counter()
    events = collapse(frame, flagged)
    elapsed = time.perf_counter() - started
    assert elapsed < 5, elapsed  # 0.6 s measured while other work ran; generous for a shared machine
    assert events["points"].sum() == flagged.sum()
