"""Converts a folder of NAB data files (timestamp,value) to one long stats table ip,timestamp,value.

Each file is one host: its stem (ec2_cpu_utilization_24ae8d.csv -> ec2_cpu_utilization_24ae8d) is the ip,
the id NAB's combined_windows.json names it by. Timestamps and values are copied as written, files in name
order, each in its own order, except that a timestamp written twice keeps only its first row: batchpredict
refuses a host with a repeated timestamp, and two realAWSCloudwatch files repeat 2014-03-09 03:00:00 twelve
times (the hour a clock change skipped). `--head 0.5` keeps only the first half of each host's rows (after
that): a training table.

`--resample STEP` writes each host at another step instead (after the repeats are dropped, before `--head`):

- `1min`: every whole minute from the host's first timestamp to its last, each value linearly interpolated
  in time between the points either side of it (a gap, such as the clock change's hour, becomes a line);
- `15min`, `1h`: the mean of the points in each bucket, buckets aligned to the hour and named by their start
  (the hour 14:00 holds 14:00 to 14:59); a bucket with no point is no row.

Resampled timestamps are written `YYYY-MM-DD HH:MM:SS`, as NAB writes them, and values to 12 significant
digits (no float noise from the interpolation). NAB's windows are times, so its labels apply to a resampled
copy as they do to the original, by the same ids.

    python scripts/nab_to_long.py NAB/data/realAWSCloudwatch --out nab/all.csv
    python scripts/nab_to_long.py NAB/data/realAWSCloudwatch --head 0.5 --out nab/train.csv
    python scripts/nab_to_long.py NAB/data/realAWSCloudwatch --resample 1min \
        --out nab/realAWSCloudwatch-1min/all.csv

where NAB is a clone of github.com/numenta/NAB (or a copy of its data and labels folders).
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from batchpredict.io.files import write_atomic

STEPS = ("1min", "15min", "1h")  # --resample: interpolated to the minute; bucket means of 15 minutes, an hour
STAMP = "%Y-%m-%d %H:%M:%S"


def resample(body: list[list[str]], step: str) -> list[list[str]]:
    """A host's (timestamp, value) rows at `step` (one of STEPS), as the module docstring says."""
    times = pd.to_datetime(pd.Series([stamp for stamp, _ in body]))
    values = pd.Series([float(value) for _, value in body], index=times.values).sort_index()
    if step == "1min":
        grid = pd.date_range(values.index[0].ceil("min"), values.index[-1].floor("min"), freq="min")
        start = values.index[0]
        minutes = (values.index - start) / pd.Timedelta(minutes=1)
        resampled = pd.Series(np.interp((grid - start) / pd.Timedelta(minutes=1), minutes, values), index=grid)
    else:
        resampled = values.resample(step).mean().dropna()
    return [[when.strftime(STAMP), f"{value:.12g}"] for when, value in resampled.items()]


def convert(folder: str, out: str, head: float = 1.0, resample_to: str | None = None) -> dict[str, int]:
    """Write the long table; returns the rows written per ip. ValueError for a file that is not NAB's."""
    files = sorted(Path(folder).glob("*.csv"))
    if not files:
        raise ValueError(f"no .csv files in {folder}")
    written: dict[str, int] = {}
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["ip", "timestamp", "value"])
    for path in files:
        with open(path, newline="") as src:
            rows = list(csv.reader(src))
        if not rows or [c.strip().lower() for c in rows[0]] != ["timestamp", "value"]:
            raise ValueError(f"{path}: expected the header timestamp,value")
        body, seen = [], set()
        for line, row in enumerate(rows[1:], 2):
            if len(row) != 2:
                raise ValueError(f"{path}, line {line}: expected timestamp,value, not {','.join(row)}")
            if row[0] not in seen:
                seen.add(row[0])
                body.append(row)
        if len(body) < len(rows) - 1:
            print(f"nab_to_long: {path.stem}: {len(rows) - 1 - len(body)} rows repeat an earlier timestamp; "
                  f"kept the first of each", file=sys.stderr)
        if resample_to:
            body = resample(body, resample_to)
        body = body[: math.floor(len(body) * head)]
        writer.writerows([path.stem, stamp, value] for stamp, value in body)
        written[path.stem] = len(body)
    write_atomic(out, buffer.getvalue())
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a folder of NAB data files, e.g. NAB/data/realAWSCloudwatch")
    parser.add_argument("--out", required=True, help="the long table to write")
    parser.add_argument("--head", type=float, default=1.0, metavar="FRACTION",
                        help="keep the first FRACTION of each host's rows (default 1: all)")
    parser.add_argument("--resample", choices=STEPS, help="each host at this step instead (see above)")
    args = parser.parse_args(argv)
    if not 0 < args.head <= 1:
        parser.error("--head takes a fraction in (0, 1]")
    try:
        written = convert(args.folder, args.out, args.head, args.resample)
    except (OSError, ValueError) as exc:
        print(f"nab_to_long: {exc}", file=sys.stderr)
        return 2
    print(f"nab_to_long: {len(written)} hosts, {sum(written.values())} rows -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
