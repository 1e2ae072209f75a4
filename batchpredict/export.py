"""The anomalies CSV (docs/design.md §4) and its summary, each written atomically."""
from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections import Counter
from typing import Any

import pandas as pd

from .job import Result


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


def to_frame(results: list[Result], sigmas: tuple[float, float]) -> pd.DataFrame:
    return pd.DataFrame([row(r) for r in results], columns=columns(sigmas))


def write_csv(results: list[Result], sigmas: tuple[float, float], path: str) -> None:
    write_rows(path, columns(sigmas), [row(r) for r in results])


def write_rows(path: str, header: list[str], rows: list[list[Any]]) -> None:
    """A CSV written atomically; None is an empty cell, floats keep full precision."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([["" if cell is None else repr(cell) if isinstance(cell, float) else cell for cell in cells]
                      for cells in rows])
    write_atomic(path, buffer.getvalue())


_UMASK = os.umask(0)
os.umask(_UMASK)


def write_atomic(path: str, text: str) -> None:
    """Temporary file + rename in the same folder: a reader never sees half a file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide the output from its readers
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def summary(results: list[Result], executed: int, wall_s: float, coordinator_peak_mib: float,
            **extra: Any) -> dict:
    peaks = [r.worker_peak_rss_mib for r in results if r.worker_peak_rss_mib]
    return {
        "ips": len(results),
        "status": dict(Counter(r.status.value for r in results)),
        "severity": dict(Counter(r.severity.value for r in results if r.severity)),
        "anomalies": sum(1 for r in results if r.anomaly),
        "jobs_run": executed,
        "engines": dict(Counter(r.engine for r in results if r.engine)),
        "wall_s": round(wall_s, 3),
        "jobs_per_s": round(executed / wall_s, 3) if wall_s > 0 else None,
        "worker_peak_rss_mib": round(max(peaks), 1) if peaks else None,
        "coordinator_peak_rss_mib": round(coordinator_peak_mib, 1),
        **extra,
    }


def write_summary(path: str, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")
