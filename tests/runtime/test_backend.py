"""Executors by name (runtime/backend.py): the same settings for each, a usage error for an unknown one, and
the command line's --backend choices read without the executors' imports."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from leanprobe import Task, handler

from batchpredict.errors import UsageError
from batchpredict.job import RunOptions
from batchpredict.result import Status
from batchpredict.runtime.backend import BACKENDS, local_settings, make_executor
from batchpredict.runtime.executor import LocalExecutor

OPTIONS = dict(workers=3, jobs_per_worker=2, timeout=7.5, max_worker_memory_mib=640.0, retries=0)


def test_the_backends_are_local_and_ray_each_an_executor_of_its_name():
    assert sorted(BACKENDS) == ["local", "ray"]
    for name in BACKENDS:
        executor = make_executor(RunOptions(workers=1, backend=name))
        assert executor.name == name and callable(executor.run)


def test_an_unknown_backend_is_a_usage_error_naming_the_choices():
    with pytest.raises(UsageError, match=r"^unknown backend 'spark'; choose from local, ray$"):
        make_executor(RunOptions(backend="spark"))


def test_the_local_backend_takes_the_runs_settings():
    executor = make_executor(RunOptions(**OPTIONS))
    assert isinstance(executor, LocalExecutor)
    assert (executor.workers, executor.jobs_per_worker, executor.timeout, executor.max_memory_mib,
            executor.retries) == (3, 2, 7.5, 640.0, 0)


def test_the_ray_backend_takes_the_same_settings_for_the_executor_of_each_shard():
    """Constructing it imports ray but starts nothing: Ray starts (or is joined) when it runs."""
    options = RunOptions(**OPTIONS, backend="ray", ray_address="ray://head:10001", shard_size=11)
    executor = make_executor(options)
    assert executor.settings == local_settings(options) == local_settings(RunOptions(**OPTIONS))
    assert (executor.address, executor.shard_size) == ("ray://head:10001", 11)
    shard = LocalExecutor(**executor.settings)  # what each shard's Ray task runs
    local = make_executor(RunOptions(**OPTIONS))
    assert vars(shard).keys() == vars(local).keys()
    assert all(vars(shard)[k] == vars(local)[k] for k in vars(local))
    import ray

    assert not ray.is_initialized()


def test_no_memory_cap_given_is_the_executors_default_not_zero():
    assert local_settings(RunOptions(workers=2))["max_memory_mib"] is None
    assert make_executor(RunOptions(workers=2)).max_memory_mib > 0


def test_the_backends_names_are_read_without_the_executors_imports():
    """--help reads BACKENDS for --backend's choices: neither multiprocess, psutil, numpy nor ray for it;
    making the local executor imports what it runs on, and still not ray."""
    heavy = ["multiprocess", "psutil", "numpy", "ray"]
    code = ("import json, sys; from batchpredict.runtime.backend import BACKENDS, make_executor; "
            "from batchpredict.job import RunOptions; "
            f"before = [m for m in {heavy!r} if m in sys.modules]; make_executor(RunOptions(workers=1)); "
            f"print(json.dumps([before, [m for m in {heavy!r} if m in sys.modules]]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    before, after = json.loads(done.stdout)
    assert before == [] and {"multiprocess", "psutil"} <= set(after) and "ray" not in after


def test_the_local_backend_yields_one_outcome_per_job_from_real_workers():
    tasks = [Task(f"job-{i}", pool="lean") for i in range(5)]
    outcomes = list(make_executor(RunOptions(workers=2, timeout=60)).run(handler, tasks))
    assert sorted(o.ip for o in outcomes) == [t.ip for t in tasks]
    assert {(o.status, o.error, o.attempts) for o in outcomes} == {(Status.OK, "lean=True", 1)}
    assert all(o.worker_pid for o in outcomes) and len({o.worker_pid for o in outcomes}) == 5  # one each
