"""The alerting stage on synthetic series: onsets only, a floor under the scale, causality, the fallback, and
the ensemble's value rules (a new extreme, a quiet day, a job at a new hour)."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from batchpredict.job import Params

from batchpredict.scoring import alerting
from batchpredict.scoring.alerting import alerts, extremes, onsets, quiet_days, seasonal
from batchpredict.scoring.method import Method, Spans, parse
from batchpredict.rules import REFERENCE, RULES

DEFAULT = parse("likelihood").at(REFERENCE)
HISTORY = DEFAULT.history()


def noise(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 1.0, n)


def run(residuals: np.ndarray, method: Spans = DEFAULT, std: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return alerts(residuals, np.abs(residuals) > 4 * std, std, method)[:3]


def test_the_default_and_its_parameters():
    likelihood = parse("likelihood")
    assert likelihood.spec() == "likelihood:window=2d,average=15m,centre=1d,rest=8h,threshold=0.35,floor=0.5"
    assert parse(likelihood.spec()) == likelihood
    assert parse("none") is None
    # A bare number counts 5-minute buckets, as spans did before they were durations.
    assert parse("likelihood:rest=12,threshold=0.7") == Method("likelihood", rest=3600, threshold=0.7)
    assert parse("likelihood:rest=1h,window=576") == parse("likelihood:rest=60m,window=2d")
    assert parse("severity:rest=3").at(REFERENCE).history() == 3
    assert HISTORY == 288 + 576 + 96
    ensemble = parse("ensemble")
    assert ensemble.spec() == ("ensemble:window=2d,average=15m,centre=1d,rest=8h,threshold=0.65,floor=0.5,"
                               "tolerance=1h,extreme=0.05,miss=1,span=2d,quiet=0.2,seasonal=0.2,repeat=0.2,day=1d,week=7d,"
                               "smooth=25m,gap=5m")
    assert parse(ensemble.spec()) == ensemble and Params().alert == "ensemble"
    five = ensemble.at(REFERENCE)
    assert five.history() == 288 + 576 + 288 + 12 + 2 * 96 and five.value_history() == 2016 + 288 + 2 * 96


@pytest.mark.parametrize("step, counts", [
    (60.0, dict(window=2880, average=15, centre=1440, rest=480, tolerance=60, day=1440, week=10080, smooth=25, gap=5)),
    (900.0, dict(window=192, average=1, centre=96, rest=32, tolerance=4, day=96, week=672)),
    # Above 20-minute steps the spans estimated from hold a quarter of their 5-minute points: they read more time.
    (3600.0, dict(window=144, average=1, centre=72, rest=8, span=144, tolerance=1, day=24, week=168, around=2)),
    (86400.0, dict(window=144, average=1, centre=72, rest=1, tolerance=0, day=1, week=7, around=0)),  # the daily rules hold
])
def test_spans_are_counted_at_each_step(step, counts):
    spans = parse("ensemble").at(step)
    assert {key: getattr(spans, key) for key in counts} == counts
    assert spans.tolerance < spans.day < spans.week and spans.per_reference == REFERENCE / step


@pytest.mark.parametrize("text", ["", "zscore", "none:1", "likelihood:window=0", "likelihood:window=2x",
                                  "likelihood:window=-1h",
                                  "likelihood:threshold=1.5", "likelihood:threshold=nan", "likelihood:bogus=1",
                                  "severity:window=3", "likelihood:rest", "likelihood:extreme=0.1",
                                  "ensemble:week=0", "ensemble:quiet=-1", "ensemble:miss=-1", "ensemble:day=2016",
                                  "ensemble:tolerance=288", "ensemble:repeat=1.5"])
def test_bad_methods_say_what_is_accepted(text):
    with pytest.raises(ValueError, match="--alert"):
        parse(text)


def test_onsets_are_the_first_trigger_of_each_burst():
    trigger = np.array([0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 0, 0], dtype=bool)
    assert onsets(trigger, 3).nonzero()[0].tolist() == [1, 8]     # 4 is 2 after 2: the same burst
    assert onsets(trigger, 1).nonzero()[0].tolist() == [1, 4, 8]
    # Two series end to end: the second's first trigger is an onset whatever the first did.
    first = np.repeat([0, 6], 6)
    assert onsets(trigger, 3, first).nonzero()[0].tolist() == [1, 8]
    assert onsets(np.r_[trigger[:6], [1, 0, 0, 0, 0, 0]].astype(bool), 3, first).nonzero()[0].tolist() == [1, 6]


def test_a_level_shift_alerts_once_at_its_onset():
    residuals = noise(4000)
    residuals[3000:] += 12.0  # the model never learns the new level: every later residual is off
    alert, score, judged = run(residuals)
    assert judged[600:].all()
    (onset,) = alert.nonzero()[0].tolist()  # within the short-term mean of its first point
    assert 3000 <= onset < 3000 + DEFAULT.average
    assert score[onset] >= 0.5 and np.nanmax(score[3600:]) < 0.5  # the re-centring absorbed the new level


def test_a_spike_alerts_once_and_the_noise_around_it_never():
    """One point alone must lift the short-term mean of 3 past 3.4 stds of |noise| (0.8 +- 0.6): ~9."""
    residuals = noise(4000, seed=1)
    residuals[3500] += 12.0
    alert, score, _ = run(residuals)
    assert alert.nonzero()[0].tolist() == [3500]
    assert 0.0 <= np.nanmin(score) and np.nanmax(score) <= 1.0


def test_the_floor_keeps_a_flat_stretch_from_alerting_on_a_blip():
    """A series that goes flat (residuals all 0 for 2,500 points) then moves by 0.3 of its usual std: with
    no floor under the scale any blip is infinitely many stds; the floor (half the store's std) keeps it
    quiet, while a real move (8 stds for 3 points) after the same flat stretch still alerts."""
    residuals = noise(5000, seed=2)
    residuals[2000:] = 0.0
    residuals[4600:4606] = 0.3
    assert not run(residuals)[0].any()
    assert run(residuals, Method("likelihood", floor=1e-9).at(REFERENCE))[0].nonzero()[0].tolist() == [4600]
    residuals[4800:4803] = 8.0
    assert run(residuals)[0].nonzero()[0].tolist() == [4800]


def test_a_point_depends_only_on_the_history_before_it():
    """The same residuals computed from any start at least `history()` points earlier give the same alert
    and score: what makes --points and --since agree."""
    residuals = noise(6000, seed=3)
    residuals[[3300, 4100, 5900]] += [25.0, 40.0, 60.0]
    residuals[4500:4800] += 6.0
    whole = run(residuals)
    for start in (0, 17, 1111):
        part = run(residuals[start:])
        keep = slice(HISTORY, None)
        assert np.array_equal(part[0][keep], whole[0][start:][keep])
        np.testing.assert_allclose(part[1][keep], whole[1][start:][keep], rtol=1e-9, atol=1e-12)
    assert whole[0].sum() >= 3


def test_too_little_history_falls_back_to_onsets_of_critical_points():
    residuals = noise(300, seed=4)
    residuals[[100, 101, 250]] = [9.0, 9.5, -8.0]
    alert, score, judged = run(residuals)
    short = DEFAULT.window // 4
    assert not judged[:short].any() and judged[short:].all()
    assert alert[:short].nonzero()[0].tolist() == [100, 101][:1]  # 101 is the same burst
    assert np.isnan(score[:short]).all() and not np.isnan(score[short:]).any()


def test_severity_alerts_on_the_onset_of_each_critical_burst():
    residuals = np.zeros(40)
    residuals[[5, 6, 7, 20, 30]] = 10.0
    alert, score, judged = run(residuals, parse("severity:rest=5").at(REFERENCE))
    assert alert.nonzero()[0].tolist() == [5, 20, 30] and not judged.any() and np.isnan(score).all()


def test_the_score_is_numentas_log_likelihood():
    z = np.array([-3.0, 0.0, 4.264890794, 6.361340902, 50.0])  # tails of 1e-5 and 1e-10 in the middle
    expected = [-math.log10(0.5 * math.erfc(v / math.sqrt(2)) + 1e-10) / 10 for v in z[:2]]
    got = alerting._score(z)
    np.testing.assert_allclose(got[:2], expected, rtol=1e-12)
    assert got[2] == pytest.approx(0.5, abs=1e-6) and got[3] == pytest.approx(-math.log10(2e-10) / 10, abs=1e-6)
    assert got[4] == 1.0


ENSEMBLE = parse("ensemble").at(REFERENCE)
WARM = 2 * 288


def daily(days: int, seed: int = 5, day: int = 288) -> np.ndarray:
    """A metric with a job each day: 0.1 +- 0.01, and 12 points at 0.97 to 1.03 at about the same time each
    day (within an hour), so every day's range holds a job; bounded, so nothing steady is a new extreme."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(0.09, 0.11, days * day)
    for d in range(days):
        at = d * day + 100 + int(rng.integers(0, 12))
        values[at:at + 12] = rng.uniform(0.97, 1.03, 12)
    return values


def ensemble(values: np.ndarray, residuals: np.ndarray | None = None, method: Method = ENSEMBLE, *,
             missed: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(alert, rule) of every point after the first two days (where the first job a series shows is new to it),
    the residuals (default a well-behaved model's noise) judged beside; at the points `missed` the model is
    off by 2 store stds (a jump it could not predict, too little for the likelihood alone)."""
    residuals = noise(len(values), seed=9) * 0.01 if residuals is None else residuals.copy()
    residuals[list(missed)] += 0.02
    alert, _, _, rule = alerts(residuals, np.abs(residuals) > 0.04, 0.01, method, observed=values)
    alert[:max(0, WARM - (len(values) - len(alert)))] = False
    return alert, rule


def test_a_new_extreme_alerts_once_at_its_first_point():
    values = daily(12)
    values[2500:2520] = 1.5  # the job ran hotter than any time in two days, for 20 points
    alert, rule = ensemble(values, missed=(2500,))
    assert alert.nonzero()[0].tolist() == [2500] and RULES[rule[2500]] == "extreme"
    # A model that predicted it (a drift it learned) is not surprised: the value is no news.
    predicted = noise(len(values), seed=9) * 0.01
    predicted[2500:2520] = 0.0
    assert extremes(values, ENSEMBLE)[2500] and "extreme" not in {RULES[r] for r in ensemble(values, predicted)[1]}
    alert, rule = ensemble(values, predicted, parse("ensemble:miss=0").at(REFERENCE))  # miss=0: as before
    assert alert.nonzero()[0].tolist() == [2500] and RULES[rule[2500]] == "extreme"
    assert extremes(values, ENSEMBLE)[2500:2520].sum() == 1  # once 1.5 is in the window it is not new


@pytest.mark.parametrize("step", [60.0, REFERENCE])
def test_a_slow_rise_to_a_new_high_is_new_at_every_step(step):
    """A daily sine (0.3 high), then from its peak a rise of 0.02 a minute: at 5-minute steps each point is 0.1
    above the one before, past the margin (5% of the week's range, about 0.03); at 1-minute steps 0.02 is not, but
    a few minutes of the rise are: the range is the `span`'s up to the `gap` (5 minutes) before."""
    minutes = np.arange(3 * 1440 + 360 + 60)
    values = 0.3 * np.sin(2 * np.pi * minutes / 1440)
    rise = 3 * 1440 + 360
    values[rise:] = 0.3 + 0.02 * np.arange(1, 61)
    every = int(step // 60)
    spans = parse("ensemble").at(step)
    fired = minutes[::every][extremes(values[::every], spans)]
    assert len(fired) and rise <= fired[0] <= rise + 10, fired
    if step < REFERENCE:  # compared with the point before, no step of the rise is new
        assert not extremes(values[::every], replace(spans, gap=1)).any()


def test_a_level_shift_of_the_values_alerts_once_and_the_new_level_is_absorbed():
    values = daily(14)
    job = 3000 + int(np.argmax(values[3000:] > 0.5))
    values[job:] += 2.0  # from a job on, every value above every earlier one: one extreme, then the range holds it
    alert, rule = ensemble(values, missed=(job,))
    assert alert.nonzero()[0].tolist() == [job] and RULES[rule[job]] == "extreme"


def test_a_daily_rhythm_that_stops_alerts_once_a_day_later():
    values = daily(14)
    last_job = int(np.flatnonzero(values[:2304 + 288] > 0.5)[-1])
    values[2304 + 288:] = np.random.default_rng(6).normal(0.1, 0.01, len(values) - 2304 - 288)
    alert, rule = ensemble(values)
    (onset,) = alert.nonzero()[0].tolist()
    assert RULES[rule[onset]] == "quiet" and onset == last_job + ENSEMBLE.day  # the first day without a job


def test_a_day_without_change_alerts_as_quiet_however_large_the_weeks_burst():
    """A burst of 20 makes a tenth of the week's range (2) larger than every day's range (about 0.9), so no day
    is quieter by the margin; a day of one value after a week that changed every day is quiet all the same."""
    values = daily(14)
    values[8 * 288 + 200:8 * 288 + 212] = 20.0
    flat = 11 * 288 + 150  # after day 11's job
    values[flat:] = 0.1
    # Until that day is one of the week's before: then the week holds a day without change.
    first = flat + ENSEMBLE.day - 1
    assert quiet_days(values, ENSEMBLE).nonzero()[0].tolist() == list(range(first, first + ENSEMBLE.day))
    alert, rule = ensemble(values)
    assert (alert[flat:].nonzero()[0] + flat).tolist() == [first] and RULES[rule[first]] == "quiet"


def test_a_job_at_a_new_hour_alerts_once_where_the_series_repeats_daily():
    values = daily(12)
    values[3080:3092] = 1.0  # day 10's second job, 100 points after its usual hour: as high as any job
    assert not extremes(values, ENSEMBLE)[3080:3092].any()  # the last two days held jobs as high
    alert, rule = ensemble(values)
    assert alert.nonzero()[0].tolist() == [3080] and RULES[rule[3080]] == "seasonal"


def test_a_noisy_hour_is_judged_against_five_values_a_day():
    """At hourly steps the time of day's range reaches two points either side (`around`), not the tolerance's
    one: on a noisy daily rhythm the range of 3 values a day pages on its own noise."""
    spans = parse("ensemble").at(3600.0)
    hours = np.arange(28 * 24)
    fired = {1: 0, 2: 0}
    for seed in range(5):
        values = 10 + 3 * np.sin(2 * np.pi * hours / 24) + np.random.default_rng(seed).normal(0, 1, len(hours))
        for around in fired:
            fired[around] += int(seasonal(values, replace(spans, around=around))[8 * 24:].sum())
    assert spans.around == 2 and fired[2] < fired[1] / 2, fired


@pytest.mark.parametrize("step, judged", [(3600.0, True), (4 * 3600.0, True), (5 * 3600.0, False), (86400.0, False)])
def test_the_seasonal_rule_judges_only_days_of_more_than_a_time_of_day(step, judged):
    """At daily steps the time of day is the day itself: its range over a week is 7 values, which a noisy
    series leaves by a fifth of the week's range every few days (a third to a half of a daily table's points paged)."""
    spans = parse("ensemble").at(step)
    rng = np.random.default_rng(2)
    days = np.arange(300 * spans.day) / spans.day
    values = 10 + 3 * np.sin(2 * np.pi * days) + np.cumsum(rng.normal(0, 1, len(days)))
    assert spans.hours == judged and seasonal(values, spans).any() == judged


def test_the_daily_correlation_is_the_weeks_with_the_day_before():
    values = daily(12) + np.linspace(0.0, 1e6, 12 * 288)  # a trend far from zero: the sums keep their digits
    day, week = ENSEMBLE.day, ENSEMBLE.week
    correlation = alerting._daily_correlation(values, ENSEMBLE)
    for t in (week, 2500, len(values) - 1):
        expected = np.corrcoef(values[t - week + day:t], values[t - week:t - day])[0, 1]
        assert correlation[t] == pytest.approx(expected, rel=1e-9)
    assert np.isnan(correlation[:week]).all()


@pytest.mark.parametrize("count", [1, 2, 7, 25, 288, 1000, 2999, 5000])
def test_the_runs_ending_at_each_point_are_its_max_and_min(count):
    """The value rules' ranges, against the max and the min of each run taken one by one: a NaN in a run is
    the run's, runs before the series' start are cut, and a run longer than the series is all of it."""
    values = np.random.default_rng(4).normal(0.0, 1.0, 3000)
    values[[5, 1500, 2999]] = np.nan
    for reduce, direct in ((np.maximum, np.max), (np.minimum, np.min)):
        runs = alerting._trailing(values, count, reduce)
        expected = [direct(values[max(0, t - count + 1):t + 1]) for t in range(len(values))]
        assert np.array_equal(runs, expected, equal_nan=True)
    assert alerting._trailing(values[:0], count, np.maximum).shape == (0,)


def test_the_time_of_day_over_the_week_is_each_days_own():
    """Shared.season, day by day, is the max and the min over Shared.days' rows, at every point."""
    values = daily(12) + np.random.default_rng(5).normal(0.0, 0.01, 12 * 288)
    values[2000] = np.nan
    shared = alerting.Shared(values, ENSEMBLE)
    top, bottom = shared.days(np.arange(len(values)))
    high, low = shared.season
    assert np.array_equal(high, top.max(axis=0), equal_nan=True)
    assert np.array_equal(low, bottom.min(axis=0), equal_nan=True)
    assert np.isnan(high[:ENSEMBLE.week]).all() and np.isfinite(high[ENSEMBLE.week + 300:2000]).all()


def test_a_bursty_series_is_not_judged_by_the_hour():
    """Jobs at a random hour each day: every job is at a new hour, and the series correlates too little with the
    day before for the seasonal rule to judge it."""
    rng = np.random.default_rng(3)
    values = rng.uniform(0.09, 0.11, 12 * 288)
    for d in range(12):
        at = d * 288 + int(rng.integers(0, 276))
        values[at:at + 12] = rng.uniform(0.97, 1.03, 12)
    assert seasonal(values, replace(ENSEMBLE, repeat=-1.0)).any()
    assert not seasonal(values, ENSEMBLE).any()


def test_a_nightly_job_back_to_its_height_after_two_small_nights_is_no_new_extreme():
    values = daily(12)
    small = slice(8 * 288, 10 * 288)
    values[small] = np.minimum(values[small], 0.5)  # two nights' jobs at half height
    habitless = extremes(values, replace(ENSEMBLE, week=2 * ENSEMBLE.day))  # only yesterday and the day before
    assert habitless[10 * 288:11 * 288].any()  # beyond the last two days' range...
    alert, _ = ensemble(values)
    assert not alert[10 * 288:11 * 288].any()  # ...but seen at this hour on the days before them


def test_a_flat_or_steady_series_never_alerts():
    assert not ensemble(np.full(5000, 3.0))[0].any()
    assert not ensemble(daily(16, seed=7))[0].any()
    assert not quiet_days(np.full(5000, 3.0), ENSEMBLE).any()


def test_the_likelihood_still_alerts_in_the_ensemble_and_says_so():
    values = daily(12)
    residuals = noise(len(values), seed=8) * 0.01
    residuals[3000:3003] += 0.5
    alert, rule = ensemble(values, residuals)
    assert alert.nonzero()[0].tolist() == [3000] and RULES[rule[3000]] == "likelihood"


def test_an_ensemble_point_depends_only_on_its_history():
    """Values from `value_history()` points back and residuals from `history()` back give the same alerts."""
    values = daily(16, seed=10)
    values[3100:3110] = 1.6
    values[3500:3512] = 1.0  # a job at a new hour
    values[4000:] = 0.1
    residuals = noise(len(values), seed=11) * 0.01
    residuals[2900:2903] += 0.6
    residuals[3100] += 0.02  # the model misses the hot job
    whole = ensemble(values, residuals)
    assert {RULES[r] for r in whole[1][whole[0]]} == {"likelihood", "extreme", "quiet", "seasonal"}
    reach, history = ENSEMBLE.value_history(), ENSEMBLE.history()
    for start in (2600, 2700, 2800):
        part = ensemble(values[start - reach:], residuals[start - history:])
        assert np.array_equal(part[0][history:], whole[0][start:])
        assert np.array_equal(part[1][history:], whole[1][start:])


def test_a_spike_at_the_same_time_every_day_pages_on_its_first_day_only():
    """A nightly job the model cannot predict: 3 points 0.5 off at about 03:00 (within 20 minutes) of each day
    from day 4. The likelihood alone pages every night; the ensemble drops a trigger within an hour of one
    a day before, so only the first night pages."""
    residuals = noise(288 * 12, seed=12) * 0.01
    nights = [288 * d + 36 + (d % 3) * 2 for d in range(4, 12)]
    for at in nights:
        residuals[at:at + 3] += 0.5
    values = np.full(len(residuals), 0.1)
    alone = alerts(residuals, np.zeros(len(residuals), bool), 0.01, DEFAULT, observed=values)[0]
    paged = alone.nonzero()[0]
    assert len(paged) == len(nights) and all(at <= p < at + 3 for p, at in zip(paged, nights, strict=True))
    together, rule = ensemble(values, residuals)
    assert together.nonzero()[0].tolist() == paged[:1].tolist() and RULES[rule[paged[0]]] == "likelihood"
