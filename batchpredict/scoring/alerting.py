"""The alerting stage (docs/design.md §3): after the seed's verdict, when to page a person, and a score to rank by.

Per IP, over its scored points in time order, with history from the points before the first one:

    residual r ─► minus the mean of the `centre` r before it ─► a = |.| / store std
      ─► z = (mean of the last `average` a − mean of the `window` a before) / max(their std, `floor`)
      ─► score = −log10(Q(z)) / 10, clipped to [0, 1]       (Q: the normal tail; Numenta's log-likelihood)
      ─► trigger: score ≥ threshold  ─► alert: a trigger with no trigger in the `rest` points before it

This is Numenta's anomaly likelihood (Ahmad et al. 2017) on the model's residuals: the tail probability of
the short-term mean of the residual score against its long-window distribution. Every step looks back a fixed
number of points, so a point's alert depends only on the `history()` points up to it: the same point gets the
same alert whatever --points or --since range it falls in. A point with fewer than `window // 4` residual
scores before it has no distribution to be judged against: it falls back to the seed's verdict (a trigger is a
critical point), its score is empty and its source says `severity`. Windows are counted in points (buckets).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

NONE = "none"


@dataclass(frozen=True)
class Method:
    """`--alert METHOD[:key=value,...]`: `likelihood` (the default) or `severity` (onsets of critical runs)."""

    name: str
    window: int = 576        # residual scores the distribution is estimated from (2 days of 5-minute buckets)
    average: int = 3         # the short-term mean's length
    centre: int = 288        # residuals whose mean re-centres each one (absorbs a level shift in a day)
    rest: int = 96           # a trigger this soon after another does not page again (8 hours)
    threshold: float = 0.35  # on the score: a tail probability of 10^-3.5 (Numenta's NAB threshold is 0.5, 1e-5)
    floor: float = 0.5       # the least std of the residual scores, in store stds: a flat stretch cannot shrink it

    def history(self) -> int:
        """Points before a point that its alert depends on."""
        if self.name == "severity":
            return self.rest
        return self.centre + max(self.window, self.average - 1) + self.rest

    def spec(self) -> str:
        """The method as --alert takes it, every parameter written out."""
        keys = _KEYS[self.name]
        return f"{self.name}:" + ",".join(f"{key}={getattr(self, key):g}" for key in keys)


_KEYS = {"likelihood": ("window", "average", "centre", "rest", "threshold", "floor"), "severity": ("rest",)}


def parse(text: str) -> Method | None:
    """`--alert` as a Method, or None for `none`; ValueError saying what is accepted."""
    name, _, options = text.partition(":")
    if name == NONE and not options:
        return None
    if name not in _KEYS:
        raise ValueError(f"--alert takes {', '.join(_KEYS)} or none, optionally with key=value,..., not {text!r}")
    values: dict[str, Any] = {}
    types = {f.name: f.type for f in fields(Method)}
    for option in filter(None, options.split(",")):
        key, _, value = option.partition("=")
        if key not in _KEYS[name]:
            raise ValueError(f"--alert {name} takes {', '.join(_KEYS[name])}, not {key!r}")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        whole = types[key] == "int"
        if not (number > 0 and math.isfinite(number)) or (whole and number != int(number)) or (
                key == "threshold" and number > 1):
            raise ValueError(f"--alert {name}: {key} must be a {'whole number >= 1' if whole else 'number > 0'}"
                             f"{' and <= 1' if key == 'threshold' else ''}, not {value!r}")
        values[key] = int(number) if whole else number
    return Method(name=name, **values)


def alerts(residuals: np.ndarray, critical: np.ndarray, store_std: float, method: Method
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(alert, score, judged by the likelihood) per point, from every point's residual in time order.

    `critical`: the seed's verdict per point, the fallback where too little history exists. The score is
    NaN where the point fell back.
    """
    n = len(residuals)
    score = np.full(n, np.nan)
    judged = np.zeros(n, dtype=bool)
    if method.name == "likelihood":
        z, judged = likelihood_z(residuals, store_std, method)
        score[judged] = _score(z[judged])
    with np.errstate(invalid="ignore"):
        trigger = np.where(judged, score >= method.threshold, critical)
    return onsets(trigger, method.rest), score, judged


def likelihood_z(residuals: np.ndarray, store_std: float, method: Method) -> tuple[np.ndarray, np.ndarray]:
    """The short-term mean of the residual scores in stds of their long-window distribution, and where that
    distribution had at least `window // 4` scores."""
    unit = store_std if store_std > 0 else 1.0
    # The mean, not the median: as good on NAB's series (docs/evaluation.md) at a hundredth of the cost.
    centre, _, taken = _stats_before(residuals, method.centre)
    a = np.abs(residuals - np.where(taken > 0, centre, 0.0)) / unit
    mean, std, count = _stats_before(a, method.window)
    recent = _mean_ending(a, method.average)
    spread = np.maximum(std, method.floor if store_std > 0 else 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(spread > 0, (recent - mean) / spread, np.where(recent > mean, np.inf, 0.0))
    return z, count >= max(2, method.window // 4)


def _score(z: np.ndarray) -> np.ndarray:
    """-log10 of the normal tail beyond z, over 10, in [0, 1]: 0.5 at a tail of 1e-5, 1 at 1e-10 and beyond."""
    tail = 0.5 * np.array([math.erfc(v / math.sqrt(2.0)) for v in np.minimum(z, 40.0).tolist()])
    return np.clip(-np.log10(tail + 1e-10) / 10.0, 0.0, 1.0)


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
