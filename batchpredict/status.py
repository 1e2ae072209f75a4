"""A row's status and a point's severity: what the command line needs of a result, without numpy."""
from __future__ import annotations

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

