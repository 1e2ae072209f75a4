"""scripts/nab_walkthrough.py (`make nab`): NAB absent, the 2-fold check worked out by hand, a whole run."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "nab_walkthrough.py"
_spec = importlib.util.spec_from_file_location("nab_walkthrough", SCRIPT)
walkthrough = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(walkthrough)

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


def nab_folder(root: Path, hosts: list[str], length: int = 400) -> Path:
    """A NAB-like copy: each host a sine with a spike in its second half, inside its labelled window."""
    data = root / "realAWSCloudwatch"
    data.mkdir(parents=True)
    times = pd.date_range("2014-02-14 14:30", periods=length, freq="5min")
    windows = {}
    for k, host in enumerate(hosts):
        rng = np.random.default_rng(k)
        values = 100 + 20 * np.sin(np.arange(length) / 4) + rng.normal(0, 2, length)
        spike = length // 2 + 60 + 10 * k
        values[spike:spike + 5] += 200
        pd.DataFrame({"timestamp": times.strftime("%Y-%m-%d %H:%M:%S"), "value": values.round(3)}).to_csv(
            data / f"{host}.csv", index=False)
        windows[f"realAWSCloudwatch/{host}.csv"] = [[str(times[spike - 10]), str(times[spike + 20])]]
    (root / "combined_windows.json").write_text(json.dumps(windows))
    return root


@pytest.mark.slow
def test_a_whole_walkthrough_reuses_the_store_and_reports_the_2_fold_check(base_store, tmp_path):
    hosts = ["10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4"]
    nab = nab_folder(tmp_path / "NAB", hosts)
    out = tmp_path / "nab"
    shutil.copytree(base_store, out / "store")
    done = walk(nab, "--out", out, timeout=280)
    assert done.returncode == 0, done.stderr
    assert f"{out / 'store'} exists: training skipped" in done.stdout
    for mode in walkthrough.STD_MODES:
        name = walkthrough.name_of(mode)
        assert f"--points 2500 --std {mode}" in done.stdout
        assert len(pd.read_csv(out / f"sweep-{name}.csv")) > 0
    assert "--std rolling:96 --sigmas 3,6" in done.stdout
    assert (out / "eval-store.json").is_file() and (out / "eval-rolling96.json").is_file()
    fold_lines = done.stdout.split("2-fold check by host")[1].splitlines()
    assert (out / "eval-alert.json").is_file() and len(pd.read_csv(out / "sweep-alert.csv")) > 0
    # The LSTM, the z-score and the alert score, each fold.
    assert sum(line.startswith(("1 ", "2 ")) for line in fold_lines) == 6
    assert sum(line.startswith("(") and walkthrough.ALERT in line for line in fold_lines) == 2
    assert "nab_walkthrough: done in" in done.stdout
