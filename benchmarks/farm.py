"""A store of N IPs for benchmarks and soaks, copied from the bundled demo store.

Each IP gets its own copy of a real trained two-layer LSTM (LSTM(64) -> LSTM(32) -> Dense(1)),
its scaler and std, and its own row in a wide table, cycling through the demo IPs.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def machine() -> dict:
    """The machine a benchmark ran on, for its JSON: the CPU's model too, since hosts of one kernel and core count
    have differed by a third in speed (docs/performance.md)."""
    import psutil

    cpu = ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:  # not Linux
        pass
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu": cpu or platform.processor(), "cores": os.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1)}


def build(n: int, dest: str | Path, source: str | Path = ROOT / "models",
          stats: str | Path = ROOT / "examples" / "stats.csv", buckets: int | None = None) -> tuple[Path, Path]:
    """(store, table) for n IPs under dest.

    `buckets`: a table of that many five-minute buckets instead of stats.csv's 48 hourly ones: each IP's
    history.csv series continued by its stats.csv row, repeated from its start where it is shorter, the last
    `buckets` values, relabelled. The models saw hourly buckets, so the values mean the same to them whatever
    the labels say.
    """
    dest, source = Path(dest), Path(source)
    store = dest / "store"
    for sub in ("model", "sc", "std"):
        (store / sub).mkdir(parents=True, exist_ok=True)
    demo = pd.read_csv(stats, dtype={"ip": str})
    if buckets is not None:
        demo = _long_series(demo, buckets)
    stds = json.loads((source / "std" / "std.json").read_text())
    models = {p.name.rsplit(".", 1)[0]: p for p in (source / "model").iterdir() if p.suffix in (".h5", ".keras")}
    rows, new_stds = [], {}
    for i in range(n):
        origin = demo.iloc[i % len(demo)]
        ip = f"10.{100 + i // 65536}.{i // 256 % 256}.{i % 256}"
        model = models[origin["ip"]]
        shutil.copyfile(model, store / "model" / f"{ip}{model.suffix}")
        shutil.copyfile(source / "sc" / f"{origin['ip']}.save", store / "sc" / f"{ip}.save")
        new_stds[ip] = stds[origin["ip"]]
        rows.append([ip, *origin.iloc[1:].tolist()])
    (store / "std" / "std.json").write_text(json.dumps(new_stds))
    table = dest / "stats.csv"
    pd.DataFrame(rows, columns=demo.columns).to_csv(table, index=False)
    return store, table


def _long_series(demo: pd.DataFrame, buckets: int) -> pd.DataFrame:
    history = pd.read_csv(ROOT / "examples" / "history.csv", dtype={"ip": str}).set_index("ip")
    values = pd.concat([history.loc[demo["ip"]].reset_index(drop=True), demo.iloc[:, 1:]], axis=1).to_numpy()
    values = np.tile(values, (1, -(-buckets // values.shape[1])))  # a longer series: the demo's again
    labels = pd.date_range("2026-11-27T00:00", periods=buckets, freq="5min").strftime("%Y-%m-%dT%H:%M")
    frame = pd.DataFrame(values[:, -buckets:], columns=list(labels))
    frame.insert(0, "ip", demo["ip"].to_numpy())
    return frame


def origin_of(i: int, stats: str | Path = ROOT / "examples" / "stats.csv") -> str:
    demo = pd.read_csv(stats, dtype={"ip": str})
    return str(demo.iloc[i % len(demo)]["ip"])


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("n", type=int)
    parser.add_argument("dest")
    args = parser.parse_args()
    print(*build(args.n, args.dest))
