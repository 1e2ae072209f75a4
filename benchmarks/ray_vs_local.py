"""Jobs/s of the local and the ray backend on one machine, for the same N IPs.

    .venv/bin/python benchmarks/ray_vs_local.py [--ips 200] [--workers 2]

The store is the bundled `models/` (32 trained production-size LSTMs) cycled to N IPs under new
names, with `examples/stats.csv` rows to match; both runs go through the CLI, each summary's
wall time includes everything (for ray: starting the local Ray instance). Prints one line per
backend and checks that both CSVs agree apart from timing and pid columns.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMING = {"duration_ms", "worker_pid", "worker_peak_rss_mib"}


def build(folder: str, count: int) -> tuple[str, str]:
    """A store and a wide table of `count` IPs, each a copy of one bundled IP."""
    source = os.path.join(ROOT, "models")
    with open(os.path.join(ROOT, "examples", "stats.csv"), newline="") as fh:
        header, *rows = list(csv.reader(fh))
    with open(os.path.join(source, "std", "std.json")) as fh:
        stds = json.load(fh)
    store, table = os.path.join(folder, "store"), os.path.join(folder, "stats.csv")
    for sub in ("model", "sc", "std"):
        os.makedirs(os.path.join(store, sub))
    copies, out_stds = [], {}
    for i in range(count):
        row = rows[i % len(rows)]
        ip, new = row[0], f"10.200.{i // 250}.{i % 250}"
        model = next(name for name in os.listdir(os.path.join(source, "model")) if name.rsplit(".", 1)[0] == ip)
        shutil.copy(os.path.join(source, "model", model), os.path.join(store, "model", new + os.path.splitext(model)[1]))
        shutil.copy(os.path.join(source, "sc", ip + ".save"), os.path.join(store, "sc", new + ".save"))
        out_stds[new] = stds[ip]
        copies.append([new] + row[1:])
    with open(os.path.join(store, "std", "std.json"), "w") as fh:
        json.dump(out_stds, fh)
    with open(table, "w", newline="") as fh:
        csv.writer(fh).writerows([header] + copies)
    return store, table


def run(backend: str, store: str, table: str, out: str, workers: int) -> dict:
    subprocess.run([sys.executable, "-m", "batchpredict.cli", "predict", "--data", table, "--models", store,
                    "--out", out, "--workers", str(workers), "--backend", backend, "-q"], check=True)
    with open(out + ".summary.json") as fh:
        return json.load(fh)


def rows(path: str) -> list[dict]:
    with open(path, newline="") as fh:
        return [{k: v for k, v in r.items() if k not in TIMING} for r in csv.DictReader(fh)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ips", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as folder:
        store, table = build(folder, args.ips)
        for backend in ("local", "ray"):
            load = os.getloadavg()[0]  # the machine may be shared: say how busy it was
            info = run(backend, store, table, os.path.join(folder, backend + ".csv"), args.workers)
            print(f"{backend:5s} {info['ips']} IPs, --workers {args.workers}: {info['wall_s']:.1f} s, "
                  f"{info['jobs_per_s']:.2f} jobs/s, {info['status']}, load average {load:.1f} -> "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
        same = rows(os.path.join(folder, "local.csv")) == rows(os.path.join(folder, "ray.csv"))
        print("CSV equal apart from timing and pid columns:", same)


if __name__ == "__main__":
    main()
