"""The per-IP stats table: wide (IP, then one column per time bucket) or long (ip,timestamp,value)."""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .errors import UsageError

LONG_COLUMNS = (("ip", "timestamp", "value"), ("unique_id", "ds", "y"))
LAYOUTS = ("wide", "long")


@dataclass
class Series:
    """One IP's series in time order, labels as written in the input."""

    ip: str
    labels: list[str]
    values: np.ndarray
    problem: str = ""  # why this IP cannot be scored as given (duplicates, ...)
    rows: list[int] = field(default_factory=list)
    keys: list = field(default_factory=list)  # long tables: each label's order key (_order_key)


def read_table(path: str, layout: str | None = None) -> list[Series]:
    """All distinct IPs in table order. Raises UsageError when the file is unusable as a whole."""
    if layout is not None and layout not in LAYOUTS:
        raise UsageError(f"--layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    frame = read_text_csv(path, "table", skipinitialspace=True)
    if frame.shape[1] < 2 or frame.shape[0] == 0:
        raise UsageError(f"table {path} has no data rows or fewer than two columns")
    chosen = layout or detect_layout(list(frame.columns))
    return _read_long(frame, path) if chosen == "long" else _read_wide(frame)


def read_text_csv(path: str, what: str, **options: object) -> pd.DataFrame:
    """A CSV with every cell as written; UsageError naming `what` when it cannot be read at all."""
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False, **options)
    except FileNotFoundError:
        raise UsageError(f"{what} not found: {path}") from None
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError, IsADirectoryError,
            PermissionError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"cannot read {what} {path}: {detail}") from None


def detect_layout(header: list[str]) -> str:
    names = tuple(h.strip().lower() for h in header)
    return "long" if names in LONG_COLUMNS else "wide"


def _numbers(cells: pd.Series | list[str]) -> np.ndarray:
    return pd.to_numeric(pd.Series(cells, dtype=object), errors="coerce").to_numpy(dtype=float)


def _read_wide(frame: pd.DataFrame) -> list[Series]:
    labels = [str(c) for c in frame.columns[1:]]
    ids = frame.iloc[:, 0].str.strip()
    first: dict[str, Series] = {}
    for row, ip in enumerate(ids):
        if ip in first:
            first[ip].rows.append(row + 2)
            continue
        first[ip] = Series(ip, labels, _numbers(frame.iloc[row, 1:].tolist()), rows=[row + 2])
    for series in first.values():
        if len(series.rows) > 1:
            series.problem = f"IP appears {len(series.rows)} times in the table (lines {', '.join(map(str, series.rows))})"
    return list(first.values())


def _read_long(frame: pd.DataFrame, path: str) -> list[Series]:
    names = [c.strip().lower() for c in frame.columns]
    if tuple(names[:3]) not in LONG_COLUMNS or len(names) != 3:
        raise UsageError(f"long table {path} needs exactly the columns ip,timestamp,value (or unique_id,ds,y)")
    frame = frame.set_axis(["ip", "timestamp", "value"], axis=1)
    frame["ip"] = frame["ip"].str.strip()
    frame["_key"] = _order_key(frame["timestamp"])
    result = []
    for ip, group in frame.groupby("ip", sort=False):
        group = group.sort_values("_key", kind="stable")
        series = Series(ip, group["timestamp"].tolist(), _numbers(group["value"]), rows=[i + 2 for i in group.index],
                        keys=group["_key"].tolist())
        dupes = group["timestamp"][group["_key"].duplicated()].unique().tolist()
        if dupes:
            series.problem = f"duplicate timestamp {dupes[0]!r} for this IP"
        result.append(series)
    return result


def first_after(table: list[Series], label: str) -> list[int]:
    """Each series' index of its first point after `label`, its length when it has none.

    Wide tables: `label` is a column header and "after" is the columns to its right. Long tables:
    `label` is a timestamp some IP has, and "after" follows the table's order key (dates, numbers or
    text, as the rows were sorted). UsageError when no series has it.
    """
    holder = next((series for series in table if label in series.labels), None)
    if holder is None:
        what = "timestamp of any IP" if table and table[0].keys else "column header"
        raise UsageError(f"--since {label!r} is not a {what} in the table (give it as written there)")
    at = holder.labels.index(label)
    if not holder.keys:
        return [at + 1] * len(table)  # a wide table's series share its columns
    return [bisect.bisect_right(series.keys, holder.keys[at]) for series in table]


def _order_key(stamps: pd.Series) -> pd.Series:
    """Dates when all parse as dates, numbers when all are numbers, else text (docs/design.md §2)."""
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
