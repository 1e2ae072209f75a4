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
    """The per-IP algorithm's knobs (docs/design.md §3)."""

    rolling: int = 5
    window: int = 20
    sigmas: tuple[float, float] = (2.0, 4.0)


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


@dataclass
class Result(Outcome):
    """One output row (docs/design.md §4)."""

    timestamp: str = ""
    observed: float | None = None
    predicted: float | None = None
    std: float | None = None
    lower: tuple[float, ...] = ()
    upper: tuple[float, ...] = ()
    anomaly: bool | None = None
    severity: Severity | None = None
    model: str = ""
    engine: str = ""  # "numpy" or "keras": who computed the forward pass
    log: list[str] = field(default_factory=list)    # the coordinator logs these at INFO
    debug: list[str] = field(default_factory=list)  # and these at DEBUG (-v)

    def to_dict(self) -> dict:
        """The fields as they are (no deep copy: dataclasses.asdict cost ~0.5 ms a journal line)."""
        return dict(vars(self))

    @classmethod
    def from_dict(cls, d: dict) -> "Result":
        d = dict(d)
        d["status"] = Status(d["status"])
        d["severity"] = Severity(d["severity"]) if d.get("severity") else None
        d["lower"], d["upper"] = tuple(d.get("lower", ())), tuple(d.get("upper", ()))
        return cls(**d)


@dataclass
class Job:
    """One IP to score: its series, its artefacts (relative to the store) and its std."""

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

    def rerouted(self, reason: str) -> "Job":
        """The job for the TensorFlow pool, after a lean worker found it could not run it."""
        return dataclasses.replace(self, pool="full", notes=(*self.notes, reason))

    def failed(self, status: Status, error: str) -> Result:
        return Result(ip=self.ip, status=status, error=error, model=self.model,
                      timestamp=self.labels[-1] if self.labels else "")
