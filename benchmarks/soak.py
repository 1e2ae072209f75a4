"""Fork-safety soak: N one-job workers in a row from one forkserver, no hang and no crash.

    .venv/bin/python benchmarks/soak.py --n 2000 --workers 2
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

import psutil

sys.path.insert(0, os.path.dirname(__file__))
import farm  # noqa: E402

from batchpredict import RunOptions, predict_table  # noqa: E402
from batchpredict.job import default_workers  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=default_workers())
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store, table = farm.build(args.n, tmp)
        rss = []
        start = time.monotonic()
        frame = predict_table(str(table), str(store), options=RunOptions(workers=args.workers, timeout=120),
                              on_result=lambda r: rss.append(psutil.Process().memory_info().rss / 2**20))
        wall = time.monotonic() - start
    counts = frame["status"].value_counts().to_dict()
    result = {"jobs": args.n, "workers": args.workers, "wall_s": round(wall, 1), "jobs_per_s": round(args.n / wall, 2),
              "status": counts, "distinct_worker_pids": int(frame["worker_pid"].nunique()),
              "worker_peak_rss_mib_max": float(frame["worker_peak_rss_mib"].max()),
              "coordinator_rss_first_last_mib": [round(rss[0], 1), round(rss[-1], 1)],
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                         f"{psutil.virtual_memory().total / 2**30:.0f} GiB"}
    print(json.dumps(result, indent=2))
    sys.exit(0 if counts == {"ok": args.n} else 1)


if __name__ == "__main__":
    main()
