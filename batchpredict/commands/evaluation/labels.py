"""Labelled anomaly windows: NAB's combined_windows.json or a CSV ip,start,end."""
from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...errors import UsageError
from ...io.readers import read_text_records, regular_file

CSV_COLUMNS = ("ip", "start", "end")
NAT = np.iinfo(np.int64).min  # what numpy's NaT is as int64


@dataclass
class Labels:
    """Windows per id as (start, end) in ns since the epoch, UTC, sorted and not overlapping."""

    windows: dict[str, np.ndarray] = field(default_factory=dict)  # id -> int64 array shaped (k, 2)
    excluded: dict[str, str] = field(default_factory=dict)        # id -> why its labels were unusable
    warnings: list[str] = field(default_factory=list)


def parse_times(values: pd.Series | list) -> np.ndarray:
    """Dates as int64 ns UTC (naive dates are taken as UTC); NAT where a value is not a date.

    The results' timestamps go through this too, so both sides compare alike whatever their format. A date
    has a separator ('2014' and '1392807000' are numbers here), and falls within 1678-2261 ('t1' would
    read as year 1).
    """
    text = pd.Series(values, dtype=object).astype(str).str.strip()
    parsed = _dates(text)
    if parsed.isna().any():  # the common case is one format, which pandas infers fast; the rest one by one
        parsed = parsed.fillna(_dates(text[parsed.isna()], "mixed"))
    usable = (parsed.notna() & text.str.contains(r"[-/:T ]", regex=True)
              & (parsed > pd.Timestamp.min.tz_localize("UTC")) & (parsed < pd.Timestamp.max.tz_localize("UTC")))
    result = np.full(len(text), NAT, dtype=np.int64)
    result[usable.to_numpy()] = parsed[usable].dt.tz_convert(None).to_numpy().astype("datetime64[ns]").astype(np.int64)
    return result


def _dates(text: pd.Series, form: str | None = None) -> pd.Series:
    try:
        with warnings.catch_warnings():  # "could not infer format": the values that fail go the slow way
            warnings.simplefilter("ignore", UserWarning)
            return pd.to_datetime(text, errors="coerce", format=form, utc=True)
    except (ValueError, TypeError):
        return pd.Series(pd.NaT, index=text.index, dtype="datetime64[ns, UTC]")


def label_id(key: str) -> str:
    """NAB keys windows by data file ('realAWSCloudwatch/ec2_cpu_utilization_24ae8d.csv'): its stem is the id."""
    name = key.strip().replace("\\", "/").rsplit("/", 1)[-1]
    return re.sub(r"\.csv$", "", name, flags=re.IGNORECASE)


def read_labels(path: str) -> Labels:
    """JSON when the file starts with '{', else CSV. UsageError when the file is unusable as a whole."""
    regular_file(path, "labels")  # a FIFO would block the command for good, /dev/zero never end
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise UsageError(f"labels not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read labels {path}: {exc}") from None
    labels, merged_ids = Labels(), []
    pairs, broken = (_json_pairs(text, path), {}) if text.lstrip().startswith("{") else _csv_pairs(path, labels)
    shapes = {ident: broken.get(ident) or _shape(windows) for ident, (_, windows) in pairs.items()}
    times = iter(parse_times([value for ident, (_, windows) in pairs.items() if not shapes[ident]
                              for window in windows for value in window]).reshape(-1, 2))
    for ident, (keys, windows) in pairs.items():
        if len(keys) > 1:
            labels.warnings.append(f"labels {', '.join(keys)} all name id {ident}; their windows are combined")
        problem = shapes[ident]
        if not problem:
            array = np.array([next(times) for _ in windows], dtype=np.int64).reshape(-1, 2)
            problem = _order(windows, array)
        if problem:
            labels.excluded[ident] = problem
            labels.warnings.append(f"labels for {ident}: {problem}; {ident} is left out of the evaluation")
            continue
        labels.windows[ident] = _merge(array[np.argsort(array[:, 0], kind="stable")])
        if len(labels.windows[ident]) < len(array):
            merged_ids.append(ident)
    if merged_ids:
        labels.warnings.append(f"overlapping windows merged for {len(merged_ids)} ids: " + ", ".join(merged_ids[:5])
                               + (f" and {len(merged_ids) - 5} more" if len(merged_ids) > 5 else ""))
    if pairs and not labels.windows:
        raise UsageError(f"no usable label windows in {path}: " + "; ".join(labels.warnings[:3]))
    return labels


def _json_pairs(text: str, path: str) -> dict[str, tuple[list[str], list]]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # past the parser's depth, an integer of over 4,300 digits: no labels
        raise UsageError(f"labels {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"labels {path}: expected an object {{series: [[start, end], ...]}}")
    pairs: dict[str, tuple[list[str], list]] = {}
    for key, windows in data.items():
        keys, found = pairs.setdefault(label_id(key), ([], []))
        keys.append(key)
        found.extend(windows if isinstance(windows, list) else [windows])
    return pairs


def _csv_pairs(path: str, labels: Labels) -> tuple[dict[str, tuple[list[str], list]], dict[str, str]]:
    """The windows per IP, and the IPs of lines of other fields than the header's with the first such line:
    as in the stats table (docs/design.md §2), such a line costs its own IP, which is left out."""
    frame, bad = read_text_records(path, "labels")
    names = [c.strip().lower() for c in frame.columns]
    if tuple(names) != CSV_COLUMNS:
        raise UsageError(f"labels {path}: a CSV needs exactly the columns ip,start,end (or is NAB JSON), "
                         f"not {','.join(frame.columns[:4])}{',...' if len(frame.columns) > 4 else ''} "
                         f"({len(frame.columns)} columns)")
    frame.columns = list(CSV_COLUMNS)
    pairs: dict[str, tuple[list[str], list]] = {}
    for ip, group in frame.groupby(frame["ip"].str.strip(), sort=False):
        pairs[ip] = ([ip], group[["start", "end"]].values.tolist())
    broken: dict[str, str] = {}
    for line in bad:
        if line.first:
            pairs.setdefault(line.first, ([line.first], []))
            broken.setdefault(line.first, line.problem(len(CSV_COLUMNS)))
        else:
            labels.warnings.append(f"labels {path}: {line.problem(len(CSV_COLUMNS))}, and no IP: left out")
    return pairs, broken


def _shape(windows: list) -> str:
    """The first window that is not a [start, end] pair, as a problem; '' when all are."""
    for i, window in enumerate(windows, 1):
        if not isinstance(window, (list, tuple)) or len(window) != 2:
            return f"window {i} is {json.dumps(window)}, not [start, end]"
    return ""


def _order(windows: list, times: np.ndarray) -> str:
    """The first window with a time that is not a date, or that ends before it starts; '' when none."""
    for i, (window, (start, end)) in enumerate(zip(windows, times, strict=True), 1):
        if NAT in (start, end):
            return f"window {i} has a time that is not a date: {json.dumps(window)}"
        if end < start:
            return f"window {i} ends before it starts: {json.dumps(window)}"
    return ""


def _merge(windows: np.ndarray) -> np.ndarray:
    merged: list[list[int]] = []
    for start, end in windows.tolist():
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return np.array(merged, dtype=np.int64).reshape(-1, 2)
