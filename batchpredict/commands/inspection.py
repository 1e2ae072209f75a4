"""`batchpredict store check`: every IP of a store, its artefacts, and whether each one loads.

Nothing is predicted. Each model and scaler is described and loaded in its own worker process
(the executor's), so a file that crashes or hangs its loader is reported like any other problem.
Each row says which engine and which worker pool `predict` would give the IP, and why; the check
runs where predict's job would start (a lean worker sends what it cannot load on to TensorFlow's). With
`--verify` the worker also runs both engines on a few random windows and reports how far apart
they are: how a user proves the numpy engine on their own store.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .. import extras
from ..errors import JobError, Unsupported, first_line
from ..io import manifest
from ..io.store import Store
from ..job import RunOptions
from ..result import Outcome, Status
from ..runtime.backend import make_executor
from ..runtime.forkserver import pool_for
from ..scoring import prediction, scalers
from ..scoring.loading import LoadedModel, describe, load_model
from ..status import listed, tally
from .verdict import Verdict

log = logging.getLogger("batchpredict")

COLUMNS = ["ip", "status", "model", "format", "keras", "runtime", "timesteps", "engine", "pool", "verify",
           "scaler", "problems"]
VERIFY_WINDOWS = 4


@dataclass(kw_only=True)
class CheckResult(Outcome):
    model: str = ""
    format: str = ""
    keras_version: str = ""
    runtime: str = ""
    timesteps: str = ""  # what the model declares: a number, or "variable"
    scaler: str = ""
    engine: str = ""     # what --engine gives the model, and why not numpy where it is keras
    pool: str = ""       # "lean", or "tensorflow" and why
    max_diff: float | None = None  # --verify: max |numpy - keras| / max |keras| on random windows
    verify: str = ""     # --verify: the difference, or why there is none
    problems: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class CheckTask:
    ip: str
    store: str
    model: str
    scaler: str | None
    engine: str = "auto"
    verify: bool = False
    window: int = 20  # fed to a model with variable timesteps
    trust: bool = False  # RunOptions.trust_store: joblib reads the scaler, Keras loads Lambda layers
    sealed: dict | None = None  # the IP's manifest.json entry
    std: float | None = None
    pool: str = "lean"  # as predict starts the IP's job (pool_for); check_store sends --verify to TensorFlow's

    def failed(self, status: Status, error: str) -> CheckResult:
        return CheckResult(ip=self.ip, status=status, error=error, model=self.model, problems=[error])

    def rerouted(self, reason: str) -> CheckTask:
        """The task for the TensorFlow pool, after a lean worker found it could not load what it checks."""
        return replace(self, pool="full")


def inspect_artefacts(task: CheckTask) -> CheckResult:
    """Runs in the worker: describe and load the model and the scaler. Never raises."""
    result = CheckResult(ip=task.ip, model=task.model)
    for step in (_inspect_seal, _inspect_scaler, _inspect_model):  # the scaler's reason for the TF pool comes first
        try:
            step(task, result)
        except Unsupported as exc:  # only where the lean readers are all there is
            if extras.installed():  # a lean worker: the TensorFlow pool checks it
                return CheckResult(ip=task.ip, model=task.model, reroute=f"{task.ip}: {exc}")
            result.pool = "tensorflow (not installed)"
            result.problems.append(extras.needs_tensorflow(str(exc)))
        except JobError as exc:
            result.problems.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - the report says what went wrong; other IPs go on
            result.problems.append(first_line(exc))
    if result.problems:
        result.status = Status.LOAD_ERROR
    return result


def _inspect_seal(task: CheckTask, result: CheckResult) -> None:
    if task.sealed is not None and task.std is not None and task.scaler:  # an empty entry too: prediction.py
        manifest.check(task.store, task.sealed, task.model, task.scaler, std=task.std)


def _inspect_model(task: CheckTask, result: CheckResult) -> None:
    path = os.path.join(task.store, task.model)
    fmt = describe(path)
    result.format, result.keras_version, result.runtime = fmt.kind, fmt.keras_version, fmt.runtime
    try:
        loaded = load_model(path, task.engine, lean=prediction.LEAN or not extras.installed(), trust=task.trust)
    except Unsupported as exc:
        raise Unsupported(f"{task.model}: {exc}") from None
    result.timesteps = "variable" if loaded.window is None else str(loaded.window)
    result.runtime = f"{fmt.runtime} {loaded.entry}".strip()
    result.engine = loaded.engine if loaded.engine == "numpy" or task.engine == "keras" else \
        f"keras ({loaded.note.removeprefix('; ')})"
    result.pool = result.pool or ("lean" if loaded.engine == "numpy" else "tensorflow (keras engine)")
    if task.verify:
        _verify(path, loaded, task, result)


def _verify(path: str, loaded: LoadedModel, task: CheckTask, result: CheckResult) -> None:
    """Both engines on the same random windows (scaled space), seeded by the IP."""
    if loaded.engine != "numpy":
        result.verify = "keras only"
        return
    try:
        keras = load_model(path, "keras")
    except JobError as exc:
        result.verify = f"not verified: {exc}"
        return
    rng = np.random.default_rng(sum(map(ord, task.ip)))
    x = rng.uniform(0, 1, (VERIFY_WINDOWS, loaded.window or task.window, 1)).astype(np.float32)
    ours, theirs = np.asarray(loaded.predict(x), dtype=float), np.asarray(keras.predict(x), dtype=float)
    result.max_diff = float(np.max(np.abs(ours - theirs)) / max(float(np.max(np.abs(theirs))), 1e-12))
    result.verify = f"{result.max_diff:.1e}"


def _inspect_scaler(task: CheckTask, result: CheckResult) -> None:
    if not task.scaler:
        return
    path = os.path.join(task.store, task.scaler)
    if not task.trust:
        result.scaler = scalers.read_untrusted(path, one_column=True).kind
        return
    if prediction.LEAN or not extras.installed():  # joblib is not there to read it: the lean reader is all there is
        result.scaler = scalers.read_scaler(path, one_column=True).kind
        return
    result.scaler = prediction.trusted_scaler(path).kind
    try:
        scalers.read_scaler(path)
    except Unsupported as exc:
        result.pool = f"tensorflow ({exc})"


def check_store(models: str, options: RunOptions | None = None, verify: bool = False, window: int = 20
                ) -> list[CheckResult]:
    """One row per IP the store mentions, in id order. Exit 1 material: any row not `ok`."""
    options = options or RunOptions()
    if verify:
        extras.require_tensorflow("store check --verify")
    if options.engine == "keras":
        extras.require_tensorflow("--engine keras")
    store = Store(models)
    rows, tasks = {}, []
    for ip in store.ips():
        rows[ip], task = _plan(store, ip)
        if task:
            task.engine, task.verify, task.window, task.trust = options.engine, verify, window, options.trust_store
            # A lean worker checks what predict's would run; one that cannot load a file sends it on.
            task.pool = ("full" if verify else pool_for(task.model, options.engine)) if extras.installed() else "lean"
            tasks.append(task)
    for outcome in make_executor(options).run(inspect_artefacts, tasks):
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
    found: dict[str, Any] = {}
    statuses: list[Status] = []
    for name, lookup in (("model", store.model), ("scaler", store.scaler), ("std", store.std),
                         ("sealed", store.sealed)):
        try:
            found[name] = lookup(ip)
        except JobError as exc:
            row.problems.append(str(exc))
            statuses.append(Status(exc.status))
    # A file that exists but cannot be used is worse than one that is missing.
    row.status = next((s for s in (Status.INVALID_INPUT, Status.LOAD_ERROR, Status.NO_MODEL) if s in statuses),
                      Status.OK)
    row.model = found.get("model", "")
    task = CheckTask(ip=ip, store=store.root, model=row.model, scaler=found.get("scaler"), sealed=found.get("sealed"),
                     std=found.get("std"))
    return row, task if row.model else None


def report_rows(rows: list[CheckResult], window: int) -> list[list[str]]:
    """The report as text cells in COLUMNS order; a variable-timestep model is fed --window."""
    def timesteps(row: CheckResult) -> str:
        return f"variable (--window {window})" if row.timesteps == "variable" else row.timesteps

    return [[r.ip, r.status.value, r.model, r.format, r.keras_version, r.runtime, timesteps(r), r.engine, r.pool,
             r.verify, r.scaler, r.error] for r in rows]


def verdict(rows: list[CheckResult], models: str, *, verify: bool, tolerance: float) -> Verdict:
    """Exit 1 unless every IP is ok and, with --verify, every difference within `tolerance`."""
    counts = tally(row.status for row in rows)
    said, over = "", []
    if verify:
        diffs = [row.max_diff for row in rows if row.max_diff is not None]
        over = [row.ip for row in rows if row.max_diff is not None and row.max_diff > tolerance]
        said = (f"; verified {len(diffs)}, largest difference {max(diffs, default=0.0):.1e}, "
                f"{len(over)} over {tolerance:g}" + (f": {', '.join(over[:10])}" if over else ""))
    trusted = [row.ip for row in rows if "only with --trust-store" in row.error]
    said += f"; {len(trusted)} need --trust-store: {', '.join(trusted[:10])}" if trusted else ""
    return Verdict(line=f"batchpredict store check: {len(rows)} IPs in {models}: {listed(counts) or 'none found'}"
                        f"{said}",
                   code=0 if rows and counts.get("ok", 0) == len(rows) and not over else 1)


def seal(models: str) -> Verdict:
    """Write the store's manifest.json over every IP that has all its artefacts; log the others."""
    store = Store(models)
    entries, skipped = store.seal()
    path = manifest.write(store.root, entries)
    for ip, why in skipped.items():
        log.warning("%s: not sealed: %s", ip, why)
    return Verdict(line=f"batchpredict store seal: {len(entries)} IPs -> {path}"
                        + (f"; {len(skipped)} without all their artefacts not sealed" if skipped else ""),
                   fields={"event": "seal", "ips": len(entries), "skipped": len(skipped)})
