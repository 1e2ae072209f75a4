"""What a job comes back as: its status, its scored points, and the executor's account of it."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Status(str, Enum):
    OK = "ok"
    NO_MODEL = "no_model"
    INSUFFICIENT_DATA = "insufficient_data"
    INVALID_INPUT = "invalid_input"
    LOAD_ERROR = "load_error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    MEMORY_EXCEEDED = "memory_exceeded"
    ERROR = "error"

    @property
    def failed(self) -> bool:
        """A failed job makes the run exit 1 (docs/design.md §5); the others are answers."""
        return self in _FAILED


_FAILED = {Status.LOAD_ERROR, Status.TIMEOUT, Status.CRASHED, Status.MEMORY_EXCEEDED, Status.ERROR}


class Severity(str, Enum):
    NORMAL = "normal"
    WARNING = "warning"
    CRITICAL = "critical"


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


@dataclass(slots=True)
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
    alert_source: str = ""     # the method that judged the point, or `severity` where history was too short

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_dict(cls, d: dict) -> Point:
        return cls(**{**d, "severity": Severity(d["severity"]), "lower": tuple(d["lower"]),
                      "upper": tuple(d["upper"])})


@dataclass
class Result(Outcome):
    """One IP's answer: its scored points (one output row each), or one row saying why there are none."""

    timestamp: str = ""  # the label of the IP's last point, for the row of an IP without points
    points: list[Point] = field(default_factory=list)
    model: str = ""
    engine: str = ""  # "numpy" or "keras": who computed the forward pass
    log: list[str] = field(default_factory=list)    # the coordinator logs these at INFO
    debug: list[str] = field(default_factory=list)  # and these at DEBUG (-v)

    @property
    def anomalies(self) -> int:
        return sum(point.anomaly for point in self.points)

    @property
    def alerts(self) -> int:
        return sum(bool(point.alert) for point in self.points)

    def to_dict(self) -> dict:
        """The fields as they are (no deep copy: dataclasses.asdict cost ~0.5 ms a journal line)."""
        return {**vars(self), "points": [point.to_dict() for point in self.points]}

    @classmethod
    def from_dict(cls, d: dict) -> Result:
        return cls(**{**d, "status": Status(d["status"]), "points": [Point.from_dict(p) for p in d.get("points", ())]})
