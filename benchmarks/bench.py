"""`make bench`: batchpredict against the loop it replaces, on the same store, in one run.

    .venv/bin/python benchmarks/bench.py [--n 200] [--ours-n 1000] [--workers CORES] [--spawn-n 20]
                                         [--nightly-n 1000] [--nightly-seed-n 100] [--only RUN,...]

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
7. nightly: the night's workload, `predict --since LABEL --std rolling:96` with the default alerting
   stage, the CSV and events file written, on --nightly-n IPs whose table holds the whole history the
   alerting stage and the std read before the day it scores (LABEL leaves NIGHTLY_POINTS, a day, after it);
   beside it, nightly_seed: the seed loop scoring the same points with one batched `predict` per IP
   (--nightly-seed-n IPs of the same store), timed before the nights and again after them, its rate over both
   (this machine's speed drifts by a fifth over minutes: 1.17 and 1.50 jobs/s within an hour);
8. nightly_history: the same night with `--history DIR` (filled by the night before, untimed) on a table of
   that day and `--window` + `--rolling` buckets before it; its rows must equal run 7's.
Both nights report the share of their rows whose alert fell back to the onset of a critical run
(`alert_source` severity: too little history to judge), 0 where the table or the history holds enough.
Runs 3-7 score --ours-n IPs (the same store, grown), counted from the call to the last row, planning
included; both forkservers are started and the weights cache (a folder of the run's own) filled before the
first of them, as on every night after the first (a run pays the start once: ~0.2 s lean, ~3 s TensorFlow).
Prints a table, the ratios and the targets of docs/performance.md (met or missed), and writes them to
benchmarks/results.json; with --only, just the runs named, and results.json only with an explicit --out.
benchmarks/profile_job.py gives the breakdown of a nightly job's time.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
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

import pandas as pd  # noqa: E402

from batchpredict import Params, RunOptions, predict_table  # noqa: E402
from batchpredict.commands.predict import predict  # noqa: E402
from batchpredict.io import manifest  # noqa: E402
from batchpredict.io.store import Store  # noqa: E402
from batchpredict.job import default_workers  # noqa: E402
from batchpredict.rules import REFERENCE  # noqa: E402
from batchpredict.runtime import forkserver  # noqa: E402
from batchpredict.scoring import anomaly  # noqa: E402
from batchpredict.scoring import method as methods  # noqa: E402

NIGHTLY_POINTS = 288  # a day of five-minute buckets scored
NIGHTLY_STD = "rolling:96"
RUNS = ("seed_loop", "spawn_per_job", "strict_k1", "k25", "strict_keras", "strict_sealed", "nightly_seed", "nightly",
        "nightly_history")


def nightly_before() -> int:
    """Buckets a scored point reads before it with the nightly settings: what the rules and the std say they
    need (method.Spans at the bench's 5-minute step), and each window's --window + --rolling."""
    params = Params(std=NIGHTLY_STD)
    parsed = methods.parse(params.alert)
    assert parsed is not None
    method = parsed.at(REFERENCE)
    needs = max(method.value_history(), method.history(), anomaly.std_mode(params.std)[1])
    return needs + params.window + params.rolling


def external(store: str, table: str, n: int, spawn: bool, points: int = 1) -> dict:
    cmd = [sys.executable, os.path.join(HERE, "seed_loop.py"), store, table, "--limit", str(n), "--points", str(points)]
    done = subprocess.run(cmd + (["--spawn"] if spawn else []), capture_output=True, text=True, check=True)
    out = json.loads(done.stdout)
    return {"jobs": out["jobs"], "wall_s": out["wall_s"], "jobs_per_s": out["jobs"] / out["wall_s"],
            "rows_per_s": out["jobs"] * points / out["wall_s"],
            "coordinator_peak_rss_mib": out["peak_rss_mib"],
            "coordinator_rss_growth_mib": out["rss_mib"][-1] - out["rss_mib"][0],
            "worker_peak_rss_mib": out["child_peak_rss_mib"] if spawn else out["peak_rss_mib"],
            "predictions": out["predictions"]}


def both(before: dict, after: dict) -> dict:
    """The seed loop timed before and after the runs it is the reference of: its rate over both."""
    jobs, wall = before["jobs"] + after["jobs"], before["wall_s"] + after["wall_s"]
    return {**before, "jobs": jobs, "wall_s": wall, "jobs_per_s": jobs / wall,
            "rows_per_s": (before["rows_per_s"] * before["wall_s"] + after["rows_per_s"] * after["wall_s"]) / wall,
            "jobs_per_s_before_after": [before["jobs_per_s"], after["jobs_per_s"]],
            "coordinator_peak_rss_mib": max(before["coordinator_peak_rss_mib"], after["coordinator_peak_rss_mib"])}


def ours(store: str, table: str, workers: int, k: int, engine: str = "auto") -> dict:
    me = psutil.Process()
    rss: list[float] = []

    seen = itertools.count()

    def probe(_: object) -> None:  # after every 10th result: each read of /proc costs the coordinator ~0.1 ms
        if next(seen) % 10 == 0:
            rss.append(me.memory_info().rss / 2**20)

    start, cpu = time.monotonic(), time.process_time()
    frame = predict_table(table, store, options=RunOptions(workers=workers, jobs_per_worker=k, engine=engine),
                          on_result=probe)
    rss.append(me.memory_info().rss / 2**20)
    wall, cpu = time.monotonic() - start, time.process_time() - cpu
    assert (frame["status"] == "ok").all(), frame[frame["status"] != "ok"][["ip", "status", "error"]]
    return {"jobs": len(frame), "wall_s": wall, "jobs_per_s": len(frame) / wall,
            "coordinator_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "coordinator_rss_growth_mib": rss[-1] - rss[0],
            "coordinator_cpu_ms_per_job": cpu / len(frame) * 1e3,  # every thread of this process, the RSS probe's too
            "worker_peak_rss_mib": float(frame["worker_peak_rss_mib"].max()),
            "median_job_ms": float(frame["duration_ms"].median()),
            "engines": frame.attrs["summary"]["engines"],
            "predictions": dict(zip(frame["ip"], frame["predicted"], strict=True))}


def nights(table: str, dest: str) -> tuple[str, str, str]:
    """From the whole table (nightly_before() + 2 days of buckets): the night before's table, which fills
    the history, and tonight's of one day with --window + --rolling before it; and tonight's --since."""
    frame = pd.read_csv(table, dtype=str, keep_default_na=False)
    labels, params = list(frame.columns[1:]), Params()
    night = len(labels) - NIGHTLY_POINTS  # tonight's first bucket
    before, tonight = os.path.join(dest, "before.csv"), os.path.join(dest, "tonight.csv")
    frame[["ip", *labels[:night]]].to_csv(before, index=False)
    frame[["ip", *labels[night - params.window - params.rolling:]]].to_csv(tonight, index=False)
    return before, tonight, labels[night - 1]


def nightly(store: str, table: str, workers: int, dest: str, *, since: str, history: str | None = None,
            name: str = "nightly") -> dict:
    """The night's command (module docstring, runs 7 and 8), as the CLI runs it: CSV, events and summary
    written."""
    out = os.path.join(dest, f"{name}.csv")
    params = Params(since=since, std=NIGHTLY_STD)
    start = time.monotonic()
    summary = predict(table, store, out, params, options=RunOptions(workers=workers, history=history))
    wall = time.monotonic() - start
    frame = pd.read_csv(out, dtype={"ip": str}, usecols=["ip", "predicted", "status", "duration_ms",
                                                          "worker_peak_rss_mib", "alert_source"])
    assert (frame["status"] == "ok").all(), frame[frame["status"] != "ok"]
    jobs = frame.groupby("ip", sort=False).last()
    assert (frame.groupby("ip").size() == NIGHTLY_POINTS).all()
    sizes = [entry.stat().st_size for entry in os.scandir(history) if entry.name.endswith(".history")] \
        if history else []
    return {"jobs": len(jobs), "rows": len(frame), "wall_s": wall, "jobs_per_s": len(jobs) / wall,
            "table_buckets": len(pd.read_csv(table, nrows=0).columns) - 1,
            "fallback_share": float((frame["alert_source"] == "severity").mean()),
            "history_kib_per_ip": max(sizes) / 1024 if sizes else None,
            "rows_per_s": len(frame) / wall, "points_per_ip": NIGHTLY_POINTS, "std": NIGHTLY_STD,
            "alert": params.alert, "alerts": summary.get("alerts"), "events": summary["events"],
            "coordinator_peak_rss_mib": summary["coordinator_peak_rss_mib"],
            "coordinator_cpu_ms_per_job": summary["timings"]["coordinator_cpu_s"] / len(jobs) * 1e3,
            "coordinator_rss_growth_mib": None,
            "worker_peak_rss_mib": float(jobs["worker_peak_rss_mib"].max()),
            "median_job_ms": float(jobs["duration_ms"].median()),
            "engines": summary["engines"],
            "predictions": jobs["predicted"].to_dict()}


def same_rows(one: str, other: str) -> bool:
    """The two outputs hold the same rows, outside the columns that time the jobs."""
    timing = ["attempts", "duration_ms", "worker_pid", "worker_peak_rss_mib"]
    a, b = (pd.read_csv(path, dtype=str, keep_default_na=False).drop(columns=timing) for path in (one, other))
    return a.equals(b)


def _targets(runs: dict, ratios: dict) -> list[tuple[str, float | None, float, bool]]:
    """(name, value, bound, whether the bound is a ceiling) of each target of docs/performance.md."""
    strict, nightly, kept = runs.get("strict_k1", {}), runs.get("nightly", {}), runs.get("nightly_history", {})
    return [("strict >= 100x", ratios.get("strict_vs_seed"), 100.0, False),
            ("worker <= 150 MiB", strict.get("worker_peak_rss_mib"), 150.0, True),
            ("coordinator <= 1 ms CPU a strict job", strict.get("coordinator_cpu_ms_per_job"), 1.0, True),
            ("nightly >= 25x", ratios.get("nightly_vs_seed"), 25.0, False),
            ("nightly --history >= 60x", ratios.get("nightly_history_vs_seed"), 60.0, False),
            ("nightly fallback share = 0", nightly.get("fallback_share"), 0.0, True),
            ("nightly --history fallback share = 0", kept.get("fallback_share"), 0.0, True),
            ("nightly --history rows equal the stateless night's", kept.get("rows_equal"), 1.0, False),
            ("history <= 64 KiB an IP", kept.get("history_kib_per_ip"), 64.0, True)]


def warm_cache() -> None:
    """The bundled models read once into the weights cache, in a process of their own (this one stays the
    coordinator it measures, without h5py)."""
    bundled = [str(p) for p in sorted((farm.ROOT / "models" / "model").iterdir()) if p.suffix in (".h5", ".keras")]
    code = "import sys; from batchpredict.scoring.engine import load; [load(p) for p in sys.argv[1:]]"
    subprocess.run([sys.executable, "-c", code, *bundled], check=True)


def start_pools() -> None:
    for pool in forkserver.PRELOADS:
        process = forkserver.Process(pool, target=time.sleep, args=(0,))
        process.start()
        process.join()


def hashing_ms(store: str, entries: dict[str, dict], rounds: int = 3) -> float:
    """What a sealed job adds in its worker: manifest.check of one IP, timed over every IP (page cache warm)."""
    opened = Store(store)
    found = {ip: opened.artefacts(ip) for ip in entries}
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for ip, entry in entries.items():
            manifest.check(store, entry, found[ip].model, found[ip].scaler, std=found[ip].std)
        best = min(best, (time.perf_counter() - start) / len(entries) * 1e3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--ours-n", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--spawn-n", type=int, default=20)
    parser.add_argument("--nightly-n", type=int, default=1000)
    parser.add_argument("--nightly-seed-n", type=int, default=100)
    parser.add_argument("--only", type=lambda text: text.split(","), default=list(RUNS),
                        help=f"comma-separated runs among {', '.join(RUNS)}")
    parser.add_argument("--out", default=None, help="default benchmarks/results.json, unless --only")
    args = parser.parse_args()
    unknown = set(args.only) - set(RUNS)
    if unknown:
        parser.error(f"--only: no run {', '.join(sorted(unknown))}")
    wanted = [name for name in RUNS if name in args.only]
    out = args.out or (os.path.join(HERE, "results.json") if len(wanted) == len(RUNS) else None)
    runs: dict[str, dict] = {}
    hash_ms = None
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        # A weights cache of this run's own, filled before the timed runs: a night after the first, whatever
        # earlier runs left in the user's cache (farm copies the bundled models, so their entries serve it).
        os.environ["BATCHPREDICT_CACHE"] = os.path.join(tmp, "weights-cache")
        warm_cache()
        # Both forkservers up before the first timed run: otherwise the first run of each pool alone pays its
        # start (~0.2 s lean, ~3 s with TensorFlow) and the later ones reuse it.
        start_pools()
        # The first --n IPs of the grown store are the seed loop's: farm cycles the demo IPs in order.
        if set(wanted) & set(RUNS[:6]):
            store, table = map(str, farm.build(max(args.n, args.ours_n), os.path.join(tmp, "day")))
            one_point = {
                "seed_loop": lambda: external(store, table, args.n, spawn=False),
                "spawn_per_job": lambda: external(store, table, min(args.spawn_n, args.n), spawn=True),
                "strict_k1": lambda: ours(store, table, args.workers, 1),
                "k25": lambda: ours(store, table, args.workers, 25),
                "strict_keras": lambda: ours(store, table, args.workers, 1, engine="keras"),
            }
            for name in RUNS[:5]:
                if name in wanted:
                    runs[name] = one_point[name]()
                    load.append(os.getloadavg()[0])
            if "strict_sealed" in wanted:
                entries, _ = Store(store).seal()
                manifest.write(store, entries)
                runs["strict_sealed"] = ours(store, table, args.workers, 1)
                hash_ms = hashing_ms(store, entries)
                load.append(os.getloadavg()[0])
        if set(wanted) & set(RUNS[6:]):
            night = os.path.join(tmp, "night")
            store, table = map(str, farm.build(max(args.nightly_n, args.nightly_seed_n), night,
                                               buckets=nightly_before() + 2 * NIGHTLY_POINTS))
            before, tonight, since = nights(table, night)
            if "nightly_seed" in wanted:
                runs["nightly_seed"] = external(store, table, args.nightly_seed_n, spawn=False, points=NIGHTLY_POINTS)
                load.append(os.getloadavg()[0])
            if "nightly" in wanted:
                runs["nightly"] = nightly(store, table, args.workers, night, since=since)
                load.append(os.getloadavg()[0])
            if "nightly_history" in wanted:
                folder = os.path.join(night, "history")  # the night before's, untimed
                predict(before, store, os.path.join(night, "before.out.csv"),
                        Params(since=pd.read_csv(before, nrows=0).columns[-NIGHTLY_POINTS - 1], std=NIGHTLY_STD),
                        options=RunOptions(workers=args.workers, history=folder))
                runs["nightly_history"] = nightly(store, tonight, args.workers, night, since=since, history=folder,
                                                  name="nightly_history")
                load.append(os.getloadavg()[0])
                if "nightly" in wanted:
                    runs["nightly_history"]["rows_equal"] = float(same_rows(os.path.join(night, "nightly.csv"),
                                                                            os.path.join(night, "nightly_history.csv")))
            if "nightly_seed" in wanted and {"nightly", "nightly_history"} & set(runs):
                runs["nightly_seed"] = both(runs["nightly_seed"], external(store, table, args.nightly_seed_n,
                                                                           spawn=False, points=NIGHTLY_POINTS))
                load.append(os.getloadavg()[0])
    for seed_name, names in (("seed_loop", RUNS[:6]), ("nightly_seed", RUNS[6:])):  # nightly_seed: itself
        reference = runs.get(seed_name, {}).get("predictions")
        for name in names:
            if name in runs and reference is not None:
                predictions = runs[name]["predictions"]
                runs[name]["max_abs_diff_vs_seed"] = max(abs(predictions[ip] - reference[ip])
                                                         for ip in predictions.keys() & reference)
    for run in runs.values():
        run.pop("predictions")
    pairs = {"strict_vs_seed": ("strict_k1", "seed_loop"), "k25_vs_seed": ("k25", "seed_loop"),
             "strict_keras_vs_seed": ("strict_keras", "seed_loop"), "strict_sealed_vs_seed": ("strict_sealed", "seed_loop"),
             "spawn_vs_seed": ("spawn_per_job", "seed_loop"), "nightly_vs_seed": ("nightly", "nightly_seed"),
             "nightly_history_vs_seed": ("nightly_history", "nightly_seed")}
    ratios = {key: runs[name]["jobs_per_s"] / runs[seed]["jobs_per_s"]
              for key, (name, seed) in pairs.items() if name in runs and seed in runs}
    targets = {name: {"value": value, "target": bound,
                      "met": value is not None and (value <= bound if ceiling else value >= bound)}
               for name, value, bound, ceiling in _targets(runs, ratios)}
    results = {
        "machine": farm.machine(),
        "versions": {name: metadata.version(name) for name in ("tensorflow-cpu", "keras", "numpy", "batchpredict")},
        "n": args.n, "ours_n": args.ours_n, "nightly_n": args.nightly_n, "nightly_seed_n": args.nightly_seed_n,
        "workers": args.workers, "load_average": [round(x, 2) for x in load], "runs": runs,
        "manifest_check_ms_per_job": hash_ms,
        "ratios": ratios,
        "nightly_vs_seed": ratios.get("nightly_vs_seed"),
        "nightly_jobs_per_s": runs.get("nightly", {}).get("jobs_per_s"),
        "nightly_history_vs_seed": ratios.get("nightly_history_vs_seed"),
        "nightly_history_jobs_per_s": runs.get("nightly_history", {}).get("jobs_per_s"),
        "targets": targets,
    }
    if out:
        with open(out, "w") as fh:
            json.dump(results, fh, indent=2)
    print(f"{'run':16} {'jobs':>5} {'jobs/s':>7} {'rows/s':>8} {'wall s':>7} {'job ms':>7} {'coord peak':>10} "
          f"{'coord growth':>12} {'worker peak':>11} {'max |diff|':>10}")
    for name, run in runs.items():
        job_ms = f"{run['median_job_ms']:7.1f}" if "median_job_ms" in run else f"{'-':>7}"
        rows = f"{run['rows_per_s']:8.1f}" if "rows_per_s" in run else f"{run['jobs_per_s']:8.1f}"
        growth = run["coordinator_rss_growth_mib"]
        diff = run.get("max_abs_diff_vs_seed")
        print(f"{name:16} {run['jobs']:5d} {run['jobs_per_s']:7.2f} {rows} {run['wall_s']:7.1f} {job_ms} "
              f"{run['coordinator_peak_rss_mib']:8.0f}Mi {'-' if growth is None else f'{growth:.1f}Mi':>12} "
              f"{run['worker_peak_rss_mib'] or 0:9.0f}Mi {'-' if diff is None else f'{diff:.2e}':>10}")
    print("ratios: " + ", ".join(f"{k} {v:.2f}x" for k, v in results["ratios"].items()))
    print("targets: " + ", ".join(f"{name} {'met' if t['met'] else 'missed'} ({t['value']:.3g})"
                                   for name, t in targets.items() if t["value"] is not None))
    if hash_ms is not None:
        print(f"manifest check (sha256 of one IP's model and scaler, and its std): {hash_ms:.3f} ms a job")
    print("load average (1 min) before and after each run: " + " ".join(f"{x:.2f}" for x in load))


if __name__ == "__main__":
    main()
