"""What a job comes back as: its status, its scored points, and the executor's account of it."""
from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .rules import RULES, VALUE_RULES
from .status import Severity, Status

SEVERITIES = list(Severity)  # a severity code (Points.severity) is its index here


@dataclass
class Outcome:
    """What the executor knows about any job it ran, prediction or training."""

    ip: str
    status: Status = Status.OK
    error: str = ""
    attempts: int = 0
    duration_ms: float | None = None
    worker_pid: int | None = None
    worker_peak_rss_mib: float | None = None
    reroute: str = ""  # not an answer: why this worker's pool cannot run the task (see Job.rerouted)
    outage: str = ""   # a disk error writing a file the run keeps (the IP's history): the run stops, exit 74


@dataclass(kw_only=True, slots=True)
class Point:
    """One scored bucket of an IP: the values of one output row (docs/design.md §3, §4)."""

    timestamp: str
    observed: float
    predicted: float
    std: float
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    anomaly: bool
    severity: Severity
    std_source: str = "store"  # which std: std.json's, or the --std mode's (rolling:N, mad:N)
    alert: bool | None = None  # the alerting stage's verdict (Params.alerting): page a person here
    score: float | None = None  # its anomaly score in [0, 1]; None where it fell back to the seed's verdict
    alert_source: str = ""     # the rule that raised its alert, else the method that judged the point, or `severity`
                               # where history was too short

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_dict(cls, d: dict) -> Point:
        return cls(**{**d, "severity": Severity(d["severity"]), "lower": tuple(d["lower"]),
                      "upper": tuple(d["upper"])})


class Points:
    """An IP's scored points as columns, one entry each, in time order: a night's points travel from the worker
    to the CSV as a few arrays, never as an object per point. Iterating gives Point objects, for tests and
    callers that want them.

    `lower`, `upper`: one row per sigma. `severity`: codes into SEVERITIES. `rolled`: the point's std came from
    `std_mode` (`rolling:N`, `mad:N`), not the store. `alert`, `score`, `judged`: the alerting stage's verdict,
    score and whether `method` judged the point (else it fell back to the seed's verdict); None without it.
    `rule`: per alert, the rule that raised it (codes into alerting.RULES); None where the method has one.
    """

    __slots__ = ("timestamp", "observed", "predicted", "std", "lower", "upper", "anomaly", "severity", "rolled",
                 "std_mode", "alert", "score", "judged", "method", "rule")

    def __init__(self, timestamp: ArrayLike, observed: ArrayLike, predicted: ArrayLike, std: ArrayLike, *,
                 lower: ArrayLike, upper: ArrayLike, anomaly: ArrayLike, severity: ArrayLike,
                 rolled: ArrayLike | None = None, std_mode: str = "store", alert: ArrayLike | None = None,
                 score: ArrayLike | None = None, judged: ArrayLike | None = None, method: str = "",
                 rule: ArrayLike | None = None) -> None:
        self.observed, self.predicted, self.std = (np.asarray(a, dtype=float) for a in (observed, predicted, std))
        n = len(self.observed)
        self.timestamp = np.asarray(timestamp, dtype=str)
        self.lower, self.upper = (np.asarray(a, dtype=float).reshape(-1, n) if n else np.empty((0, 0))
                                  for a in (lower, upper))
        self.anomaly = np.asarray(anomaly, dtype=bool)
        self.severity = np.asarray(severity, dtype=np.uint8)
        self.rolled = np.zeros(n, dtype=bool) if rolled is None else np.asarray(rolled, dtype=bool)
        self.std_mode = std_mode
        self.alert = None if alert is None else np.asarray(alert, dtype=bool)
        self.score = None if score is None else np.asarray(score, dtype=float)
        self.judged = None if judged is None else np.asarray(judged, dtype=bool)
        self.method = method
        self.rule = None if rule is None else np.asarray(rule, dtype=np.uint8)

    @staticmethod
    def empty() -> Points:
        """No points: one shared instance, which nothing can change. Every IP without a model gets it, a million
        a night at scale, and building eight arrays for each was a tenth of the coordinator's planning."""
        return _NO_POINTS

    @classmethod
    def of(cls, points: Sequence[Point]) -> Points:
        """Points from Point objects (their std_source taken as the mode where it is not `store`)."""
        if not points:
            return cls.empty()
        modes = {p.std_source for p in points} - {"store"}
        alerting = any(p.alert is not None for p in points)
        return cls([p.timestamp for p in points], [p.observed for p in points], [p.predicted for p in points],
                   [p.std for p in points], lower=np.array([p.lower for p in points]).T,
                   upper=np.array([p.upper for p in points]).T, anomaly=[p.anomaly for p in points],
                   severity=[SEVERITIES.index(p.severity) for p in points],
                   rolled=[p.std_source != "store" for p in points], std_mode=modes.pop() if modes else "store",
                   alert=[bool(p.alert) for p in points] if alerting else None,
                   score=[np.nan if p.score is None else p.score for p in points] if alerting else None,
                   judged=[p.score is not None for p in points] if alerting else None,
                   method=next((p.alert_source for p in points
                                if p.alert_source not in ("", "severity", *VALUE_RULES)), ""),
                   rule=[RULES.index(p.alert_source) if p.alert and p.alert_source in RULES else 0 for p in points]
                   if any(p.alert and p.alert_source in VALUE_RULES for p in points) else None)

    def __len__(self) -> int:
        return len(self.observed)

    def std_sources(self) -> np.ndarray:
        return np.where(self.rolled, self.std_mode, "store")

    def alert_sources(self) -> np.ndarray | None:
        """Per point, what raised its alert, or else what judged it (`severity`: too little history)."""
        if self.judged is None:
            return None
        sources = np.where(self.judged, self.method, "severity")
        if self.rule is None or self.alert is None:
            return sources
        return np.where(self.alert & (self.rule > 0), np.asarray(RULES, dtype=object)[self.rule], sources)

    def __iter__(self) -> Iterator[Point]:
        sources, alert_sources = self.std_sources().tolist(), self.alert_sources()
        for i in range(len(self)):
            alert: dict[str, Any] = {}
            if self.alert is not None and self.score is not None and alert_sources is not None:
                judged = bool(self.judged[i]) if self.judged is not None else False
                alert = {"alert": bool(self.alert[i]), "score": float(self.score[i]) if judged else None,
                         "alert_source": alert_sources[i]}
            yield Point(timestamp=str(self.timestamp[i]), observed=float(self.observed[i]),
                        predicted=float(self.predicted[i]), std=float(self.std[i]),
                        lower=tuple(self.lower[:, i].tolist()), upper=tuple(self.upper[:, i].tolist()),
                        anomaly=bool(self.anomaly[i]), severity=SEVERITIES[self.severity[i]], std_source=sources[i],
                        **alert)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return list(self) == other
        if not isinstance(other, Points):
            return NotImplemented
        return all(_same(getattr(self, name), getattr(other, name)) for name in Points.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict:
        """The columns as JSON-able values: the numbers as base64 of their bytes (exact, and ~20 times faster
        to write than JSON's decimals for a night's 288 points), the labels as a list."""
        return {name: _encoded(getattr(self, name)) for name in Points.__slots__}

    @classmethod
    def from_dict(cls, d: dict | list) -> Points:
        """to_dict's columns (as lists, in journals written before the bytes), or a list of Point dicts (journals
        written before the columns)."""
        if isinstance(d, list):
            return cls.of([Point.from_dict(p) for p in d])
        points = cls(**{name: _decoded(value) for name, value in d.items()})
        points._check()
        return points

    def _check(self) -> None:
        """ValueError unless every column holds one entry per point and each code names a severity and a rule. A
        journal line comes back through here: one this version did not write (its CRC made to match) with a
        severity code of 9 was an IndexError traceback once the CSV was written, not its IP run again."""
        n = len(self.observed)
        columns = [self.timestamp, self.predicted, self.std, self.anomaly, self.severity, self.rolled,
                   *(column for column in (self.alert, self.score, self.judged, self.rule) if column is not None)]
        bands = (2, n) if n else (0, 0)  # a row per sigma: --sigmas are two
        if any(column.shape != (n,) for column in columns) or self.lower.shape != bands or self.upper.shape != bands:
            raise ValueError("points whose columns are of different lengths")
        if self.severity.max(initial=0) >= len(SEVERITIES) or (self.rule is not None
                                                               and self.rule.max(initial=0) >= len(RULES)):
            raise ValueError("a severity or rule code that names none")


class _NoPoints(Points):
    """Points.empty()'s one instance: its arrays are read-only and its attributes cannot be set again."""

    __slots__ = ()

    def __init__(self) -> None:
        built = Points(np.empty(0, dtype=str), *(np.empty(0),) * 3, lower=np.empty((0, 0)), upper=np.empty((0, 0)),
                       anomaly=np.empty(0, dtype=bool), severity=np.empty(0, dtype=np.uint8))
        for name in Points.__slots__:
            value = getattr(built, name)
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Points.empty() is shared: build a Points instead of setting its {name}")

    def __reduce__(self) -> tuple:  # unpickled as the one instance, not rebuilt attribute by attribute
        return Points.empty, ()


_NO_POINTS = _NoPoints()

_NUMBERS = {"<f8", "|b1", "|u1"}  # the dtypes of a Points column; anything else in a journal is not one of ours


def _encoded(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype.str in _NUMBERS:
        return {"dtype": value.dtype.str, "shape": list(value.shape), "b64": base64.b64encode(value.tobytes()).decode()}
    return value.tolist() if isinstance(value, np.ndarray) else value


def _decoded(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get("dtype") not in _NUMBERS:
            raise ValueError(f"a column of dtype {value.get('dtype')!r}")
        return np.frombuffer(base64.b64decode(value["b64"]), dtype=value["dtype"]).reshape(value["shape"]).copy()
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return False
    return bool(a == b)


@dataclass
class Result(Outcome):
    """One IP's answer: its scored points (one output row each), or one row saying why there are none."""

    timestamp: str = ""  # the label of the IP's last point, for the row of an IP without points
    points: Points = field(default_factory=Points.empty)
    model: str = ""
    engine: str = ""  # "numpy" or "keras": who computed the forward pass
    log: list[str] = field(default_factory=list)    # the coordinator logs these at INFO
    debug: list[str] = field(default_factory=list)  # and these at DEBUG (-v)

    def __post_init__(self) -> None:
        if not isinstance(self.points, Points):  # Point objects, as callers built them before the columns
            self.points = Points.of(self.points)

    @property
    def anomalies(self) -> int:
        return int(self.points.anomaly.sum())

    @property
    def alerts(self) -> int:
        return 0 if self.points.alert is None else int(self.points.alert.sum())

    def to_dict(self) -> dict:
        """The fields as they are (no deep copy: dataclasses.asdict cost ~0.5 ms a journal line)."""
        return {**vars(self), "points": self.points.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> Result:
        return cls(**{**d, "status": Status(d["status"]), "points": Points.from_dict(d.get("points", []))})
