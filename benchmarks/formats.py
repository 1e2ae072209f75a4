"""Per-job cost of each model format: N IPs per format through real workers, one at a time.

    .venv/bin/python benchmarks/formats.py [--ips 20]

Builds one small LSTM per format with the runtime that writes it (tests/storegen.py), copies it to
N IPs, runs `predict_table` with one worker and one job per worker, and prints a Markdown table of
the median `duration_ms` (load + predict inside the worker; the fork itself is not in it).
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from conftest import (  # noqa: E402
    FORMATS,
    build_models,
    fitted_scaler,
    series_for,
    wide_table,
    write_scaler,
    write_stds,
)

from batchpredict import RunOptions, predict_table  # noqa: E402

RUNTIMES = {"h5": "keras", "keras": "keras", "keras2-h5": "tf_keras", "keras2-keras": "tf_keras",
            "keras2-savedmodel": "SavedModel signature", "keras3-export": "SavedModel signature",
            "tf-module": "SavedModel signature", "tf-module-call": "SavedModel `__call__`"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ips", type=int, default=20, help="IPs per format (default 20)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-formats-") as tmp:
        store = Path(tmp) / "store"
        formats = {fmt: window for fmt, window in FORMATS.values()}
        build_models(store, [{"ip": f"seed-{i}", "kind": "lstm", "format": fmt, "window": window}
                             for i, (fmt, window) in enumerate(formats.items())])
        data, of_format = {}, {}
        for i, fmt in enumerate(formats):
            (seed,) = (store / "model").glob(f"seed-{i}*")
            for n in range(args.ips):
                ip = f"10.9.{i}.{n}"
                copy = shutil.copytree if seed.is_dir() else shutil.copy
                copy(seed, store / "model" / (ip + seed.suffix))
                data[ip], of_format[ip] = series_for(ip), fmt
                write_scaler(store, ip, fitted_scaler(data[ip]))
            shutil.rmtree(seed) if seed.is_dir() else seed.unlink()
        write_stds(store, {ip: 1.0 for ip in data})
        started = time.monotonic()
        frame = predict_table(str(wide_table(Path(tmp) / "t.csv", data)), str(store),
                              options=RunOptions(workers=1, jobs_per_worker=1))
        wall = time.monotonic() - started
    assert (frame["status"] == "ok").all(), frame[frame["status"] != "ok"][["ip", "status", "error"]]
    frame["format"] = frame["ip"].map(of_format)
    print(f"{len(frame)} jobs, 1 worker, wall {wall:.1f} s ({len(frame) / wall:.2f} jobs/s)\n")
    print("| format (written by) | read with | median ms per job | p90 ms |")
    print("| --- | --- | ---: | ---: |")
    for fmt, group in frame.groupby("format", sort=False):
        ms = sorted(group["duration_ms"])
        print(f"| {fmt} | {RUNTIMES[fmt]} | {statistics.median(ms):.0f} | {ms[int(0.9 * (len(ms) - 1))]:.0f} |")


if __name__ == "__main__":
    main()
