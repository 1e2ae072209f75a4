"""scripts/nab_walkthrough.py (`make nab`) and its nab_categories.py: NAB absent, the categories it reads (never
realTweets), the 2-fold and leave-one-category-out checks worked out by hand, the copies' targets, a whole run."""
from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
SCRIPT = SCRIPTS / "nab_walkthrough.py"
if str(SCRIPTS) not in sys.path:  # the walkthrough's modules import each other, as `python scripts/...` runs them
    sys.path.insert(0, str(SCRIPTS))
_spec = importlib.util.spec_from_file_location("nab_walkthrough", SCRIPT)
walkthrough = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(walkthrough)
categories = importlib.import_module("nab_categories")
AWS = categories.AWS

LSTM = "LSTM --std " + walkthrough.RECOMMENDED[0]
CRITICAL = float(walkthrough.RECOMMENDED[1].split(",")[1])


def walk(*args: object, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def test_without_nab_data_it_says_what_it_needs_and_exits_2(tmp_path):
    (tmp_path / "nab" / "realAWSCloudwatch").mkdir(parents=True)  # the data without its labels is not enough
    for where in (tmp_path / "absent", tmp_path / "nab"):
        done = walk(where, "--out", tmp_path / "out")
        assert done.returncode == 2
        assert f"no NAB data at {where}: it needs realAWSCloudwatch/ and combined_windows.json" in done.stderr
        assert "make nab NAB=" in done.stderr and done.stdout == ""
    assert not (tmp_path / "out").exists()
    clone = tmp_path / "NAB"  # github.com/numenta/NAB's layout is found too
    (clone / "data" / "realAWSCloudwatch").mkdir(parents=True)
    (clone / "labels").mkdir()
    (clone / "labels" / "combined_windows.json").write_text("{}")
    assert walkthrough.locate(clone) == (clone / "data" / "realAWSCloudwatch",
                                         clone / "labels" / "combined_windows.json")


def per_host(table: dict[tuple[str, float], dict[str, tuple[int, int]]]) -> pd.DataFrame:
    """Per-host sweep rows: (setting, threshold) -> {host: (detected, false-alarm events)}; one day per host,
    windows a 2, b 1, c 1, d 0; false-alarm points = events; each window worth 1 detected, -1 missed (NAB's
    raw score without its false alarms), so the normalised NAB score is the recall in %."""
    windows = {"a": 2, "b": 1, "c": 1, "d": 0}
    return pd.DataFrame([{"setting": setting, "threshold": threshold, "ip": ip, "windows": windows[ip],
                          "detected": detected, "days": 1.0, "false_alarm_points": events,
                          "false_alarm_events": events, "nab_raw": 2.0 * detected - windows[ip]}
                         for (setting, threshold), hosts in table.items()
                         for ip, (detected, events) in hosts.items()])


ROWS = per_host({
    (LSTM, 4.0): {"a": (2, 2), "b": (1, 1), "c": (1, 1), "d": (0, 1)},
    (LSTM, CRITICAL): {"a": (2, 0), "b": (0, 0), "c": (1, 0), "d": (0, 1)},
    ("zscore", 4.0): {"a": (2, 1), "b": (1, 2), "c": (1, 1), "d": (0, 2)},
    ("zscore", CRITICAL): {"a": (1, 0), "b": (1, 1), "c": (0, 0), "d": (0, 1)},
})


def test_the_halves_share_the_windows_and_each_chooses_for_the_other():
    assert walkthrough.halves(ROWS) == (["a", "c"], ["b", "d"])  # 3 windows and 1: as even as 2, 1, 1, 0 allow
    lines = {(row[0], row[1]): row[2:] for row in walkthrough.two_fold(ROWS)}
    six = f"{CRITICAL:g}σ"
    # Fold 1 chooses on a, c (3 windows, 2 days): the LSTM at 4σ 3/3 with 1.5 events a day, at 6σ 3/3 with 0;
    # the z-score at 4σ 3/3 with 1.0, at 6σ only 1/3. Scored on b, d (1 window, 2 days).
    assert lines[("1", LSTM)] == [six, "3/3 (100%)", "0.00", "2 hosts", "0/1 (0%)", "0.5", "0.50", "0.0"]
    assert lines[("1", "zscore")] == ["4σ", "3/3 (100%)", "1.00", "2 hosts", "1/1 (100%)", "2.0", "2.00", "100.0"]
    # Fold 2 chooses on b, d: the LSTM at 6σ misses b's window, so 4σ (1/1, 1.0); the z-score at 6σ has 1/1
    # with 1.0 against 2.0 at 4σ. Scored on a, c.
    assert lines[("2", LSTM)] == ["4σ", "1/1 (100%)", "1.00", "2 hosts", "3/3 (100%)", "1.5", "1.50", "100.0"]
    assert lines[("2", "zscore")] == [six, "1/1 (100%)", "1.00", "2 hosts", "1/3 (33%)", "0.0", "0.00",
                                      "33.3"]
    assert lines[("(first half)", LSTM)][4:7] == ["3/3 (100%)", "0.0", "0.00"]
    assert lines[("(second half)", LSTM)][4:7] == ["0/1 (0%)", "0.5", "0.50"]
    # Both scored halves: LSTM 0/1 + 3/3, (1 + 3) events in 4 days; z-score 1/1 + 1/3, (4 + 0) in 4.
    assert lines[("both", "LSTM")][3:7] == ["4 hosts", "3/4 (75%)", "1.0", "1.00"]
    assert lines[("both", "zscore")][3:7] == ["4 hosts", "2/4 (50%)", "1.0", "1.00"]


def test_choose_takes_the_fewest_false_alarm_events_at_the_target_recall_else_the_highest_recall():
    sums = pd.DataFrame([("reaches", 4.0, 1.0, 3.0), ("reaches", 5.0, 0.9, 1.0), ("reaches", 6.0, 0.9, 1.0),
                         ("reaches", 7.0, 0.5, 0.0), ("short", 4.0, 0.5, 3.0), ("short", 5.0, 0.75, 4.0),
                         ("short", 6.0, 0.75, 2.0), ("short", 7.0, 0.25, 0.1)],
                        columns=["setting", "threshold", "recall", "fa_events_per_day"])
    chosen = walkthrough.choose(sums, "setting")
    assert dict(zip(chosen["setting"], chosen["threshold"])) == {"reaches": 5.0, "short": 6.0}
    both = walkthrough.choose(walkthrough.totals(ROWS), "setting")  # LSTM 4/4 at 4σ with 5 events, 3/4 at 6σ
    assert dict(zip(both["setting"], both["threshold"])) == {LSTM: 4.0, "zscore": 4.0}


def test_it_reads_only_the_real_categories_in_either_layout_never_realtweets_or_artificial(tmp_path):
    for data in (tmp_path / "flat", tmp_path / "clone" / "data"):
        for name in [AWS, "realKnownCause", "realAdExchange", "realTweets", "artificialWithAnomaly", "realOther"]:
            (data / name).mkdir(parents=True)
        names = [c.name for c in categories.found(data, tmp_path / "out")]
        assert names == [AWS, "realKnownCause", "realAdExchange", f"{AWS}-15min", f"{AWS}-1h", f"{AWS}-1min"]
    (tmp_path / "clone" / "labels").mkdir()
    (tmp_path / "clone" / "labels" / "combined_windows.json").write_text("{}")
    aws, _ = walkthrough.locate(tmp_path / "clone")
    data = aws.parent
    found = {c.name: c for c in categories.found(data, tmp_path / "out")}
    assert found[AWS].out == tmp_path / "out" and found[AWS].step is None  # its files where they always were
    assert found["realKnownCause"].out == tmp_path / "out" / "realKnownCause"
    copy = found[f"{AWS}-1min"]
    assert (copy.data, copy.out, copy.step) == (data / AWS, tmp_path / "out" / f"{AWS}-1min", "1min")
    assert [c.name for c in categories.found(tmp_path / "clone" / "labels", tmp_path / "out")] == []


def test_each_category_keeps_only_its_own_windows_and_a_copy_those_of_aws(tmp_path):
    labels = tmp_path / "combined_windows.json"
    labels.write_text(json.dumps({f"{AWS}/a.csv": [["2014-01-01 00:00", "2014-01-01 01:00"]],
                                  f"{AWS}/b.csv": [], "realKnownCause/c.csv": [["2014-01-02", "2014-01-03"]] * 2,
                                  "realTweets/Twitter_volume_X.csv": [["2015-01-01", "2015-01-02"]]}))
    kept = {}
    for c in categories.found(tmp_path, tmp_path / "out"):
        c.out.mkdir(parents=True, exist_ok=True)
        kept[c.name] = (categories.keep_labels(labels, c), json.loads(Path(c.path("labels.json")).read_text()))
    assert kept == {}  # nothing found: no category folder here
    (tmp_path / AWS).mkdir()
    (tmp_path / "realKnownCause").mkdir()
    for c in categories.found(tmp_path, tmp_path / "out"):
        c.out.mkdir(parents=True, exist_ok=True)
        kept[c.name] = (categories.keep_labels(labels, c), json.loads(Path(c.path("labels.json")).read_text()))
    aws = (1, {f"{AWS}/a.csv": [["2014-01-01 00:00", "2014-01-01 01:00"]], f"{AWS}/b.csv": []})
    assert kept == {AWS: aws, "realKnownCause": (2, {"realKnownCause/c.csv": [["2014-01-02", "2014-01-03"]] * 2}),
                    f"{AWS}-15min": aws, f"{AWS}-1h": aws, f"{AWS}-1min": aws}


def test_points_cover_the_longest_second_half_and_a_rest_before_it(tmp_path):
    c = categories.Category("x", tmp_path, tmp_path)
    for rows, expected in [({"a": 4730, "b": 1243}, 2500), ({"a": 23646, "b": 100}, 12000), ({"a": 9808}, 5000)]:
        full = [(ip, t) for ip, n in rows.items() for t in range(n)]
        head = [(ip, t) for ip, n in rows.items() for t in range(n // 2)]
        pd.DataFrame(full, columns=["ip", "timestamp"]).to_csv(c.path("all.csv"), index=False)
        pd.DataFrame(head, columns=["ip", "timestamp"]).to_csv(c.path("train.csv"), index=False)
        assert categories.points_for(c) == expected  # 2365 + 96 -> 2500; 11823 + 96 -> 12000; 4904 + 96 -> 5000


def sweep(table: dict[tuple[str, float], dict[str, tuple[int, int]]]) -> pd.DataFrame:
    """Per-host sweep rows of the alert score: (category, threshold) -> {host: (detected, false alarms)}; each
    host one window and one day, NAB's raw score 2 * detected - 1 (its false alarms left out)."""
    return pd.DataFrame([{"category": category, "setting": "alert score", "threshold": threshold, "ip": ip,
                          "windows": 1, "detected": detected, "days": 1.0, "false_alarm_points": alarms,
                          "false_alarm_events": alarms, "nab_raw": 2.0 * detected - 1}
                         for (category, threshold), hosts in table.items() for ip, (detected, alarms) in hosts.items()])


SWEEPS = sweep({  # three categories of two hosts (one of them named alike in two), two thresholds
    ("A", 0.5): {"a1": (1, 2), "x": (1, 1)}, ("A", 0.7): {"a1": (1, 0), "x": (0, 0)},
    ("B", 0.5): {"b1": (1, 1), "x": (1, 1)}, ("B", 0.7): {"b1": (1, 1), "x": (1, 0)},
    ("C", 0.5): {"c1": (1, 3), "c2": (1, 1)}, ("C", 0.7): {"c1": (0, 0), "c2": (1, 1)},
})


def test_leave_one_category_out_chooses_on_the_others_pooled_at_90_percent_recall():
    lines = {line[0]: line[1:] for line in categories.leave_one_out(SWEEPS)}
    # Without A: B and C pooled, 0.5 has 4/4 at 6 alarms in 4 days, 0.7 3/4 (75%): 0.5 is the one at >= 90%.
    assert lines["A"] == ["score 0.5", "4/4 (100%)", "1.50", "2/2 (100%)", "1.50", "1.50", "100.0"]
    # Without B: A and C, 0.5 4/4 at 1.75, 0.7 2/4: 0.5 again.
    assert lines["B"] == ["score 0.5", "4/4 (100%)", "1.75", "2/2 (100%)", "1.00", "1.00", "100.0"]
    # Without C: A and B, 0.5 4/4 at 1.25; 0.7 3/4 at 0.25 is cheaper but below 90%.
    assert lines["C"] == ["score 0.5", "4/4 (100%)", "1.25", "2/2 (100%)", "2.00", "2.00", "100.0"]
    assert lines["pooled (3 left out)"] == ["as chosen", "", "", "6/6 (100%)", "1.50", "1.50", "100.0"]
    # Where no threshold reaches 90% on the others, the highest recall: without A, B and C at 0.5 catch 2/4
    # here, at 0.7 still 3/4 (75%), so 0.7, though neither reaches 90%.
    harder = SWEEPS.copy()
    harder.loc[(harder["category"] == "B") & (harder["threshold"] == 0.5) & (harder["ip"] == "x"), "detected"] = 0
    harder.loc[(harder["category"] == "C") & (harder["threshold"] == 0.5) & (harder["ip"] == "c1"), "detected"] = 0
    assert categories.leave_one_out(harder)[0][:4] == ["A", "score 0.7", "3/4 (75%)", "0.50"]


def alert_rows(table: dict[str, tuple[int, int, int, float]]) -> pd.DataFrame:
    """The default alerts' per-host rows: category -> (hosts, windows detected of one each, false alarms, days)."""
    rows = []
    for category, (hosts, detected, alarms, days) in table.items():
        for k in range(hosts):
            rows.append({"category": category, "setting": categories.DEFAULT, "ip": f"h{k}", "windows": 1,
                         "detected": int(k < detected), "days": days / hosts, "false_alarm_points": alarms * (k == 0),
                         "false_alarm_events": alarms * (k == 0), "nab_raw": 0.0})
    return pd.DataFrame(rows)


def test_each_rules_alerts_are_evaluates_counts_in_a_window_or_outside_summed_per_category(tmp_path):
    c = categories.Category(AWS, tmp_path, tmp_path)
    raised = [{"alert_source": rule, "in_window": h, "outside": f}
              for rule, h, f in [("likelihood", 1, 0), ("extreme", 1, 1), ("quiet", 0, 1), ("seasonal", 0, 0),
                                 ("severity", 0, 0)]]
    (tmp_path / "eval-alert.json").write_text(json.dumps({"metrics": [], "raised": raised}))
    counts = categories.rule_counts(c)
    assert counts.loc[["likelihood", "extreme", "quiet", "seasonal"], ["in_window", "outside"]].values.tolist() == [
        [1, 0], [1, 1], [0, 1], [0, 0]]
    (line,) = categories.rule_lines(counts, [AWS])
    assert line == [AWS, "1 / 0", "1 / 1", "0 / 1", "0 / 0", "0 / 0", "2"]
    lines = categories.rule_lines(pd.concat([counts, counts.assign(category="realKnownCause"),
                                             counts.assign(category=f"{AWS}-1h")]), [AWS, "realKnownCause"])
    assert [line[0] for line in lines] == [AWS, "realKnownCause", "pooled (2 real)", f"{AWS}-1h"]
    assert lines[2][1:] == ["2 / 0", "2 / 2", "0 / 2", "0 / 0", "0 / 0", "4"]


def test_the_copies_are_held_to_one_window_and_1_5_times_the_5_minute_pages():
    # 5 minutes: 16/18 at 14 false pages in 100 host-days (0.14): the targets >= 15 windows, <= 0.21 a host-day.
    rows = alert_rows({AWS: (18, 16, 14, 100.0), f"{AWS}-15min": (18, 10, 50, 100.0),
                       f"{AWS}-1h": (18, 15, 20, 100.0), f"{AWS}-1min": (18, 14, 22, 100.0)})
    lines = {line[0]: line[1:] for line in categories.copies(rows)}
    assert list(lines) == ["15min", "1h", "1min"]
    assert lines["15min"][:3] + lines["15min"][-1:] == ["10/18 (56%)", "16/18", "", "(none set)"]
    assert lines["1h"] == ["15/18 (83%)", "16/18", ">= 15", "0.20", "0.14", "<= 0.21", "50.0", "yes"]
    assert lines["1min"][-1] == "no: windows, pages"
    rows.loc[rows["category"] == f"{AWS}-1min", "detected"] = 1  # 18/18: more windows is within the target
    assert categories.copies(rows)[2][-1] == "no: pages"
def nab_folder(root: Path, hosts: dict[str, list[str]], length: int = 400) -> Path:
    """A NAB-like copy, each category a folder beside combined_windows.json: each host a sine with a spike in its
    second half, inside its labelled window."""
    times = pd.date_range("2014-02-14 14:30", periods=length, freq="5min")
    windows = {}
    for category, names in hosts.items():
        (root / category).mkdir(parents=True)
        for k, host in enumerate(names):
            rng = np.random.default_rng(k)
            values = 100 + 20 * np.sin(np.arange(length) / 4) + rng.normal(0, 2, length)
            spike = length // 2 + 60 + 10 * k
            values[spike:spike + 5] += 200
            pd.DataFrame({"timestamp": times.strftime("%Y-%m-%d %H:%M:%S"), "value": values.round(3)}).to_csv(
                root / category / f"{host}.csv", index=False)
            windows[f"{category}/{host}.csv"] = [[str(times[spike - 10]), str(times[spike + 20])]]
    (root / "combined_windows.json").write_text(json.dumps(windows))
    return root


@pytest.mark.slow
def test_a_whole_walkthrough_reuses_the_stores_and_reports_every_category_never_realtweets(base_store, tmp_path):
    # Three days at 5 minutes, so that the hourly copy has 72 points; stores in place for every category.
    nab = nab_folder(tmp_path / "NAB", {AWS: ["10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4"],
                                        "realKnownCause": ["10.1.0.5", "10.1.0.6"],
                                        "realTweets": ["Twitter_volume_X"], "artificialWithAnomaly": ["art_x"]},
                     length=864)
    out = tmp_path / "nab"
    names = [AWS, "realKnownCause"] + [f"{AWS}-{step}" for step in categories.STEPS]
    folders = {name: out if name == AWS else out / name for name in names}
    for folder in folders.values():
        shutil.copytree(base_store, folder / "store")
    done = walk(nab, "--out", out, timeout=400)
    assert done.returncode == 0, done.stderr
    for name, folder in folders.items():
        assert f"{folder / 'store'} exists: training skipped" in done.stdout
        assert len(pd.read_csv(folder / "sweep-alert.csv")) > 0 and (folder / "eval-alert.json").is_file()
        assert "10.1.0.5" in (folder / "labels.json").read_text() if name == "realKnownCause" else True
    for mode in walkthrough.STD_MODES:
        assert f"--points 2500 --std {mode}" in done.stdout
        assert len(pd.read_csv(out / f"sweep-{walkthrough.name_of(mode)}.csv")) > 0
    assert "--std rolling:96 --sigmas 3,6" in done.stdout
    assert (out / "eval-store.json").is_file() and (out / "eval-rolling96.json").is_file()
    fold_lines = done.stdout.split("2-fold check by host")[1].split("The default alerts")[0].splitlines()
    # The LSTM, the z-score and the alert score, each fold.
    assert sum(line.startswith(("1 ", "2 ")) for line in fold_lines) == 6
    assert sum(line.startswith("(") and walkthrough.ALERT in line for line in fold_lines) == 2
    # The copies are long tables batchpredict reads, at their steps.
    minute = pd.read_csv(folders[f"{AWS}-1min"] / "all.csv")
    assert len(minute) == 4 * (5 * 863 + 1) and minute["timestamp"][1] == "2014-02-14 14:31:00"
    assert pd.read_csv(folders[f"{AWS}-1h"] / "all.csv")["timestamp"][1] == "2014-02-14 15:00:00"
    # realTweets and the artificial data: never read, never named.
    for never in ("realTweets", "Twitter_volume", "artificial", "art_x"):
        assert never not in done.stdout + done.stderr
        assert not [path for path in out.rglob("*") if never in path.name]
        assert not [path for path in out.rglob("*.json") if never in path.read_text()]
    summary = done.stdout.split("The default alerts and the rolling z-score")[1]
    table = summary.split("Leave-one-category-out")[0].splitlines()
    for name in names + ["pooled (2 real)"]:
        assert sum(line.startswith(name + " ") for line in table) == 3  # the alerts, the z-score at 4.5σ and 6σ
    loco = summary.split("Leave-one-category-out check")[1].split("What raised")[0].splitlines()
    assert [line.split()[0] for line in loco if line.startswith(("real", "pooled"))] == [AWS, "realKnownCause",
                                                                                      "pooled"]
    ruled = summary.split("What raised")[1].split("realAWSCloudwatch resampled")[0].splitlines()
    assert [line.split()[0] for line in ruled if line.startswith(("real", "pooled"))] == [
        AWS, "realKnownCause", "pooled", *(f"{AWS}-{step}" for step in categories.STEPS)]
    copied = summary.split("realAWSCloudwatch resampled")[1].splitlines()
    assert [line.split()[0] for line in copied if line[:1].isdigit()] == list(categories.STEPS)
    assert "nab_walkthrough: done in" in done.stdout
