"""commands/evaluation/measurement.py: flags against labelled windows, worked out by hand on a small night.

NAB's own numbers (nab_raw, nab_score) are test_nab.py's; here, what is counted and where.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from batchpredict.commands.evaluation.labels import Labels, parse_times
from batchpredict.commands.evaluation.measurement import TOTAL, WINDOW_COLUMNS, flags, order_points, place, score
from batchpredict.errors import UsageError

STAMPS = [f"2026-01-01 00:{5 * i:02d}:00" if i < 12 else f"2026-01-01 01:{5 * (i - 12):02d}:00" for i in range(20)]
FLAGGED = {"a": [2, 3, 6, 15], "b": [4]}  # a: a run of two and a lone point outside, one point in its window


def night() -> pd.DataFrame:
    """Two IPs of 20 five-minute points each, rows shuffled; a flagged point is 5 stds off, the others 1."""
    rows = [{"ip": ip, "timestamp": STAMPS[i], "observed": 10.0 + (5.0 if i in FLAGGED[ip] else 1.0),
             "predicted": 10.0, "std": 1.0, "severity": "normal"} for ip in ("a", "b") for i in range(20)]
    return pd.DataFrame(rows).sample(frac=1, random_state=3).reset_index(drop=True)


def window(first: int, last: int) -> np.ndarray:
    return parse_times([STAMPS[first], STAMPS[last]]).reshape(1, 2)


def test_a_night_counted_by_hand():
    scored = place(night(), Labels(windows={"a": window(5, 8)}))  # b has no labels
    metrics, windows = score(scored, flags(scored, 3.0))
    a, b, total = (metrics.set_index("ip").loc[ip] for ip in ("a", "b", TOTAL))
    assert (a["points"], a["windows"], a["detected"], a["flagged_points"], a["false_alarm_points"]) == (20, 1, 1, 4, 3)
    assert (a["events"], a["false_alarm_events"]) == (3, 2)  # [2, 3], [6] and [15]; only [6] in the window
    assert a["recall"] == 1 and a["precision"] == pytest.approx(1 / 3) and a["point_precision"] == 0.25
    assert a["f1"] == pytest.approx(0.5) and a["mean_delay_minutes"] == 5.0  # a flag one point into its window
    assert a["days"] == pytest.approx(100 / 1440)  # 20 points of 5 minutes
    assert a["false_alarm_points_per_day"] == pytest.approx(3 / (100 / 1440))
    assert (b["windows"], b["events"], b["false_alarm_events"], b["precision"]) == (0, 1, 1, 0.0)
    assert np.isnan(b["recall"]) and np.isnan(b["mean_delay_minutes"])
    assert (total["points"], total["windows"], total["events"], total["false_alarm_events"]) == (40, 1, 4, 3)
    first = night()["ip"].iloc[0]
    assert list(metrics["ip"]) == [first, "ab".replace(first, ""), TOTAL]  # IPs as first seen, then the totals
    assert list(windows.columns) == WINDOW_COLUMNS and len(windows) == 1
    row = windows.iloc[0]
    assert (row["ip"], row["points"], row["detected"], row["first_flag"]) == ("a", 4, True, STAMPS[6])
    assert (row["delay_minutes"], row["delay_points"]) == (5.0, 1)
    assert row["start"].startswith("2026-01-01 00:25:00") and row["end"].startswith("2026-01-01 00:40:00")


def test_a_higher_threshold_misses_the_window_and_a_missed_window_costs_its_weight():
    scored = place(night(), Labels(windows={"a": window(5, 8)}))
    metrics, windows = score(scored, flags(scored, 6.0))  # nothing is 6 stds off
    a = metrics.set_index("ip").loc["a"]
    assert (a["detected"], a["flagged_points"], a["events"], a["recall"]) == (0, 0, 0, 0.0)
    assert a["nab_raw"] == -scored.profile.fn and np.isnan(a["precision"])
    assert (windows.iloc[0]["detected"], windows.iloc[0]["first_flag"], windows.iloc[0]["delay_points"]) == (
        False, None, -1)


def test_a_window_without_a_scored_point_is_counted_outside():
    late = parse_times(["2026-01-02 00:00:00", "2026-01-02 01:00:00"]).reshape(1, 2)
    scored = place(night(), Labels(windows={"a": np.concatenate([window(5, 8), late])}))
    a = score(scored, flags(scored, 3.0))[0].set_index("ip").loc["a"]
    assert (a["windows"], a["windows_outside"]) == (1, 1)


def test_points_are_ordered_by_ip_as_first_seen_then_by_time():
    frame, time = order_points(night(), "results")
    first = night()["ip"].iloc[0]
    assert frame["ip"].iloc[0] == first and list(frame["ip"]) == sorted(frame["ip"], key=lambda ip: ip != first)
    for ip in ("a", "b"):
        assert list(frame.loc[frame["ip"] == ip, "timestamp"]) == STAMPS
    assert (np.diff(time[frame["ip"] == "a"]) == 5 * 60 * 10**9).all()


@pytest.mark.parametrize(("change", "message"), [
    (lambda f: f.assign(timestamp=f["timestamp"].where(f.index != 7, "t7")), r"^results: timestamp 't7' is not a date"),
    (lambda f: pd.concat([f, f.iloc[[4]]]), r"^results: ip \w has timestamp '2026-01-01 \d\d:\d\d:00' twice$"),
])
def test_a_timestamp_not_a_date_or_given_twice_is_a_usage_error(change, message):
    with pytest.raises(UsageError, match=message):
        order_points(change(night()), "results")
