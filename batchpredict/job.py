"""Jobs, results and statuses: the small values every other module passes around."""
from __future__ import annotations

import dataclasses
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


@dataclass(frozen=True)
class Params:
    """The per-IP algorithm's knobs (docs/design.md §3) and which points of each series it scores."""

    rolling: int = 5
    window: int = 20
    sigmas: tuple[float, float] = (2.0, 4.0)
    points: int = 1            # the last N points of each series (--points)
    since: str | None = None   # or every point after this label (--since); the two exclude each other
    std: str = "store"         # the std of the bands: std.json's, or rolling:N / mad:N of the residuals
    alert: str = "likelihood"  # the alerting stage's method (alerting.parse), or none; only with several points

    @property
    def alerting(self) -> bool:
        """Alerts are given where a series has several scored points (--points N > 1, --since)."""
        return self.alert != "none" and (self.points > 1 or self.since is not None)


ENGINES = ("auto", "numpy", "keras")  # RunOptions.engine: who computes the forward pass


@dataclass(frozen=True)
class RunOptions:
    """How a run is executed (the algorithm's knobs are Params)."""

    workers: int = 2
    jobs_per_worker: int = 1
    timeout: float = 300.0
    max_worker_memory_mib: float | None = None
    retries: int = 1
    backend: str = "local"
    resume: bool = False
    layout: str | None = None
    ray_address: str | None = None  # ray backend: None starts a local Ray; "auto" or "ray://host:10001" join one
    shard_size: int | None = None   # ray backend: IPs per Ray task; None sizes them from the cluster
    engine: str = "auto"            # one of ENGINES
    trust_store: bool = False       # let store files run code: any pickle, Keras Lambda layers (--trust-store)
    allow_unsealed: bool = False    # a store with a manifest.json may have IPs it does not list


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
    def from_dict(cls, d: dict) -> "Point":
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
    def from_dict(cls, d: dict) -> "Result":
        return cls(**{**d, "status": Status(d["status"]), "points": [Point.from_dict(p) for p in d.get("points", ())]})


@dataclass
class Job:
    """One IP to score: its series, its artefacts (relative to the store), its std, and which points."""

    ip: str
    labels: list[str]
    values: list[float]
    store: str
    model: str
    scaler: str
    std: float
    params: Params = Params()
    engine: str = "auto"  # RunOptions.engine
    pool: str = "lean"    # the forkserver it runs in: "lean" (numpy, no TensorFlow) or "full"
    notes: tuple[str, ...] = ()  # why it left the lean pool, for the debug log
    first: int = -1  # the index of the first point to score; negative counts from the end
    trust: bool = False  # RunOptions.trust_store: the store's files may run code
    sealed: dict | None = None  # the IP's manifest.json entry, checked before its files are read

    def start(self) -> int:
        """The index of the first point to score."""
        return max(0, len(self.values) + self.first) if self.first < 0 else self.first

    def rerouted(self, reason: str) -> "Job":
        """The job for the TensorFlow pool, after a lean worker found it could not run it."""
        return dataclasses.replace(self, pool="full", notes=(*self.notes, reason))

    def failed(self, status: Status, error: str) -> Result:
        return Result(ip=self.ip, status=status, error=error, model=self.model,
                      timestamp=self.labels[-1] if self.labels else "")
