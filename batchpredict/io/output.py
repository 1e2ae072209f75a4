"""The anomalies CSV (docs/design.md §4), its events and its summary, written into the temporary files that
predict then puts in place together (files.replaced_together)."""
from __future__ import annotations

import csv
import itertools
import json
from array import array
from typing import Any

import numpy as np
import orjson
import pandas as pd

from ..errors import one_line
from ..result import SEVERITIES, Points, Result, Status
from .events import collapse, distance, event_columns, event_names
from .files import write_atomic, write_text

ALERT_COLUMNS = ["alert", "score", "alert_source"]  # appended where the alerting stage runs (Params.alerting)


def columns(sigmas: tuple[float, float], std_source: bool = False, alert: bool = False) -> list[str]:
    """The CSV's header; `std_source` (any --std but store) adds the column saying which std a row used,
    `alert` the alerting stage's columns at the end."""
    bands = [f"{side}_{k:g}std" for k in sigmas for side in ("lower", "upper")]
    return (["ip", "timestamp", "observed", "predicted", "std"] + ["std_source"] * std_source + bands
            + ["anomaly", "severity", "status", "error", "model", "attempts", "duration_ms", "worker_pid",
               "worker_peak_rss_mib"] + ALERT_COLUMNS * alert)


def rows(result: Result, std_source: bool = False, alert: bool = False) -> list[list[Any]]:
    """The result's CSV rows as cells: one per scored point, in time order, or one saying why there is none."""
    n = len(result.points)
    if not n:
        return [row(result, std_source, alert)]
    points, alerts = _point_columns(result.points, std_source, alert, text=False)
    # Each column is made at once, the result's cells repeated, not a row at a time.
    tail = ([cell] * n for cell in _result_cells(result))
    return [list(cells) for cells in zip([result.ip] * n, *points, *tail, *alerts, strict=True)]


def row(result: Result, std_source: bool = False, alert: bool = False) -> list[Any]:
    """The one row of a result without points; None is an empty cell."""
    return [result.ip, result.timestamp, *[None] * (9 + std_source), *_result_cells(result),
            *[None] * len(ALERT_COLUMNS) * alert]


def text(result: Result, std_source: bool = False, alert: bool = False, writer: _Writer | None = None) -> str:
    """rows() as CSV text, byte for byte what the csv module writes of them, made a column at a time: the
    floats' repr over each array, the result's own cells rendered once and repeated.

    `writer`: one to reuse; each new one is a reference cycle that only the collector frees."""
    writer = writer or _Writer()
    n = len(result.points)
    if not n or _needs_quotes(result.points.timestamp):
        return writer.render(rows(result, std_source, alert))
    ip, middle = writer.render([[result.ip]])[:-1], writer.render([_result_cells(result)])[:-1]
    points, alerts = _point_columns(result.points, std_source, alert, text=True)
    *between, last = [[middle] * n, *alerts]
    return "".join(map(",".join, zip([ip] * n, *points, *between, [cell + "\n" for cell in last], strict=True)))


def _needs_quotes(labels: np.ndarray) -> bool:
    """A label the csv module would quote: text() then leaves the result to it."""
    joined = "\0".join(labels.tolist())  # one string to search: a twentieth of np.char.find's cost for one label
    return any(c in joined for c in ',"\r\n')


def _result_cells(result: Result) -> list[Any]:
    """The cells every row of the result repeats after its points' own."""
    return [result.status.value, result.error, result.model, result.attempts,
            None if result.duration_ms is None else round(result.duration_ms, 1), result.worker_pid,
            None if result.worker_peak_rss_mib is None else round(result.worker_peak_rss_mib, 1)]


_SEVERITY_NAMES = np.array([severity.value for severity in SEVERITIES])


def reprs(values: np.ndarray) -> list[str]:
    """repr() of each value as a float, as the csv module writes it. orjson writes the same shortest
    round-trip digits, and writes them as repr does from 1e-4 to 1e16 (zero included); repr writes the
    rest (an exponent, nan, inf). A night's column of 288 took 122 us by repr alone, 14 us so; below
    _SHORT values, repr alone is the faster (a strict job's one point: 0.4 against ~10 us)."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    if len(values) < _SHORT:
        return list(map(repr, values.tolist()))
    texts = orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].decode().split(",")
    size = np.abs(values)
    for i in np.flatnonzero(~((size >= 1e-4) & (size < 1e16) | (size == 0))).tolist():
        texts[i] = repr(float(values[i]))
    return texts


_SHORT = 32


def _point_columns(points: Points, std_source: bool, alert: bool, text: bool
                   ) -> tuple[list[list[Any]], list[list[Any]]]:
    """The per-point columns of the rows, from timestamp to severity, and the alert columns: as cells, or as
    CSV text (a float's repr, as the csv module writes it; an empty cell for None)."""
    floats: Any = reprs if text else (lambda values: values.tolist())
    bands = [floats(side[k]) for k in range(len(points.lower)) for side in (points.lower, points.upper)]
    columns = [points.timestamp.tolist(), floats(points.observed), floats(points.predicted), floats(points.std),
               *[points.std_sources().tolist()] * std_source, *bands,
               np.where(points.anomaly, "true", "false").tolist(), _SEVERITY_NAMES[points.severity].tolist()]
    alerts: list[list[Any]] = []
    if alert:
        n = len(points)
        sources = points.alert_sources()
        if points.alert is None or points.score is None or points.judged is None or sources is None:
            empty = "" if text else None
            alerts = [[empty] * n, [empty] * n, [""] * n]
        else:
            score = floats(points.score)
            alerts = [np.where(points.alert, "true", "false").tolist(),
                      [value if judged else "" if text else None
                       for value, judged in zip(score, points.judged.tolist(), strict=True)],
                      sources.tolist()]
    return columns, alerts


def events(frame: pd.DataFrame) -> pd.DataFrame:
    """The alert events of an output frame (events.collapse): each run of flagged points of one IP, with
    the alerts among its points where the frame has an `alert` column."""
    scored = frame[frame["predicted"].notna()]
    alerts = (scored["alert"] == "true").to_numpy() if "alert" in scored else None
    return collapse(scored, (scored["anomaly"] == "true").to_numpy(), alerts)


def result_events(result: Result, alert: bool = False) -> list[list[Any]]:
    """The alert events of one result's points, as EVENT_COLUMNS cells (`open` as true/false), and with
    `alert` the alerts among each event's points."""
    points = result.points
    if not len(points) or not points.anomaly.any():  # the first test is a tenth of the second's cost
        return []
    alerts = (np.zeros(len(points), dtype=bool) if points.alert is None else points.alert) if alert else None
    found = event_columns(np.full(len(points), result.ip, dtype=object), points.timestamp.astype(object),
                          points.severity.astype(int), distance(points.observed, points.predicted, points.std),
                          flagged=points.anomaly, alerts=alerts)
    return [[("true" if cell else "false") if isinstance(cell, bool) else cell for cell in cells]
            for cells in zip(*(found[c].tolist() for c in event_names(alert)), strict=True)]


def aligned(header: list[str], rows: list[list[str]]) -> str:
    """A table as aligned text columns for a terminal; an empty cell shows as '-', a line break in one as `\\n` (an
    id from a file name in model/ holding one broke its row in two)."""
    cells = [header] + [[one_line(c or "-") for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header) - 1)]
    return "\n".join("  ".join([c.ljust(w) for c, w in zip(row, widths, strict=False)] + [row[-1]]) for row in cells)


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
# Per position, what the summary counts: rows, points per severity, events per peak severity, alerts.
_TALLIES = ("rows", "normal", "warning", "critical", "events_warning", "events_critical", "alerts")
_NO_SEVERITIES = [0] * len(SEVERITIES)


class Rows:
    """A run's finished rows by table position, kept small: each IP's rows as CSV text (as cells where a
    DataFrame is wanted), its alert events likewise, and the few numbers its summary counts.

    A position may be put again (an IP found twice in the table): its new rows replace the old ones.
    """

    def __init__(self, sigmas: tuple[float, float], cells: bool = False, std_source: bool = False, *,
                 events: bool = False, alert: bool = False) -> None:
        self.header = columns(sigmas, std_source, alert)
        self.events_header = event_names(alert)
        self._std_source, self.keeps_events, self._alert = std_source, events, alert
        self._cells = cells
        self._rows: list[Any] = []    # per position: CSV text, or the list of cell rows
        self._events: list[Any] = []  # per position, when events are kept: likewise
        # Per position: status (1 + its index; 0 is a position not finished yet) and engine (1 + index in
        # self._engines, 0 for none), a byte each; and the _TALLIES, an int each.
        self._codes = bytearray()
        self._tallies = array("l")
        self._engines: list[str] = []
        self._peaks: dict[int, float] = {}  # worker peak RSS (MiB) of the positions that have one
        self._writer = _Writer()

    def put(self, position: int, result: Result) -> None:
        if position >= len(self._rows):
            missing = position + 1 - len(self._rows)
            self._rows += [None] * missing
            self._events += [None] * missing * self.keeps_events
            self._codes += bytes(2 * missing)
            self._tallies.extend([0] * len(_TALLIES) * missing)
        if self._cells:
            self._rows[position] = rows(result, self._std_source, self._alert)
        else:
            self._rows[position] = text(result, self._std_source, self._alert, self._writer)
        found = result_events(result, self._alert)
        if self.keeps_events:
            self._events[position] = found if self._cells else self._writer.render(found)
        engine = result.engine
        if engine and engine not in self._engines:
            self._engines.append(engine)
        self._codes[2 * position:2 * position + 2] = bytes((
            _STATUSES[result.status], self._engines.index(engine) + 1 if engine else 0))
        severities = np.bincount(result.points.severity, minlength=len(SEVERITIES)).tolist() if len(result.points) \
            else _NO_SEVERITIES
        peaks = [event[4] for event in found]
        at = len(_TALLIES) * position
        self._tallies[at:at + len(_TALLIES)] = array("l", (
            max(len(result.points), 1), *severities, peaks.count("warning"), peaks.count("critical"), result.alerts))
        if result.worker_peak_rss_mib:
            self._peaks[position] = result.worker_peak_rss_mib
        elif self._peaks:
            self._peaks.pop(position, None)

    def __len__(self) -> int:
        return len(self._rows)

    def write_csv(self, path: str) -> None:
        unfinished = self._codes[::2].find(0)
        if unfinished >= 0:
            raise RuntimeError(f"row {unfinished} of {path} was never finished")
        self._write(path, self.header, self._rows)

    def write_events(self, path: str) -> None:
        """`<out>.events.csv`: EVENT_COLUMNS, in table order then time order."""
        self._write(path, self.events_header, self._events)

    def _write(self, path: str, header: list[str], texts: list[Any]) -> None:
        render = self._writer.render if self._cells else str
        write_text(path, itertools.chain([self._writer.render([header])], map(render, texts)))

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([cells for position in self._rows for cells in position], columns=self.header)

    def events_frame(self) -> pd.DataFrame:
        """The events file as a DataFrame (kept events, as cells), in table order then time order."""
        return pd.DataFrame([cells for position in self._events for cells in position], columns=self.events_header)

    def summary(self, executed: int, wall_s: float, coordinator_peak_mib: float, **extra: Any) -> dict:
        """The run's summary.json: what the rows hold (per IP: `ips`, `status`; per row: `rows`, `severity`,
        `anomalies`; `events` per peak severity; `alerts` where the alerting stage ran), then how the run went,
        then `extra`. Each count is in order of first appearance in the table."""
        status, engine = np.frombuffer(bytes(self._codes), dtype=np.uint8).reshape(-1, 2).T
        totals = np.frombuffer(self._tallies, dtype=np.int64).reshape(-1, len(_TALLIES)).sum(axis=0)
        tallies = dict(zip(_TALLIES, totals.tolist(), strict=True))
        peaks = list(self._peaks.values())
        return {"ips": len(status),
                "rows": tallies["rows"],
                "status": _tally(status, [s.value for s in Status]),
                "severity": {k: tallies[k] for k in ("normal", "warning", "critical") if tallies[k]},
                "anomalies": tallies["warning"] + tallies["critical"],
                "events": {k: tallies[f"events_{k}"] for k in ("warning", "critical") if tallies[f"events_{k}"]},
                **({"alerts": tallies["alerts"]} if self._alert else {}),
                "jobs_run": executed,
                "engines": _tally(engine, self._engines),
                "wall_s": round(wall_s, 3),
                "jobs_per_s": round(executed / wall_s, 3) if wall_s > 0 else None,
                "worker_peak_rss_mib": round(max(peaks), 1) if peaks else None,
                "coordinator_peak_rss_mib": round(coordinator_peak_mib, 1),
                **extra}


def _tally(codes: np.ndarray, names: list[str]) -> dict[str, int]:
    found, first, counts = np.unique(codes, return_index=True, return_counts=True)
    return {names[code - 1]: int(count) for _, code, count in sorted(zip(first, found, counts, strict=True)) if code}


def write_summary(path: str, summary: dict) -> None:
    write_text(path, json.dumps(summary, indent=2) + "\n")
