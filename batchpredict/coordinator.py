"""Walks the stats table, hands each IP to the executor, and writes the flags.

The coordinator never imports TensorFlow: its memory stays flat however many jobs run.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import resource
import signal
import sys
import threading
import time
from importlib import metadata
from typing import Callable, Iterator, NamedTuple

import pandas as pd

from . import export
from .anomaly import std_mode
from .backend import make_executor
from .errors import Interrupted, JobError, UsageError
from .job import ENGINES, Job, Params, Result, RunOptions, Status
from .journal import Journal, Lock, fingerprint
from .store import MODEL_SUFFIXES, Store
from .table import first_after, read_table
from .worker import run_job

log = logging.getLogger("batchpredict")


def check_params(params: Params) -> None:
    if params.rolling < 1 or params.window < 1 or params.points < 1:
        raise UsageError(f"--rolling, --window and --points must be at least 1 (got {params.rolling}, "
                         f"{params.window}, {params.points})")
    if params.since is not None and params.points != 1:
        raise UsageError("--points and --since exclude each other: --since scores every point after its label")
    try:
        std_mode(params.std)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    low, high = params.sigmas
    if not (0 < low < high) or not math.isfinite(high):
        raise UsageError(f"--sigmas needs two increasing positive numbers (warning, critical), got {low:g},{high:g}")


class Plan(NamedTuple):
    order: list[str]            # the IPs that get rows, in table order
    settled: dict[str, Result]  # their rows settled without a worker
    jobs: list[Job]
    skipped: int                # --since: IPs without a point after the label, which get no rows


def plan(data: str, models: str, params: Params, layout: str | None, engine: str = "auto") -> Plan:
    """Each IP of the table settled at once, given a job, or (--since) skipped."""
    if engine not in ENGINES:
        raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    store = Store(models)
    table = read_table(data, layout)
    firsts = [-params.points] * len(table) if params.since is None else first_after(table, params.since)
    order, settled, jobs = [], {}, []
    for series, first in zip(table, firsts):
        if first == len(series.labels):
            continue
        order.append(series.ip)
        label = series.labels[-1] if series.labels else ""
        try:
            if series.problem:
                store.check_ip(series.ip)
                raise JobError(Status.INVALID_INPUT, series.problem)
            found = store.artefacts(series.ip)
            if not (series.values == series.values).any():  # all NaN: no process needed to say so
                raise JobError(Status.INSUFFICIENT_DATA, "no numeric value in the series")
        except JobError as exc:
            settled[series.ip] = Result(ip=series.ip, status=Status(exc.status), error=str(exc), timestamp=label)
            continue
        # The numpy engine reads files; a SavedModel directory goes straight to the TensorFlow pool.
        lean = engine != "keras" and found.model.endswith(MODEL_SUFFIXES)
        jobs.append(Job(series.ip, series.labels, series.values.tolist(), store.root, found.model,
                        found.scaler, found.std, params, engine, "lean" if lean else "full", first=first))
    return Plan(order, settled, jobs, len(table) - len(order))


def predict_table(data: str, models: str, out: str | None = None, params: Params = Params(),
                  options: RunOptions = RunOptions(),
                  on_result: Callable[[Result], None] | None = None,
                  on_start: Callable[[int], None] | None = None) -> pd.DataFrame:
    """Score every IP of the table; with `out`, also write the CSV, its summary and a journal.

    `on_start(jobs)` is told how many jobs will run, `on_result(result)` gets each as it finishes.
    """
    check_params(params)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_signals_raise())
        order, results, jobs, skipped = plan(data, models, params, options.layout, options.engine)
        executor = make_executor(options)
        journal = None
        if out:
            stack.enter_context(Lock(out + ".lock"))
            settings = {"params": dataclasses.asdict(params), "layout": options.layout}
            journal = Journal(out + ".journal", fingerprint(data, models, settings))
            done = journal.open(options.resume)
            stack.callback(journal.close, remove=False)
            results.update(done)
            if done:
                log.info("resuming: %d of %d jobs already done", len(done), len(jobs))
            jobs = [job for job in jobs if job.ip not in done]
        if on_start:
            on_start(len(jobs))
        for result in executor.run(run_job, jobs):
            for line in result.log:
                log.info(line)
            for line in result.debug:
                log.debug(line)
            results[result.ip] = result
            if journal:
                journal.append(result)
            if on_result:
                on_result(result)
        ordered = [results[ip] for ip in order]
        std_source = params.std != "store"
        frame = export.to_frame(ordered, params.sigmas, std_source)
        alerts = export.events(frame)
        info = export.summary(ordered, len(jobs), time.monotonic() - started,
                              resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, alerts,
                              backend=executor.name, workers=options.workers,
                              jobs_per_worker=options.jobs_per_worker, engine=options.engine,
                              skipped=skipped, versions=versions())
        if out:
            export.write_csv(ordered, params.sigmas, out, std_source)
            if params.points > 1 or params.since is not None:
                export.write_events(out + ".events.csv", alerts)
            export.write_summary(out + ".summary.json", info)
            journal.close(remove=True)
    frame.attrs["summary"], frame.attrs["events"] = info, alerts
    return frame


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM/SIGINT become Interrupted, so the executor kills its workers on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def versions() -> dict[str, str]:
    """Installed versions, read from package metadata: importing TensorFlow here is not allowed."""
    found = {"python": sys.version.split()[0]}
    for name in ("batchpredict", "tensorflow-cpu", "tensorflow", "keras", "tf-keras", "scikit-learn", "numpy",
                 "pandas"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found
