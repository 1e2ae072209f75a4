"""Walks the stats table, hands each IP to the executor, and writes the flags.

The table streams: jobs start as soon as the first chunk of it is planned, while the rest is read.
The coordinator holds the jobs in flight and each finished IP's row as CSV text; it never imports
TensorFlow, so its memory stays flat however many jobs run.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import resource
import sys
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from importlib import metadata
from typing import NamedTuple, NoReturn

import numpy as np
import pandas as pd

from .. import extras
from ..errors import Interrupted, JobError, OutputError, UsageError, on_stop, signals_raise, writing
from ..io import output
from ..io.files import remove_leftovers, replaced_together
from ..io.journal import Journal, Lock, check_writable, fingerprint
from ..io.store import Store
from ..io.table import Series, Table
from ..job import ENGINES, Job, Params, RunOptions, check_sigmas
from ..result import Result, Status
from ..rules import REFERENCE, duration, parse_duration
from ..runtime.backend import make_executor
from ..runtime.forkserver import pool_for
from ..scoring.anomaly import std_mode
from ..scoring.method import Method, parse, step_of
from ..scoring.prediction import run_job
from ..status import listed
from .verdict import Verdict

log = logging.getLogger("batchpredict")
EVENTS, SUMMARY = ".events.csv", ".summary.json"
OUTPUT_SUFFIXES = ("", EVENTS, SUMMARY)  # the files of a run's output: `--out` and these beside it


# --rolling and --window at most: no series is this long (16 GiB of floats an IP), and past int64 the worker's
# arithmetic on positions overflowed ("OverflowError: Python int too large to convert to C long") for every IP.
MAX_COUNT = 2**31 - 1


class Parsed(NamedTuple):
    """--std, --alert and --step as check_params parses them, once for every job of the run."""

    std_mode: tuple[str, int]
    method: Method | None  # None where the run gives no alerts
    step: float | None  # seconds; None: each series' own (method.step_of)
    kept: Method | None  # --alert's, alerting or not: what a --history file keeps values for


def check_params(params: Params) -> Parsed:
    """UsageError where the knobs are unusable; else --std, --alert and --step parsed, for every job of the run."""
    if params.rolling < 1 or params.window < 1 or params.points < 1:
        raise UsageError(f"--rolling, --window and --points must be at least 1 (got {params.rolling}, "
                         f"{params.window}, {params.points})")
    if max(params.rolling, params.window) > MAX_COUNT:
        raise UsageError(f"--rolling and --window must be at most {MAX_COUNT:,} (got {params.rolling:,}, "
                         f"{params.window:,})")
    if params.since is not None and params.points != 1:
        raise UsageError("--points and --since exclude each other: --since scores every point after its label")
    try:
        std, method = std_mode(params.std), parse(params.alert)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        step = None if params.step is None else parse_duration(params.step)
    except ValueError as exc:
        raise UsageError(f"--step: {exc}") from None
    check_sigmas(params.sigmas)
    return Parsed(std, method if params.alerting else None, step, method)


LOGGED = 20  # IPs with unreadable cells, and lines without an IP, logged one by one; the rest are counted


def unreadable(cells: tuple[int, str, str], how: str = "") -> str:
    """A series' unreadable cells (Series.unreadable) in words: how many, `how` they were taken, the first."""
    count, where, text = cells
    return f"{count} unreadable cell{'s' * (count != 1)}{how}, the first on {where}: {text!r}"


class InputReport:
    """What the table held that is no number (each counts as missing) or no line of the header's width:
    logged once per IP for the first LOGGED, counted in the summary's `input` (docs/design.md §2)."""

    def __init__(self) -> None:
        self.cells = 0
        self.ips = 0
        self.per_ip: dict[str, int] = {}  # the first LOGGED IPs

    def note(self, series: Series) -> None:
        """Count and log a series with unreadable cells."""
        assert series.unreadable is not None
        count = series.unreadable[0]
        self.cells += count
        self.ips += 1
        if self.ips <= LOGGED:
            self.per_ip[series.ip] = count
            log.warning("%s: %s", series.ip, unreadable(series.unreadable, " counted as missing"))

    def summary(self, table: Table) -> dict:
        """The summary's `input`; logs what was left to say."""
        if self.ips > LOGGED:
            log.warning("%d more IPs with unreadable cells (summary.json: input)", self.ips - LOGGED)
        for line in table.lost_lines[:LOGGED]:
            log.warning("line %d: %d fields, the header has %d, and no IP: left out", line.line, line.fields,
                        table.width)
        if len(table.lost_lines) > LOGGED:
            log.warning("%d more lines without an IP left out (summary.json: input)", len(table.lost_lines) - LOGGED)
        return {"bad_lines": table.bad_lines, "lines_without_ip": [line.line for line in table.lost_lines[:LOGGED]],
                "lines_without_ip_count": len(table.lost_lines), "unreadable_cells": self.cells,
                "unreadable_ips": self.ips, "unreadable": self.per_ip}


class Plan:
    """Turns the table's series into rows settled at once and jobs, as the executor asks for jobs.

    `done` holds the journal's results of an earlier run (--resume): those IPs take them, run nothing.
    """

    def __init__(self, table: Table, store: Store, params: Params, *, engine: str, rows: output.Rows,
                 trust: bool = False, allow_unsealed: bool = False, parsed: Parsed | None = None,
                 history: str | None = None, strict_input: bool = False) -> None:
        if engine not in ENGINES:
            raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        self.std_mode, self.method, self.step, kept = parsed or check_params(params)  # for every job: parsed once
        # A night without alerts (--points 1) still leaves the next night's alerts the history they read.
        self.kept = kept if history else None
        self._steps: tuple[list[str] | None, float] = (None, REFERENCE)  # the last labels seen, and their step
        self.table, self.store, self.params, self.engine, self.rows = table, store, params, engine, rows
        self.trust, self.allow_unsealed, self.history = trust, allow_unsealed, history  # RunOptions', for every job
        self.strict_input = strict_input  # an IP with an unreadable cell is invalid_input (--strict-input)
        self.input = InputReport()
        self.done: dict[str, Result] = {}
        self.running: dict[str, int] = {}  # IP -> table position of each job handed out and not finished
        self.jobs = 0      # handed out
        self.started = 0.0  # when the first was (time.monotonic)
        self.cpu_s = 0.0    # CPU time spent reading and planning the table
        self.skipped = 0    # --since: IPs without a point after the label, each one insufficient_data row
        self.untimed = False  # some series' labels were not times (said once)
        # The index of each series' first point to score: negative counts from its end.
        self.first = (lambda series: -params.points) if params.since is None else table.since(params.since)

    def jobs_of(self, chunks: Iterable[list[Series]]) -> Iterator[Job | None]:
        """Each job once planned; None after each chunk, so that the executor looks at its workers."""
        cpu = time.process_time()
        for chunk in chunks:
            for series in chunk:
                job = self._plan(series)
                if job is not None:
                    self.running[job.ip] = series.position
                    self.jobs += 1
                    self.started = self.started or time.monotonic()
                    self.cpu_s += time.process_time() - cpu
                    yield job
                    cpu = time.process_time()
            self.cpu_s += time.process_time() - cpu
            yield None
            cpu = time.process_time()
        self.cpu_s += time.process_time() - cpu

    def finish(self, result: Result) -> None:
        self.rows.put(self.running.pop(result.ip), result)

    def settle_duplicates(self) -> None:
        """An IP found again later in a wide table: its first row becomes invalid_input, job or not."""
        for ip in self.table.duplicates:
            series = Series(ip=ip, labels=self.table.labels, values=np.empty(0),
                            problem=self.table.duplicate_problem(ip), position=self.table.position(ip))
            self._settle(series, self._check_problem)

    def _plan(self, series: Series) -> Job | None:
        if series.unreadable is not None:
            self.input.note(series)
        if series.ip in self.done:
            self.rows.put(series.position, self.done.pop(series.ip))
            return None
        if series.ip in self.table.duplicates:
            return None  # settled once the whole table is read: the error lists every line
        return self._settle(series, self._check)

    def _settle(self, series: Series, check: Callable[[Series], Job]) -> Job | None:
        try:
            return check(series)
        except JobError as exc:
            self.rows.put(series.position, Result(ip=series.ip, status=Status(exc.status), error=str(exc),
                                                  timestamp=series.labels[-1] if series.labels else ""))
            return None

    def _check_problem(self, series: Series) -> NoReturn:
        self.store.check_ip(series.ip)
        raise JobError(Status.INVALID_INPUT, series.problem)

    def _check(self, series: Series) -> Job:
        if series.problem:
            self._check_problem(series)
        if series.unreadable and self.strict_input:
            self.store.check_ip(series.ip)
            raise JobError(Status.INVALID_INPUT, unreadable(series.unreadable) + " (--strict-input)")
        found = self.store.artefacts(series.ip)
        sealed = self.store.sealed(series.ip, self.allow_unsealed)
        if np.isnan(series.values).all():  # no process needed to say so
            raise JobError(Status.INSUFFICIENT_DATA, "no numeric value in the series")
        # --since: an IP that has nothing new keeps one row (docs/design.md §4), after what the store says of
        # it: a no_model or load_error must not go unseen on a night without news.
        if self.params.since is not None and self.first(series) == len(series.labels):
            self.skipped += 1
            raise JobError(Status.INSUFFICIENT_DATA, f"no point after --since {self.params.since!r}")
        pool = pool_for(found.model, self.engine)
        if pool == "full" and not extras.installed():  # a SavedModel: --engine keras stopped the run before
            raise JobError(Status.LOAD_ERROR, extras.needs_tensorflow(f"{found.model} is a SavedModel"))
        return Job(ip=series.ip, labels=series.labels, values=series.values.tolist(), store=self.store.root,
                   model=found.model, scaler=found.scaler, std=found.std, params=self.params, engine=self.engine,
                   pool=pool, first=self.first(series), trust=self.trust, sealed=sealed, std_mode=self.std_mode,
                   method=self.method, kept=self.kept, history=self.history, step=self._step_of(series))

    def _step_of(self, series: Series) -> float:
        """The series' step for the alerting stage's spans: --step, else its labels' median spacing, found once
        for the labels every IP of a wide table shares. Labels that are not times take REFERENCE, said once."""
        if (self.method or self.kept) is None or self.step is not None:
            return self.step or REFERENCE
        labels, step = self._steps
        if series.labels is not labels:
            found = step_of(series.labels, series.times)
            if found is None and not self.untimed:
                log.warning("%s: labels are not times (%r ...): the alert spans count %s steps; --step sets the "
                            "step (said once)", series.ip, series.labels[0] if series.labels else "",
                            duration(REFERENCE))
            self.untimed = self.untimed or found is None
            step = found or REFERENCE
            self._steps = (series.labels, step)
        return step


def predict_table(data: str, models: str, out: str | None = None, params: Params = Params(), *,
                  options: RunOptions = RunOptions(),
                  on_result: Callable[[Result], None] | None = None,
                  on_start: Callable[[int | None], None] | None = None) -> pd.DataFrame:
    """Score every IP of the table; with `out`, also write the CSV, its summary and a journal.

    Returns the output as a DataFrame, its summary in `.attrs["summary"]`. `on_start(jobs)` is called
    as the jobs begin, with None, and again with their number once the whole table is planned (some
    may have finished by then); `on_result(result)` gets each job's result as it finishes.
    """
    rows = _rows(params, cells=True)
    info = _run(data, models, out, params, options=options, rows=rows, on_result=on_result, on_start=on_start)
    frame = rows.frame()
    frame.attrs["summary"], frame.attrs["events"] = info, rows.events_frame()
    return frame


def predict(data: str, models: str, out: str, params: Params = Params(), *, options: RunOptions = RunOptions(),
            on_result: Callable[[Result], None] | None = None,
            on_start: Callable[[int | None], None] | None = None) -> dict:
    """predict_table for the command line: the output goes only to `out`; returns the summary."""
    return _run(data, models, out, params, options=options, rows=_rows(params), on_result=on_result,
                on_start=on_start)


def verdict(info: dict, out: str, since: str | None = None) -> Verdict:
    """The run's summary line; exit 1 where a job failed (docs/design.md §5)."""
    rows = f", {info['rows']} rows, {sum(info['events'].values())} events" if info["rows"] != info["ips"] else ""
    rows += f", {info['alerts']} alerts" if "alerts" in info else ""
    skipped = f" ({info['skipped']} with nothing after {since})" if info["skipped"] else ""
    return Verdict(line=f"batchpredict: {info['ips']} IPs{rows}{skipped} in {info['wall_s']:.1f} s "
                        f"({info['jobs_per_s'] or 0:.1f} jobs/s) -> {out}: {listed(info['status']) or 'no rows'}; "
                        f"severity: {listed(info['severity']) or 'none'}",
                   fields={"event": "summary", **info},
                   code=1 if any(Status(s).failed for s in info["status"]) else 0)


def _rows(params: Params, cells: bool = False) -> output.Rows:
    """The run's rows, and their events where they are wanted: in predict_table's frame, and in an events
    file where an IP has several points (--points N, --since)."""
    return output.Rows(params.sigmas, cells, std_source=params.std != "store",
                       events=cells or params.several, alert=params.alerting)


def _run(data: str, models: str, out: str | None, params: Params, *, options: RunOptions, rows: output.Rows,
         on_result: Callable[[Result], None] | None, on_start: Callable[[int | None], None] | None) -> dict:
    parsed = check_params(params)
    if options.engine == "keras":
        extras.require_tensorflow("--engine keras")
    started, cpu = time.monotonic(), time.process_time()
    try:
        return _steps(data, models, out, params, options=options, rows=rows, on_result=on_result,
                      on_start=on_start, started=started, cpu=cpu, parsed=parsed)
    except OutputError as exc:  # the workers are stopped and the journal closed by now
        raise OutputError(f"{exc}; {_KEPT}") from exc


def _check_apart(out: str, data: str, history: str | None) -> None:
    """UsageError where --data or --history is one of the files the run writes beside --out: the table would be
    written over, and the history folder made where the CSV (or its journal) goes, so that the night ends in
    IsADirectoryError once every job has run."""
    written = {os.path.realpath(out + suffix) for suffix in (*OUTPUT_SUFFIXES, ".journal", ".lock")}
    if os.path.realpath(data) in written:
        raise UsageError(f"--out {out} would write over the table it reads, --data {data}")
    if history and os.path.realpath(history) in written:
        raise UsageError(f"--history {history} is a file the run writes beside --out {out}: give it a folder of its "
                         "own")


def _steps(data: str, models: str, out: str | None, params: Params, *, options: RunOptions, rows: output.Rows,
           on_result: Callable[[Result], None] | None, on_start: Callable[[int | None], None] | None,
           started: float, cpu: float, parsed: Parsed) -> dict:
    """_run's steps, in order (docs/design.md §5)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(signals_raise())
        if out:  # before anything is read: a second run on the same output exits 75 at once
            _check_apart(out, data, options.history)
            stack.enter_context(Lock(out + ".lock"))
            check_writable(out)  # before any job: a folder that takes no file exits 2, not after the night
            name = os.path.basename(out)
            remove_leftovers(os.path.dirname(os.path.abspath(out)), [name + suffix for suffix in OUTPUT_SUFFIXES])
        if options.history:  # each worker writes its IP's file there: one run at a time
            stack.enter_context(Lock(os.path.join(options.history, ".lock")))
        store = Store(models)
        table = Table(data, options.layout)
        chunks = table.chunks()
        first = next(chunks)  # an unreadable or empty table stops the run before anything is written
        executor = make_executor(options)
        plan = Plan(table, store, params, engine=options.engine, rows=rows, trust=options.trust_store,
                    allow_unsealed=options.allow_unsealed, parsed=parsed, history=options.history,
                    strict_input=options.strict_input)
        journal = _journal(stack, out, plan, fingerprint(data, models, {
            "params": dataclasses.asdict(params), "layout": options.layout,
            **({"history": options.history} if options.history else {})}), resume=options.resume) if out else None

        def tasks() -> Iterator[Job | None]:
            yield from plan.jobs_of(_chain(first, chunks))
            if on_start:
                on_start(plan.jobs)

        if on_start:
            on_start(None)
        _dispatch(executor.run(run_job, tasks()), plan, journal, on_result)
        plan.settle_duplicates()
        info = rows.summary(plan.jobs, time.monotonic() - started, peak_rss_mib(),
                            backend=executor.name, workers=options.workers,
                            jobs_per_worker=options.jobs_per_worker, engine=options.engine,
                            skipped=plan.skipped, last_label=table.last_label(), input=plan.input.summary(table),
                            timings=_timings(plan, started, cpu), versions=versions())
        if out:
            _write_output(out, rows, params, info)
        if journal:
            journal.close(remove=True)
    return info


def _journal(stack: contextlib.ExitStack, out: str, plan: Plan, fingerprinted: str, *, resume: bool) -> Journal:
    """The run's journal beside `out`, closed (and kept) on the way out; with `resume`, its jobs done."""
    journal = Journal(out + ".journal", fingerprinted)
    stack.callback(journal.close, remove=False)  # before open: its header may meet a full disk
    plan.done = journal.open(resume)
    if plan.done:
        log.info("resuming: %d jobs already done", len(plan.done))
    return journal


def _dispatch(results: Iterator[Result], plan: Plan, journal: Journal | None,
              on_result: Callable[[Result], None] | None) -> None:
    """Each result as it comes: its log lines, its row, its journal line, the caller's callback. A disk error
    in a worker (writing its IP's history) stops the run, the workers with it, before its row is kept."""
    try:
        for result in results:
            if result.outage:
                raise OutputError(result.outage)
            for line in result.log:
                log.info(line)
            for line in result.debug:
                log.debug(line)
            plan.finish(result)
            if journal:
                journal.append(result)
            if on_result:
                on_result(result)
    except UsageError:  # the table turned out unreadable further on: nothing is kept
        if journal:
            journal.close(remove=True)
        raise
    finally:
        if isinstance(results, Generator):  # closed now, not when the traceback goes: its workers stop
            results.close()


_KEPT = "the earlier output is untouched and the journal keeps every finished job: free space, then rerun with --resume"


def _write_output(out: str, rows: output.Rows, params: Params, info: dict) -> None:
    """The CSV, its events file and its summary, all or none: each is written beside its old self, and the
    three replace the old ones only once all are written (a full disk leaves the earlier output as it was),
    the summary last. A stop asked for meanwhile waits for the three to be in place (_signals_deferred)."""
    files = [(out, rows.write_csv)]
    if params.several:
        files.append((out + EVENTS, rows.write_events))
    files.append((out + SUMMARY, lambda path: output.write_summary(path, info)))
    with _signals_deferred(), writing(out), replaced_together([path for path, _ in files]) as temporaries:
        for (path, write), temporary in zip(files, temporaries, strict=True):
            with writing(path):
                write(temporary)


def _chain(first: list[Series], rest: Iterator[list[Series]]) -> Iterator[list[Series]]:
    yield first
    yield from rest


def _timings(plan: Plan, started: float, cpu: float) -> dict:
    """Where the coordinator's time went: to the first job, reading and planning the table, in all."""
    return {"first_job_s": round(plan.started - started, 3) if plan.jobs else None,
            "plan_cpu_s": round(plan.cpu_s, 3),
            "coordinator_cpu_s": round(time.process_time() - cpu, 3)}


def peak_rss_mib() -> float:
    """This process's peak resident memory: the high-water mark of its own pages (VmHWM). ru_maxrss starts
    from the parent's RSS at fork, so a coordinator started by a large process would report that one's."""
    with contextlib.suppress(OSError, ValueError, StopIteration), open("/proc/self/status") as fh:
        return int(next(line for line in fh if line.startswith("VmHWM:")).split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGTERM/SIGINT wait for the block to end, then stop the run as signals_raise's do: the output files
    replace their old selves as a set, never one of them killed half-way through the set."""
    arrived: list[int] = []
    with on_stop(lambda signum, frame: arrived.append(signum)):
        yield
    if arrived:
        raise Interrupted(arrived[0])


def versions() -> dict[str, str]:
    """Installed versions, read from package metadata: importing TensorFlow here is not allowed."""
    found = {"python": sys.version.split()[0]}
    for name in ("batchpredict", "tensorflow-cpu", "tensorflow", "keras", "tf-keras", "scikit-learn", "numpy",
                 "pandas", "pyarrow"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found
