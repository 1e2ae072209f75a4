"""The NAB walkthrough (`make nab`): train, predict and evaluate on NAB realAWSCloudwatch, with the product.

    python scripts/nab_walkthrough.py NAB --out nab

NAB is a copy of NAB's data and labels: realAWSCloudwatch/ and combined_windows.json, either side by side
or as a clone of github.com/numenta/NAB lays them out (data/realAWSCloudwatch/, labels/combined_windows.json).
Every step is a `batchpredict` command, printed before it runs:

1. the 17 hosts to a long table (all.csv), and their first halves to a training table (train.csv);
2. `train` on train.csv into OUT/store, about 2 minutes on 2 cores; skipped when OUT/store exists, so a
   rerun takes a minute and a half (the store is trained into OUT/store.partial and renamed when train
   succeeds, so an interrupted training is never taken for a store);
3. `predict --points 2500` (the second half of the longest host) with each --std of STD_MODES, the
   recommended setting with its thresholds; each with the default alerting stage (`alert`, `score`);
4. `evaluate --after train.csv --baseline zscore` of --std store and of the recommended setting, then a
   `--sweep` of every mode (OUT/sweep-*.txt, .csv); `evaluate --flags alert` of the default alerts beside
   the z-score at ALERT_BASELINE, and a `--sweep` of the alert score (OUT/sweep-alert.*);
5. from the sweeps' per-host rows: each detector's best setting (the fewest false-alarm events per host-day
   at >= 85% event recall, else the highest recall), and a 2-fold check by host: that choice made on one
   half of the hosts and scored on the other.

Exit 2 when NAB's files are not there; a failing command stops the walkthrough with its exit code.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from batchpredict.commands.evaluation.nab import normalised
from batchpredict.io.output import aligned
from batchpredict.job import Params
from batchpredict.scoring.method import parse

SCRIPTS = Path(__file__).resolve().parent
POINTS = 2500
STD_MODES = ["store", "rolling:96", "rolling:288", "rolling:576", "mad:288"]
RECOMMENDED = ("rolling:96", "3,6")  # --std, --sigmas: warnings to a dashboard, critical events paged
TARGET_RECALL = 0.85
SWEEP = "2:10:0.5"
ZSCORE = "zscore"
SUMS = ["windows", "detected", "days", "false_alarm_points", "false_alarm_events", "nab_raw"]
ALERT = "alert likelihood"  # the setting name of the alert score's sweep rows
ALERT_DEFAULT = parse(Params.alert).threshold  # the default method's threshold on its score
ALERT_BASELINE = "4.5,6"    # the z-score beside the alerts: its best at 16/18 windows, and the LSTM's 6σ


def locate(nab: Path) -> tuple[Path, Path] | None:
    """NAB's realAWSCloudwatch folder and combined_windows.json, in either layout; None if absent."""
    for data, labels in [(nab / "realAWSCloudwatch", nab / "combined_windows.json"),
                         (nab / "data" / "realAWSCloudwatch", nab / "labels" / "combined_windows.json")]:
        if data.is_dir() and labels.is_file():
            return data, labels
    return None


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
    print(f"[{_duration(time.monotonic() - started)}]", flush=True)
    if code:
        raise Failed(code)


def product(*args: str, capture: Path | None = None) -> None:
    run([sys.executable, "-m", "batchpredict.cli", *args], "batchpredict " + " ".join(args), capture)


def script(name: str, *args: str) -> None:
    run([sys.executable, str(SCRIPTS / name), *args], f"python scripts/{name} " + " ".join(args))


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def name_of(mode: str) -> str:
    return mode.replace(":", "")


def walk(nab: Path, out: Path) -> None:
    data, labels = locate(nab)
    out.mkdir(parents=True, exist_ok=True)
    full, train, store = str(out / "all.csv"), str(out / "train.csv"), out / "store"
    script("nab_to_long.py", str(data), "--out", full)
    script("nab_to_long.py", str(data), "--head", "0.5", "--out", train)
    if store.is_dir():
        print(f"\n{store} exists: training skipped (remove it to train again, about 2 minutes on 2 cores)")
    else:
        partial = out / "store.partial"
        print(f"\nTraining one LSTM per host on its first half, about 2 minutes on 2 cores, into {partial} "
              f"(renamed {store.name} when it succeeds; a rerun skips this step):")
        product("train", "--data", train, "--models", str(partial))
        partial.rename(store)
    judged = ["--labels", str(labels), "--after", train]
    for mode in STD_MODES:
        sigmas = ["--sigmas", RECOMMENDED[1]] if mode == RECOMMENDED[0] else []
        product("predict", "--data", full, "--models", str(store), "--out", str(out / f"{name_of(mode)}.csv"),
                "--points", str(POINTS), "--std", mode, *sigmas, "-q")
    for mode in ["store", RECOMMENDED[0]]:
        product("evaluate", "--results", str(out / f"{name_of(mode)}.csv"), *judged, "--baseline", ZSCORE,
                "--data", full, "--out", str(out / f"eval-{name_of(mode)}"))
    for i, mode in enumerate(STD_MODES):
        baseline = ["--baseline", ZSCORE, "--data", full] if i == 0 else []  # the z-score's rows are every mode's
        prefix = out / f"sweep-{name_of(mode)}"
        product("evaluate", "--results", str(out / f"{name_of(mode)}.csv"), *judged, *baseline, "--sweep", SWEEP,
                "--out", str(prefix), capture=prefix.with_suffix(".txt"))
    alerts = str(out / "store.csv")  # the alerting stage depends on the residuals, not on --std
    product("evaluate", "--results", alerts, *judged, "--flags", "alert", "--baseline", ZSCORE, "--data", full,
            "--sigmas", ALERT_BASELINE, "--out", str(out / "eval-alert"))
    product("evaluate", "--results", alerts, *judged, "--flags", "alert", "--sweep", "--out",
            str(out / "sweep-alert"), capture=out / "sweep-alert.txt")
    rows = per_host(out)
    print("\nEach detector's fewest false-alarm events per host-day at >= "
          f"{TARGET_RECALL:.0%} event recall (every threshold: {out}/sweep-*.txt):\n")
    print(describe(choose(totals(rows), "setting")))
    print("\n2-fold check by host: the setting chosen (as above) on one half of the hosts, scored on the other:\n")
    print(aligned(FOLD_COLUMNS, two_fold(rows)))


def per_host(out: Path) -> pd.DataFrame:
    """The sweeps' per-host rows, a `setting` column naming the detector (`--std` mode, or zscore)."""
    frames = []
    for mode in STD_MODES:
        metrics = pd.read_csv(out / f"sweep-{name_of(mode)}.csv", keep_default_na=False, na_values=[""])
        metrics["setting"] = metrics["detector"].where(metrics["detector"] != "model", "LSTM --std " + mode)
        frames.append(metrics)
    alerts = pd.read_csv(out / "sweep-alert.csv", keep_default_na=False, na_values=[""])
    frames.append(alerts.assign(setting=ALERT))
    rows = pd.concat(frames, ignore_index=True)
    return rows[rows["ip"] != "(total)"].reset_index(drop=True)


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


def choose(sums: pd.DataFrame, by: str) -> pd.DataFrame:
    """Per value of `by`, the row with the fewest false-alarm events per host-day among those at >= TARGET_RECALL
    (then the higher recall, then the lower threshold); where none gets there, the highest recall."""
    reach = sums["recall"] >= TARGET_RECALL
    ranked = sums.assign(group=sums[by], reach=reach,
                         first=np.where(reach, sums["fa_events_per_day"], -sums["recall"]),
                         second=np.where(reach, -sums["recall"], sums["fa_events_per_day"]))
    ranked = ranked.sort_values(["reach", "first", "second", "threshold"], ascending=[False, True, True, True],
                                kind="stable")
    return ranked.groupby("group", sort=False).head(1).drop(columns=["group", "reach", "first", "second"])


def detector(setting: pd.Series) -> pd.Series:
    """LSTM (whatever its --std), alert or the baseline: what the 2-fold check chooses a setting of."""
    return setting.str.split(" ").str[0]


def threshold(setting: str, value: float) -> str:
    """A sigma, or a threshold on the alert score."""
    return f"score {value:g}" if setting == ALERT else f"{value:g}σ"


def describe(sums: pd.DataFrame) -> str:
    return aligned(["detector", "threshold", "recall", "FA points/host-day", "FA events/host-day", "NAB"],
                        [[r.setting, threshold(r.setting, r.threshold), _recall(r), f"{r.fa_points_per_day:.1f}",
                          f"{r.fa_events_per_day:.2f}", f"{r.nab_score:.1f}"] for r in sums.itertuples()])


def _recall(r: object) -> str:
    return f"{r.detected:.0f}/{r.windows:.0f} ({r.recall:.0%})"


def halves(rows: pd.DataFrame) -> tuple[list[str], list[str]]:
    """The hosts split in two with about as many labelled windows each: by windows then name, alternately."""
    windows = rows.groupby("ip")["windows"].first().reset_index()
    order = windows.sort_values(["windows", "ip"], ascending=[False, True])["ip"].tolist()
    return order[0::2], order[1::2]


FOLD_COLUMNS = ["fold", "setting", "threshold", "recall (chosen on)", "FA events/host-day (chosen on)", "scored on",
                "recall", "FA points/host-day", "FA events/host-day", "NAB"]


def two_fold(rows: pd.DataFrame) -> list[list[str]]:
    """FOLD_COLUMNS: each detector's setting chosen on one half and scored on the other, both ways; the
    recommended setting on each half; each detector's two scored halves together."""
    first, second = halves(rows)
    lines, scored = [], {}
    for fold, (picked, held) in enumerate([(first, second), (second, first)], 1):
        chosen = totals(rows[rows["ip"].isin(picked)])
        for r in choose(chosen.assign(detector=detector(chosen["setting"])), "detector").itertuples():
            there = rows[rows["ip"].isin(held) & (rows["setting"] == r.setting) & (rows["threshold"] == r.threshold)]
            scored.setdefault(r.detector, []).append(there)
            lines.append([str(fold), r.setting, threshold(r.setting, r.threshold), _recall(r),
                          f"{r.fa_events_per_day:.2f}", *_scored(there, len(held))])
    defaults = [("LSTM --std " + RECOMMENDED[0], float(RECOMMENDED[1].split(",")[1])), (ALERT, ALERT_DEFAULT)]
    for setting, value in defaults:
        if not (rows["setting"] == setting).any():
            continue
        for name, hosts in [("first", first), ("second", second)]:
            there = rows[rows["ip"].isin(hosts) & (rows["setting"] == setting) & np.isclose(rows["threshold"], value)]
            lines.append([f"({name} half)", setting, threshold(setting, value), "", "", *_scored(there, len(hosts))])
    for name, parts in scored.items():
        lines.append(["both", name, "as chosen", "", "", *_scored(pd.concat(parts), len(first) + len(second))])
    return lines


def _scored(rows: pd.DataFrame, hosts: int) -> list[str]:
    rate = rates(rows)
    return [f"{hosts} hosts", _recall(rate), f"{rate.fa_points_per_day:.1f}", f"{rate.fa_events_per_day:.2f}",
            f"{rate.nab_score:.1f}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("nab", type=Path, help="NAB's data and labels (realAWSCloudwatch/, combined_windows.json)")
    parser.add_argument("--out", type=Path, default=Path("nab"), help="folder for every file made (default nab)")
    args = parser.parse_args(argv)
    if not locate(args.nab):
        print(f"nab_walkthrough: no NAB data at {args.nab}: it needs realAWSCloudwatch/ and combined_windows.json "
              f"there (or data/realAWSCloudwatch/ and labels/combined_windows.json, a clone of "
              f"github.com/numenta/NAB); give its path, e.g. make nab NAB=~/NAB", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        walk(args.nab, args.out)
    except Failed as failed:
        print(f"nab_walkthrough: stopped, the step above exited {failed.args[0]}", file=sys.stderr)
        return int(failed.args[0])
    print(f"\nnab_walkthrough: done in {_duration(time.monotonic() - started)}; every file is in {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
