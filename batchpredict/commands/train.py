"""Trains the per-IP models into the store, one isolated worker process per IP.

Each worker fits the original two-layer LSTM on its IP's rolling-mean history, then writes
`model/<ip>.<format>`, `sc/<ip>.save` and its `std/std.json` entry, each atomically, with a marker beside them
meanwhile (`_save`).
"""
from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import extras
from ..errors import IO_ERRORS, Interrupted, JobError, UsageError, first_line, signals_raise, writing
from ..io import manifest
from ..io.files import foreign, remove_leftovers, replaced, sync_folder, write_atomic
from ..io.output import write_rows
from ..io.store import SAVING, Store, model_names
from ..io.table import read_table
from ..job import Params, RunOptions
from ..result import Outcome, Status
from ..scoring.engine import cache
from ..scoring.features import rolling_series
from ..status import listed, tally
from .verdict import Verdict

log = logging.getLogger("batchpredict")

FORMATS = ("h5", "keras", "savedmodel")
_ROOM = 2**20  # bytes free below which a failed write is taken for a full disk
REPORT = "train_report.csv"  # in the store, one row per IP trained
STD_LOCK = os.path.join("std", "std.json.lock")  # in the store: std.json's writers, one at a time (merge_stds)
REPORT_COLUMNS = ["ip", "status", "error", "model", "epochs", "train_loss", "holdout_loss", "std", "duration_ms",
                  "worker_peak_rss_mib"]


@dataclass(kw_only=True)
class TrainResult(Outcome):
    model: str = ""
    epochs: int | None = None
    train_loss: float | None = None
    holdout_loss: float | None = None
    std: float | None = None
    sealed: dict | None = None  # its manifest.json entry, hashed in the worker once the files are written


@dataclass(kw_only=True)
class TrainJob:
    ip: str
    values: list[float]
    store: str
    format: str = "h5"
    params: Params = field(default_factory=Params)
    epochs: int = 30
    holdout: float = 0.2
    seed: int = 0
    pool = "full"  # training needs TensorFlow

    def failed(self, status: Status, error: str) -> TrainResult:
        return TrainResult(ip=self.ip, status=status, error=error)


def ip_seed(seed: int, ip: str) -> int:
    """A per-IP seed: stable across runs, different across IPs."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{ip}".encode()).digest()[:4], "big")


def windows(scaled: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Sliding windows of `window` values -> the value after each."""
    count = len(scaled) - window
    x = np.stack([scaled[i:i + window] for i in range(count)])[..., None].astype(np.float32)
    return x, scaled[window:].reshape(-1, 1).astype(np.float32)


def architecture(window: int):  # noqa: ANN201 - keras is imported lazily
    import keras

    return keras.Sequential([keras.Input((window, 1)), keras.layers.LSTM(64, return_sequences=True),
                             keras.layers.LSTM(32), keras.layers.Dense(1)])


def train_ip(job: TrainJob) -> TrainResult:
    """Runs in the worker. Never raises: a failure leaves the IP's previous artefacts in place."""
    try:
        return _train(job)
    except JobError as exc:
        return job.failed(Status(exc.status), str(exc))
    except Exception as exc:  # noqa: BLE001 - the report says what went wrong; other IPs go on
        return job.failed(Status.ERROR, first_line(exc))


def _train(job: TrainJob) -> TrainResult:
    import keras
    import tensorflow as tf
    from sklearn.preprocessing import MinMaxScaler

    # One thread and deterministic kernels: same data and seed give the same weights.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(ip_seed(job.seed, job.ip))

    window = job.params.window
    smoothed = rolling_series(np.asarray(job.values, dtype=float), job.params.rolling)
    # Counted before any array is made: a series shorter than --rolling smooths to nothing (the scaler's fit
    # raised), and a --window past the series made an empty array of that many timesteps (numpy raised).
    count = max(len(smoothed) - window, 0)
    held = int(round(count * job.holdout))
    if held < 2 or count - held < 2:
        raise JobError(Status.INSUFFICIENT_DATA, f"{len(job.values)} values are too few to train with rolling "
                                                 f"{job.params.rolling}, window {window} and holdout {job.holdout}")
    scaler = MinMaxScaler().fit(smoothed.reshape(-1, 1))
    scaled = scaler.transform(smoothed.reshape(-1, 1)).ravel()
    x, y = windows(scaled, window)
    fit_x, fit_y, hold_x, hold_y = x[:-held], y[:-held], x[-held:], y[-held:]

    model = architecture(window)
    model.compile(optimizer=keras.optimizers.Adam(), loss="mse")
    stop = keras.callbacks.EarlyStopping(patience=5, restore_best_weights=True)
    history = model.fit(fit_x, fit_y, validation_data=(hold_x, hold_y), epochs=job.epochs, batch_size=32,
                        callbacks=[stop], verbose=0, shuffle=True)
    predicted = scaler.inverse_transform(model.predict(hold_x, verbose=0))
    std = float(np.std(scaler.inverse_transform(hold_y) - predicted, ddof=1))
    if not np.isfinite(std):
        raise JobError(Status.ERROR, "training diverged: residual std is not finite")

    # Saved without the optimizer: the store holds what prediction needs, a third of the size.
    plain = architecture(window)
    plain.set_weights(model.get_weights())
    scaler_path = os.path.join("sc", job.ip + ".save")
    relative = _save(job, plain, scaler, std=std, scaler_path=scaler_path)
    losses = history.history
    best = int(np.argmin(losses["val_loss"]))
    return TrainResult(ip=job.ip, model=relative, epochs=len(losses["loss"]), train_loss=float(losses["loss"][best]),
                       holdout_loss=float(losses["val_loss"][best]), std=std,
                       sealed=manifest.entry(job.store, relative, scaler_path, std))


def _save(job: TrainJob, model, scaler, *, std: float, scaler_path: str) -> str:  # noqa: ANN001
    """The IP's model, scaler and std, in turn, with its marker (store.SAVING) in model/ meanwhile: a run
    killed between two of them leaves the marker, and predict a load_error saying so, never a new model read
    with the old std. A disk error in any of them (h5py names none) is the IP's error, named as one."""
    folder = os.path.join(job.store, "model")
    marker = os.path.join(folder, SAVING.format(ip=job.ip))
    try:
        os.makedirs(folder, exist_ok=True)
        with open(marker, "w"):
            pass
        sync_folder(folder)  # on disk before the first artefact is replaced
        try:
            relative = _save_model(model, job)
        except BaseException:
            _unlink(marker)  # the model is replaced whole or not at all: the old one still goes with its scaler
            raise
        _save_scaler(scaler, os.path.join(job.store, scaler_path))
        merge_stds(job.store, {job.ip: std})
    except Exception as exc:
        full = _disk_error(exc, job.store)
        if full:
            raise JobError(Status.ERROR, f"{full} writing the model, scaler and std of {job.ip} in "
                                         f"{job.store}") from exc
        raise
    _unlink(marker)
    return relative


def _disk_error(exc: BaseException, store: str) -> str | None:
    """What a failed write says of the disk: an OSError's errno anywhere in the chain, or a store whose disk has
    no room left (h5py turns ENOSPC into "Can't destroy cache")."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in IO_ERRORS:
            return IO_ERRORS[seen.errno]
        seen = seen.__cause__ or seen.__context__
    with contextlib.suppress(OSError):
        disk = os.statvfs(store)
        if disk.f_bavail * disk.f_frsize < _ROOM:
            return IO_ERRORS[errno.ENOSPC]
    return None


def _save_model(model, job: TrainJob) -> str:  # noqa: ANN001
    folder = os.path.join(job.store, "model")
    os.makedirs(folder, exist_ok=True)
    final = os.path.join(folder, job.ip if job.format == "savedmodel" else f"{job.ip}.{job.format}")
    if job.format == "savedmodel":
        staging = tempfile.mkdtemp(dir=folder, prefix=f".{job.ip}.")
        try:
            built = os.path.join(staging, "export")
            model.export(built, verbose=False)
            _replace_dir(built, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    else:
        with replaced(final, keep_suffix=True) as built:
            model.save(built)
        cache.fill(final)  # the night's lean workers then never open it with h5py
    # Exactly one artefact per IP: a model retrained in another format replaces the old one.
    for other in (os.path.join(folder, name) for name in model_names(job.ip)):
        if other != final:
            shutil.rmtree(other, ignore_errors=True) if os.path.isdir(other) else _unlink(other)
    return os.path.relpath(final, job.store)


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _replace_dir(new: str, final: str) -> None:
    old = None
    if os.path.exists(final):
        old = final + ".old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(new, final)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def _save_scaler(scaler, path: str) -> None:  # noqa: ANN001
    import joblib

    with replaced(path) as tmp:
        joblib.dump(scaler, tmp)


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def merge_stds(store: str, entries: dict[str, float]) -> None:
    """Read-modify-write std.json under a lock, replaced atomically: no entry is ever lost."""
    path = os.path.join(store, "std", "std.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _locked(os.path.join(store, STD_LOCK)):
        current = {}
        if os.path.exists(path):
            with open(path) as fh:
                current = json.load(fh)
        current.update(entries)
        write_atomic(path, json.dumps(current, indent=1, sort_keys=True) + "\n")


def train_table(data: str, models: str, fmt: str = "h5", params: Params = Params(), *, epochs: int = 30,
                holdout: float = 0.2, seed: int = 0, ips: list[str] | None = None,
                options: RunOptions | None = None) -> list[TrainResult]:
    """Train every (or each named) IP of the history table; writes `<models>/train_report.csv`."""
    from ..runtime.backend import make_executor

    extras.require_tensorflow("train")
    store = _store_for(models, fmt, holdout)
    report = os.path.join(models, REPORT)
    table = read_table(data)
    wanted = set(ips) if ips else None
    if wanted and wanted - {s.ip for s in table}:
        raise UsageError(f"not in {data}: {', '.join(sorted(wanted - {s.ip for s in table}))}")
    results: dict[str, TrainResult] = {}
    jobs = []
    for series in table:
        if wanted is not None and series.ip not in wanted:
            continue
        try:
            store.check_ip(series.ip)
            if series.problem:
                raise JobError(Status.INVALID_INPUT, series.problem)
        except JobError as exc:
            results[series.ip] = TrainResult(ip=series.ip, status=Status(exc.status), error=str(exc))
            continue
        jobs.append(TrainJob(ip=series.ip, values=series.values.tolist(), store=store.root, format=fmt, params=params,
                             epochs=epochs, holdout=holdout, seed=seed))
    stopped = None
    try:
        # A stop kills the workers (the executor's way out), then the IPs trained before it are reported and sealed
        # as a whole run's are: SIGTERM ended train at once, without a word, and an IP it had retrained kept its
        # old manifest entry (a checksum mismatch the next night, as if someone had changed its files).
        with signals_raise():
            for outcome in make_executor(options or RunOptions()).run(train_ip, jobs):
                results[outcome.ip] = outcome
    except Interrupted as exc:
        stopped = exc
    ordered = [results[s.ip] for s in table if s.ip in results]
    with writing(report):
        write_report(ordered, report)
    sealed = {r.ip: r.sealed for r in ordered if r.status is Status.OK and r.sealed}
    if sealed and store.manifest is None:  # a first manifest lists the IPs trained before too, as they are
        before, _ = store.seal(skip=set(sealed))
        if before:
            log.info("train: %s also lists %d IPs this run did not train, as found", manifest.FILE, len(before))
        sealed = {**before, **sealed}
    if sealed:  # with a manifest there already, the entries of IPs this run did not train stay as they were
        with writing(os.path.join(store.root, manifest.FILE)):
            manifest.write(store.root, sealed, keep=True)
    if stopped:
        raise Interrupted(stopped.signum, f"the {len(ordered)} IPs answered before it are in {report} and "
                                          f"{manifest.FILE}; train the others again") from None
    return ordered


def _store_for(models: str, fmt: str, holdout: float) -> Store:
    """The store to train into, made if need be, once the settings are known to be usable."""
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if not 0 < holdout < 1:
        raise UsageError(f"--holdout must be between 0 and 1, not {holdout}")
    try:
        os.makedirs(models, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot make the store folder --models {models}: {exc.strerror or exc}") from None
    # Found once an IP had trained, each failed late: a report that was a FIFO hung train for good after the last
    # IP, a folder was a traceback, neither sealed; a lock that was a folder failed every IP after its model and
    # scaler were replaced (each then a load_error until trained again).
    for own, what in ((REPORT, "a report"), (STD_LOCK, "a lock")):
        path = os.path.join(models, own)
        kind = foreign(path)
        if kind:
            raise UsageError(f"{path} is {kind}, not {what}: train writes that file itself; remove it")
    for folder in ("model", "sc", "std"):  # what killed trainers were writing
        remove_leftovers(os.path.join(models, folder))
    return Store(models, fresh=True)


def verdict(results: list[TrainResult], models: str) -> Verdict:
    """Each IP not trained logged with why; exit 1 unless every IP is ok."""
    for r in results:
        if r.status is not Status.OK:
            log.warning("%s: %s: %s", r.ip, r.status.value, r.error)
    counts = tally(r.status for r in results)
    return Verdict(line=f"batchpredict train: {len(results)} IPs -> {models}: {listed(counts)}",
                   fields={"event": "summary", "ips": len(results), "status": counts},
                   code=0 if counts.get("ok", 0) == len(results) else 1)


def write_report(results: list[TrainResult], path: str) -> None:
    """Updates the report: rows of IPs trained now replace their old rows, other IPs' rows stay."""
    rows: dict[str, list[Any]] = {
        r.ip: [r.ip, r.status.value, r.error, r.model, r.epochs, r.train_loss, r.holdout_loss, r.std,
               None if r.duration_ms is None else round(r.duration_ms, 1), r.worker_peak_rss_mib]
        for r in results}
    rows = {**_old_rows(path), **rows}
    write_rows(path, REPORT_COLUMNS, list(rows.values()))


def _old_rows(path: str) -> dict[str, list[str]]:
    """The report's rows by IP, those of this header's fields only: a row of other fields would shift the columns
    it is written in. A report that cannot be read (not UTF-8, not CSV) is one warning, and its rows are dropped:
    raising here would come after the IPs were trained, and before their manifest entries are written."""
    try:
        with open(path, newline="") as fh:
            lines = list(csv.reader(fh))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        log.warning("train: %s is unreadable (%s); its rows of IPs not trained now are dropped", path,
                    first_line(exc))
        return {}
    if lines and lines[0] != REPORT_COLUMNS:
        log.warning("train: %s has another header; its rows of IPs not trained now are dropped", path)
        return {}
    bad = sum(1 for line in lines[1:] if line and len(line) != len(REPORT_COLUMNS))
    if bad:
        log.warning("train: %s: %d rows without the header's %d fields dropped", path, bad, len(REPORT_COLUMNS))
    return {line[0]: line for line in lines[1:] if len(line) == len(REPORT_COLUMNS)}
