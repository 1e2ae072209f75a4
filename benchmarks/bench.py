"""`make bench`: batchpredict against the loop it replaces, on the same store, in one run.

    .venv/bin/python benchmarks/bench.py [--n 200] [--ours-n 1000] [--workers CORES] [--spawn-n 20]

1. seed loop: one process, load_model + joblib.load + predict + del + clear_session +
   reset_default_graph + gc.collect per IP (benchmarks/seed_loop.py, in a subprocess; --n IPs,
   its TensorFlow import not counted);
2. spawn per job: a fresh `spawn` process per IP that imports TensorFlow itself (--spawn-n IPs);
3. batchpredict strict: default settings (--jobs-per-worker 1, --engine auto), --workers = cores;
4. batchpredict K=25: --jobs-per-worker 25;
5. batchpredict strict with --engine keras: every job on the TensorFlow forkserver, as before the
   numpy engine;
6. batchpredict strict on the same store sealed (`store seal`): each worker checks its IP's files against
   manifest.json before reading them; beside it, the sha256 of one IP's files, timed alone.
Runs 3-6 score --ours-n IPs (the same store, grown), counted from the call to the last row:
planning and forkserver start-up included. Prints a table and writes benchmarks/results.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from importlib import metadata

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import farm  # noqa: E402

from batchpredict import RunOptions, predict_table  # noqa: E402
from batchpredict.io import manifest  # noqa: E402
from batchpredict.io.store import Store  # noqa: E402
from batchpredict.job import default_workers  # noqa: E402


def external(store: str, table: str, n: int, spawn: bool) -> dict:
    cmd = [sys.executable, os.path.join(HERE, "seed_loop.py"), store, table, "--limit", str(n)]
    done = subprocess.run(cmd + (["--spawn"] if spawn else []), capture_output=True, text=True, check=True)
    out = json.loads(done.stdout)
    return {"jobs": out["jobs"], "wall_s": out["wall_s"], "jobs_per_s": out["jobs"] / out["wall_s"],
            "coordinator_peak_rss_mib": out["peak_rss_mib"],
            "coordinator_rss_growth_mib": out["rss_mib"][-1] - out["rss_mib"][0],
            "worker_peak_rss_mib": out["child_peak_rss_mib"] if spawn else out["peak_rss_mib"],
            "predictions": out["predictions"]}


def ours(store: str, table: str, workers: int, k: int, engine: str = "auto") -> dict:
    me = psutil.Process()
    rss: list[float] = []
    start = time.monotonic()
    frame = predict_table(table, store, options=RunOptions(workers=workers, jobs_per_worker=k, engine=engine),
                          on_result=lambda r: rss.append(me.memory_info().rss / 2**20))
    wall = time.monotonic() - start
    assert (frame["status"] == "ok").all(), frame[frame["status"] != "ok"][["ip", "status", "error"]]
    return {"jobs": len(frame), "wall_s": wall, "jobs_per_s": len(frame) / wall,
            "coordinator_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "coordinator_rss_growth_mib": rss[-1] - rss[0],
            "worker_peak_rss_mib": float(frame["worker_peak_rss_mib"].max()),
            "median_job_ms": float(frame["duration_ms"].median()),
            "engines": frame.attrs["summary"]["engines"],
            "predictions": dict(zip(frame["ip"], frame["predicted"], strict=True))}


def hashing_ms(store: str, entries: dict[str, dict], rounds: int = 3) -> float:
    """What a sealed job adds in its worker: manifest.check of one IP, timed over every IP (page cache warm)."""
    opened = Store(store)
    found = {ip: opened.artefacts(ip) for ip in entries}
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for ip, entry in entries.items():
            manifest.check(store, entry, found[ip].model, found[ip].scaler, found[ip].std)
        best = min(best, (time.perf_counter() - start) / len(entries) * 1e3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--ours-n", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--spawn-n", type=int, default=20)
    parser.add_argument("--out", default=os.path.join(HERE, "results.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # The first --n IPs of the grown store are the seed loop's: farm cycles the demo IPs in order.
        store, table = map(str, farm.build(max(args.n, args.ours_n), tmp))
        runs = {
            "seed_loop": external(store, table, args.n, spawn=False),
            "spawn_per_job": external(store, table, min(args.spawn_n, args.n), spawn=True),
            "strict_k1": ours(store, table, args.workers, 1),
            "k25": ours(store, table, args.workers, 25),
            "strict_keras": ours(store, table, args.workers, 1, engine="keras"),
        }
        entries, _ = Store(store).seal()
        manifest.write(store, entries)
        runs["strict_sealed"] = ours(store, table, args.workers, 1)
        hash_ms = hashing_ms(store, entries)
    seed = runs["seed_loop"]
    reference = seed["predictions"]
    for run in runs.values():
        predictions = run.pop("predictions")
        run["max_abs_diff_vs_seed"] = max(abs(predictions[ip] - reference[ip]) for ip in predictions.keys() & reference)
    results = {
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cores": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1)},
        "versions": {name: metadata.version(name) for name in ("tensorflow-cpu", "keras", "numpy", "batchpredict")},
        "n": args.n, "ours_n": args.ours_n, "workers": args.workers, "runs": runs,
        "manifest_check_ms_per_job": hash_ms,
        "ratios": {"strict_vs_seed": runs["strict_k1"]["jobs_per_s"] / seed["jobs_per_s"],
                   "k25_vs_seed": runs["k25"]["jobs_per_s"] / seed["jobs_per_s"],
                   "strict_keras_vs_seed": runs["strict_keras"]["jobs_per_s"] / seed["jobs_per_s"],
                   "strict_sealed_vs_seed": runs["strict_sealed"]["jobs_per_s"] / seed["jobs_per_s"],
                   "spawn_vs_seed": runs["spawn_per_job"]["jobs_per_s"] / seed["jobs_per_s"]},
    }
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=2)
    print(f"{'run':16} {'jobs':>5} {'jobs/s':>7} {'wall s':>7} {'job ms':>7} {'coord peak':>10} {'coord growth':>12} "
          f"{'worker peak':>11} {'max |diff|':>10}")
    for name, run in runs.items():
        job_ms = f"{run['median_job_ms']:7.1f}" if "median_job_ms" in run else f"{'-':>7}"
        print(f"{name:16} {run['jobs']:5d} {run['jobs_per_s']:7.2f} {run['wall_s']:7.1f} {job_ms} "
              f"{run['coordinator_peak_rss_mib']:8.0f}Mi {run['coordinator_rss_growth_mib']:10.1f}Mi "
              f"{run['worker_peak_rss_mib'] or 0:9.0f}Mi {run['max_abs_diff_vs_seed']:10.2e}")
    print("ratios: " + ", ".join(f"{k} {v:.2f}x" for k, v in results["ratios"].items()))
    print(f"manifest check (sha256 of one IP's model and scaler, and its std): {hash_ms:.3f} ms a job")


if __name__ == "__main__":
    main()
