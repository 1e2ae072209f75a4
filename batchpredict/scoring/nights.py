"""A night that continues the one before (`--history DIR`): the series tonight's table and the IP's history
make together, the model's predictions the night before left for it, and what it leaves for the next.

    history (values, predictions) ─┐
                                   ├─► joined: the history's values before the table's first label, then
    tonight's table (from its      │   the table (which wins where both hold a bucket)
    first label on) ───────────────┘
    stored predictions reused where the model, the scaler, the window and the engine are the same

The joined series is the one a stateless run sees on a table that holds every bucket since DIR began, so
every row is the same: the values, the fill of a missing value (the history's running sum and count), and
the model's predictions (prediction.predicted pads every batch alike, so a window's prediction does not
depend on the others computed with it).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace

import numpy as np

from ..errors import writing
from ..io import history, manifest
from ..job import Job


@dataclass(frozen=True, kw_only=True)
class Joined:
    labels: list[str]  # the table's: those of values[offset:]
    values: np.ndarray
    before: tuple[float, int] | None  # sum and count of the numeric values before the first of `values`
    offset: int = 0  # where the table begins in `values`: what came before is the history's
    origin: int = 0  # the place of values[0] in the series since the history began: the table's start without one
    stored: np.ndarray | None = None  # the history's predictions of values[reused - len(stored):reused]
    reused: int = 0  # the end of what the history holds alike: its values before the table, and those it
    # holds as the table does (bit for bit) from the table's start on, whose predictions are the same
    note: str = ""  # why the history was not used, for the log
    encoded: np.ndarray | None = None  # every label of `values` as the history holds them (history.encoded),
    # where join read them; else the table's are encoded when the file is left

    def timestamps(self, positions: np.ndarray) -> list[str]:
        """The labels of the table's points at `positions` (indices into `values`, none before `offset`)."""
        labels = self.labels
        return [labels[at] for at in (positions - self.offset).tolist()]

    def kept_predictions(self, first: int, count: int) -> np.ndarray:
        """The history's predictions of the points from `first` on (at most `count`, contiguous), none unless
        it holds the first's."""
        if self.stored is None or not self.reused - len(self.stored) <= first < self.reused:
            return np.empty(0)
        at = first - (self.reused - len(self.stored))
        return self.stored[at:at + count]


def key(job: Job, *, window: int, engine: str, model: dict | None = None) -> str:
    """What a prediction depends on besides the values: the model's and the scaler's files, the window, the
    rolling mean and the engine. `model`: the model file's manifest.digest where the caller has it (the
    numpy engine hashed the file to read it), so that it is not hashed again."""
    files = {rel: model if model is not None and rel == job.model else manifest.digest(os.path.join(job.store, rel))
             for rel in manifest.files_of(job.store, job.model, job.scaler)}
    said = json.dumps({"files": files, "window": window, "rolling": job.params.rolling, "engine": engine},
                      sort_keys=True)
    return hashlib.sha256(said.encode()).hexdigest()


def join(job: Job, folder: str, current: str) -> Joined:
    """The IP's series with its history before it; the table alone where there is none that lines up."""
    table = alone(job)
    path = history.path_of(folder, job.ip)
    try:
        kept = history.read(path)
    except history.Unreadable as exc:
        return alone(job, f"{path}: {exc}")
    if kept is None or not job.labels:
        return table
    if kept.ip and kept.ip != job.ip:  # its labels would line up (a wide table's IPs share them): its values not
        return alone(job, f"{path}: it is the history of {kept.ip}")
    if not len(kept.labels):  # nothing to join, and no first label to place the table by
        return alone(job, f"{path}: it holds no values")
    labels = history.encoded(job.labels)
    start = _start(kept.labels, labels)
    if start is None:
        back = np.flatnonzero(labels == kept.labels[0])
        if len(back):  # the table reaches back further than the history: it has it all, and the same places
            return replace(table, origin=kept.origin - int(back[0]))
        return alone(job, f"{path}: its labels ({_text(kept.labels[0])} ... {_text(kept.labels[-1])}) do not line "
                             f"up with the table's ({job.labels[0]} ...)")
    both = kept.values[start:start + len(table.values)]
    alike = both.view("<i8") == table.values[:len(both)].view("<i8")
    reused = start + (len(alike) if alike.all() else int(np.argmin(alike)))
    first = len(kept.labels) - len(kept.predicted)  # the history holds predictions from this value on
    stored = kept.predicted[:reused - first] if kept.key == current and reused > first else None
    return Joined(labels=job.labels, values=np.concatenate([kept.values[:start], table.values]), before=kept.before,
                  offset=start, origin=kept.origin, stored=stored, reused=reused,
                  encoded=np.concatenate([kept.labels[:start], labels]))


def leave(job: Job, folder: str, joined: Joined, *, keep: int, predicted: np.ndarray, current: str) -> None:
    """The IP's file for the next night: the last `keep` values (with the sum and count of those before
    them) and the predictions of the last of them."""
    cut = max(0, len(joined.values) - keep)
    dropped = joined.values[:cut]
    total, count = joined.before or (0.0, 0)
    numeric = ~np.isnan(dropped)
    if numeric.any():  # accumulated in order, as scored_windows' running sum is: the same float
        total = float(np.cumsum(np.concatenate([[total], dropped[numeric]]))[-1])
        count += int(numeric.sum())
    values = joined.values[cut:]
    path = history.path_of(folder, job.ip)
    with writing(path):  # a full disk, as errors.IO_ERRORS says, is an OutputError naming the file
        labels = history.encoded(joined.labels) if joined.encoded is None else joined.encoded
        history.write(path, history.History(labels=labels[cut:], values=values, before=(total, count), key=current,
                                            predicted=predicted[-len(values):], origin=joined.origin + cut,
                                            ip=job.ip))


def alone(job: Job, note: str = "") -> Joined:
    """The table's series without a history; `note` says why there is none, where one was looked for."""
    return Joined(labels=job.labels, values=np.asarray(job.values, dtype=float), before=None, note=note)


def _start(kept: np.ndarray, labels: np.ndarray) -> int | None:
    """Where the table's first label falls in the history, if the buckets both hold carry the same labels;
    the history's length where the table begins one step after it. Both as history.encoded."""
    found = np.flatnonzero(kept == labels[0])
    if not len(found):
        return len(kept) if _follows(kept, labels) else None
    at = int(found[0])
    overlap = kept[at:at + len(labels)]
    return at if bool((overlap == labels[:len(overlap)]).all()) else None


def _follows(kept: np.ndarray, labels: np.ndarray) -> bool:
    """The table's first label one of the history's steps after its last, where the labels are times."""
    if len(kept) < 2:
        return False
    try:
        times = np.array([_text(kept[-2]), _text(kept[-1]), _text(labels[0])], dtype="datetime64[s]")
    except ValueError:
        return False
    step = times[1] - times[0]
    return bool(step > np.timedelta64(0, "s") and times[2] - times[1] == step)


def _text(label: bytes) -> str:
    return label.decode(errors="replace")
