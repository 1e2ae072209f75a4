"""`make nab`'s one protocol for every NAB category, and its summary (scripts/nab_walkthrough.py runs both).

The real categories are the ones of REAL found in NAB's data folder; realTweets is never read (it is kept for
an independent check) and neither are the artificial* categories. Each category, and each resampled copy of
realAWSCloudwatch (STEPS: `nab_to_long.py --resample`, same ids, so NAB's windows still apply), gets its own
folder: OUT itself for realAWSCloudwatch, OUT/<name>/ for the others. In it, its labels (labels.json, the
windows of its own files), the long table and its first halves (all.csv, train.csv), its store (trained once,
reused on a rerun), `predict --std store` of every later point with the default alerting stage (store.csv),
and `evaluate --flags alert` of those points beside the z-score at ALERT_BASELINE (eval-alert.*), then the
sweep of the alert score (sweep-alert.*).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from nab_common import choose, host_rows, product, rates, recall_text, script, totals, train_once

from batchpredict.io.files import write_atomic
from batchpredict.io.output import aligned
from batchpredict.rules import RULES

AWS = "realAWSCloudwatch"
REAL = (AWS, "realKnownCause", "realTraffic", "realAdExchange")
STEPS = ("15min", "1h", "1min")  # AWS's resampled copies, in the order they run: the 1-minute one trains longest
TARGETS = ("1min", "1h")         # the copies with targets: windows within one of 5 minutes', <= 1.5x its pages
PAGES_RATIO = 1.5
POINTS = 2500      # predict --points at least: the second half of AWS's longest host, and 135 points before it
MARGIN = 96        # points before the longest host's second half that --points also covers (a rest period)
LOCO_RECALL = 0.90
ZSCORE = "zscore"
ALERT_BASELINE = "4.5,6"  # the z-score beside the alerts: its best at 16/18 AWS windows, and the LSTM's 6σ
DEFAULT = "LSTM + the default alert"


@dataclass(frozen=True)
class Category:
    """A NAB category, or a resampled copy of realAWSCloudwatch (`step`), and the folder of its files."""

    name: str
    data: Path               # its NAB data folder (realAWSCloudwatch's for a copy)
    out: Path
    step: str | None = None  # nab_to_long.py --resample

    def path(self, name: str) -> str:
        return str(self.out / name)

    @property
    def labelled(self) -> str:
        """The category whose files its labels' keys name."""
        return AWS if self.step else self.name


def found(data: Path, out: Path) -> list[Category]:
    """The categories of REAL that `data` holds, in REAL's order, then AWS's copies at STEPS (when it has AWS).
    Only these names are looked at: nothing else in `data` is read."""
    real = [Category(name, data / name, out if name == AWS else out / name) for name in REAL
            if (data / name).is_dir()]
    copies = [Category(f"{AWS}-{step}", data / AWS, out / f"{AWS}-{step}", step) for step in STEPS]
    return real + (copies if (data / AWS).is_dir() else [])


def keep_labels(labels: Path, category: Category) -> int:
    """Write the windows of `category`'s own files (keys `<category>/<file>.csv`) to its labels.json; their
    count. Other categories' windows are left out, so evaluate neither lists nor reports them."""
    windows = json.loads(labels.read_text())
    mine = {key: value for key, value in windows.items() if key.split("/")[0] == category.labelled}
    write_atomic(category.path("labels.json"), json.dumps(mine, indent=1) + "\n")
    return sum(len(value) for value in mine.values())


def prepare(category: Category, labels: Path, expected: str = "") -> None:
    """Its labels, its long table and first halves, and its store (trained unless it exists)."""
    category.out.mkdir(parents=True, exist_ok=True)
    count = keep_labels(labels, category)
    print(f"\n{category.name}: {count} labelled windows of {category.labelled} -> {category.path('labels.json')}")
    resample = ["--resample", category.step] if category.step else []
    script("nab_to_long.py", str(category.data), *resample, "--out", category.path("all.csv"))
    script("nab_to_long.py", str(category.data), *resample, "--head", "0.5", "--out", category.path("train.csv"))
    train_once(category.path("train.csv"), category.out / "store", expected)


def points_for(category: Category) -> int:
    """predict --points: POINTS, or more where the longest host's second half and MARGIN points before it need
    more (rounded up to 500); --after then judges only the second halves."""
    full = pd.read_csv(category.path("all.csv"), usecols=["ip"])["ip"].value_counts()
    head = pd.read_csv(category.path("train.csv"), usecols=["ip"])["ip"].value_counts()
    longest = int((full - head.reindex(full.index, fill_value=0)).max())
    return max(POINTS, math.ceil((longest + MARGIN) / 500) * 500)


def judge_alerts(category: Category) -> None:
    """evaluate --flags alert of store.csv's second halves beside the z-score, then the sweep of the score."""
    judged = ["--labels", category.path("labels.json"), "--after", category.path("train.csv")]
    alerts = category.path("store.csv")  # the alerting stage depends on the residuals, not on --std
    product("evaluate", "--results", alerts, *judged, "--flags", "alert", "--baseline", ZSCORE,
            "--data", category.path("all.csv"), "--sigmas", ALERT_BASELINE, "--out", category.path("eval-alert"))
    product("evaluate", "--results", alerts, *judged, "--flags", "alert", "--sweep", "--out",
            category.path("sweep-alert"), capture=category.out / "sweep-alert.txt")


def protocol(category: Category, labels: Path) -> None:
    """The whole protocol for a category other than realAWSCloudwatch (whose walk adds its --std sections)."""
    prepare(category, labels)
    product("predict", "--data", category.path("all.csv"), "--models", category.path("store"),
            "--out", category.path("store.csv"), "--points", str(points_for(category)), "--std", "store", "-q")
    judge_alerts(category)


def alert_rows(category: Category) -> pd.DataFrame:
    """eval-alert's per-host rows, `setting` DEFAULT or the z-score at its threshold, `category` its name."""
    rows = host_rows(category.out / "eval-alert.csv")
    zscore = "rolling z-score " + rows["threshold"].map("{:g}σ".format)
    return rows.assign(setting=np.where(rows["detector"] == "model", DEFAULT, zscore), category=category.name)


def sweep_rows(category: Category) -> pd.DataFrame:
    return host_rows(category.out / "sweep-alert.csv").assign(setting="alert score", category=category.name)


def rule_counts(category: Category) -> pd.DataFrame:
    """Per rule (`alert_source`), the default alerts of the judged points as evaluate counted them in
    eval-alert.json: `in_window` one of the IP's windows, `outside` every one."""
    raised = json.loads(Path(category.path("eval-alert.json")).read_text())["raised"]
    return pd.DataFrame(raised).set_index("alert_source").assign(category=category.name)


RULE_COLUMNS = ["category", *(r for r in RULES if r), "false pages"]


def rule_lines(counts: pd.DataFrame, real: list[str]) -> list[list[str]]:
    """RULE_COLUMNS: per category (the real ones pooled after them), each rule's alerts in a window / outside."""
    ours = counts[counts["category"].isin(real)]
    parts = [*(g for _, g in ours.groupby("category", sort=False)),
             *([ours.assign(category=f"pooled ({len(real)} real)")] if len(real) > 1 else []),
             *(g for _, g in counts[~counts["category"].isin(real)].groupby("category", sort=False))]
    lines = []
    for part in parts:
        sums = part.groupby(level=0, sort=False)[["in_window", "outside"]].sum()
        lines.append([part["category"].iloc[0], *(f"{h} / {f}" for h, f in zip(sums["in_window"], sums["outside"])),
                      str(int(sums["outside"].sum()))])
    return lines


SUMMARY_COLUMNS = ["category", "hosts", "detector", "windows", "FA events/host-day", "FA points/host-day", "NAB",
                   "this run"]


def summary(rows: pd.DataFrame, real: list[str], times: dict[str, str]) -> list[list[str]]:
    """SUMMARY_COLUMNS: each real category's detectors, those of the real categories pooled (when there are two
    or more), then the copies'; a category's time on its first line."""
    ours = rows["category"].isin(real)
    pooled = rows[ours].assign(category=f"pooled ({len(real)} real)") if len(real) > 1 else rows.iloc[:0]
    lines, timed = [], set()
    for part in (rows[ours], pooled, rows[~ours]):
        for (category, setting), group in part.groupby(["category", "setting"], sort=False):
            lines.append([category, str(len(group)), setting, *scored(group),
                          "" if category in timed else times.get(category, "")])
            timed.add(category)
    return lines


def scored(rows: pd.DataFrame) -> list[str]:
    """Windows detected, false-alarm events and points per host-day, NAB score of some hosts' rows together."""
    rate = rates(rows)
    return [recall_text(rate), f"{rate.fa_events_per_day:.2f}", f"{rate.fa_points_per_day:.2f}",
            f"{rate.nab_score:.1f}"]


LOCO_COLUMNS = ["left out", "threshold chosen on the others", "their recall", "their FA events/host-day",
                "left out: windows", "FA events/host-day", "FA points/host-day", "NAB"]


def leave_one_out(sweeps: pd.DataFrame) -> list[list[str]]:
    """LOCO_COLUMNS: for each real category, the alert score's threshold chosen on the others' sweep rows pooled
    and judged on it; then every left-out category at its threshold together. The rule: the fewest false-alarm
    events per host-day at >= LOCO_RECALL (90%) pooled event recall (then the higher recall, then the lower
    threshold); where no threshold gets there, the highest recall (then the fewest false-alarm events)."""
    names = list(dict.fromkeys(sweeps["category"]))
    lines, judged = [], []
    for name in names:
        others = totals(sweeps[sweeps["category"] != name])
        chosen = choose(others, "setting", target=LOCO_RECALL).iloc[0]
        held = sweeps[(sweeps["category"] == name) & np.isclose(sweeps["threshold"], chosen.threshold)]
        judged.append(held)
        lines.append([name, f"score {chosen.threshold:g}", recall_text(chosen), f"{chosen.fa_events_per_day:.2f}",
                      *scored(held)])
    lines.append([f"pooled ({len(names)} left out)", "as chosen", "", "", *scored(pd.concat(judged))])
    return lines


COPY_COLUMNS = ["copy", "windows", "5-minute", "target", "FA events/host-day", "5-minute", "target", "NAB",
                "targets met"]


def copies(rows: pd.DataFrame) -> list[list[str]]:
    """COPY_COLUMNS: each resampled copy's default alerts beside realAWSCloudwatch's (5 minutes) and, for
    TARGETS, the issue's targets: at least the 5-minute windows detected less one, and at most PAGES_RATIO
    times its false-alarm events (pages) per host-day."""
    alerts = rows[rows["setting"] == DEFAULT]
    base = rates(alerts[alerts["category"] == AWS])
    lines = []
    for step in STEPS:
        there = alerts[alerts["category"] == f"{AWS}-{step}"]
        if there.empty:
            continue
        rate, targeted = rates(there), step in TARGETS
        windows = rate.detected >= base.detected - 1
        pages = rate.fa_events_per_day <= PAGES_RATIO * base.fa_events_per_day
        met = ("yes" if windows and pages else "no: " + ", ".join(
            [what for what, ok in (("windows", windows), ("pages", pages)) if not ok])) if targeted else "(none set)"
        lines.append([step, recall_text(rate), f"{base.detected:.0f}/{base.windows:.0f}",
                      f">= {base.detected - 1:.0f}" if targeted else "", f"{rate.fa_events_per_day:.2f}",
                      f"{base.fa_events_per_day:.2f}",
                      f"<= {PAGES_RATIO * base.fa_events_per_day:.2f}" if targeted else "",
                      f"{rate.nab_score:.1f}", met])
    return lines


def report(categories: list[Category], times: dict[str, str]) -> None:
    """Print the summary, the leave-one-category-out check, each rule's alerts and the copies against their targets."""
    real = [c.name for c in categories if not c.step]
    rows = pd.concat([alert_rows(c) for c in categories], ignore_index=True)
    print(f"\nThe default alerts and the rolling z-score at {ALERT_BASELINE.replace(',', ' and ')}σ on each "
          "category's second halves (FA: false alarm; every file is in its folder):\n")
    print(aligned(SUMMARY_COLUMNS, summary(rows, real, times)))
    missing = [name for name in REAL if name not in real]
    if len(real) < 2:
        print(f"\nLeave-one-category-out check: it needs two real categories or more, found {', '.join(real)} "
              f"({', '.join(missing)}: a NAB clone has them under data/)")
    else:
        sweeps = pd.concat([sweep_rows(c) for c in categories if not c.step], ignore_index=True)
        print(f"\nLeave-one-category-out check of the alert score's threshold (chosen on the other real categories "
              f"pooled: the fewest false-alarm events per host-day at >= {LOCO_RECALL:.0%} event recall, else the "
              f"highest recall; judged on the one left out):\n")
        print(aligned(LOCO_COLUMNS, leave_one_out(sweeps)))
    print("\nWhat raised the default alerts of the second halves, per rule: alerts in a window / outside any "
          "(false pages):\n")
    print(aligned(RULE_COLUMNS, rule_lines(pd.concat([rule_counts(c) for c in categories]), real)))
    if lines := copies(rows):
        print(f"\nrealAWSCloudwatch resampled, the default alerts beside its 5-minute figures (targets at "
              f"{' and '.join(TARGETS)}: windows within one of the 5-minute figure, false-alarm events per host-day "
              f"at most {PAGES_RATIO:g}x):\n")
        print(aligned(COPY_COLUMNS, lines))
