"""The anomalies CSV (docs/design.md §4) and its summary, each written atomically."""
from __future__ import annotations

import csv
import itertools
import json
import os
import tempfile
from typing import Any, Iterable

import numpy as np
import pandas as pd

from .job import Result, Severity, Status


def columns(sigmas: tuple[float, float]) -> list[str]:
    bands = [f"{side}_{k:g}std" for k in sigmas for side in ("lower", "upper")]
    return (["ip", "timestamp", "observed", "predicted", "std"] + bands
            + ["anomaly", "severity", "status", "error", "model", "attempts", "duration_ms", "worker_pid",
               "worker_peak_rss_mib"])


def row(result: Result) -> list[Any]:
    """The result as CSV cells; None is an empty cell, floats keep full precision."""
    bands = [v for pair in zip(result.lower, result.upper) for v in pair] or [None] * 4
    anomaly = None if result.anomaly is None else ("true" if result.anomaly else "false")
    return [result.ip, result.timestamp, result.observed, result.predicted,
            result.std if result.predicted is not None else None, *bands, anomaly,
            result.severity.value if result.severity else None, result.status.value, result.error,
            result.model, result.attempts,
            None if result.duration_ms is None else round(result.duration_ms, 1), result.worker_pid,
            None if result.worker_peak_rss_mib is None else round(result.worker_peak_rss_mib, 1)]


def rows(result: Result) -> list[list[Any]]:
    """The CSV rows of one result."""
    return [row(result)]


def write_rows(path: str, header: list[str], rows: list[list[Any]]) -> None:
    """A CSV written atomically; None is an empty cell, floats keep full precision."""
    text = _Writer()
    write_atomic(path, [text.render([header]), text.render(rows)])


class _Writer:
    """CSV text of rows: the csv module writes None as an empty cell and a float as its repr (full precision)."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._csv = csv.writer(self, lineterminator="\n")  # it writes each row here, whole

    def write(self, line: str) -> None:
        self._lines.append(line)

    def render(self, rows: list[list[Any]]) -> str:
        self._csv.writerows(rows)
        text = "".join(self._lines)
        self._lines.clear()
        return text


_STATUSES = {status: code for code, status in enumerate(Status, 1)}
_SEVERITIES = {severity: code for code, severity in enumerate(Severity, 1)}


class Rows:
    """A run's finished rows by table position, kept small: each IP's rows as CSV text (as cells where a
    DataFrame is wanted) and the few codes its summary counts, a byte each.

    A position may be put again (an IP found twice in the table): its new row replaces the old one.
    """

    def __init__(self, sigmas: tuple[float, float], cells: bool = False) -> None:
        self.header = columns(sigmas)
        self._cells = cells
        self._rows: list[Any] = []  # per position: CSV text, or the list of cell rows
        # Per position, a byte each: status and severity (1 + their index, 0 for none; a status of 0 is a
        # position not finished yet), anomaly (1 for true), engine (1 + index in self._engines, 0 for none).
        self._codes = bytearray()
        self._engines: list[str] = []
        self._peaks: dict[int, float] = {}  # worker peak RSS (MiB) of the positions that have one
        self._writer = _Writer()

    def put(self, position: int, result: Result) -> None:
        if position >= len(self._rows):
            missing = position + 1 - len(self._rows)
            self._rows += [None] * missing
            self._codes += bytes(4 * missing)
        cells = rows(result)
        self._rows[position] = cells if self._cells else self._writer.render(cells)
        engine = result.engine
        if engine and engine not in self._engines:
            self._engines.append(engine)
        self._codes[4 * position:4 * position + 4] = bytes((
            _STATUSES[result.status], _SEVERITIES[result.severity] if result.severity else 0,
            1 if result.anomaly else 0, self._engines.index(engine) + 1 if engine else 0))
        if result.worker_peak_rss_mib:
            self._peaks[position] = result.worker_peak_rss_mib
        elif self._peaks:
            self._peaks.pop(position, None)

    def __len__(self) -> int:
        return len(self._rows)

    def write_csv(self, path: str) -> None:
        unfinished = self._codes[::4].find(0)
        if unfinished >= 0:
            raise RuntimeError(f"row {unfinished} of {path} was never finished")
        render = self._writer.render if self._cells else str
        write_atomic(path, itertools.chain([self._writer.render([self.header])], map(render, self._rows)))

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([cells for position in self._rows for cells in position], columns=self.header)

    def counts(self) -> dict:
        """The summary's counts, each in order of first appearance in the table."""
        status, severity, anomaly, engine = np.frombuffer(bytes(self._codes), dtype=np.uint8).reshape(-1, 4).T
        peaks = list(self._peaks.values())
        return {"ips": len(self._rows),
                "status": _tally(status, [s.value for s in Status]),
                "severity": _tally(severity, [s.value for s in Severity]),
                "anomalies": int(anomaly.sum()),
                "engines": _tally(engine, self._engines),
                "worker_peak_rss_mib": round(max(peaks), 1) if peaks else None}


def _tally(codes: np.ndarray, names: list[str]) -> dict[str, int]:
    found, first, counts = np.unique(codes, return_index=True, return_counts=True)
    return {names[code - 1]: int(count) for _, code, count in sorted(zip(first, found, counts)) if code}


_UMASK = os.umask(0)
os.umask(_UMASK)


def write_atomic(path: str, text: str | Iterable[str]) -> None:
    """Temporary file + rename in the same folder: a reader never sees half a file. `text` may come in pieces."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide the output from its readers
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.writelines([text] if isinstance(text, str) else text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def summary(counts: dict, executed: int, wall_s: float, coordinator_peak_mib: float, **extra: Any) -> dict:
    """The run's summary.json: `counts` from Rows.counts, then how the run went."""
    peak = counts["worker_peak_rss_mib"]
    return {
        **{k: counts[k] for k in ("ips", "status", "severity", "anomalies")},
        "jobs_run": executed,
        "engines": counts["engines"],
        "wall_s": round(wall_s, 3),
        "jobs_per_s": round(executed / wall_s, 3) if wall_s > 0 else None,
        "worker_peak_rss_mib": peak,
        "coordinator_peak_rss_mib": round(coordinator_peak_mib, 1),
        **extra,
    }


def write_summary(path: str, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")
