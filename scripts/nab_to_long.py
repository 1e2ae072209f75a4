"""Converts a folder of NAB data files (timestamp,value) to one long stats table ip,timestamp,value.

Each file is one host: its stem (ec2_cpu_utilization_24ae8d.csv -> ec2_cpu_utilization_24ae8d) is the ip,
the id NAB's combined_windows.json names it by. Timestamps and values are copied as written, files in name
order, each in its own order, except that a timestamp written twice keeps only its first row: batchpredict
refuses a host with a repeated timestamp, and two realAWSCloudwatch files repeat 2014-03-09 03:00:00 twelve
times (the hour a clock change skipped). `--head 0.5` keeps only the first half of each host's rows (after
that): a training table.

    python scripts/nab_to_long.py NAB/data/realAWSCloudwatch --out nab/all.csv
    python scripts/nab_to_long.py NAB/data/realAWSCloudwatch --head 0.5 --out nab/train.csv

where NAB is a clone of github.com/numenta/NAB (or a copy of its data and labels folders).
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from pathlib import Path

from batchpredict.io.files import write_atomic


def convert(folder: str, out: str, head: float = 1.0) -> dict[str, int]:
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
    args = parser.parse_args(argv)
    if not 0 < args.head <= 1:
        parser.error("--head takes a fraction in (0, 1]")
    try:
        written = convert(args.folder, args.out, args.head)
    except (OSError, ValueError) as exc:
        print(f"nab_to_long: {exc}", file=sys.stderr)
        return 2
    print(f"nab_to_long: {len(written)} hosts, {sum(written.values())} rows -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
