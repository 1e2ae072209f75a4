"""errors.py: one exception class per exit code of docs/design.md §5, and a row's one-line error."""
from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from batchpredict.errors import (
    BatchPredictError,
    Interrupted,
    JobError,
    LockHeld,
    OutputError,
    Unsupported,
    UsageError,
    first_line,
)
from batchpredict.status import Status

DESIGN = Path(__file__).parents[1] / "docs" / "design.md"


def test_each_exit_code_of_the_design_is_a_class():
    section = DESIGN.read_text().split("## 5.")[1].split("\n## ")[0]
    codes = set(re.findall(r"^\| (\d+(?:\+N)?) \|", section, re.MULTILINE))
    assert codes == {"0", "1", "2", "74", "75", "128+N"}
    assert (BatchPredictError.exit_code, UsageError.exit_code, OutputError.exit_code, LockHeld.exit_code) == (
        1, 2, 74, 75)
    assert JobError(Status.ERROR, "x").exit_code == Unsupported("x").exit_code == 1
    assert all(issubclass(c, BatchPredictError)
               for c in (UsageError, OutputError, LockHeld, Interrupted, JobError, Unsupported))


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_a_stop_by_signal_n_exits_128_plus_n_and_says_how_to_resume(signum, code):
    stop = Interrupted(signum)
    assert (stop.exit_code, stop.signum) == (code, signum)
    assert str(stop) == f"stopped by {signal.Signals(signum).name}; journal kept, rerun with --resume"


def test_a_job_error_carries_its_rows_status_and_message():
    error = JobError(Status.INSUFFICIENT_DATA, "12 values give 8 smoothed points")
    assert error.status == Status.INSUFFICIENT_DATA == "insufficient_data"
    assert str(error) == "12 values give 8 smoothed points"


@pytest.mark.parametrize(("exc", "line"), [
    (ValueError("bad value\nmore detail\n"), "ValueError: bad value"),
    (ZeroDivisionError("  division by zero  "), "ZeroDivisionError: division by zero"),
    (KeyError("units"), "KeyError: 'units'"),
    (RuntimeError(), "RuntimeError"),  # no message: the type alone, no dangling colon
    (OSError("\n\n"), "OSError"),
    (UsageError("table not found: t.csv"), "UsageError: table not found: t.csv"),
])
def test_first_line_is_the_type_and_the_first_line_of_the_message(exc, line):
    assert first_line(exc) == line
