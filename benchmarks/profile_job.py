"""Where a nightly job's time goes: each step of prediction.run_job timed, in a worker forked per job as the lean
forkserver forks them, then the result's trip to the coordinator and the coordinator's rendering of its rows.

    .venv/bin/python benchmarks/profile_job.py [--n 100] [--buckets 400] [--points 288] [--std rolling:96] [--alert ensemble]
                                               [--history]

`--history`: the night of `make bench`'s nightly_history run, each job reading and writing its IP's `--history`
file: a table of bench.nightly_before() + 2 days of buckets (unless --buckets), whose last day is scored from a
history that the days before it filled (untimed), on a table of that day and `--window` + `--rolling` buckets.

The steps are timed by wrapping the functions prediction.py calls (time.perf_counter around each), so the
code timed is the product's own; nothing in the product is instrumented. Prints the median per job and
per row of each step, and `--json` writes them.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import batchpredict.runtime.preload  # noqa: E402,F401,I001 - first: one BLAS thread, as in every worker
import batchpredict.runtime.preload.lean  # noqa: E402,F401 - the worker's parent, as the lean forkserver is
import bench  # noqa: E402
import farm  # noqa: E402
from batchpredict.commands import predict as coordinator  # noqa: E402
from batchpredict.io.journal import _line as journal_line  # noqa: E402
from batchpredict.io.store import Store  # noqa: E402
from batchpredict.io.table import Table  # noqa: E402
from batchpredict.job import Params  # noqa: E402
from batchpredict.scoring import alerting, anomaly, features, nights, prediction, scalers  # noqa: E402

STEPS = ("read scaler", "read model", "history key", "history join", "windows", "scale", "forward pass", "stds",
         "bands and verdicts", "alerts", "history leave", "other in the job")
spent: dict[str, float] = defaultdict(float)
faulted: dict[str, float] = defaultdict(float)  # minor page faults, each a page first written in the worker


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        start, faults = time.perf_counter(), _faults()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - start
            faulted[name] += _faults() - faults
    return call


def instrument() -> None:
    """Wraps what prediction._score calls, where it looks each name up."""
    def scaler(load: Callable[[str], Any]) -> Callable[[str], Any]:
        def read(path: str, **kwargs: Any) -> Any:
            found = timed("read scaler", load)(path, **kwargs)
            for method in ("transform", "inverse_transform"):  # a frozen dataclass: set past its guard
                object.__setattr__(found, method, timed("scale", getattr(found, method)))
            return found
        return read

    def model_reader(path: str, *args: Any, **kwargs: Any) -> Any:
        model = timed("read model", original_load)(path, *args, **kwargs)
        model.predict = timed("forward pass", model.predict)
        return model

    scalers.read_untrusted = scaler(scalers.read_untrusted)
    scalers.read_scaler = scaler(scalers.read_scaler)
    original_load = prediction.load_model
    prediction.load_model = model_reader
    prediction.windowed = timed("windows", prediction.windowed)
    features.Windows.inputs = timed("windows", features.Windows.inputs)
    prediction.point_stds = timed("stds", prediction.point_stds)
    for name in ("assess", "verdicts"):  # the per-point verdict, or its vectorised form
        for module in (prediction, anomaly):
            if hasattr(module, name):
                setattr(module, name, timed("bands and verdicts", getattr(module, name)))
    alerting.alerts = timed("alerts", alerting.alerts)
    nights.key = timed("history key", nights.key)
    nights.join = timed("history join", nights.join)
    nights.leave = timed("history leave", nights.leave)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--buckets", type=int, default=400)
    parser.add_argument("--points", type=int, default=288)
    parser.add_argument("--std", default="rolling:96")
    parser.add_argument("--alert", default=Params.alert)
    parser.add_argument("--json", default=None)
    parser.add_argument("--cold", action="store_true", help="no weights cache: every model read through h5py")
    parser.add_argument("--history", action="store_true", help="the nightly_history night (module docstring)")
    args = parser.parse_args()
    if args.history and args.buckets == parser.get_default("buckets"):
        args.buckets = bench.nightly_before() + 2 * args.points
    with tempfile.TemporaryDirectory() as tmp:
        # A weights cache of its own, filled below before any job is timed (a night after the first).
        os.environ["BATCHPREDICT_CACHE"] = "off" if args.cold else os.path.join(tmp, "weights-cache")
        store, table_path = map(str, farm.build(args.n, tmp, buckets=args.buckets))
        # In a process of its own: this one stays what the lean forkserver is, without h5py (a worker that
        # misses the cache, as with --cold, imports it).
        models = [os.path.join(store, "model", name) for name in sorted(os.listdir(os.path.join(store, "model")))]
        code = "import sys; from batchpredict.scoring.engine import load; [load(p) for p in sys.argv[1:]]"
        subprocess.run([sys.executable, "-c", code, *models], check=True)
        folder = os.path.join(tmp, "history") if args.history else None
        if folder:  # the nights before tonight's, untimed, in a child: this process stays as the forkserver is
            before, table_path, _ = bench.nights(table_path, tmp)
            filled = Table(before)
            params = Params(since=filled.labels[-args.points - 1], std=args.std, alert=args.alert)
            plan = coordinator.Plan(filled, Store(store), params, engine="auto", rows=coordinator._rows(params),
                                    history=folder)
            jobs = [job for job in plan.jobs_of(filled.chunks()) if job is not None]
            child = os.fork()
            if child == 0:
                os._exit(0 if all(prediction.run_job(job).status.value == "ok" for job in jobs) else 1)
            assert os.waitpid(child, 0)[1] == 0, "the night before failed"
        table = Table(table_path)
        since = table.labels[-args.points - 1] if args.points > 1 else None
        params = Params(since=since, std=args.std, alert=args.alert)
        rows = coordinator._rows(params)
        plan = coordinator.Plan(table, Store(store), params, engine="auto", rows=rows, history=folder)
        jobs = [job for job in plan.jobs_of(table.chunks()) if job is not None]
        instrument()
        per_job: list[dict[str, float]] = []
        per_job_faults: list[dict[str, float]] = []
        points = 0
        for job in jobs:
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker: one job, its timings and its pickled result down the pipe
                os.close(read)
                start, faults = time.perf_counter(), _faults()
                result = prediction.run_job(job)
                total = time.perf_counter() - start
                faulted["job"] = _faults() - faults
                result.duration_ms = total * 1e3
                pickled = time.perf_counter()
                payload = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
                spent["pickle in the worker"] = time.perf_counter() - pickled
                spent["job"] = total
                message = pickle.dumps((dict(spent), dict(faulted), payload))
                with os.fdopen(write, "wb") as fh:
                    fh.write(message)
                os._exit(0)
            os.close(write)
            with os.fdopen(read, "rb") as fh:
                timings, faults, payload = pickle.loads(fh.read())
            os.waitpid(pid, 0)
            start = time.perf_counter()
            result = pickle.loads(payload)
            timings["unpickle in the coordinator"] = time.perf_counter() - start
            timings["result bytes"] = len(payload)
            start = time.perf_counter()
            plan.finish(result)
            timings["coordinator rows (CSV, events, tallies)"] = time.perf_counter() - start
            start = time.perf_counter()
            journal_line(result.to_dict())  # the bytes Journal.append writes
            timings["journal line"] = time.perf_counter() - start
            timings["other in the job"] = timings["job"] - sum(timings.get(step, 0.0) for step in STEPS[:-1])
            faults["other in the job"] = faults["job"] - sum(faults.get(step, 0.0) for step in STEPS[:-1])
            per_job_faults.append(faults)
            assert result.status.value == "ok", result.error
            points = len(result.points)
            per_job.append(timings)
    names = [*STEPS, "job", "pickle in the worker", "unpickle in the coordinator",
             "coordinator rows (CSV, events, tallies)", "journal line"]
    medians = {name: statistics.median(t.get(name, 0.0) for t in per_job) * 1e3 for name in names}
    faults = {name: statistics.median(f.get(name, 0.0) for f in per_job_faults) for name in [*STEPS, "job"]}
    print(f"{len(per_job)} jobs, {points} rows each, --std {args.std}, --alert {args.alert}; load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'step':42} {'median ms/job':>13} {'us/row':>8} {'page faults':>11}")
    for name in names:
        print(f"{name:42} {medians[name]:13.2f} {medians[name] * 1e3 / max(points, 1):8.1f}"
              + (f" {faults[name]:11.0f}" if name in faults else ""))
    print(f"{'result bytes':42} {statistics.median(t['result bytes'] for t in per_job):13.0f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"jobs": len(per_job), "rows_per_job": points, "std": args.std, "alert": args.alert,
                       "load_average": os.getloadavg()[0], "median_ms": medians, "median_page_faults": faults,
                       "result_bytes": statistics.median(t["result bytes"] for t in per_job)}, fh, indent=2)


if __name__ == "__main__":
    main()
