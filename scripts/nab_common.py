"""What the NAB walkthrough's parts share: running a step as a user would type it, training a store once, the
per-host rows of `evaluate`'s CSVs, and their totals and the choice of a threshold from them."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from batchpredict.commands.evaluation.nab import normalised

SCRIPTS = Path(__file__).resolve().parent
TARGET_RECALL = 0.85
SUMS = ["windows", "detected", "days", "false_alarm_points", "false_alarm_events", "nab_raw"]
TOTAL = "(total)"  # evaluate's ip of a total row


class Failed(Exception):
    """A step exited non-zero; carries its exit code."""


def run(args: list[str], shown: str, capture: Path | None = None) -> None:
    """Run a step, printing it as a user would type it; its stdout goes to `capture` when given."""
    print(f"\n$ {shown}" + (f" > {capture}" if capture else ""), flush=True)
    started = time.monotonic()
    if capture:
        with open(capture, "w") as out:
            code = subprocess.run(args, stdout=out).returncode
    else:
        code = subprocess.run(args).returncode
    print(f"[{duration(time.monotonic() - started)}]", flush=True)
    if code:
        raise Failed(code)


def product(*args: str, capture: Path | None = None) -> None:
    run([sys.executable, "-m", "batchpredict.cli", *args], "batchpredict " + " ".join(args), capture)


def script(name: str, *args: str) -> None:
    run([sys.executable, str(SCRIPTS / name), *args], f"python scripts/{name} " + " ".join(args))


def duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def train_once(train: str, store: Path, expected: str = "") -> None:
    """`train` on `train` into `store` unless it exists: into STORE.partial, renamed when train succeeds, so an
    interrupted training is never taken for a store. `expected` says how long it takes, when that is known."""
    took = f", {expected}" if expected else ""
    if store.is_dir():
        print(f"\n{store} exists: training skipped (remove it to train again{took})")
        return
    partial = store.with_name(store.name + ".partial")
    print(f"\nTraining one LSTM per host on its first half{took}, into {partial} "
          f"(renamed {store.name} when it succeeds; a rerun skips this step):")
    started = time.monotonic()
    product("train", "--data", train, "--models", str(partial))
    partial.rename(store)
    print(f"{store}: trained in {duration(time.monotonic() - started)}")


def host_rows(path: Path) -> pd.DataFrame:
    """An `evaluate --out` CSV's per-host rows (its total rows left out)."""
    rows = pd.read_csv(path, keep_default_na=False, na_values=[""])
    return rows[rows["ip"] != TOTAL].reset_index(drop=True)


def rates(rows: pd.DataFrame) -> pd.Series:
    """Windows, detections, false alarms and NAB's raw score summed over some hosts' rows; recall, the rates per
    host-day and the NAB score normalised over their windows, as evaluate's total."""
    sums = rows[SUMS].sum()
    return pd.concat([sums, pd.Series({"recall": sums["detected"] / sums["windows"],
                                       "fa_points_per_day": sums["false_alarm_points"] / sums["days"],
                                       "fa_events_per_day": sums["false_alarm_events"] / sums["days"],
                                       "nab_score": normalised(sums["nab_raw"], sums["windows"])})])


def totals(rows: pd.DataFrame) -> pd.DataFrame:
    """rates() of each setting and threshold."""
    return rows.groupby(["setting", "threshold"], sort=False)[SUMS].apply(rates).reset_index()


def choose(sums: pd.DataFrame, by: str, *, target: float = TARGET_RECALL) -> pd.DataFrame:
    """Per value of `by`, the row with the fewest false-alarm events per host-day among those at >= `target`
    event recall (then the higher recall, then the lower threshold); where none gets there, the highest recall
    (then the fewest false-alarm events, then the lower threshold)."""
    reach = sums["recall"] >= target
    ranked = sums.assign(group=sums[by], reach=reach,
                         first=np.where(reach, sums["fa_events_per_day"], -sums["recall"]),
                         second=np.where(reach, -sums["recall"], sums["fa_events_per_day"]))
    ranked = ranked.sort_values(["reach", "first", "second", "threshold"], ascending=[False, True, True, True],
                                kind="stable")
    return ranked.groupby("group", sort=False).head(1).drop(columns=["group", "reach", "first", "second"])


def recall_text(r: object) -> str:
    return f"{r.detected:.0f}/{r.windows:.0f} ({r.recall:.0%})"
