"""The per-IP stats table (docs/design.md §2): wide or long, CSV or Parquet, read a chunk at a time.

A wide table streams: each chunk of rows becomes series as soon as it is read, so jobs can start
while the rest of the file is still being read. A long table is read whole before its first
series: an IP's points may be anywhere in it.
"""
from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd

from ..errors import UsageError
from .readers import CsvFile, TableFile, integer_groups, open_table_file, text_numbers

LONG_COLUMNS = (("ip", "timestamp", "value"), ("unique_id", "ds", "y"))
LAYOUTS = ("wide", "long")
CHUNK_IPS = 10_000  # series per chunk of a long table (a wide one goes by the file's chunks of rows)


@dataclass(kw_only=True)
class Series:
    """One IP's series in time order, labels as written in the input."""

    ip: str
    labels: list[str]
    values: np.ndarray
    problem: str = ""  # why this IP cannot be scored as given (duplicates, ...)
    position: int = 0  # its place among the table's distinct IPs
    keys: np.ndarray | None = None  # long tables: each label's rank in the table's time order


def read_table(path: str, layout: str | None = None, ips: set[str] | None = None) -> list[Series]:
    """All distinct IPs in table order, or only those in `ips`. Raises UsageError when the file is
    unusable as a whole."""
    table = Table(path, layout)
    series = [s for chunk in table.chunks() for s in chunk if ips is None or s.ip in ips]
    for s in series:
        s.problem = s.problem or table.duplicate_problem(s.ip)
        if ips is not None:
            s.values = s.values.copy()  # not a view that keeps its whole chunk of the table
    return series


def detect_layout(header: list[str]) -> str:
    names = tuple(h.strip().lower() for h in header)
    return "long" if names in LONG_COLUMNS else "wide"


class Table:
    """A stats table opened for reading: its layout and labels at once, its series a chunk at a time."""

    def __init__(self, path: str, layout: str | None = None) -> None:
        if layout is not None and layout not in LAYOUTS:
            raise UsageError(f"--layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
        self.path = path
        self.file = open_table_file(path)
        if len(self.file.header) < 2:
            raise UsageError(self._empty())
        self.layout = layout or detect_layout(self.file.header)
        self.labels = [str(c) for c in self.file.header[1:]]  # a wide table's bucket labels
        # Wide: an IP seen on a later row is a duplicate, however far apart the rows are.
        self.duplicates: dict[str, list[int]] = {}  # IP -> every line it is on, once it is on two
        self._positions: dict[str, int] = {}
        self._first_lines = array("q")  # position -> the line of its first appearance
        self._points: LongPoints | None = None  # a long table's rows, once read

    def chunks(self) -> Iterator[list[Series]]:
        """The distinct IPs in table order, in chunks; a wide table's `duplicates` are complete at the end."""
        return self._long() if self.layout == "long" else self._wide()

    def since(self, label: str) -> Callable[[Series], int]:
        """--since: each series' index of its first point after `label`, its length when it has none.

        Wide tables: `label` is a column header and "after" is the columns to its right. Long tables
        (ask once the first chunk is read): `label` is a timestamp some IP has, as written, and "after"
        follows the table's time order (dates, numbers or text). UsageError when no series has it.
        """
        if self.layout == "wide":
            if label not in self.labels:
                raise UsageError(f"--since {label!r} is not a column header in the table (give it as written there)")
            after = self.labels.index(label) + 1
            return lambda series: after
        rank = self._points.rank(label) if self._points else None
        if rank is None:
            raise UsageError(f"--since {label!r} is not a timestamp of any IP in the table (give it as written there)")
        return lambda series: int(np.searchsorted(cast(np.ndarray, series.keys), rank, side="right"))  # long: keyed

    def position(self, ip: str) -> int:
        return self._positions[ip]

    def last_label(self) -> str | None:
        """The table's latest bucket, as written: what the next run's --since takes. A wide table's last
        column header; a long table's latest timestamp (ask once its series are read), None without one."""
        if self.layout == "wide":
            return self.labels[-1]
        return self._points.last() if self._points else None

    def duplicate_problem(self, ip: str) -> str:
        lines = self.duplicates.get(ip)
        if not lines:
            return ""
        return f"IP appears {len(lines)} times in the table (lines {', '.join(map(str, lines))})"

    def _empty(self) -> str:
        return f"table {self.path} has no data rows or fewer than two columns"

    def _wide(self) -> Iterator[list[Series]]:
        start = 0
        for ids, block in self.file.wide_chunks():
            yield self._first_appearances(ids, block, start)
            start += len(ids)
        if not start:
            raise UsageError(self._empty())

    def _first_appearances(self, ids: list[str], block: np.ndarray, start: int) -> list[Series]:
        found = []
        for row, raw in enumerate(ids):
            ip, line = raw.strip(), start + row + 2
            position = self._positions.setdefault(ip, len(self._first_lines))
            if position < len(self._first_lines):
                self.duplicates.setdefault(ip, [self._first_lines[position]]).append(line)
                continue
            self._first_lines.append(line)
            found.append(Series(ip=ip, labels=self.labels, values=block[row], position=position))
        return found

    def _long(self) -> Iterator[list[Series]]:
        names = tuple(h.strip().lower() for h in self.file.header)
        if names not in LONG_COLUMNS:
            if next(self.file.wide_chunks(), None) is None:  # an empty table says so first
                raise UsageError(self._empty())
            raise UsageError(f"long table {self.path} needs exactly the columns ip,timestamp,value (or unique_id,ds,y)")
        points = self._points = LongPoints()
        for chunk in self.file.long_chunks():
            points.add(*chunk)
        if not points.rows:
            raise UsageError(self._empty())
        yield from points.series(self.file)


class LongPoints:
    """A long table's rows as numbers: IP and timestamp codes (in order of first appearance), values."""

    def __init__(self) -> None:
        self._ips: dict[str | None, int] = {}
        self._stamps: dict[str | None, int] = {}
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._ranks = np.zeros(0, dtype=np.int64)  # by timestamp code, once series() has begun
        self.rows = 0

    def add(self, ips: tuple[np.ndarray, list], stamps: tuple[np.ndarray, list], values: np.ndarray) -> None:
        """One chunk: (codes, uniques) of its IP and timestamp cells, uniques None where a cell is missing."""
        self._parts.append((_recode(self._ips, *ips), _recode(self._stamps, *stamps), values))
        self.rows += len(values)

    def last(self) -> str | None:
        """The timestamp latest in time order, None when no row has one."""
        stamps = [(int(self._ranks[code]), label) for label, code in self._stamps.items()
                  if label is not None and code < len(self._ranks)]
        return max(stamps)[1] if stamps else None

    def rank(self, label: str) -> int | None:
        """The timestamp's rank in time order, None when no row has it."""
        code = self._stamps.get(label)
        return None if code is None or code >= len(self._ranks) else int(self._ranks[code])

    def series(self, file: TableFile) -> Iterator[list[Series]]:
        ip_codes, stamp_codes, values = (np.concatenate(p) for p in zip(*self._parts, strict=True))
        self._parts.clear()
        groups, names = pd.factorize(np.array([(ip or "").strip() for ip in self._ips], dtype=object))
        group = groups[ip_codes]
        labels = np.array([np.nan if s is None else s for s in self._stamps], dtype=object)
        self._ranks = _order_ranks(labels)
        rank = self._ranks[stamp_codes]
        order = np.lexsort((rank, group))  # stable: equal timestamps keep the table's order
        starts = np.flatnonzero(np.diff(group[order], prepend=-1))
        ends = np.append(starts[1:], len(order))
        # Parquet's numbers are typed; CSV's text may read otherwise as a series (readers.integer_groups).
        exact = (_series_cells(file, order, starts, ends, groups=integer_groups(group, values, len(names)))
                 if isinstance(file, CsvFile) else {})
        chunk = []
        for g, (a, b) in enumerate(zip(starts, ends, strict=True)):
            rows = order[a:b]
            point_labels = labels[stamp_codes[rows]].tolist()
            dup = np.flatnonzero(rank[rows][1:] == rank[rows][:-1])
            problem = f"duplicate timestamp {point_labels[dup[0] + 1]!r} for this IP" if len(dup) else ""
            series_values = text_numbers(exact[g]) if g in exact else values[rows]
            chunk.append(Series(ip=names[g], labels=point_labels, values=series_values, problem=problem, position=g,
                                keys=rank[rows]))
            if len(chunk) == CHUNK_IPS:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


def _recode(index: dict, codes: np.ndarray, uniques: list) -> np.ndarray:
    """A chunk's codes as codes of the whole table, numbered in order of first appearance."""
    mapping = np.fromiter((index.setdefault(u, len(index)) for u in uniques), dtype=np.int32, count=len(uniques))
    return mapping[codes]


def _order_ranks(stamps: np.ndarray) -> np.ndarray:
    """Each distinct timestamp's rank in time order (docs/design.md §2), missing ones last."""
    keys = _order_key(pd.Series(stamps, dtype=object))
    return keys.rank(method="dense", na_option="bottom").to_numpy(dtype=np.int64)


def _order_key(stamps: pd.Series) -> pd.Series:
    """Numbers when all are numbers, else dates when all parse as dates, else text (docs/design.md §2)."""
    numbers = pd.to_numeric(stamps, errors="coerce")
    if numbers.notna().all():
        return numbers
    try:
        dates = pd.to_datetime(stamps, errors="coerce", format="mixed", utc=True)
    except (ValueError, TypeError):
        dates = None
    if dates is not None and dates.notna().all():
        return dates
    return stamps


def _series_cells(file: CsvFile, order: np.ndarray, starts: np.ndarray, ends: np.ndarray, *,
                  groups: np.ndarray) -> dict[int, list]:
    """The value cells, as text in time order, of the given groups: read again, they are rare."""
    if not len(groups):
        return {}
    wanted = {g: order[starts[g]:ends[g]] for g in groups}
    rows = np.sort(np.concatenate(list(wanted.values())))
    cells = dict(zip(rows.tolist(), file.cells(column=2, rows=rows), strict=True))
    return {g: [cells[r] for r in rows.tolist()] for g, rows in wanted.items()}
