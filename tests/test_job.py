"""job.py: the values a run hands down: which points a job scores, its way to the full pool, its failed row,
and the run's defaults (one worker per CPU this process may run on)."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from batchpredict.job import ENGINES, Job, Params, RunOptions, default_workers
from batchpredict.result import Result, Status


def job(values: int = 10, **fields: object) -> Job:
    return Job(ip="10.0.0.1", labels=[f"t{i}" for i in range(values)], values=[float(i) for i in range(values)],
               store="/store", model="model/10.0.0.1.h5", scaler="sc/10.0.0.1.save", std=1.5,
               **{"std_mode": ("store", 0), "method": None, **fields})


@pytest.mark.parametrize(("first", "start"), [(-1, 9), (-3, 7), (-10, 0), (-25, 0), (0, 0), (4, 4), (12, 12)])
def test_start_is_the_first_point_to_score_counting_from_the_end_when_negative(first, start):
    assert job(first=first).start() == start


def test_a_job_scores_its_last_point_in_the_lean_pool_by_default():
    plain = job()
    assert (plain.start(), plain.pool, plain.engine, plain.notes, plain.trust, plain.params) == (
        9, "lean", "auto", (), False, Params())


def test_rerouted_is_the_same_job_for_the_full_pool_with_the_reason_noted():
    lean = job(notes=("model declares 12 timesteps",))
    full = lean.rerouted("layer Conv1D is not supported by the numpy engine")
    assert full.pool == "full" and lean.pool == "lean"
    assert full.notes == ("model declares 12 timesteps", "layer Conv1D is not supported by the numpy engine")
    assert dataclasses.replace(full, pool="lean", notes=lean.notes) == lean


def test_failed_is_the_row_of_a_job_without_points():
    row = job().failed(Status.TIMEOUT, "no result within 300 s")
    assert isinstance(row, Result) and len(row.points) == 0
    assert (row.ip, row.status, row.error, row.model, row.timestamp) == (
        "10.0.0.1", Status.TIMEOUT, "no result within 300 s", "model/10.0.0.1.h5", "t9")
    assert job(values=0).failed(Status.INSUFFICIENT_DATA, "no values").timestamp == ""


@pytest.mark.parametrize(("params", "several", "alerting"), [
    (Params(), False, False), (Params(points=2), True, True), (Params(since="t3"), True, True),
    (Params(points=288, alert="none"), True, False), (Params(points=1, alert="zscore"), False, False)])
def test_a_series_of_several_points_has_events_and_alerts_unless_alert_is_none(params, several, alerting):
    assert (params.several, params.alerting) == (several, alerting)


def test_the_knobs_are_frozen_values():
    """Params() and RunOptions() are default arguments throughout: one shared instance must not change."""
    for value, name in ((Params(), "window"), (RunOptions(), "workers")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, name, 1)
    assert Params() == Params() and hash(Params()) == hash(Params())
    assert ENGINES == ("auto", "numpy", "keras") and RunOptions().engine in ENGINES


def test_workers_default_to_the_cpus_this_process_may_run_on():
    assert RunOptions().workers == default_workers() == len(os.sched_getaffinity(0))
    code = "from batchpredict.job import RunOptions; print(RunOptions().workers)"
    pinned = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
    assert pinned.stdout.strip() == "1"  # as taskset -c 0 would run it
