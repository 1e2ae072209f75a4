"""One prediction job (the per-IP algorithm, docs/design.md §3), run inside an isolated worker process."""
from __future__ import annotations

import os

import numpy as np

from .. import extras
from ..errors import JobError, OutputError, Unsupported, first_line
from ..io import manifest
from ..job import Job
from ..result import Points, Result, Status
from . import alerting, loading, nights, scalers
from .anomaly import point_stds, verdicts
from .engine.products import BLOCK
from .features import windowed
from .loading import LoadedModel, load_model
from .method import ENSEMBLE

# True in workers forked from the lean forkserver (preload/lean.py): no TensorFlow, no scikit-learn
# to fall back on, so a job that needs either is sent back to run in the TensorFlow pool.
LEAN = False


def run_job(job: Job) -> Result:
    """Score one IP's points. Never raises: every failure becomes the row's status and one-line error."""
    result = Result(ip=job.ip, model=job.model, timestamp=job.labels[-1] if job.labels else "")
    try:
        _score(job, result)
    except Unsupported as exc:  # only where LEAN: the TensorFlow pool runs it, where it is installed
        if extras.installed():
            result.reroute = f"{job.ip}: {exc}"
        else:
            result.status, result.error = Status.LOAD_ERROR, extras.needs_tensorflow(str(exc))
    except JobError as exc:
        result.status, result.error = Status(exc.status), str(exc)
    except Exception as exc:  # noqa: BLE001 - the row says what went wrong; the run goes on
        result.status, result.error = Status.ERROR, first_line(exc)
    return result


def _scaler(path: str, trust: bool) -> scalers.Scaler:
    """The IP's scaler. joblib, which runs whatever a pickle holds, only for a trusted store and only in the
    TensorFlow pool."""
    if not trust:
        return scalers.read_untrusted(path, one_column=True)
    return scalers.read_scaler(path, one_column=True) if LEAN else trusted_scaler(path)


def trusted_scaler(path: str) -> scalers.Scaler:
    """A job's scaler as joblib reads it, its statistics checked as the lean reader checks its own."""
    loaded = loading.load_scaler(path)
    scalers.check_statistics(loaded.name, loaded.model.states, one_column=True)
    return loaded


def _score(job: Job, result: Result) -> None:
    params = job.params
    result.debug += [f"{note}; run in the TensorFlow pool" for note in job.notes]
    # Before anything of the IP's is read. `is not None`: an entry that is empty or of another type (`{}`, `[]`,
    # `0`) is a damaged manifest's, which check() refuses, not an IP the store left unsealed.
    if job.sealed is not None:
        manifest.check(job.store, job.sealed, job.model, job.scaler, std=job.std)
    scaler = _scaler(os.path.join(job.store, job.scaler), job.trust)
    result.debug.append(f"{job.ip}: {scaler.note}")
    model = load_model(os.path.join(job.store, job.model), job.engine, lean=LEAN, trust=job.trust)
    result.engine = model.engine
    result.debug.append(f"{job.ip}: {job.model}: {model.format}{' ' + model.entry if model.entry else ''}, "
                        f"timesteps {model.window or 'variable'}{model.note}")
    window = params.window
    if model.window is not None and model.window != window:
        result.log.append(f"{job.ip}: model declares {model.window} timesteps; using them instead of --window {window}")
        window = model.window
    kind, count = job.std_mode
    method = job.method.at(job.step) if job.method else None
    joined, current = _joined(job, result, window=window, model=model)
    start = joined.offset + job.start()
    # --std rolling:N / mad:N and the alerting stage also score the points before the first one, for their
    # residuals only: each point's std and alert depend on that many points before it.
    history = max(count, method.history() if method else 0)
    # The ensemble's value rules look further back, at the observed values only: no model call for those.
    reach = max(history, method.value_history() if method else 0)
    found = windowed(joined.values, params.rolling, window, max(0, start - reach), before=joined.before)
    values = found.observed
    modelled = int(np.searchsorted(found.positions, start - history))
    positions, observed = found.positions[modelled:], values[modelled:]
    stored = joined.kept_predictions(int(positions[0]), len(positions)) if len(positions) else np.empty(0)
    # The windows of only the points the model is asked about: those the history holds no prediction of.
    asked = positions[len(stored):]
    predicted = np.concatenate([stored, _predicted(model, scaler, found.inputs(modelled + len(stored)),
                                                   at=joined.origin + asked if len(positions) > 1 or history > 0
                                                   else None)])
    if job.history:
        result.debug.append(f"{job.ip}: history: {joined.offset} values before the table, {len(stored)} of "
                            f"{len(predicted)} predictions kept from the night before")
    residuals = observed - predicted
    stds, rolled = point_stds(residuals, job.std, kind, count)
    # Every point's bands and verdict, the history's too: the alerting stage falls back on its critical ones.
    lowers, uppers, anomaly, severity = verdicts(observed, predicted, stds, params.sigmas)
    keep = slice(int(np.searchsorted(positions, start)), None)  # positions ascend: the points to write
    alert = score = judged = rule = None
    if method:
        # The value rules read the values' mean over a duration, as the rolling mean is at 5-minute steps.
        ruled = found.smoothed(method.smooth) if method.name == ENSEMBLE else values
        alert, score, judged, rule = (a[keep] for a in alerting.alerts(residuals, severity == 2, job.std, method,
                                                                         observed=ruled))
    if job.history:
        # What the next night's alerts read, though tonight gives none (--points 1).
        rules = method or (job.kept.at(job.step) if job.kept else None)
        before = max(reach, rules.value_history() if rules else 0)
        result.outage = _leave(job, job.history, joined, predicted=predicted, current=current,
                               keep=before + max(window + params.rolling, rules.smooth if rules else 0)
                               + len(observed[keep]))
    result.points = Points(joined.timestamps(positions[keep]), observed[keep], predicted[keep], stds[keep],
                           lower=lowers[:, keep], upper=uppers[:, keep], anomaly=anomaly[keep],
                           severity=severity[keep], rolled=rolled[keep], std_mode=params.std, alert=alert,
                           score=score, judged=judged, method=method.name if method else "", rule=rule)


_CACHED = 16  # blocks in one call of the numpy engine


def _predicted(model: LoadedModel, scaler: scalers.Scaler, inputs: np.ndarray, *,
               at: np.ndarray | None) -> np.ndarray:
    """The model's prediction after each window: the model, the scaler and the arithmetic are per row.

    `at`: each window's place in the series since its history began (where the job's windows are more than
    its one scored point's). Each window then goes in the block of products.BLOCK rows that place falls in,
    at its place in it, and the blocks are computed alike (products.py): a window's prediction depends on
    nothing else, so a night continued from its history (--history) gives the bits of one run whole."""
    if not len(inputs):
        return np.empty(0)
    window = inputs.shape[1]
    x = scaler.transform(inputs.reshape(-1)).reshape(len(inputs), window, 1).astype(np.float32)
    rows = np.arange(len(x))
    if at is not None:
        rows = at - (at[0] - at[0] % BLOCK)
        placed = np.zeros((-(-(int(rows[-1]) + 1) // BLOCK) * BLOCK, window, 1), np.float32)
        placed[rows] = x
        x = placed
    # TensorFlow is called a block at a time, one shape for every call. The numpy engine multiplies its own
    # blocks alike, so it takes as many as keep a step's arrays in the CPU's caches: a stateless night's 1,644
    # windows in calls of 512 take a sixth less time than in one.
    step = _CACHED * BLOCK if model.engine == "numpy" else BLOCK
    calls = [x] if at is None else np.split(x, range(step, len(x), step))
    # One value per window, (batch, 1) or (batch,): LoadedModel.predict refuses any other output.
    raw = np.concatenate([np.asarray(model.predict(call), dtype=float).reshape(len(call), 1) for call in calls])
    predicted = scaler.inverse_transform(raw[rows])[:, 0]
    finite = np.isfinite(predicted)
    if not finite.all():
        raise JobError(Status.ERROR, f"model returned {predicted[~finite][0]} for a finite window")
    return predicted


def _joined(job: Job, result: Result, *, window: int, model: LoadedModel) -> tuple[nights.Joined, str]:
    """The IP's series (with its history, under --history) and what its predictions depend on."""
    if not job.history:
        return nights.alone(job), ""
    current = nights.key(job, window=window, engine=model.engine, model=model.digest)
    joined = nights.join(job, job.history, current)
    if joined.note:
        result.log.append(f"{job.ip}: no history: {joined.note}; scored from the table alone")
    return joined, current


def _leave(job: Job, folder: str, joined: nights.Joined, *, predicted: np.ndarray, current: str, keep: int) -> str:
    """The IP's history for the next night. A disk that takes no more (errors.IO_ERRORS) is the run's to stop
    on, and returned; any other error writing it fails the job, which says why."""
    try:
        nights.leave(job, folder, joined, keep=keep, predicted=predicted, current=current)
    except OutputError as exc:
        return str(exc)
    except OSError as exc:
        raise JobError(Status.ERROR, f"history not written to {folder}: {exc.strerror or exc}") from None
    return ""
