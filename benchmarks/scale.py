"""`make bench-scale`: a night of a million IPs, for CSV and for Parquet.

    .venv/bin/python benchmarks/scale.py [--n 1000000] [--every 200] [--workers CPUS] [--keep DIR]

Writes a wide table of --n IPs x 60 hourly buckets (windows of examples/history.csv) as CSV and as
Parquet, and a store in which one IP in --every has a model: hard links to the bundled store's
models and scalers (models/), so it costs no disk. For each format it measures

- read+plan: the coordinator's reading and planning of the whole table (table.Table and
  commands.predict.Plan, jobs dropped), alone in a fresh process: wall, CPU and peak RSS;
- a run: `batchpredict predict` with default settings (--workers: one per CPU, one job per worker process):
  time to the first job, total wall, the coordinator's peak RSS (summary.json), its CPU per job
  (its CPU minus what reading and planning took, per job), and the slot overhead per job: worker
  slots' time not spent inside jobs (workers x wall - sum of duration_ms), per job.

A third, dense run scores a table of DENSE IPs that all have a model: with no table to speak of,
its CPU and slot overhead per job are the executor's own.

Prints a table and writes benchmarks/scale-results.json, with the load average around each step:
on a shared machine the figures are only as quiet as it was.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from batchpredict.job import default_workers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import farm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUCKETS = 60
DENSE = 2000  # IPs of the dense run: every one a job, so the table costs next to nothing
TARGETS = {"read_plan_s": 30.0, "first_job_s": 10.0, "coordinator_peak_rss_mib": 1024.0,
           "coordinator_cpu_ms_per_job": 1.0}


def ip_of(i: int) -> str:
    return f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"


def build(n: int, every: int, dest: Path) -> tuple[Path, Path, Path, Path, int]:
    """(CSV table, Parquet table, dense CSV table, store, IPs with a model) under dest; the dense table
    holds the first DENSE of the IPs with a model, and nothing else."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    history = pd.read_csv(ROOT / "examples" / "history.csv", dtype={"ip": str})
    hosts, values = history["ip"].tolist(), history.iloc[:, 1:].to_numpy()
    labels = list(history.columns[1 + values.shape[1] - BUCKETS:])
    offsets = values.shape[1] - BUCKETS + 1
    # IP i shows host i % hosts over the 60 hours from offset (i // hosts) % offsets of its history.
    host = np.arange(n) % len(hosts)
    offset = (np.arange(n) // len(hosts)) % offsets
    rendered = {}
    csv_path, parquet_path, dense_path = dest / "stats.csv", dest / "stats.parquet", dest / "dense.csv"
    with open(csv_path, "w") as fh, open(dense_path, "w") as dense:
        for out in (fh, dense):
            out.write(",".join(["ip", *labels]) + "\n")
        for i in range(n):
            key = (host[i], offset[i])
            if key not in rendered:
                rendered[key] = ",".join(map(repr, values[key[0], key[1]:key[1] + BUCKETS].tolist()))
            fh.write(f"{ip_of(i)},{rendered[key]}\n")
            if i % every == 0 and i // every < DENSE:
                dense.write(f"{ip_of(i)},{rendered[key]}\n")
    schema = pa.schema([("ip", pa.string())] + [(label, pa.float64()) for label in labels])
    with pq.ParquetWriter(parquet_path, schema) as writer:
        for start in range(0, n, 65_536):
            rows = np.arange(start, min(n, start + 65_536))
            block = values[host[rows][:, None], offset[rows][:, None] + np.arange(BUCKETS)]
            writer.write_table(pa.table([pa.array([ip_of(i) for i in rows])] + list(block.T), schema=schema))
    store = dest / "store"
    for sub in ("model", "sc", "std"):
        (store / sub).mkdir(parents=True)
    models = {p.name.rsplit(".", 1)[0]: p for p in (ROOT / "models" / "model").iterdir()}
    demo_stds = json.loads((ROOT / "models" / "std" / "std.json").read_text())
    stds = {}
    for i in range(0, n, every):
        ip, origin = ip_of(i), hosts[host[i]]
        os.link(models[origin], store / "model" / (ip + models[origin].suffix))
        os.link(ROOT / "models" / "sc" / f"{origin}.save", store / "sc" / f"{ip}.save")
        stds[ip] = demo_stds[origin]
    (store / "std" / "std.json").write_text(json.dumps(stds))
    return csv_path, parquet_path, dense_path, store, len(stds)


def read_and_plan(table: str, store: str) -> None:
    """(In its own process.) The coordinator's reading and planning of the whole table, jobs dropped."""
    from batchpredict.commands.predict import Plan, peak_rss_mib
    from batchpredict.io.output import Rows
    from batchpredict.io.store import Store
    from batchpredict.io.table import Table
    from batchpredict.job import Params

    start, cpu = time.monotonic(), time.process_time()
    opened = Table(table)
    plan = Plan(opened, Store(store), Params(), engine="auto", rows=Rows(Params().sigmas))
    first, ips = None, 0

    def counted(chunks: Iterator[list]) -> Iterator[list]:
        nonlocal ips
        for chunk in chunks:
            ips += len(chunk)
            yield chunk

    for job in plan.jobs_of(counted(opened.chunks())):
        if job is not None and first is None:
            first = time.monotonic() - start
    plan.settle_duplicates()
    print(json.dumps({"read_plan_s": time.monotonic() - start, "read_plan_cpu_s": time.process_time() - cpu,
                      "first_job_planned_s": first, "jobs": plan.jobs, "ips": ips,
                      "read_plan_peak_rss_mib": peak_rss_mib()}))


def measure(table: Path, store: Path, out: Path, workers: int) -> dict:
    load = os.getloadavg()[0]
    planned = json.loads(subprocess.run([sys.executable, __file__, "--read-and-plan", str(table), str(store)],
                                        capture_output=True, text=True, check=True).stdout)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "batchpredict.cli", "predict", "--data", str(table), "--models",
                           str(store), "--out", str(out), "--workers", str(workers), "-q"],
                          capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"predict exited {done.returncode}: {done.stderr}")
    summary = json.loads(Path(str(out) + ".summary.json").read_text())
    jobs, timings = summary["jobs_run"], summary["timings"]
    busy_s = float(pd.read_csv(out, usecols=["duration_ms"])["duration_ms"].sum()) / 1000
    return {
        **planned,
        "first_job_s": timings["first_job_s"],
        "startup_s": round(wall - summary["wall_s"], 3),  # the command's imports and exit, outside its run
        "wall_s": round(wall, 3),
        "run_wall_s": summary["wall_s"],
        "jobs_run": jobs,
        "jobs_per_s": summary["jobs_per_s"],
        "coordinator_peak_rss_mib": summary["coordinator_peak_rss_mib"],
        "coordinator_cpu_s": timings["coordinator_cpu_s"],
        "plan_cpu_s": timings["plan_cpu_s"],
        "coordinator_cpu_ms_per_job": round((timings["coordinator_cpu_s"] - timings["plan_cpu_s"]) / jobs * 1000, 3),
        "workers_busy_s": round(busy_s, 3),
        "slot_overhead_ms_per_job": round((workers * summary["wall_s"] - busy_s) / jobs * 1000, 3),
        "median_job_ms": float(pd.read_csv(out, usecols=["duration_ms"])["duration_ms"].median()),
        "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000, help="IPs in the table (default 1,000,000)")
    parser.add_argument("--every", type=int, default=200, help="one IP in EVERY has a model (default 200: 0.5%%)")
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--keep", metavar="DIR",
                        help="build in DIR (new) and leave it there (default: a temporary folder)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "scale-results.json"))
    parser.add_argument("--read-and-plan", nargs=2, metavar=("TABLE", "STORE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.read_and_plan:
        read_and_plan(*args.read_and_plan)
        return
    if args.keep:
        Path(args.keep).mkdir(parents=True)
    folder = contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(prefix="bench-scale-")
    with folder as tmp:
        dest = Path(tmp)
        started, load = time.monotonic(), os.getloadavg()[0]
        csv_path, parquet_path, dense_path, store, models = build(args.n, args.every, dest)
        built = {"build_s": round(time.monotonic() - started, 1), "load_average": round(load, 2),
                 "csv_mib": round(csv_path.stat().st_size / 2**20, 1),
                 "parquet_mib": round(parquet_path.stat().st_size / 2**20, 1)}
        print(f"built {args.n:,} IPs ({models:,} with a model) in {built['build_s']} s: CSV {built['csv_mib']} MiB, "
              f"Parquet {built['parquet_mib']} MiB", flush=True)
        runs = {}
        for name, table in (("csv", csv_path), ("parquet", parquet_path), ("dense", dense_path)):
            runs[name] = measure(table, store, dest / f"out-{name}.csv", args.workers)
            print(name, json.dumps(runs[name]), flush=True)
        total = round(time.monotonic() - started, 1)
    results = {
        "machine": farm.machine(),
        "versions": {name: metadata.version(name) for name in ("batchpredict", "pandas", "pyarrow", "numpy")},
        "n": args.n, "with_model": models, "buckets": BUCKETS, "workers": args.workers, "build": built,
        "runs": runs, "total_s": total, "targets": TARGETS,
        "met": {name: {k: run[k] <= limit for k, limit in TARGETS.items()} for name, run in runs.items()
                if name != "dense"},
    }
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=2)
    print(f"\n{'':8} {'read+plan':>9} {'1st job':>8} {'wall':>7} {'jobs/s':>7} {'peak RSS':>9} {'CPU/job':>8} "
          f"{'slot ovh/job':>12}")
    for name, run in runs.items():
        print(f"{name:8} {run['read_plan_s']:8.1f}s {run['first_job_s']:7.2f}s {run['wall_s']:6.0f}s "
              f"{run['jobs_per_s']:7.1f} {run['coordinator_peak_rss_mib']:6.0f}MiB "
              f"{run['coordinator_cpu_ms_per_job']:6.2f}ms {run['slot_overhead_ms_per_job']:10.2f}ms")
    print(f"total {total} s; targets {TARGETS}; met: {results['met']}")


if __name__ == "__main__":
    main()
