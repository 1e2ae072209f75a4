"""`batchpredict store check`: every IP of a store, its artefacts, and whether each one loads.

Nothing is predicted. Each model and scaler is described and loaded in its own worker process
(the executor's), so a file that crashes or hangs its loader is reported like any other problem.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from .backend import make_executor
from .errors import JobError
from .job import Outcome, RunOptions, Status
from .loading import describe, first_line, load_model, load_scaler
from .store import Store

COLUMNS = ["ip", "status", "model", "format", "keras", "runtime", "timesteps", "scaler", "problems"]


@dataclass
class CheckResult(Outcome):
    model: str = ""
    format: str = ""
    keras_version: str = ""
    runtime: str = ""
    timesteps: str = ""  # what the model declares: a number, or "variable"
    scaler: str = ""
    problems: list[str] = field(default_factory=list)


@dataclass
class CheckTask:
    ip: str
    store: str
    model: str
    scaler: str | None

    def failed(self, status: Status, error: str) -> CheckResult:
        return CheckResult(ip=self.ip, status=status, error=error, model=self.model, problems=[error])


def inspect_artefacts(task: CheckTask) -> CheckResult:
    """Runs in the worker: describe and load the model and the scaler. Never raises."""
    result = CheckResult(ip=task.ip, model=task.model)
    for step in (_inspect_model, _inspect_scaler):
        try:
            step(task, result)
        except JobError as exc:
            result.problems.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - the report says what went wrong; other IPs go on
            result.problems.append(first_line(exc))
    if result.problems:
        result.status = Status.LOAD_ERROR
    return result


def _inspect_model(task: CheckTask, result: CheckResult) -> None:
    path = os.path.join(task.store, task.model)
    fmt = describe(path)
    result.format, result.keras_version, result.runtime = fmt.kind, fmt.keras_version, fmt.runtime
    loaded = load_model(path)
    result.timesteps = "variable" if loaded.window is None else str(loaded.window)
    result.runtime = f"{fmt.runtime} {loaded.entry}".strip()


def _inspect_scaler(task: CheckTask, result: CheckResult) -> None:
    if task.scaler:
        result.scaler = load_scaler(os.path.join(task.store, task.scaler)).note.split(": ", 1)[1]


def check_store(models: str, options: RunOptions | None = None) -> list[CheckResult]:
    """One row per IP the store mentions, in id order. Exit 1 material: any row not `ok`."""
    store = Store(models)
    rows, tasks = {}, []
    for ip in store.ips():
        rows[ip], task = _plan(store, ip)
        tasks += [task] if task else []
    for outcome in make_executor(options or RunOptions()).run(inspect_artefacts, tasks):
        planned = rows[outcome.ip]
        outcome.problems = planned.problems + outcome.problems
        if outcome.status is Status.OK:
            outcome.status = planned.status
        rows[outcome.ip] = outcome
    for row in rows.values():
        row.error = "; ".join(row.problems)
    return list(rows.values())


def _plan(store: Store, ip: str) -> tuple[CheckResult, CheckTask | None]:
    """What the store itself says about `ip`, and the task that loads what it has."""
    row = CheckResult(ip=ip)
    try:
        store.check_ip(ip)
    except JobError as exc:
        row.status, row.problems = Status(exc.status), [str(exc)]
        return row, None
    found, statuses = {}, []
    for name, lookup in (("model", store.model), ("scaler", store.scaler), ("std", store.std)):
        try:
            found[name] = lookup(ip)
        except JobError as exc:
            row.problems.append(str(exc))
            statuses.append(Status(exc.status))
    # A file that exists but cannot be used is worse than one that is missing.
    row.status = next((s for s in (Status.INVALID_INPUT, Status.LOAD_ERROR, Status.NO_MODEL) if s in statuses),
                      Status.OK)
    row.model = found.get("model", "")
    return row, CheckTask(ip, store.root, row.model, found.get("scaler")) if row.model else None


def report_rows(rows: list[CheckResult], window: int) -> list[list[str]]:
    """The report as text cells in COLUMNS order; a variable-timestep model is fed --window."""
    def timesteps(row: CheckResult) -> str:
        return f"variable (--window {window})" if row.timesteps == "variable" else row.timesteps

    return [[r.ip, r.status.value, r.model, r.format, r.keras_version, r.runtime, timesteps(r), r.scaler, r.error]
            for r in rows]


def format_table(header: list[str], rows: list[list[str]]) -> str:
    """Aligned columns; an empty cell shows as '-'."""
    cells = [header] + [[c or "-" for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header) - 1)]
    return "\n".join("  ".join([c.ljust(w) for c, w in zip(row, widths)] + [row[-1]]) for row in cells)
