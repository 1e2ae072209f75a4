"""Writes the bundled example: examples/history.csv (training) and examples/stats.csv (tonight),
and with --train the demo store in models/ (half .h5, half .keras), with `batchpredict train`.

Hourly request counts for a few dozen hosts: a daily cycle, a weekly dip, noise and the odd
burst. Tonight's table continues each history; a few hosts end on a clear anomaly. Seeded, so
the files are reproducible byte for byte.
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import pandas as pd

HISTORY_HOURS = 24 * 28
TONIGHT_HOURS = 48
START = pd.Timestamp("2026-10-01T00:00")


def host_ids(n: int) -> list[str]:
    ids = [f"10.0.{i // 10}.{10 + i}" for i in range(n - 4)]
    return ids + ["2001:db8::1", "2001:db8::2f", "edge-proxy-1.example.net", "db-primary"][: max(0, n - len(ids))]


def series(rng: np.random.Generator, hours: int) -> np.ndarray:
    t = np.arange(hours)
    base = rng.uniform(50, 2000)
    daily = 1 + rng.uniform(0.2, 0.6) * np.sin(2 * np.pi * (t % 24 - rng.uniform(6, 10)) / 24)
    weekly = 1 - rng.uniform(0.0, 0.3) * ((t // 24) % 7 >= 5)
    noise = rng.normal(1, rng.uniform(0.02, 0.06), hours)
    bursts = 1 + (rng.random(hours) < 0.01) * rng.uniform(0.3, 1.0, hours)
    return np.round(base * daily * weekly * noise * bursts, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default="examples")
    parser.add_argument("--train", metavar="STORE", help="also train the demo store into STORE (e.g. models)")
    parser.add_argument("--epochs", type=int, default=40)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    ids = host_ids(args.hosts)
    stamps = pd.date_range(START, periods=HISTORY_HOURS + TONIGHT_HOURS, freq="h").strftime("%Y-%m-%dT%H:%M")
    full = np.vstack([series(rng, HISTORY_HOURS + TONIGHT_HOURS) for _ in ids])
    # A few hosts end on an anomaly: a surge or an outage in the last hours.
    for row in range(3, len(ids), 7):
        full[row, -3:] *= 6.0 if row % 2 else 0.0
    os.makedirs(args.out, exist_ok=True)
    history = pd.DataFrame(full[:, :HISTORY_HOURS], columns=stamps[:HISTORY_HOURS])
    history.insert(0, "ip", ids)
    history.to_csv(os.path.join(args.out, "history.csv"), index=False)
    tonight = pd.DataFrame(full[:, HISTORY_HOURS:], columns=stamps[HISTORY_HOURS:])
    tonight.insert(0, "ip", ids)
    tonight.to_csv(os.path.join(args.out, "stats.csv"), index=False)
    if args.train:
        train_store(os.path.join(args.out, "history.csv"), args.train, ids, args.epochs)


def train_store(history: str, store: str, ids: list[str], epochs: int) -> None:
    from batchpredict import RunOptions
    from batchpredict.commands.train import train_table

    options = RunOptions(workers=os.cpu_count() or 2, timeout=1800)
    for fmt, subset in (("h5", ids[0::2]), ("keras", ids[1::2])):
        results = train_table(history, store, fmt, epochs=epochs, ips=subset, options=options)
        failed = [f"{r.ip}: {r.error}" for r in results if r.status != "ok"]
        if failed:
            raise SystemExit("training failed: " + "; ".join(failed))


if __name__ == "__main__":
    main()
