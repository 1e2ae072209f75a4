"""The alerting stage's spans in time: durations, each series' step from its labels, and alerts that land at the
same times whatever the step a series is sampled at (resampled as the issue's protocol does: linear
interpolation to 1 minute, means to 15 minutes and an hour)."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from batchpredict.rules import REFERENCE, RULES, duration, parse_duration
from batchpredict.scoring.alerting import alerts
from batchpredict.scoring.features import windowed
from batchpredict.scoring.method import Spans, parse, step_of

from conftest import SHARED

DAY = 86400
FIVE = 300


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("15m", 900), ("8h", 28800), ("2d", 172800), ("1w", 604800),
                                           ("1.5h", 5400), (" 5M ", 300)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds
    assert parse_duration(duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "5", "0m", "-5m", "5 minutes", "nan", "1e3s", "m"])
def test_what_is_no_duration(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize("option", ["week=99999999999w", "window=367d", "rest=105409"])  # the last: buckets
def test_an_alert_span_past_a_year_is_refused_not_allocated(option):
    with pytest.raises(ValueError, match=r"^--alert ensemble: \w+ is at most 366d, not "):
        parse(f"ensemble:{option}")
    assert parse("ensemble:week=366d,day=1d") is not None


def test_a_bare_number_counts_five_minute_buckets_where_allowed():
    assert parse_duration("12", bare=REFERENCE) == 3600


def labels(step: float, n: int = 50, form: str = "%Y-%m-%d %H:%M:%S") -> list[str]:
    return pd.date_range("2026-03-01", periods=n, freq=pd.Timedelta(seconds=step)).strftime(form).tolist()


@pytest.mark.parametrize("step", [1, 60, 300, 900, 3600, DAY])
def test_the_step_is_the_labels_median_spacing(step):
    assert step_of(labels(step)) == step


def test_the_step_of_labels_as_tables_write_them():
    assert step_of(labels(60, form="%Y-%m-%dT%H:%M:%SZ")) == 60
    assert step_of(labels(60, form="%Y-%m-%d %H:%M:%S.000000")) == 60
    assert step_of([f"2026-03-01 00:{m:02d}:00+00:00" for m in range(0, 60, 5)]) == 300
    # A gap or a missing bucket moves no median.
    some = labels(300, 100)
    assert step_of(some[:40] + some[70:]) == 300


@pytest.mark.parametrize("given", [[f"t{i:03d}" for i in range(10)], [str(i) for i in range(10)],
                                   ["1700000000", "1700000300"], ["2026-03-01"], [], ["2026-03-01", "oops"],
                                   ["2026-03-01 00:00", "2026-03-01 00:00"]])
def test_labels_that_are_not_times_have_no_step(given):
    assert step_of(given) is None


# The invariance: a synthetic day of 5-minute buckets with noise, an event on day 10, the same series at other
# steps. Residuals are a persistence forecast's (the value minus the one before), which a short-window LSTM's
# resemble; the store's std is theirs over the first week.
N_DAYS, EVENT_DAY = 12, 10
STEPS = (60, FIVE, 900, 3600)


def series(kind: str, seed: int) -> np.ndarray:
    t = np.arange(N_DAYS * 288) * FIVE
    hour = (t % DAY) / 3600
    rng = np.random.default_rng(seed)
    if kind == "dropped day":  # busy from 08:00 to 20:00, and on day 10 not at all
        values = np.where((hour >= 8) & (hour < 20), 15.0, 5.0) + rng.normal(0, 0.3, len(t))
        values[EVENT_DAY * 288:(EVENT_DAY + 1) * 288] = 5 + rng.normal(0, 0.3, 288)
        return values
    values = 10 + 3 * np.sin(2 * np.pi * hour / 24) + rng.normal(0, 0.3, len(t))
    at = EVENT_DAY * 288
    if kind == "level shift":
        values[at + 72:] += 6               # at 06:00, the day's peak
    elif kind == "spike":
        values[at + 144:at + 150] += 12     # at noon, for half an hour
    elif kind == "new daily job":
        for day in (EVENT_DAY, EVENT_DAY + 1):
            values[day * 288 + 36:day * 288 + 48] += 5  # at 03:00, for an hour, an hour it never ran
    return values


def resampled(values: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
    """(times in seconds, values): linear interpolation to finer steps, the mean of each bucket to coarser."""
    t = np.arange(len(values)) * FIVE
    if step < FIVE:
        fine = np.arange(0, t[-1] + 1, step)
        return fine, np.interp(fine, t, values)
    k = step // FIVE
    return t[::k], values.reshape(-1, k).mean(axis=1)


def stage_inputs(values: np.ndarray, spans: Spans, first: int) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    """What predict's alerting stage reads of a series: a persistence forecast's residuals of its rolling mean
    of 5 (the product's `observed`), their std over the `first` points, the critical points at 4 of them, and
    the values as the value rules read them (their mean over `smooth`, 25 minutes)."""
    found = windowed(values, 5, 0, 0)
    observed = np.concatenate([values[:4], found.observed])
    residuals = np.diff(observed, prepend=observed[0])
    std = float(np.std(residuals[:first]))
    return residuals, np.abs(residuals) > 4 * std, std, windowed(values, 1, 0, 0).smoothed(spans.smooth)


def alert_times(kind: str, step: int, seed: int) -> list[tuple[float, str]]:
    """(hours since the event day began, rule) of each alert after the first week."""
    t, values = resampled(series(kind, seed), step)
    spans = parse("ensemble").at(step)
    residuals, critical, std, ruled = stage_inputs(values, spans, 7 * DAY // step)
    alert, _, _, rule = alerts(residuals, critical, std, spans, observed=ruled)
    return [((t[i] - EVENT_DAY * DAY) / 3600, RULES[rule[i]]) for i in np.flatnonzero(alert) if t[i] >= 7 * DAY]


@pytest.mark.parametrize("kind, hour", [("level shift", 6), ("spike", 12), ("dropped day", 9), ("new daily job", 3)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_event_alerts_at_the_same_time_at_every_step(kind, hour, seed):
    """Its first alert lands within one bucket (of the coarser step) of the 5-minute one, and the week of
    normal days before it pages at no step. A dropped day pages at 09:00 and a bucket: until then its values lie
    within the time of day's range, which reaches an hour either side, and their 25-minute mean a bucket more."""
    five = alert_times(kind, FIVE, seed)
    assert five and hour <= five[0][0] <= hour + FIVE / 3600 * (1 + 1e-9), five
    for step in STEPS:
        found = alert_times(kind, step, seed)
        assert found and found[0][0] >= 0, (step, found)  # nothing before the event
        assert abs(found[0][0] - five[0][0]) <= max(step, FIVE) / 3600, (step, found, five)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_quiet_series_pages_at_no_step(seed):
    for step in STEPS:
        assert alert_times("none", step, seed) == [], step


def test_the_score_is_a_tail_per_five_minutes():
    """The same residuals at 1-minute steps score lower by log10(5) / 10: five points a reference step."""
    rng = np.random.default_rng(0)
    residuals = np.r_[rng.normal(0, 1, 2000), [3.0, 3.5, 4.0]]
    method = parse("likelihood:average=15m")
    at_five = alerts(residuals, np.abs(residuals) > 4, 1.0, method.at(FIVE))[1]
    at_one = alerts(residuals, np.abs(residuals) > 4, 1.0, replace(method.at(FIVE), step=60.0))[1]
    within = (at_one > 0.01) & (at_five < 0.7)  # neither clipped nor near the 1e-10 under the tail
    assert within.sum() > 10 and np.allclose(at_five[within] - at_one[within], np.log10(5) / 10, atol=1e-4)


def likelihood_triggers_a_day(step: int) -> float:
    """Points a day at which the likelihood scores its threshold or more on heavy-tailed noise (Student's t with 5
    degrees of freedom, 200 days, three seeds) sampled at `step`."""
    spans = parse("likelihood").at(step)
    count = 0
    for seed in range(3):
        residuals = np.random.default_rng(seed).standard_t(5, 200 * DAY // step)
        _, score, judged, _ = alerts(residuals, np.abs(residuals) > 4, 1.0, spans)
        count += int((score[judged] >= spans.threshold).sum())
    return count / 3 / 200


def test_noise_triggers_the_likelihood_about_as_often_a_day_at_coarser_steps():
    """At 10 and 15 minutes and an hour the short-term mean (15 minutes) holds 2 or 1 scores, not the 3 it holds
    at 5 minutes; `widen` makes up for the spread that costs, which made a trigger 3 to 10 times as common."""
    five = likelihood_triggers_a_day(FIVE)
    assert five > 0.05
    for step in (600, 900, 3600):
        assert five / 2 <= likelihood_triggers_a_day(step) <= 2 * five, step


NAB_AWS = SHARED / "data" / "nab" / "realAWSCloudwatch"


def aws_at(step: int) -> tuple[int, int, int, float]:
    """NAB's AWS hosts resampled to `step`, each judged on its second half with a persistence forecast's
    residuals: (windows detected, windows, false alerts, host-days)."""
    windows = json.loads((NAB_AWS.parent / "combined_windows.json").read_text())
    method = parse("ensemble").at(step)
    detected = total = false = 0
    days = 0.0
    for path in sorted(NAB_AWS.glob("*.csv")):
        frame = pd.read_csv(path, parse_dates=["timestamp"]).drop_duplicates("timestamp")
        t = frame["timestamp"].to_numpy("datetime64[s]").astype(np.int64)
        if step < FIVE:
            grid = np.arange(t[0], t[-1] + 1, step)
            values = np.interp(grid, t, frame["value"].to_numpy(float))
        else:
            means = frame.set_index("timestamp")["value"].resample(f"{step}s").mean().dropna()
            grid, values = means.index.to_numpy("datetime64[s]").astype(np.int64), means.to_numpy(float)
        half = len(values) // 2
        residuals, critical, std, ruled = stage_inputs(values, method, half)
        alert = alerts(residuals, critical, std, method, observed=ruled)[0]
        at = grid[half:][alert[half:]]
        spans = [(pd.Timestamp(a).timestamp(), pd.Timestamp(b).timestamp())
                 for a, b in windows[f"realAWSCloudwatch/{path.name}"]]
        judged = [(a, b) for a, b in spans if b >= grid[half]]
        detected += sum(bool(((at >= a) & (at <= b)).any()) for a, b in judged)
        total += len(judged)
        false += sum(not any(a <= x <= b for a, b in spans) for x in at)
        days += (grid[-1] - grid[half]) / DAY
    return detected, total, false, days


@pytest.mark.skipif(not NAB_AWS.is_dir(), reason="NAB's AWS series are not in ../shared")
def test_nab_aws_resampled_keeps_its_windows_and_its_rate_of_false_pages():
    """The issue's bar on the rules alone (a persistence forecast of the rolling mean, no model to train): at 1
    minute, recall within one window of the 5-minute figure and at most 1.5 times its false pages a host-day
    (16/18 at 0.13 at 5 minutes, 15/18 at 0.19 at 1 minute); at 15 minutes, where no bar is set, 16/18 at 0.20.
    At an hour only the pages part is met: 12/18 at 0.13, where an hour's mean dilutes a 5-minute spike
    twelvefold (docs/evaluation.md, "At any step"). With spans counted in points they were 16/18 at 1.28 a
    host-day at 1 minute and 8/18 at an hour."""
    detected, total, false, days = aws_at(FIVE)
    assert total == 18 and detected >= 15
    rate = false / days
    for step, pages in ((60, 1.5), (900, 2.0), (3600, 1.5)):
        found, _, wrong, span = aws_at(step)
        windows = detected - (1 if step < 3600 else 4)
        assert found >= windows and wrong / span <= pages * rate, (step, found, wrong / span)
