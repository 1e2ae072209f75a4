"""The per-IP stats table (docs/design.md §2): wide or long, CSV or Parquet, read a chunk at a time.

A wide table streams: each chunk of rows becomes series as soon as it is read, so jobs can start
while the rest of the file is still being read. A long table is read whole before its first
series: an IP's points may be anywhere in it.
"""
from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd

from ..errors import UsageError
from .lines import BadLine
from .readers import CsvFile, Notes, TableFile, integer_groups, open_table_file, text_numbers

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
    # Long tables of dates: each label's time as the table read it (ms since the epoch, UTC; mixed formats and time
    # zones allowed), for the alert spans' step (method.step_of); None where the labels are not dates.
    times: np.ndarray | None = None
    # Cells that hold neither a number nor a missing mark (each counts as missing): how many, where the first
    # is (`line 14 (t013)`) and its text; None when there is none.
    unreadable: tuple[int, str, str] | None = None


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
        # Lines with other than the header's fields (docs/design.md §2): how many, the problem of each IP on
        # one, and those whose IP cannot be told (no first field).
        self.width = len(self.file.header)
        self.bad_lines = 0
        self.line_problems: dict[str, str] = {}
        self.lost_lines: list[BadLine] = []

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
            heads = self.labels.count(label)
            if heads > 1:  # after which? The first would score again the points the night before scored
                raise UsageError(f"--since {label!r} heads {heads} columns of the table: it names no one point "
                                 "to start after")
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
        found = f"IP appears {len(lines)} times in the table (lines {', '.join(map(str, lines))})"
        return f"{self.line_problems[ip]}; {found}" if ip in self.line_problems else found

    def bad_line(self, line: BadLine) -> str | None:
        """Count a line of other than the header's fields: its IP's problem, None when its IP cannot be told."""
        self.bad_lines += 1
        if not line.first:
            self.lost_lines.append(line)
            return None
        problem = line.problem(self.width)
        self.line_problems.setdefault(line.first, problem)
        return problem

    def _empty(self) -> str:
        return f"table {self.path} has no data rows or fewer than two columns"

    def _wide(self) -> Iterator[list[Series]]:
        start = good = 0
        # Each chunk goes out once the next one is read: a table of one chunk is checked whole (_some_good,
        # _some_once) before its first series is planned, and a duplicate one chunk down is known before its job.
        ahead: list[Series] | None = None
        for ids, block, notes in self.file.wide_chunks():
            if notes.lines is None and not notes.unreadable:
                found = self._first_appearances(ids, block, start)
            else:
                found = self._noted_appearances(ids, block, notes)
            start += len(ids)
            good += len(ids) - len(notes.bad)
            if ahead is not None:
                yield ahead
            ahead = found
        if not start and not self.bad_lines:
            raise UsageError(self._empty())
        self._some_good(good)
        self._some_once()
        if ahead is not None:
            yield ahead

    def _some_good(self, good: int) -> None:
        """A table none of whose lines has the header's fields is read wrong as a whole (a header with a
        trailing comma, another separator): the run stops, as for an unreadable table, not a night of
        invalid_input rows that exits 0."""
        if not good and self.bad_lines:
            first = min(self.line_problems.values(), key=lambda problem: int(problem.split(":")[0].split()[1]),
                        default=self.lost_lines[0].problem(self.width) if self.lost_lines else "")
            raise UsageError(f"no line of table {self.path} has the header's {self.width} fields ({first})")

    def _some_once(self) -> None:
        """A wide table every IP of which is on several lines is a long table read as wide (a column past
        ip,timestamp,value, or --layout wide): the run stops, not a night of invalid_input rows that exits 0."""
        if not self._first_lines or len(self.duplicates) < len(self._first_lines):
            return
        ip, lines = min(self.duplicates.items(), key=lambda item: item[1][0])
        names = tuple(h.strip().lower() for h in self.file.header)
        fix = ("leave out --layout wide" if names in LONG_COLUMNS
               else "a long table has exactly the columns ip,timestamp,value (or unique_id,ds,y)")
        raise UsageError(f"every IP of table {self.path} is on several lines ({ip} on {len(lines)}): it looks like "
                         f"a long table (ip,timestamp,value[,...]) read as wide; {fix}")

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

    def _noted_appearances(self, ids: list[str], block: np.ndarray, notes: Notes) -> list[Series]:
        """_first_appearances of a chunk whose lines were read: a bad line's IP gets its problem and no values,
        a line the parser left out its own series, a row with unreadable cells says so."""
        found: list[Series] = []
        before: dict[int, list[BadLine]] = {}
        for row, line in notes.absent:
            before.setdefault(row, []).append(line)
        nothing = np.full(len(self.labels), np.nan)
        for row in range(len(ids) + 1):
            for line in before.get(row, ()):
                self._appearance(line.first, line.line, nothing, problem=self.bad_line(line), unreadable=None,
                                 found=found)
            if row == len(ids):
                break
            number = int(notes.lines[row]) if notes.lines is not None else notes.start + row + 2
            if row in notes.bad:
                self._appearance(ids[row].strip(), number, nothing, problem=self.bad_line(notes.bad[row]),
                                 unreadable=None, found=found)
                continue
            odd = notes.unreadable.get(row)
            unreadable = (odd[0], f"{notes.where(row)} ({self.labels[odd[1]]})", odd[2]) if odd else None
            self._appearance(ids[row].strip(), number, block[row], problem="", unreadable=unreadable, found=found)
        return found

    def _appearance(self, ip: str, line: int, values: np.ndarray, *, problem: str | None,
                    unreadable: tuple[int, str, str] | None, found: list[Series]) -> None:
        if problem is None:  # a bad line without an IP: counted, no row
            return
        position = self._positions.setdefault(ip, len(self._first_lines))
        if position < len(self._first_lines):
            self.duplicates.setdefault(ip, [self._first_lines[position]]).append(line)
            return
        self._first_lines.append(line)
        found.append(Series(ip=ip, labels=self.labels, values=values, problem=problem, position=position,
                            unreadable=unreadable))

    def _long(self) -> Iterator[list[Series]]:
        names = tuple(h.strip().lower() for h in self.file.header)
        if names not in LONG_COLUMNS:
            if next(self.file.wide_chunks(), None) is None:  # an empty table says so first
                raise UsageError(self._empty())
            raise UsageError(f"long table {self.path} needs exactly the columns ip,timestamp,value (or unique_id,ds,y)")
        points = self._points = LongPoints(self)
        for chunk in self.file.long_chunks():
            points.add(*chunk)
        if not points.rows and not self.bad_lines:
            raise UsageError(self._empty())
        self._some_good(points.rows - len(points.bad_rows))
        yield from points.series(self.file)


class LongPoints:
    """A long table's rows as numbers: IP and timestamp codes (in order of first appearance), values."""

    def __init__(self, table: Table | None = None) -> None:
        self._table = table
        self._ips: dict[str | None, int] = {}
        self._stamps: dict[str | None, int] = {}
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._ranks = np.zeros(0, dtype=np.int64)  # by timestamp code, once series() has begun
        self._unused: set[int] = set()  # timestamp codes of no series: only on bad lines, or unreadable
        self.bad_rows: list[int] = []  # rows of lines with other than the header's fields
        self._odd_values: dict[int, tuple[str, str]] = {}  # row -> (where, text) of an unreadable value
        self._notes: list[Notes] = []  # each chunk's, where its rows are lines (for where())
        self._starts: list[int] = []
        self.rows = 0

    def add(self, ips: tuple[np.ndarray, list], stamps: tuple[np.ndarray, list], values: np.ndarray,
            notes: Notes | None = None) -> None:
        """One chunk: (codes, uniques) of its IP and timestamp cells, uniques None where a cell is missing."""
        if notes is not None and notes.absent:
            self._first_appearances(ips, notes)
        self._parts.append((_recode(self._ips, *ips), _recode(self._stamps, *stamps), values))
        if notes is not None and (notes.lines is not None or notes.unreadable or not notes.rows_are_lines):
            if notes.lines is not None:
                notes.lines = notes.lines.astype(np.int32)  # kept to the end: 4 bytes a row
            self._notes.append(notes)
            self._starts.append(self.rows)
            self.bad_rows += [self.rows + row for row in notes.bad]
            for line in sorted([*notes.bad.values(), *(line for _, line in notes.absent)], key=lambda b: b.line):
                self._bad(line)  # in the file's order: an IP's problem is its first bad line
            for row, (_, _, text) in notes.unreadable.items():
                if row not in notes.bad:
                    self._odd_values[self.rows + row] = (notes.where(row), text)
        self.rows += len(values)

    def _first_appearances(self, ips: tuple[np.ndarray, list], notes: Notes) -> None:
        """Number the chunk's IPs and those of the lines the parser left out in the order the file has them."""
        codes, uniques = ips
        _, first_rows = np.unique(codes, return_index=True)
        rows = [(int(row), 1, 0, uniques[code]) for code, row in zip(np.unique(codes).tolist(), first_rows.tolist(),
                                                                      strict=True)]
        left_out = [(row, 0, line.line, line.first) for row, line in notes.absent if line.first]
        for *_, ip in sorted(rows + left_out, key=lambda found: found[:3]):
            self._ips.setdefault(ip, len(self._ips))

    def _bad(self, line: BadLine) -> bool:
        return self._table is not None and self._table.bad_line(line) is not None

    def where(self, row: int) -> str:
        """A row's place in the file (Notes.where)."""
        at = bisect.bisect_right(self._starts, row) - 1
        if at < 0:
            return f"line {row + 2}"
        notes = self._notes[at]
        local = row - self._starts[at]
        if notes.lines is not None and local >= len(notes.lines):
            return f"line {row + 2}"
        return notes.where(local)

    def last(self) -> str | None:
        """The timestamp latest in time order, None when no row has one."""
        stamps = [(int(self._ranks[code]), label) for label, code in self._stamps.items()
                  if label is not None and code < len(self._ranks) and code not in self._unused]
        return max(stamps)[1] if stamps else None

    def rank(self, label: str) -> int | None:
        """The timestamp's rank in time order, None when no row has it."""
        code = self._stamps.get(label)
        return (None if code is None or code >= len(self._ranks) or code in self._unused
                else int(self._ranks[code]))

    def series(self, file: TableFile) -> Iterator[list[Series]]:
        if self._parts:
            ip_codes, stamp_codes, values = (np.concatenate(p) for p in zip(*self._parts, strict=True))
        else:
            ip_codes = stamp_codes = np.zeros(0, dtype=np.int32)
            values = np.zeros(0)
        self._parts.clear()
        groups, names = pd.factorize(np.array([(ip or "").strip() for ip in self._ips], dtype=object))
        group = groups[ip_codes]
        labels = np.array([np.nan if s is None else s for s in self._stamps], dtype=object)
        keep = np.ones(len(values), dtype=bool)
        keep[self.bad_rows] = False
        used = np.zeros(len(labels), dtype=bool)
        used[stamp_codes[keep]] = True
        rows_of = np.bincount(stamp_codes[keep], minlength=len(labels))
        self._ranks, odd_stamps, kind, times = _order_ranks(np.where(used, labels, np.nan), rows_of)
        self._unused = set(np.flatnonzero(~used | odd_stamps).tolist())
        odd_stamp_rows = np.flatnonzero(keep & odd_stamps[stamp_codes])
        keep[odd_stamp_rows] = False  # a point that cannot be placed in time is left out, and named
        rank = self._ranks[stamp_codes]
        order = np.lexsort((rank, group))  # stable: equal timestamps keep the table's order
        clean = bool(keep.all())
        if not clean:
            order = order[keep[order]]
        bounds = np.searchsorted(group[order], np.arange(len(names) + 1))
        starts, ends = bounds[:-1], bounds[1:]
        odd = self._unreadable(group, odd_stamp_rows, labels[stamp_codes[odd_stamp_rows]], len(names))
        unplaced = self._unplaced(group[odd_stamp_rows], odd_stamp_rows, labels[stamp_codes[odd_stamp_rows]],
                                  lost=np.flatnonzero(starts == ends), kind=kind)
        # Parquet's numbers are typed; CSV's text may read otherwise as a series (readers.integer_groups).
        kept = (group, values) if clean else (group[order], values[order])
        exact = (_series_cells(file, order, starts, ends, groups=integer_groups(*kept, len(names)))
                 if isinstance(file, CsvFile) else {})
        problems = self._table.line_problems if self._table is not None else {}
        chunk = []
        for g, (a, b) in enumerate(zip(starts, ends, strict=True)):
            rows = order[a:b]
            point_labels = labels[stamp_codes[rows]].tolist()
            dup = np.flatnonzero(rank[rows][1:] == rank[rows][:-1])
            problem = problems.get(names[g], "") or unplaced.get(g, "")
            if not problem and len(dup):
                problem = f"duplicate timestamp {point_labels[dup[0] + 1]!r} for this IP"
            series_values = text_numbers(exact[g]) if g in exact else values[rows]
            chunk.append(Series(ip=names[g], labels=point_labels, values=series_values, problem=problem, position=g,
                                keys=rank[rows], unreadable=odd.get(g),
                                times=None if times is None else times[stamp_codes[rows]]))
            if len(chunk) == CHUNK_IPS:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def _unplaced(self, groups: np.ndarray, rows: np.ndarray, texts: np.ndarray, *, lost: np.ndarray,
                  kind: str) -> dict[int, str]:
        """The problem of each group in `lost` (no row left: each left out for its timestamp, `rows` of `groups`):
        whether its timestamps are of the other kind (an exporter writing epoch seconds among dates)."""
        mine = np.isin(groups, lost)
        if not mine.any():
            return {}
        groups, rows, texts = groups[mine], rows[mine], texts[mine]
        other = OTHER_KIND[kind]
        read = KINDS[other](pd.Series(texts, dtype=object))
        of_other = read.notna().to_numpy() if read is not None else np.zeros(len(texts), dtype=bool)
        counts, unlike = np.bincount(groups), np.bincount(groups, weights=~of_other)
        found, first = np.unique(groups, return_index=True)
        problems = {}
        for g, at in zip(found.tolist(), first.tolist(), strict=True):
            text = texts[at] if isinstance(texts[at], str) else ""
            how = f"{other} where the table's are {kind}" if not unlike[g] else f"unreadable as {kind}"
            problems[g] = f"its timestamps are {how} ({counts[g]}, the first on {self.where(int(rows[at]))}: {text!r})"
        return problems

    def _unreadable(self, group: np.ndarray, stamp_rows: np.ndarray, stamp_texts: np.ndarray,
                    groups: int) -> dict[int, tuple[int, str, str]]:
        """Per IP group, its unreadable cells: values that are not numbers, timestamps that do not parse."""
        cells = sorted([(row, "value", text) for row, (_, text) in self._odd_values.items()]
                       + [(int(row), "timestamp", "" if not isinstance(text, str) else text)
                          for row, text in zip(stamp_rows.tolist(), stamp_texts.tolist(), strict=True)])
        found: dict[int, tuple[int, str, str]] = {}
        for row, column, text in cells:
            g = int(group[row])
            if g in found:
                count, where, first = found[g]
                found[g] = (count + 1, where, first)
            else:
                where = self._odd_values[row][0] if column == "value" else self.where(row)
                found[g] = (1, f"{where} ({column})", text)
        return found


def _recode(index: dict, codes: np.ndarray, uniques: list) -> np.ndarray:
    """A chunk's codes as codes of the whole table, numbered in order of first appearance."""
    mapping = np.fromiter((index.setdefault(u, len(index)) for u in uniques), dtype=np.int32, count=len(uniques))
    return mapping[codes]


def _order_ranks(stamps: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, str, np.ndarray | None]:
    """Each distinct timestamp's rank in time order (docs/design.md §2), missing ones last; which ones do not
    parse (NaN: no row has it); the kind they are read as; and, for dates, each one's time in ms (Series.times).
    `rows`: how many rows hold each."""
    keys, odd, kind = _order_key(pd.Series(stamps, dtype=object), rows)
    times = (keys.dt.tz_convert(None).to_numpy(dtype="datetime64[ms]").astype(np.int64) if kind == "dates"
             else None)
    return keys.rank(method="dense", na_option="bottom").to_numpy(dtype=np.int64), odd, kind, times


def _numbers(stamps: pd.Series) -> pd.Series | None:
    numbers = pd.to_numeric(stamps, errors="coerce")
    # An infinity (`inf`, `1e999`) is no place in time: read as a number it would sort after every point and
    # be scored as the latest, so it is unreadable, as an infinite value is (readers.text_numbers).
    return numbers.where(~np.isinf(numbers.to_numpy(dtype=float)))


def _dates(stamps: pd.Series) -> pd.Series | None:
    try:
        return pd.to_datetime(stamps, errors="coerce", format="mixed", utc=True)
    except (ValueError, TypeError, OverflowError):
        return None


# Numbers first: `2026` is both.
KINDS: dict[str, Callable[[pd.Series], pd.Series | None]] = {"numbers": _numbers, "dates": _dates}
OTHER_KIND = {"numbers": "dates", "dates": "numbers"}


def _order_key(stamps: pd.Series, rows: np.ndarray) -> tuple[pd.Series, np.ndarray, str]:
    """Numbers when more than half of the rows' timestamps are numbers, else dates when more than half parse
    as dates, else text (docs/design.md §2); with numbers or dates, the timestamps that are not one (`oops`,
    `not a time`, an empty cell) are unreadable (the array's True). Rows vote, not distinct timestamps: two
    IPs of epoch seconds hold more distinct stamps than thirty IPs sharing dates."""
    present = stamps.notna().to_numpy()
    for kind, read in KINDS.items():
        keys = read(stamps)
        if keys is not None and _most(keys, present, rows):
            return keys, present & keys.isna().to_numpy(), kind
    return stamps, np.zeros(len(stamps), dtype=bool), "text"


def _most(read: pd.Series, present: np.ndarray, rows: np.ndarray) -> bool:
    """Every present timestamp was read, or those of more than half of the rows."""
    found = read.notna().to_numpy()
    return bool(present.any() and (found[present].all() or rows[found].sum() * 2 > rows[present].sum()))


def _series_cells(file: CsvFile, order: np.ndarray, starts: np.ndarray, ends: np.ndarray, *,
                  groups: np.ndarray) -> dict[int, list]:
    """The value cells, as text in time order, of the given groups: read again, they are rare."""
    if not len(groups):
        return {}
    wanted = {g: order[starts[g]:ends[g]] for g in groups}
    rows = np.sort(np.concatenate(list(wanted.values())))
    cells = dict(zip(rows.tolist(), file.cells(column=2, rows=rows), strict=True))
    return {g: [cells[r] for r in rows.tolist()] for g, rows in wanted.items()}
