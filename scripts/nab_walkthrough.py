"""The NAB walkthrough (`make nab`): train, predict and evaluate on NAB's data, with the product.

    python scripts/nab_walkthrough.py NAB --out nab

NAB is a copy of NAB's data and labels: realAWSCloudwatch/ (and any of realKnownCause/, realTraffic/,
realAdExchange/) beside combined_windows.json, or a clone of github.com/numenta/NAB as it lays them out
(data/<category>/, labels/combined_windows.json). realTweets and the artificial* categories are never read.
Every step is a `batchpredict` command, printed before it runs:

1. realAWSCloudwatch's 17 hosts to a long table (all.csv), their first halves to a training table (train.csv),
   and its windows to labels.json;
2. `train` on train.csv into OUT/store, about 2 minutes on 2 cores; skipped when OUT/store exists (the store is
   trained into OUT/store.partial and renamed when train succeeds, so an interrupted training is never taken
   for a store);
3. `predict --points 2500` (the second half of the longest host) with each --std of STD_MODES, the
   recommended setting with its thresholds; each with the default alerting stage (`alert`, `score`);
4. `evaluate --after train.csv --baseline zscore` of --std store and of the recommended setting, then a
   `--sweep` of every mode (OUT/sweep-*.txt, .csv); `evaluate --flags alert` of the default alerts beside
   the z-score at ALERT_BASELINE, and a `--sweep` of the alert score (OUT/sweep-alert.*);
5. from the sweeps' per-host rows: each detector's best setting (the fewest false-alarm events per host-day
   at >= 85% event recall, else the highest recall), and a 2-fold check by host: that choice made on one
   half of the hosts and scored on the other;
6. the same protocol as steps 1, 2 and the alerts of 3 and 4 (train on each file's first half, predict every
   later point, judge those with `evaluate --flags alert`) on each other real category found, and on
   realAWSCloudwatch resampled to 15 minutes, 1 hour and 1 minute, each in OUT/<name>/ with its own store
   (scripts/nab_categories.py);
7. per category, the real ones pooled, and the copies: the default alerts' windows, false-alarm events per
   host-day and NAB score beside the z-score's; a leave-one-category-out check of the alert score's
   threshold over the real categories; each rule's alerts in a window and outside; the copies beside the
   5-minute figures and their targets.

Exit 2 when NAB's files are not there; a failing command stops the walkthrough with its exit code.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from nab_categories import AWS, ZSCORE, Category, found, judge_alerts, points_for, prepare, protocol, report
from nab_common import TARGET_RECALL, Failed, choose, duration, host_rows, product, rates, recall_text, totals

from batchpredict.io.output import aligned
from batchpredict.job import Params
from batchpredict.scoring.method import parse

STD_MODES = ["store", "rolling:96", "rolling:288", "rolling:576", "mad:288"]
RECOMMENDED = ("rolling:96", "3,6")  # --std, --sigmas: warnings to a dashboard, critical events paged
SWEEP = "2:10:0.5"
ALERT = "alert likelihood"  # the setting name of the alert score's sweep rows
ALERT_DEFAULT = parse(Params.alert).threshold  # the default method's threshold on its score


def locate(nab: Path) -> tuple[Path, Path] | None:
    """NAB's realAWSCloudwatch folder and combined_windows.json, in either layout; None if absent."""
    for data, labels in [(nab / AWS, nab / "combined_windows.json"),
                         (nab / "data" / AWS, nab / "labels" / "combined_windows.json")]:
        if data.is_dir() and labels.is_file():
            return data, labels
    return None


def name_of(mode: str) -> str:
    return mode.replace(":", "")


def walk(nab: Path, out: Path) -> None:
    data, labels = locate(nab)
    categories = found(data.parent, out)
    times = {}
    for category in categories:
        started = time.monotonic()
        if category.name == AWS:
            walk_aws(category, labels)
        else:
            protocol(category, labels)
        times[category.name] = duration(time.monotonic() - started)
    report(categories, times)


def walk_aws(aws: Category, labels: Path) -> None:
    """realAWSCloudwatch, its files in OUT itself: every --std mode's flags and their sweeps, the alerts, each
    detector's best setting and the 2-fold check."""
    out, full = aws.out, aws.path("all.csv")
    prepare(aws, labels, "about 2 minutes on 2 cores")
    judged = ["--labels", aws.path("labels.json"), "--after", aws.path("train.csv")]
    points = str(points_for(aws))
    for mode in STD_MODES:
        sigmas = ["--sigmas", RECOMMENDED[1]] if mode == RECOMMENDED[0] else []
        product("predict", "--data", full, "--models", aws.path("store"), "--out", str(out / f"{name_of(mode)}.csv"),
                "--points", points, "--std", mode, *sigmas, "-q")
    for mode in ["store", RECOMMENDED[0]]:
        product("evaluate", "--results", str(out / f"{name_of(mode)}.csv"), *judged, "--baseline", ZSCORE,
                "--data", full, "--out", str(out / f"eval-{name_of(mode)}"))
    for i, mode in enumerate(STD_MODES):
        baseline = ["--baseline", ZSCORE, "--data", full] if i == 0 else []  # the z-score's rows are every mode's
        prefix = out / f"sweep-{name_of(mode)}"
        product("evaluate", "--results", str(out / f"{name_of(mode)}.csv"), *judged, *baseline, "--sweep", SWEEP,
                "--out", str(prefix), capture=prefix.with_suffix(".txt"))
    judge_alerts(aws)
    rows = per_host(out)
    print(f"\nEach detector's fewest false-alarm events per host-day at >= {TARGET_RECALL:.0%} event recall "
          f"(every threshold: {out}/sweep-*.txt):\n")
    print(describe(choose(totals(rows), "setting")))
    print("\n2-fold check by host: the setting chosen (as above) on one half of the hosts, scored on the other:\n")
    print(aligned(FOLD_COLUMNS, two_fold(rows)))


def per_host(out: Path) -> pd.DataFrame:
    """The sweeps' per-host rows, a `setting` column naming the detector (`--std` mode, or zscore)."""
    frames = []
    for mode in STD_MODES:
        metrics = host_rows(out / f"sweep-{name_of(mode)}.csv")
        metrics["setting"] = metrics["detector"].where(metrics["detector"] != "model", "LSTM --std " + mode)
        frames.append(metrics)
    frames.append(host_rows(out / "sweep-alert.csv").assign(setting=ALERT))
    return pd.concat(frames, ignore_index=True)


def detector(setting: pd.Series) -> pd.Series:
    """LSTM (whatever its --std), alert or the baseline: what the 2-fold check chooses a setting of."""
    return setting.str.split(" ").str[0]


def threshold(setting: str, value: float) -> str:
    """A sigma, or a threshold on the alert score."""
    return f"score {value:g}" if setting == ALERT else f"{value:g}σ"


def describe(sums: pd.DataFrame) -> str:
    return aligned(["detector", "threshold", "recall", "FA points/host-day", "FA events/host-day", "NAB"],
                   [[r.setting, threshold(r.setting, r.threshold), recall_text(r), f"{r.fa_points_per_day:.1f}",
                     f"{r.fa_events_per_day:.2f}", f"{r.nab_score:.1f}"] for r in sums.itertuples()])


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
            lines.append([str(fold), r.setting, threshold(r.setting, r.threshold), recall_text(r),
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
    return [f"{hosts} hosts", recall_text(rate), f"{rate.fa_points_per_day:.1f}", f"{rate.fa_events_per_day:.2f}",
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
    print(f"\nnab_walkthrough: done in {duration(time.monotonic() - started)}; every file is in {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
