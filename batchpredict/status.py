"""A row's status and a point's severity, and how a command counts them: what the command line needs of a
result, without numpy."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
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



def tally(statuses: Iterable[Status]) -> dict[str, int]:
    """How many of each status, by value."""
    return dict(Counter(status.value for status in statuses))


def listed(counts: dict[str, int]) -> str:
    """'ok 30, no_model 2': the most common first, as the final lines say them."""
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
