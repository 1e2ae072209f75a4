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

from .events import EVENT_COLUMNS, collapse
from .job import Point, Result


def columns(sigmas: tuple[float, float], std_source: bool = False) -> list[str]:
    """The CSV's header; `std_source` (any --std but store) adds the column saying which std a row used."""
    bands = [f"{side}_{k:g}std" for k in sigmas for side in ("lower", "upper")]
    return (["ip", "timestamp", "observed", "predicted", "std"] + ["std_source"] * std_source + bands
            + ["anomaly", "severity", "status", "error", "model", "attempts", "duration_ms", "worker_pid",
               "worker_peak_rss_mib"])


def rows(result: Result, std_source: bool = False) -> list[list[Any]]:
    """The result's CSV rows: one per scored point, in time order, or one saying why there is none."""
    return [row(result, point, std_source) for point in result.points] or [row(result, None, std_source)]


def row(result: Result, point: Point | None, std_source: bool = False) -> list[Any]:
    """One point of the result as CSV cells; None is an empty cell, floats keep full precision."""
    if point is None:
        values = [result.timestamp] + [None] * (9 + std_source)
    else:
        anomaly = "true" if point.anomaly else "false"
        values = [point.timestamp, point.observed, point.predicted, point.std, *[point.std_source] * std_source,
                  *[v for pair in zip(point.lower, point.upper) for v in pair], anomaly, point.severity.value]
    return [result.ip, *values, result.status.value, result.error, result.model, result.attempts,
            None if result.duration_ms is None else round(result.duration_ms, 1), result.worker_pid,
            None if result.worker_peak_rss_mib is None else round(result.worker_peak_rss_mib, 1)]


def to_frame(results: list[Result], sigmas: tuple[float, float], std_source: bool = False) -> pd.DataFrame:
    return pd.DataFrame([cells for r in results for cells in rows(r, std_source)], columns=columns(sigmas, std_source))


def write_csv(results: list[Result], sigmas: tuple[float, float], path: str, std_source: bool = False) -> None:
    write_rows(path, columns(sigmas, std_source), [cells for r in results for cells in rows(r, std_source)])


def events(frame: pd.DataFrame) -> pd.DataFrame:
    """The alert events of an output frame (events.collapse): each run of flagged points of one IP."""
    scored = frame[frame["predicted"].notna()]
    return collapse(scored, (scored["anomaly"] == "true").to_numpy())


def write_events(path: str, events: pd.DataFrame) -> None:
    """`<out>.events.csv`: EVENT_COLUMNS, `open` written as true/false like the CSV's `anomaly`."""
    write_rows(path, EVENT_COLUMNS, [[*cells[:-1], "true" if cells[-1] else "false"]
                                     for cells in events[EVENT_COLUMNS].itertuples(index=False)])


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
            events: pd.DataFrame | None = None, **extra: Any) -> dict:
    """Counts per IP (`ips`, `status`), per row (`rows`, `severity`, `anomalies`) and of `events` per
    peak severity."""
    peaks = [r.worker_peak_rss_mib for r in results if r.worker_peak_rss_mib]
    return {
        "ips": len(results),
        "rows": sum(max(1, len(r.points)) for r in results),
        "status": dict(Counter(r.status.value for r in results)),
        "severity": dict(Counter(p.severity.value for r in results for p in r.points)),
        "anomalies": sum(r.anomalies for r in results),
        "events": dict(Counter([] if events is None else events["peak_severity"].tolist())),
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
