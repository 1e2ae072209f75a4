"""`--alert METHOD[:key=value,...]` as a Method: the alerting stage's spans in time, and those spans counted in
points at one series' step (`Method.at`), which alerting.py computes with.

Every span is a duration, so a rule reads the same stretch of time at every step: two days are 576 points of a
5-minute series, 2,880 of a 1-minute one and 48 of an hourly one. A series' step is the median spacing of its
labels (`step_of`), or `--step`; labels that are not times take the reference step, 5 minutes, at which the
defaults were chosen and which a span given as a bare number counts.
"""
from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..rules import REFERENCE, UNITS, duration, parse_duration

NONE = "none"
ENSEMBLE = "ensemble"
MINUTE, HOUR, DAY = UNITS["m"], UNITS["h"], UNITS["d"]


@dataclass(frozen=True)
class Method:
    """`--alert METHOD[:key=value,...]`: `ensemble` (the default), `likelihood` or `severity` (onsets of critical
    runs). Spans are in seconds."""

    name: str
    window: float = 2 * DAY       # the residual scores the distribution is estimated from
    average: float = 15 * MINUTE  # the short-term mean's span
    centre: float = DAY           # the residuals whose mean re-centres each one (absorbs a level shift in a day)
    rest: float = 8 * HOUR        # a trigger this soon after another does not page again
    threshold: float = 0.35  # on the score: a tail probability of 10^-3.5 (Numenta's NAB threshold is 0.5, 1e-5)
    floor: float = 0.5       # the least std of the residual scores, in store stds: a flat stretch cannot shrink it
    extreme: float = 0.05    # ensemble: how far beyond the range of the `span` values before, in the week's range
    miss: float = 1.0        # ensemble: how far off its prediction a new extreme is, at least, in store stds (0: off)
    span: float = 2 * DAY    # ensemble: the values a new extreme is judged against
    tolerance: float = HOUR  # ensemble: a likelihood trigger this near one a `day` before is a daily event
    quiet: float = 0.2       # ensemble: how far below the week's least daily range, in the week's range
    seasonal: float = 0.2    # ensemble: how far beyond this time of day's range over the week, in the week's range
    repeat: float = 0.2      # ensemble: the least correlation with the day before for the seasonal rule to judge
    day: float = DAY         # ensemble: the values whose range is a day's
    week: float = 7 * DAY    # ensemble: the values the least daily range is taken over
    smooth: float = 25 * MINUTE  # ensemble: the value rules read the mean of the values over this long
    gap: float = 5 * MINUTE      # ensemble: a new extreme is judged against the `span` ending this long before it

    def at(self, step: float) -> Spans:
        """The method at a series' step (seconds): every span a whole number of points, at least one, and
        those estimated from at least a quarter of their points at 5-minute steps."""
        return _at(self, step)

    def spec(self) -> str:
        """The method as --alert takes it, every parameter written out."""
        return f"{self.name}:" + ",".join(
            f"{key}={duration(getattr(self, key)) if key in SPANS else format(getattr(self, key), 'g')}"
            for key in _KEYS[self.name])


@dataclass(frozen=True, kw_only=True)
class Spans:
    """A Method at one step: its spans counted in points of the series (the rules compute with these)."""

    name: str
    step: float  # seconds between points
    window: int
    average: int
    centre: int
    rest: int
    threshold: float
    floor: float
    extreme: float
    miss: float
    span: int
    tolerance: int
    quiet: float
    seasonal: float
    repeat: float
    day: int
    week: int
    smooth: int
    gap: int
    around: int  # the value rules' time of day: the values within this many points of it (the `tolerance`'s span)
    reference_average: int  # the `average`'s points at the reference step (5 minutes)

    @property
    def hours(self) -> bool:
        """Whether a day holds more points than a time of day's range: at steps above 4 hours a few values a
        week are no range to be new to, and the seasonal rule does not judge."""
        return self.day > 2 * max(self.around, _AROUND) + 1

    @property
    def widen(self) -> float:
        """The likelihood's spread over the residual scores' std: where the step leaves the short-term mean fewer
        points than at 5 minutes, the square root of how many times fewer, as a mean of fewer scores varies more. Finer
        steps keep 1: their points are not independent (a mean of 15 minutes is no steadier for holding 15)."""
        return math.sqrt(max(1.0, self.reference_average / self.average))

    @property
    def per_reference(self) -> float:
        """Points in a reference step (5 minutes): the score is a tail probability per that much time."""
        return REFERENCE / self.step

    def history(self) -> int:
        """Residuals before a point that its alert depends on."""
        if self.name == "severity":
            return self.rest
        likelihood = self.centre + max(self.window, self.average - 1) + self.rest
        # The ensemble's: a trigger a day (and a tolerance) back, and the onsets of all rules merged.
        return likelihood + self.day + self.tolerance + self.rest if self.name == ENSEMBLE else likelihood

    def value_history(self) -> int:
        """Observed values before a point that its alert depends on: more than residuals for the value rules,
        which need no model call."""
        if self.name != ENSEMBLE:
            return self.history()
        return max(self.history(), max(self.span + self.gap - 1, self.week + self.day) + 2 * self.rest)


SPANS = ("window", "average", "centre", "rest", "span", "tolerance", "day", "week", "smooth", "gap")
# The spans a rule estimates from (the likelihood's distribution and mean, the extreme's range) hold at least a
# quarter of their points at the reference step, so at steps above 20 minutes they read more time than they
# say: a range or a mean of a few dozen points pages on noise (docs/evaluation.md, "At any step"). The others
# place an event in time (the rest, the day, the week, the tolerance about a time of day) and stay in time, as do
# the value rules' mean and the extreme's gap: at 5-minute steps the seed's rolling mean and the point before.
_SAMPLES = ("window", "centre", "span")
_LEAST = 0.25
_AROUND = 2  # more points about a time of day delay a dropped day's alert at hourly steps by more than a bucket
_LIKELIHOOD = ("window", "average", "centre", "rest", "threshold", "floor")
_KEYS = {ENSEMBLE: _LIKELIHOOD + ("tolerance", "extreme", "miss", "span", "quiet", "seasonal", "repeat", "day",
                                  "week", "smooth", "gap"),
         "likelihood": _LIKELIHOOD,
         "severity": ("rest",)}
# The ensemble's likelihood pages at a tail of 10^-6.5: its other rules catch what a lower threshold did.
_DEFAULTS: dict[str, dict[str, Any]] = {ENSEMBLE: {"threshold": 0.65}}
_UNIT = ("threshold", "repeat")  # a score and a correlation: at most 1
_LONGEST = 366 * DAY  # a span's most
_OFF = ("miss",)  # 0 turns it off: every new extreme pages, as before the model was asked


@functools.lru_cache(maxsize=64)
def _at(method: Method, step: float) -> Spans:
    def count(key: str, at: float = step) -> int:
        seconds = getattr(method, key)
        least = math.floor(seconds / REFERENCE * _LEAST + 0.5) if key in _SAMPLES else 1
        return max(1, least, math.floor(seconds / at + 0.5))

    values: dict[str, Any] = {f.name: getattr(method, f.name) for f in fields(Method) if f.name not in SPANS}
    values.update({key: count(key) for key in SPANS}, step=step)
    # At steps near a day the daily rules still need a tolerance below the day and a week above it.
    values["week"] = max(values["week"], values["day"] + 1)
    values["tolerance"] = min(values["tolerance"], values["day"] - 1)
    # The range of a time of day is estimated from _AROUND points either side at least (at hourly steps the
    # tolerance's 3 values a day are a narrow range of a noisy hour), and within half a day.
    values["around"] = min(max(values["tolerance"], _AROUND), (values["day"] - 1) // 2)
    values["reference_average"] = count("average", REFERENCE)
    return Spans(**values)


def parse(text: str) -> Method | None:
    """`--alert` as a Method, or None for `none`; ValueError saying what is accepted."""
    name, _, options = text.partition(":")
    if name == NONE and not options:
        return None
    if name not in _KEYS:
        raise ValueError(f"--alert takes {', '.join(_KEYS)} or none, optionally with key=value,..., not {text!r}")
    values: dict[str, Any] = dict(_DEFAULTS.get(name, {}))
    for option in filter(None, options.split(",")):
        key, _, value = option.partition("=")
        if key not in _KEYS[name]:
            raise ValueError(f"--alert {name} takes {', '.join(_KEYS[name])}, not {key!r}")
        values[key] = _value(name, key, value)
    method = Method(name=name, **values)
    if name == ENSEMBLE and not method.tolerance < method.day < method.week:
        raise ValueError(f"--alert {name}: tolerance < day < week is needed, not {duration(method.tolerance)}, "
                         f"{duration(method.day)} and {duration(method.week)}")
    return method


def _value(name: str, key: str, value: str) -> float:
    if key in SPANS:  # a duration, or a count of 5-minute buckets as before spans were in time
        try:
            seconds = parse_duration(value, bare=REFERENCE)
        except ValueError as exc:
            raise ValueError(f"--alert {name}: {key} takes a duration (2d, 8h, 15m) or a count of 5-minute "
                             f"buckets: {exc}") from None
        if seconds > _LONGEST:  # each worker holds a span's points: a typo of a few digits was terabytes
            raise ValueError(f"--alert {name}: {key} is at most {duration(_LONGEST)}, not {value!r}")
        return seconds
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    unit, zero = key in _UNIT, key in _OFF
    if not ((number >= 0 if zero else number > 0) and math.isfinite(number)) or (unit and number > 1):
        raise ValueError(f"--alert {name}: {key} must be a number {'>=' if zero else '>'} 0"
                         f"{' and <= 1' if unit else ''}, not {value!r}")
    return number


def step_of(labels: list[str], times: np.ndarray | None = None) -> float | None:
    """The median spacing in seconds of labels that are all dates or times (ISO 8601, as a table writes
    them), in time order; None for labels that are not (numbers, names), or fewer than two, or no spacing.
    `times`: the labels' times in ms as the table read them (a long table's, Series.times), which take what
    ISO 8601 does not (`2026-10-01 00:05:00 UTC`, `10/01/2026 00:05`, mixed formats): those labels were taken
    for no times, and an hourly series' spans counted in 5-minute steps."""
    if times is None:
        if len(labels) < 2 or not isinstance(labels[0], str) or _is_number(labels[0]):
            return None
        try:
            with warnings.catch_warnings():  # numpy warns of an offset (+00:00) that it applies
                warnings.simplefilter("ignore")
                times = np.array(labels, dtype="datetime64[ms]").astype(np.int64)
        except (ValueError, TypeError, OverflowError):
            return None
    step = median_gap(times) / 1000.0
    return step if step > 0 else None


def median_gap(times: np.ndarray) -> float:
    """The median spacing of times in order, in their unit; 0 for fewer than two."""
    return float(np.median(np.diff(times))) if len(times) > 1 else 0.0


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
