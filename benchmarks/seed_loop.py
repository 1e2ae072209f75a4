"""The pattern batchpredict replaces: every IP scored in one Python process, cleaned up by hand.

    python benchmarks/seed_loop.py STORE TABLE [--limit N] [--points N] [--spawn]   -> JSON on stdout

With --spawn, each IP instead runs in a fresh `spawn` process that imports TensorFlow itself
(the naive way to isolate). With --points N, each IP's last N points are scored, their windows
in one batched `predict` (the night's workload for the loop); each IP's last prediction is reported.
"""
from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import resource
import sys
import time

import numpy as np
import pandas as pd
import psutil

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from batchpredict.scoring.features import scored_windows  # noqa: E402


def model_path(store: str, ip: str) -> str:
    return next(os.path.join(store, "model", ip + s) for s in (".h5", ".keras")
                if os.path.exists(os.path.join(store, "model", ip + s)))


def score(store: str, ip: str, values: np.ndarray, points: int = 1) -> float:
    """The original script's body for one IP: load_model, joblib.load, predict (of the last `points` windows,
    in one call)."""
    import joblib
    from keras.models import load_model

    model = load_model(model_path(store, ip), compile=False)
    scaler = joblib.load(os.path.join(store, "sc", ip + ".save"))
    _, inputs, _ = scored_windows(values, 5, 20, len(values) - points)
    x = scaler.transform(inputs.reshape(-1, 1)).reshape(len(inputs), 20, 1)
    predicted = float(scaler.inverse_transform(model.predict(x, verbose=0))[-1, 0])
    del model
    return predicted


def _spawned(store: str, ip: str, values: list, points: int, queue) -> None:  # noqa: ANN001
    queue.put(score(store, ip, np.asarray(values, dtype=float), points))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("store")
    parser.add_argument("table")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--points", type=int, default=1)
    parser.add_argument("--spawn", action="store_true")
    args = parser.parse_args()
    frame = pd.read_csv(args.table, dtype={"ip": str})
    rows = list(frame.itertuples(index=False))[: args.limit]
    me = psutil.Process()
    predictions, rss = {}, []
    if not args.spawn:
        import tensorflow as tf
        from keras import backend as K

        start = time.monotonic()
        for row in rows:
            predictions[row[0]] = score(args.store, row[0], np.asarray(row[1:], dtype=float), args.points)
            K.clear_session()
            tf.compat.v1.reset_default_graph()
            gc.collect()
            rss.append(me.memory_info().rss / 2**20)
    else:
        ctx = multiprocessing.get_context("spawn")
        start = time.monotonic()
        for row in rows:
            queue = ctx.Queue()
            proc = ctx.Process(target=_spawned, args=(args.store, row[0], list(row[1:]), args.points, queue))
            proc.start()
            predictions[row[0]] = queue.get()
            proc.join()
            rss.append(me.memory_info().rss / 2**20)
    wall = time.monotonic() - start
    json.dump({"wall_s": wall, "jobs": len(rows), "points": args.points, "predictions": predictions, "rss_mib": rss,
               "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               "child_peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024 or None},
              sys.stdout)


if __name__ == "__main__":
    main()
