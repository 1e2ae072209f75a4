"""A job and the knobs of a run: the values the coordinator hands to the executor and the workers."""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .rules import REFERENCE

if TYPE_CHECKING:  # result.py imports numpy, which the command line's --help does without
    from .result import Result, Status


@dataclass(frozen=True)
class Params:
    """The per-IP algorithm's knobs (docs/design.md §3) and which points of each series it scores."""

    rolling: int = 5
    window: int = 20
    sigmas: tuple[float, float] = (2.0, 4.0)
    points: int = 1            # the last N points of each series (--points)
    since: str | None = None   # or every point after this label (--since); the two exclude each other
    std: str = "store"         # the std of the bands: std.json's, or rolling:N / mad:N of the residuals
    alert: str = "ensemble"    # the alerting stage's method (method.parse), or none; only with several points
    step: str | None = None    # the series' step for the alert spans (--step 5m); None: each one's labels say

    @property
    def several(self) -> bool:
        """Each series scores more than its last point (--points N > 1, --since): its points have events."""
        return self.points > 1 or self.since is not None

    @property
    def alerting(self) -> bool:
        """Alerts are given where a series has several scored points."""
        return self.alert != "none" and self.several


def check_sigmas(sigmas: tuple[float, float], *, equal: bool = False) -> None:
    """UsageError unless `--sigmas` are a warning and a critical threshold: NaN would flag nothing, a negative
    one everything, and reversed ones swap the severities. evaluate's `--sigmas` too, where `equal` ones judge
    one threshold at both levels."""
    low, high = sigmas
    if not (0 < low < high or (equal and 0 < low == high)) or not math.isfinite(high):
        wanted = "non-decreasing" if equal else "increasing"
        raise UsageError(f"--sigmas needs two {wanted} positive numbers (warning, critical), got {low:g},{high:g}")


ENGINES = ("auto", "numpy", "keras")  # RunOptions.engine: who computes the forward pass


def default_workers() -> int:
    """One worker per CPU this process may run on: its affinity mask, as narrowed by taskset or a cpuset."""
    return len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class RunOptions:
    """How a run is executed (the algorithm's knobs are Params)."""

    workers: int = field(default_factory=default_workers)
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
    history: str | None = None      # the folder of each IP's values and predictions kept between nights
    strict_input: bool = False      # an IP with a cell that is no number is invalid_input, not missing there


@dataclass(kw_only=True)
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
    history: str | None = None  # RunOptions.history: the folder its worker reads and writes the IP's history in
    # params.std and params.alert as the coordinator parsed them, once for the run (predict.check_params).
    std_mode: tuple[str, int]
    method: Any  # a scoring.method.Method (a type of the layer above); None where the job gives no alerts
    kept: Any = None  # with --history, --alert's Method even where the job gives no alerts: the values it keeps
    step: float = REFERENCE  # seconds between the series' points, which the method's spans are counted in

    def start(self) -> int:
        """The index of the first point to score."""
        return max(0, len(self.values) + self.first) if self.first < 0 else self.first

    def rerouted(self, reason: str) -> Job:
        """The job for the TensorFlow pool, after a lean worker found it could not run it."""
        return dataclasses.replace(self, pool="full", notes=(*self.notes, reason))

    def failed(self, status: Status, error: str) -> Result:
        from .result import Result

        return Result(ip=self.ip, status=status, error=error, model=self.model,
                      timestamp=self.labels[-1] if self.labels else "")
