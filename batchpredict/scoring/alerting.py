"""The alerting stage (docs/design.md §3): after the seed's verdict, when to page a person, and a score to rank by.

Per IP, over its scored points in time order, with history from the points before the first one:

    residual r ─► minus the mean of the `centre` r before it ─► a = |.| / store std
      ─► z = (mean of the last `average` a − mean of the `window` a before) / (max(their std, `floor`) · widen)
      ─► score = −log10(Q(z) · points in 5 minutes) / 10, in [0, 1]   (Q: the normal tail; Numenta's likelihood)
      ─► trigger: score ≥ threshold  ─► alert: a trigger with no trigger in the `rest` points before it

This is Numenta's anomaly likelihood (Ahmad et al. 2017) on the model's residuals: the tail probability of
the short-term mean of the residual score against its long-window distribution: `--alert likelihood`.

The default, `ensemble`, drops a likelihood trigger within `tolerance` points of one a `day` before (a
job that spikes every night is not news), and adds three rules on the values themselves (predict passes their
mean over `smooth`), which catch what a short-window LSTM's residual under-states (its prediction is close to the
last value):

    extreme:  the value lies beyond the range of the `span` values ending `gap` points before it by `extreme`
              of the range of the `week` before it, more than `miss` store stds off its prediction, and was
              not seen at this time of day (the values within `around` points of it, a day, two days, ... a
              week before, widened by the same margin) on two days
    quiet:    the range of the last `day` values is below the least range of any `day` values in the `week`
              before, by `quiet` of the week's range, or is none where every one of those had some (a metric
              that stopped doing what it does every day)
    seasonal: the value lies beyond the range of this time of day on every day of the week before, by
              `seasonal` of the week's range, in a series that repeats daily (over the week before, its
              values correlate at least `repeat` with those a day before them): a job at a new hour;
              at steps above 4 hours (a day of 5 points or fewer) there is no hour to be new to

Each rule's triggers become onsets (no trigger of the same rule in the `rest` points before), and an alert is
an onset with no onset of any rule in the `rest` points before it; `alert_source` names the rule.

Every step looks back a fixed number of points, so a point's alert depends only on the `history()` residuals
and `value_history()` values up to it: the same point gets the same alert whatever --points or --since range
it falls in. A point with fewer than `window // 4` residual scores before it has no distribution to be judged
against: the likelihood falls back to the seed's verdict (a trigger is a critical point), its score is empty
and its source says `severity`. The value rules need a quarter of their windows.

The spans are durations (method.py), counted here in points of the series' step (`Spans`): the rules read the
same time at every step, and the score's tail is per 5 minutes, so it ranks series of any step alike. Above
5-minute steps the short-term mean holds fewer scores than the 3 it holds at 5 minutes (one at 15 minutes and an
hour), and `widen` (√(3 / its points)) keeps a trigger on noise as rare as at 5 minutes.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..rules import RULES, VALUE_RULES
from .method import ENSEMBLE, Spans

# A value seen at this time of day on this many days of the week before is a habit, not a new extreme.
_HABIT = 2
_ROOT2 = math.sqrt(2.0)


def alerts(residuals: np.ndarray, critical: np.ndarray, store_std: float, method: Spans, *,
           observed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(alert, score, judged by the likelihood, rule) per point, from every point's residual in time order.

    `critical`: the seed's verdict per point, the fallback where too little history exists. The score is
    NaN where the point fell back. `observed`: the values the ensemble's rules read (it needs them), ending at
    the same point as `residuals` and reaching further back. `rule`: per alert, what raised it, codes into RULES.
    """
    n = len(residuals)
    score = np.full(n, np.nan)
    judged = np.zeros(n, dtype=bool)
    if method.name != "severity":
        z, judged = likelihood_z(residuals, store_std, method)
        score[judged] = _score(z[judged], method.per_reference)
    first = onsets(triggers(score, judged, critical, method), method.rest)
    rule = np.where(first, np.where(judged, RULES.index("likelihood"), RULES.index("severity")), 0)
    if method.name != ENSEMBLE:
        return first, score, judged, rule.astype(np.uint8)
    if observed is None:
        raise ValueError("the ensemble's value rules need the observed values")
    values = np.asarray(observed, dtype=float)
    shared = Shared(values, method)
    # A new extreme the model predicted (a drift it learned) is not news. Before the residuals, none pages.
    missed = np.zeros(len(values), dtype=bool)
    missed[len(values) - n:] = np.abs(residuals) >= method.miss * store_std
    for name, fired in zip(VALUE_RULES, (extremes(values, method, shared) & missed, quiet_days(values, method, shared),
                                         seasonal(values, method, shared)), strict=True):
        fired = onsets(fired, method.rest)[len(values) - n:]
        rule = np.where((rule == 0) & fired, RULES.index(name), rule)
    alert = onsets(rule > 0, method.rest)
    return alert, score, judged, np.where(alert, rule, 0).astype(np.uint8)


def triggers(score: np.ndarray, judged: np.ndarray, critical: np.ndarray, method: Spans, *,
             first: np.ndarray | None = None) -> np.ndarray:
    """The likelihood's triggers: a score at or above the threshold where judged, else a critical point; the
    ensemble drops those within `tolerance` points of a trigger a `day` before. `first` as in onsets()."""
    with np.errstate(invalid="ignore"):
        trigger = np.where(judged, score >= method.threshold, critical)
    if method.name != ENSEMBLE:
        return trigger
    seen = np.concatenate([[0], np.cumsum(trigger)])
    index = np.arange(len(trigger))
    floor = 0 if first is None else first
    low = np.clip(index - method.day - method.tolerance, floor, len(trigger))
    high = np.clip(index - method.day + method.tolerance + 1, low, index)  # never the point itself or later
    return trigger & ~(seen[high] > seen[low])


def extremes(values: np.ndarray, method: Spans, shared: Shared | None = None) -> np.ndarray:
    """Values beyond the range of the `span` values ending `gap` points before them by `extreme` of the `week`'s
    range (relative to the week, so a small bump after two flat days is not new; from where a rise of the last
    few minutes began, so it is as new at every step), unless within this time of day's range,
    widened by as much, on `_HABIT` days of the week before: a nightly spike a little higher than the last
    two is not news. `shared`: Shared(values, method), if at hand."""
    shared = shared or Shared(values, method)
    high, low, count = shared.before(method.span, method.gap)
    width, _ = shared.week
    margin = method.extreme * width
    with np.errstate(invalid="ignore"):
        new = (np.maximum(values - high, low - values) > margin) & (high > low) & (count >= max(2, method.span // 4))
        at = np.flatnonzero(new)  # few: the habit is counted there only
        top, bottom = shared.days(at)
        seen = (values[at] <= top + margin[at]) & (values[at] >= bottom - margin[at])
    new[at[seen.sum(axis=0) >= _HABIT]] = False
    return new


def seasonal(values: np.ndarray, method: Spans, shared: Shared | None = None) -> np.ndarray:
    """Values beyond the range of this time of day on every day of the week before them, by `seasonal` of the
    week's range, where the week correlates at least `repeat` with the day before it: in a series with a daily
    rhythm, a job at an hour it never ran. A bursty series (jobs at any hour) correlates too little to judge."""
    if not method.hours:
        return np.zeros(len(values), dtype=bool)
    shared = shared or Shared(values, method)
    top, bottom = shared.season
    width, _ = shared.week
    with np.errstate(invalid="ignore"):
        beyond = np.maximum(values - top, bottom - values) > method.seasonal * width
        return beyond & (_daily_correlation(values, method) >= method.repeat) if beyond.any() else beyond


def quiet_days(values: np.ndarray, method: Spans, shared: Shared | None = None) -> np.ndarray:
    """Points whose last `day` values span less than any `day` values ending in the `week` before (and at
    least a day before), by `quiet` of the week's range, or not at all where each of those changed: a daily
    rhythm that stopped."""
    shared = shared or Shared(values, method)
    day, others = method.day, method.week - method.day
    index = np.arange(len(values))
    high, low = shared.ending(day)
    days = np.where(index + 1 >= day, high - low, np.nan)  # the range of the day ending at each point
    full = np.isfinite(days)
    least = _shifted(_trailing(np.where(full, days, np.inf), others, np.minimum))  # over the days ending before
    shift = min(day - 1, len(days))  # ... those ending at t - week + 1 .. t - day, for point t
    least = np.concatenate([np.full(shift, np.nan), least[:len(days) - shift]])
    seen = np.concatenate([[0], np.cumsum(full)])
    counted = seen[np.maximum(index - day + 1, 0)] - seen[np.maximum(index - method.week + 1, 0)]
    width, count = shared.week
    with np.errstate(invalid="ignore"):
        # A day of one unchanging value after a week that changed every day is a stopped metric, however large
        # a burst of that week made the margin.
        below = (days < least - method.quiet * width) | ((days == 0) & (least > 0))
    return below & (counted >= max(1, others // 4)) & (count >= method.week // 4)


class Shared:
    """What the value rules read of one series, each computed once for all of them: the max and the min of the
    runs of values ending at each point, per run length asked for (`_trailing`)."""

    def __init__(self, values: np.ndarray, method: Spans) -> None:
        self._values, self._method, self._n = np.asarray(values, dtype=float), method, len(values)
        self._runs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # A time of day: the run of `_span` values about it; on day d before a point, the run ending `_lags[d - 1]`
        # points before it.
        self._span = 2 * method.around + 1
        self._lags = np.arange(1, method.week // method.day + 1) * method.day - method.around

    def ending(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Per point, the max and the min of the up to `count` values ending at it."""
        if count not in self._runs:
            self._runs[count] = (_trailing(self._values, count, np.maximum), _trailing(self._values, count, np.minimum))
        return self._runs[count]

    def before(self, count: int, gap: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per point, the max and the min of up to `count` values ending `gap` points before it (NaN where none),
        and how many."""
        high, low = (_shifted(run, gap) for run in self.ending(count))
        return high, low, np.clip(np.arange(self._n) - gap + 1, 0, count)

    @functools.cached_property
    def week(self) -> tuple[np.ndarray, np.ndarray]:
        """Per point, the range of the `week` values before it, and how many there were: every rule's scale."""
        high, low, count = self.before(self._method.week)
        return high - low, count

    def days(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per day d = 1 .. week // day before the points `at` (rows) and per point of them (columns): the max and
        the min of the values within `around` points of the same time d days before; NaN where not all are in
        the series."""
        high, low = self.ending(self._span)
        end = at[None, :] - self._lags[:, None]
        whole = end + 1 >= self._span
        end = np.clip(end, 0, None)
        return np.where(whole, high[end], np.nan), np.where(whole, low[end], np.nan)

    @functools.cached_property
    def season(self) -> tuple[np.ndarray, np.ndarray]:
        """Per point, the max and the min of its time of day (`days`) over every day of the week before; NaN
        unless every day's are all in the series. Day by day, on shifted copies: no week-by-points table."""
        high, low = (functools.reduce(reduce, (self._lagged(run, lag) for lag in self._lags.tolist()))
                     for run, reduce in zip(self.ending(self._span), (np.maximum, np.minimum), strict=True))
        return high, low

    def _lagged(self, run: np.ndarray, lag: int) -> np.ndarray:
        """The runs of `_span` values ending `lag` points before each point; NaN where not all are in the series."""
        shifted, first = np.full(self._n, np.nan), lag + self._span - 1
        if first < self._n:
            shifted[first:] = run[self._span - 1:self._n - lag]
        return shifted


def _daily_correlation(values: np.ndarray, method: Spans) -> np.ndarray:
    """Per point, the correlation of the values in the `week` before it with those a `day` before each; NaN
    until the week is all there."""
    day, count = method.day, method.week - method.day
    centred = values - (values.mean() if len(values) else 0.0)  # the sums' rounding, for values far from zero
    # Pair k: the value at k + day and the one a day before it; a point t judges pairs t - week .. t - day - 1.
    later, earlier = (np.append(a, 0.0) for a in (centred[day:], centred[:max(len(values) - day, 0)]))
    mean_later, std_later, taken = _stats_before(later, count)
    mean_earlier, std_earlier, _ = _stats_before(earlier, count)
    with np.errstate(divide="ignore", invalid="ignore"):
        correlation = (_stats_before(later * earlier, count)[0] - mean_later * mean_earlier) / (
            std_later * std_earlier)
    correlation = np.where(taken == count, correlation, np.nan)
    return np.concatenate([np.full(min(day, len(values)), np.nan), correlation[:max(len(values) - day, 0)]])


def _trailing(values: np.ndarray, count: int, reduce: Any) -> np.ndarray:
    """Per point, `reduce` (np.maximum or np.minimum) over the up to `count` values ending at it, in a few passes
    whatever `count` (van Herk, Gil and Werman): in blocks of `count`, each run is the reduction of the end of one
    block and the start of the next. NaN where the run holds one, as `reduce` gives."""
    n = len(values)
    width = max(1, min(count, n))
    blocks = -(-n // width)
    padded = np.empty(blocks * width)
    padded[:n] = values
    padded[n:] = values[-1] if n else 0.0  # read by no run: the last block's tail
    grid = padded.reshape(blocks, width)
    ends = reduce.accumulate(grid, axis=1).reshape(-1)[:n]  # from each block's start to the point
    starts = reduce.accumulate(grid[:, ::-1], axis=1)[:, ::-1].reshape(-1)  # from the point to its block's end
    first = np.arange(n) - (count - 1)  # each run's first point; before 0, the run is the block's start on
    runs = ends.copy()
    whole = first >= 0
    runs[whole] = reduce(starts[first[whole]], ends[whole])
    return runs


def _shifted(runs: np.ndarray, by: int = 1) -> np.ndarray:
    """Runs ending at each point as those ending `by` points before it (1: the values before each point); NaN
    where there are none."""
    by = min(by, len(runs))
    return np.concatenate([np.full(by, np.nan), runs[:len(runs) - by]])


def likelihood_z(residuals: np.ndarray, store_std: float, method: Spans) -> tuple[np.ndarray, np.ndarray]:
    """The short-term mean of the residual scores in stds of their long-window distribution, and where that
    distribution had at least `window // 4` scores."""
    unit = store_std if store_std > 0 else 1.0
    # The mean, not the median: as good on NAB's series (docs/evaluation.md) at a hundredth of the cost.
    centre, _, taken = _stats_before(residuals, method.centre)
    a = np.abs(residuals - np.where(taken > 0, centre, 0.0)) / unit
    mean, std, count = _stats_before(a, method.window)
    recent = _mean_ending(a, method.average)
    spread = np.maximum(std, method.floor if store_std > 0 else 0.0) * method.widen
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(spread > 0, (recent - mean) / spread, np.where(recent > mean, np.inf, 0.0))
    return z, count >= max(2, method.window // 4)


def _score(z: np.ndarray, per_reference: float = 1.0) -> np.ndarray:
    """-log10 of the normal tail beyond z, over 10, in [0, 1]: 0.5 at a tail of 1e-5, 1 at 1e-10 and beyond.
    The tail is taken per 5 minutes (`per_reference` points), so a score is as rare at every step."""
    tail = 0.5 * np.fromiter(map(math.erfc, (np.minimum(z, 40.0) / _ROOT2).tolist()), float, count=len(z))
    return np.clip(-np.log10(tail * per_reference + 1e-10) / 10.0, 0.0, 1.0)


def onsets(trigger: np.ndarray, rest: int, first: np.ndarray | None = None) -> np.ndarray:
    """Triggers with no trigger in the `rest` points before them: the first point of each burst.

    `first`: per point, the index of its series' first point, where several series lie end to end.
    """
    trigger = np.asarray(trigger, dtype=bool)
    seen = np.concatenate([[0], np.cumsum(trigger)])  # triggers before each index
    index = np.arange(len(trigger))
    return trigger & (seen[index] == seen[np.maximum(index - rest, 0 if first is None else first)])


def _stats_before(values: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per point, the mean and (population) std of up to `count` values before it, and how many there were."""
    index = np.arange(len(values))
    start = np.maximum(index - count, 0)
    sums = np.concatenate([[0.0], np.cumsum(values)])
    squares = np.concatenate([[0.0], np.cumsum(values * values)])
    taken = index - start
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = (sums[index] - sums[start]) / taken
        variance = (squares[index] - squares[start]) / taken - mean * mean
    return mean, np.sqrt(np.maximum(variance, 0.0)), taken


def _mean_ending(values: np.ndarray, count: int) -> np.ndarray:
    """Per point, the mean of up to `count` values ending at it: those before the point after it."""
    return _stats_before(np.append(values, 0.0), count)[0][1:]
