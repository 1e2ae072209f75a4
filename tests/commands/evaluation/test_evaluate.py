"""`batchpredict evaluate`: hand-made windows and flags whose every number is worked out here by hand."""
from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

from batchpredict import Params
from batchpredict.commands.evaluation.evaluate import RAISED_COLUMNS, evaluate, format_raised, format_table
from batchpredict.commands.evaluation.measurement import TOTAL
from batchpredict.errors import UsageError
from batchpredict.io.output import columns, write_rows
from batchpredict.scoring.anomaly import assess

T0 = pd.Timestamp("2014-02-19 10:00:00")


def stamp(i: int) -> str:
    return str(T0 + pd.Timedelta(minutes=5 * i))


def results_csv(path: Path, sigmas_of_rows: dict[str, list[float]], sigmas: tuple[float, float] = (2.0, 4.0),
                failed: tuple[str, ...] = (), extra: dict[str, str] | None = None) -> Path:
    """A results CSV as predict writes it: every IP predicts 10 with std 1, so a point `s` above 10 lies
    s stds off its prediction; each point `i` of an IP is at T0 + 5 i minutes."""
    rows = []
    for ip, distances in sigmas_of_rows.items():
        for i, s in enumerate(distances):
            lowers, uppers, anomaly, severity = assess(10.0 + s, 10.0, 1.0, sigmas)
            rows.append([ip, stamp(i), 10.0 + s, 10.0, 1.0, lowers[0], uppers[0], lowers[1], uppers[1],
                         "true" if anomaly else "false", severity.value, "ok", None, f"model/{ip}.h5", 1, 5.0,
                         4242, 30.0] + list((extra or {}).values()))
    for ip in failed:
        rows.append([ip, "t", *[None] * 9, "load_error", "cannot read", f"model/{ip}.h5", 1, 5.0, 4242, 30.0]
                    + [""] * len(extra or {}))
    write_rows(str(path), columns(sigmas) + list(extra or {}), rows)
    return path


def labels_csv(path: Path, windows: list[tuple[str, str, str]]) -> Path:
    path.write_text("ip,start,end\n" + "".join(f"{ip},{a},{b}\n" for ip, a, b in windows))
    return path


def sig(x: float) -> float:
    """NAB's scaled sigmoid, written out: 2 / (1 + e^(5x)) - 1, and -1 beyond 3."""
    return -1.0 if x > 3 else 2 / (1 + math.exp(5 * x)) - 1


# Host a: a window over points 3-6, flagged at 4 (5 stds) and 5; false alarms at 1 (before any window),
# 8-9 (one run, just after the window) and 11 (the last point). Host b: a window over points 2-3, missed,
# a false alarm at 6 (4.5 stds), and a second window a day before its scored points. Host c: no labels.
HOSTS = {
    "a": [0, 3, 0, 0, 5, 2.5, 0, 0, 2.5, 2.5, 0, 3],
    "b": [0, 0, 0, 0, 0, 0, 4.5, 0],
    "c": [0, 2.5, 0, 0],
}
WINDOWS = [("a", stamp(3), stamp(6)), ("b", stamp(2), stamp(3)), ("b", "2014-02-18 10:00", "2014-02-18 11:00"),
           ("ghost", stamp(0), stamp(5))]


@pytest.fixture
def case(tmp_path: Path) -> tuple[Path, Path]:
    return results_csv(tmp_path / "r.csv", HOSTS, failed=("d",)), labels_csv(tmp_path / "l.csv", WINDOWS)


def rows_of(metrics: pd.DataFrame, threshold: float, detector: str = "model") -> dict[str, pd.Series]:
    chosen = metrics[(metrics["threshold"] == threshold) & (metrics["detector"] == detector)]
    return {row.ip: row for _, row in chosen.iterrows()}


def test_every_count_ratio_delay_and_nab_score_at_the_warning_threshold(case):
    done = evaluate(*map(str, case))
    a, b, c, total = (rows_of(done.metrics, 2.0)[k] for k in ("a", "b", "c", TOTAL))

    assert (a.points, a.windows, a.windows_outside, a.detected, a.flagged_points, a.false_alarm_points) == \
        (12, 1, 0, 1, 6, 4)
    assert (a.events, a.false_alarm_events) == (4, 3)  # [1] [4-5] [8-9] [11]; only [4-5] touches the window
    assert a.days == pytest.approx(12 * 5 / 1440)      # 12 points of 5 minutes
    assert a.false_alarm_points_per_day == pytest.approx(4 * 24) and a.false_alarm_events_per_day == pytest.approx(72)
    assert (a.recall, a.precision, a.point_precision) == (1.0, 0.25, 2 / 6)
    assert a.f1 == pytest.approx(2 * 0.25 * 1 / 1.25)
    assert a.mean_delay_minutes == 5.0                 # window from point 3, first flag at point 4
    # NAB: the 4-point window (3-6) first flagged at 4 sits at -(6 - 4 + 1) / 4; the false alarm at 1 has no
    # window before it (-0.11); those at 8, 9 and 11 lie 2, 3 and 5 points past the window, over 4 - 1.
    raw_a = (sig(-3 / 4) / sig(-1) - 0.11 + 0.11 * sig(2 / 3) + 0.11 * sig(3 / 3) + 0.11 * sig(5 / 3))
    assert a.nab_raw == pytest.approx(raw_a, rel=1e-12)
    assert a.nab_score == pytest.approx(100 * (raw_a + 1) / 2)

    assert (b.windows, b.windows_outside, b.detected, b.false_alarm_points, b.events, b.false_alarm_events) == \
        (1, 1, 0, 1, 1, 1)
    assert (b.recall, b.precision, b.f1) == (0.0, 0.0, 0.0) and math.isnan(b.mean_delay_minutes)
    raw_b = -1 + 0.11 * sig(3 / 1)                     # missed; the flag 3 points past a 2-point window
    assert b.nab_raw == pytest.approx(raw_b) and b.nab_score == pytest.approx(100 * (raw_b + 1) / 2)

    assert (c.windows, c.false_alarm_points, c.false_alarm_events) == (0, 1, 1)
    assert math.isnan(c.recall) and c.precision == 0.0 and math.isnan(c.f1)
    assert c.nab_raw == pytest.approx(-0.11) and math.isnan(c.nab_score)

    assert (total.windows, total.windows_outside, total.detected, total.false_alarm_points, total.events,
            total.false_alarm_events) == (2, 1, 1, 6, 6, 5)
    assert total.days == pytest.approx((12 + 8 + 4) * 5 / 1440)
    assert total.false_alarm_events_per_day == pytest.approx(5 / ((12 + 8 + 4) * 5 / 1440))
    assert (total.recall, total.precision) == (0.5, 1 / 6)
    assert total.f1 == pytest.approx(2 * (1 / 6) * 0.5 / (1 / 6 + 0.5))
    assert total.nab_raw == pytest.approx(raw_a + raw_b - 0.11)
    assert total.nab_score == pytest.approx(100 * (raw_a + raw_b - 0.11 + 2) / 4)

    windows = done.windows[(done.windows["threshold"] == 2.0)]
    assert windows[["ip", "start", "points", "detected", "delay_points"]].values.tolist() == [
        ["a", stamp(3), 4, True, 1], ["b", stamp(2), 2, False, -1]]
    assert windows["first_flag"].iloc[0] == stamp(4) and pd.isna(windows["first_flag"].iloc[1])
    assert any("1 rows" in w and "not scored" in w for w in done.warnings)
    assert any("ghost" in w for w in done.warnings) and any("scored with no window" in w and "c" in w
                                                           for w in done.warnings)


def test_the_critical_threshold_keeps_only_the_points_past_4_stds(case):
    a, b, c, total = (rows_of(evaluate(*map(str, case)).metrics, 4.0)[k] for k in ("a", "b", "c", TOTAL))
    assert (a.detected, a.flagged_points, a.false_alarm_points, a.events, a.false_alarm_events) == (1, 1, 0, 1, 0)
    assert a.nab_raw == pytest.approx(sig(-3 / 4) / sig(-1))
    assert (b.false_alarm_points, c.flagged_points) == (1, 0)
    assert math.isnan(c.precision) and c.nab_raw == 0.0
    assert (total.detected, total.false_alarm_events, total.precision) == (1, 1, 0.5)


def test_default_thresholds_are_the_results_sigmas_and_flags_match_their_severity(tmp_path):
    results = results_csv(tmp_path / "r.csv", HOSTS, sigmas=(3.0, 5.0))
    done = evaluate(str(results), str(labels_csv(tmp_path / "l.csv", WINDOWS)))
    assert done.metrics[["threshold", "level"]].drop_duplicates().values.tolist() == [[3.0, "warning"],
                                                                                     [5.0, "critical"]]
    frame = pd.read_csv(results)
    totals = done.metrics[done.metrics["ip"] == TOTAL].set_index("level")
    assert totals.loc["warning", "flagged_points"] == frame["severity"].isin(["warning", "critical"]).sum() == 2
    assert totals.loc["critical", "flagged_points"] == (frame["severity"] == "critical").sum() == 0


def test_rows_out_of_order_and_a_std_source_column_change_nothing(case, tmp_path):
    results, labels = case
    expected = evaluate(str(results), str(labels)).metrics
    shuffled = pd.read_csv(results, dtype=str, keep_default_na=False).sample(frac=1, random_state=3)
    shuffled.assign(std_source="rolling:288").to_csv(tmp_path / "s.csv", index=False)
    got = evaluate(str(tmp_path / "s.csv"), str(labels)).metrics

    def by_ip(frame: pd.DataFrame) -> pd.DataFrame:  # IPs come in order of first appearance
        return frame.sort_values(["threshold", "ip"]).reset_index(drop=True)

    pd.testing.assert_frame_equal(by_ip(got), by_ip(expected))


def test_sweep_equals_separate_evaluations_at_each_threshold(case):
    results, labels = map(str, case)
    sweep = [2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0]
    swept = evaluate(results, labels, sweep=sweep)
    assert sorted(set(swept.metrics["threshold"])) == sweep
    for k in sweep:
        alone = evaluate(results, labels, sigmas=(k, k)).metrics
        alone = alone[alone["level"] == "warning"].drop(columns="level").reset_index(drop=True)
        mine = swept.metrics[swept.metrics["threshold"] == k].drop(columns="level").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, alone)
    recall = swept.metrics[swept.metrics["ip"] == TOTAL].set_index("threshold")["detected"]
    assert recall.tolist() == [1, 1, 1, 1, 1, 1, 0]  # a's window holds 5 stds: flagged while threshold < 5


def test_the_zscore_baseline_by_hand(tmp_path):
    # rolling 2, window 3: smoothed s = [1, 1, 1.5, 2, 2, 6]; at point 4 (value 2) the 3 before are 1, 1.5, 2
    # (mean 1.5, std sqrt(1/6)); at point 5 (value 6) they are 1.5, 2, 2.
    raw = [1, 1, 1, 2, 2, 2, 10]
    table = tmp_path / "t.csv"
    table.write_text("ip,timestamp,value\n" + "".join(f"h,{stamp(i)},{v}\n" for i, v in enumerate(raw)))
    results = results_csv(tmp_path / "r.csv", {"h": [0] * 7})
    frame = pd.read_csv(results, dtype=str, keep_default_na=False)
    frame.iloc[5:7].to_csv(results, index=False)  # the model scored stamp(5) and stamp(6), flagging neither
    labels = labels_csv(tmp_path / "l.csv", [("h", stamp(6), stamp(6))])

    done = evaluate(str(results), str(labels), sigmas=(2, 4), baseline="zscore", data=str(table),
                    params=Params(rolling=2, window=3))
    z4 = (2 - 1.5) / np.std([1, 1.5, 2])            # 1.22: not flagged
    z5 = (6 - np.mean([1.5, 2, 2])) / np.std([1.5, 2, 2])  # 17.7: flagged at both thresholds
    assert z4 < 2 < 4 < z5
    base = rows_of(done.metrics, 2.0, "zscore")
    assert (base["h"].flagged_points, base["h"].detected, base["h"].false_alarm_points) == (1, 1, 0)
    assert rows_of(done.metrics, 4.0, "zscore")["h"].detected == 1
    assert rows_of(done.metrics, 2.0, "model")["h"].flagged_points == 0
    swept = evaluate(str(results), str(labels), sweep=[1.0, 2.0, 20.0], baseline="zscore", data=str(table),
                     params=Params(rolling=2, window=3))
    assert [rows_of(swept.metrics, k, "zscore")["h"].flagged_points for k in (1.0, 2.0, 20.0)] == [2, 1, 0]
    printed = format_table(done.metrics, totals_only=True).splitlines()
    assert [line.split()[2] for line in printed[1:]] == ["model", "zscore", "model", "zscore"]


def test_unusable_input_is_a_usage_error(case, tmp_path):
    results, labels = map(str, case)
    with pytest.raises(UsageError, match="needs --data"):
        evaluate(results, labels, baseline="zscore")
    none_ok = results_csv(tmp_path / "n.csv", {}, failed=("x",))
    with pytest.raises(UsageError, match="no scored rows"):
        evaluate(str(none_ok), labels)
    frame = pd.read_csv(results, dtype=str, keep_default_na=False)
    pd.concat([frame, frame.iloc[:1]]).to_csv(tmp_path / "twice.csv", index=False)
    with pytest.raises(UsageError, match="ip a has timestamp .* twice"):
        evaluate(str(tmp_path / "twice.csv"), labels)
    frame.assign(timestamp="t1").to_csv(tmp_path / "text.csv", index=False)
    with pytest.raises(UsageError, match="'t1' is not a date"):
        evaluate(str(tmp_path / "text.csv"), labels)
    table = tmp_path / "t.csv"
    table.write_text("ip,timestamp,value\na,x,1\n")
    with pytest.raises(UsageError, match="--data has no timestamp '2014-02-19 10:00:00' for IP a"):
        evaluate(results, labels, baseline="zscore", data=str(table))
    table.write_text("ip,timestamp,value\n" + "".join(f"a,{stamp(i - 4)},1\n" for i in range(16)))
    with pytest.raises(UsageError, match="--data has no IP b"):
        evaluate(results, labels, baseline="zscore", data=str(table))
    other = labels_csv(tmp_path / "other.csv", [("x", stamp(0), stamp(2))])
    with pytest.raises(UsageError, match="^no label id names an IP of the results: labels for x; results for a, b"):
        evaluate(results, str(other))


@pytest.mark.parametrize("fifo", ["m.csv", "m.json"])
def test_an_out_file_that_is_a_fifo_exits_2_before_anything_is_written(case, tmp_path, fifo):
    """The rename replaced the FIFO (or, as root, a device) with PREFIX.csv or PREFIX.json."""
    results, labels = case
    os.mkfifo(tmp_path / fifo)
    done = run_cli("evaluate", "--results", results, "--labels", labels, "--out", tmp_path / "m")
    assert done.returncode == 2 and "takes a regular file's path, not a FIFO's or a device's" in done.stderr
    assert "Traceback" not in done.stderr and [p.name for p in tmp_path.glob("m*")] == [fifo]
    assert stat.S_ISFIFO((tmp_path / fifo).lstat().st_mode)


def test_cli_prints_the_table_writes_csv_and_json_and_exits_0(case, tmp_path):
    results, labels = case
    done = run_cli("evaluate", "--results", results, "--labels", labels, "--out", tmp_path / "ev" / "m")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["threshold", "detector", "ip"]
    assert any(line.split()[:5] == ["2σ", "(warning)", "model", "total", "1/2"] for line in lines)
    written = pd.read_csv(tmp_path / "ev" / "m.csv")
    assert len(written) == 2 * 4 and written["ip"].tolist()[3] == TOTAL
    document = json.loads((tmp_path / "ev" / "m.json").read_text())
    assert document["nab_profile"] == {"name": "standard", "tp": 1.0, "fp": 0.11, "fn": 1.0}
    assert len(document["metrics"]) == 8 and len(document["windows"]) == 4
    assert (document["label_ids_not_in_results"], document["ips_without_labels"]) == (["ghost"], ["c"])
    assert "ghost" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("args, message", [
    (["--labels", "missing.json"], "labels not found"),
    (["--results", "missing.csv"], "results not found"),
    (["--baseline", "zscore"], "needs --data"),
    (["--sweep", "4:2:1"], "--sweep 4:2:1"),
    (["--sweep", "a:b"], "START:STOP:STEP"),
    (["--sigmas", "nan,nan"], "--sigmas needs two non-decreasing positive numbers"),  # flagged nothing, exit 0
    (["--sigmas", "0,2"], "got 0,2"),                                                 # flagged every point
    (["--sigmas", "4,2"], "got 4,2"),                                                 # 4σ called the warning
    (["--sigmas", "inf,inf"], "got inf,inf"),
])
def test_cli_exit_2_with_one_line(case, tmp_path, args, message):
    results, labels = case
    base = {"--results": str(results), "--labels": str(labels)}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = str(tmp_path / value) if value.startswith("missing") else value
    done = run_cli("evaluate", *[part for pair in base.items() for part in pair])
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_after_keeps_only_the_points_later_than_the_training_table(case, tmp_path):
    results, labels = map(str, case)
    train = tmp_path / "train.csv"
    train.write_text("ip,timestamp,value\n" + "".join(f"a,{stamp(i)},1\n" for i in range(6)))
    done = evaluate(results, labels, after=str(train))
    a, b = (rows_of(done.metrics, 2.0)[k] for k in ("a", "b"))
    assert (a.points, a.windows, a.detected, a.false_alarm_points) == (6, 1, 0, 3)  # points 6-11; window keeps 6
    assert b.points == 8  # not in the training table: every point counts
    assert any("6 points at or before their IP's last timestamp" in w for w in done.warnings)
    train.write_text("ip,timestamp,value\na,2015-01-01 00:00,1\nb,2015-01-01 00:00,1\nc,2015-01-01 00:00,1\n")
    with pytest.raises(UsageError, match="no scored point is later"):
        evaluate(results, labels, after=str(train))


def alert_results(path: Path, hosts: dict[str, tuple[list[int], list[float]]],
                  sources: dict[tuple[str, int], str] | None = None, hourly: tuple[str, ...] = ()) -> Path:
    """A results CSV with the alerting stage's columns: per IP, its alert points and every point's score
    (each point on its prediction, so the seed flags nothing); `sources` names an alert's rule. The points
    are 5 minutes apart, an hour for the IPs in `hourly`."""
    rows = []
    for ip, (alerted, scores) in hosts.items():
        for i, value in enumerate(scores):
            rows.append([ip, stamp(12 * i if ip in hourly else i), 10.0, 10.0, 1.0, 8.0, 12.0, 6.0, 14.0, "false", "normal", "ok", None,
                         f"model/{ip}.h5", 1, 5.0, 4242, 30.0, "true" if i in alerted else "false", value,
                         (sources or {}).get((ip, i), "likelihood")])
    write_rows(str(path), columns((2.0, 4.0), alert=True), rows)
    return path


def test_flags_alert_judges_the_alert_column_and_a_sweep_its_score(tmp_path):
    """a: a window over points 3-6, alerted at 4 and at 10 (a false alarm 4 points past the 4-point
    window); b: a window over 2-3, missed, a false alarm at 7. The scores give the same alerts at 0.5 with
    a rest of 3 (5 is 4's burst), and at 0.65 only 5."""
    a = ([4, 10], [0, 0, 0, 0, 0.6, 0.7, 0, 0, 0, 0, 0.55, 0])
    b = ([7], [0, 0, 0, 0, 0, 0, 0, 0.9])
    results = alert_results(tmp_path / "r.csv", {"a": a, "b": b})
    labels = labels_csv(tmp_path / "l.csv", WINDOWS[:2])
    done = evaluate(str(results), str(labels), judged="alert", params=Params(alert="likelihood:rest=3"))
    rows = {row.ip: row for row in done.metrics.itertuples()}
    assert done.metrics[["detector", "level"]].drop_duplicates().values.tolist() == [["model", "alert"]]
    raw_a = sig(-3 / 4) / sig(-1) + 0.11 * sig(4 / 3)
    raw_b = -1 + 0.11 * -1.0  # 4 points past a 2-point window: beyond 3 widths
    assert (rows["a"].detected, rows["a"].flagged_points, rows["a"].false_alarm_events) == (1, 2, 1)
    assert (rows["b"].detected, rows["b"].false_alarm_events) == (0, 1)
    assert rows["a"].nab_raw == pytest.approx(raw_a) and rows["b"].nab_raw == pytest.approx(raw_b)
    assert rows[TOTAL].nab_score == pytest.approx(100 * (raw_a + raw_b + 2) / 4)
    assert format_table(done.metrics, totals_only=True).splitlines()[1].startswith("alert ")

    swept = evaluate(str(results), str(labels), sweep=[0.5, 0.65], judged="alert",
                     params=Params(alert="likelihood:rest=3"))
    totals = swept.metrics[swept.metrics["ip"] == TOTAL].set_index("threshold")
    assert totals.loc[0.5, "nab_raw"] == pytest.approx(raw_a + raw_b)
    assert totals.loc[0.65, "nab_raw"] == pytest.approx(sig(-2 / 4) / sig(-1) + raw_b)


def test_an_ensemble_sweep_keeps_the_alerts_of_its_value_rules(tmp_path):
    """a: a window over points 3-6; the likelihood alerted at 4 (5 is its burst), a new extreme at 9. At
    0.5 the sweep gives the alert column; at 0.65 the likelihood pages at 5 instead, the extreme still at 9
    (3 points past 5 or 6: no onset in the rest of 3 before it), a false alarm 3 points past the window."""
    results = alert_results(tmp_path / "r.csv", {"a": ([4, 9], [0, 0, 0, 0, 0.6, 0.7, 0, 0, 0, 0, 0, 0])},
                            {("a", 4): "likelihood", ("a", 9): "extreme"})
    labels = labels_csv(tmp_path / "l.csv", WINDOWS[:1])
    params = Params(alert="ensemble:rest=3")
    column = evaluate(str(results), str(labels), judged="alert", params=params)
    swept = evaluate(str(results), str(labels), sweep=[0.5, 0.65], judged="alert", params=params)
    false_alarm = 0.11 * sig(3 / 3)
    raw = {0.5: sig(-3 / 4) / sig(-1) + false_alarm, 0.65: sig(-2 / 4) / sig(-1) + false_alarm}
    assert column.metrics.set_index("ip").loc["a", "nab_raw"] == pytest.approx(raw[0.5])
    assert column.raised.set_index("alert_source").loc[["likelihood", "extreme", "quiet"]].values.tolist() == [
        [1, 0], [0, 1], [0, 0]]
    assert format_raised(column.raised).splitlines()[-1].split() == ["total", "1", "1"]
    assert swept.raised is None  # a sweep judges scores, not the column the rules raised
    totals = swept.metrics[swept.metrics["ip"] == TOTAL].set_index("threshold")
    for threshold, expected in raw.items():
        assert totals.loc[threshold, "nab_raw"] == pytest.approx(expected)
        assert totals.loc[threshold, "false_alarm_events"] == 1 and totals.loc[threshold, "detected"] == 1


def test_a_sweep_counts_the_rest_at_each_ips_step(tmp_path):
    """The same scores, one IP every 5 minutes and one hourly: a rest of an hour is 12 points of the first
    (4 and 10 are one burst) and one of the second (two alerts); --step 1h makes both hourly."""
    scores = [0, 0, 0, 0, 0.6, 0, 0, 0, 0, 0, 0.6, 0]
    results = alert_results(tmp_path / "r.csv", {"f": ([4], scores), "h": ([4, 10], scores)}, hourly=("h",))
    labels = labels_csv(tmp_path / "l.csv", [("f", stamp(3), stamp(6))])

    def flagged(**given) -> dict[str, int]:
        swept = evaluate(str(results), str(labels), sweep=[0.5], judged="alert",
                         params=Params(alert="likelihood:rest=1h", **given))
        return swept.metrics.set_index("ip")["flagged_points"].drop(TOTAL).to_dict()

    assert flagged() == {"f": 1, "h": 2}
    assert flagged(step="1h") == {"f": 2, "h": 2}
    with pytest.raises(UsageError, match="--step: not a duration"):
        flagged(step="1 hour")


def test_flags_alert_beside_the_baseline_and_without_an_alert_column(case, tmp_path):
    results, labels = case
    with pytest.raises(UsageError, match="no alert column"):
        evaluate(str(results), str(labels), judged="alert")
    alerts = alert_results(tmp_path / "r.csv", {"a": ([4], [0.0] * 12)})
    pd.read_csv(alerts, dtype=str).drop(columns="alert_source").to_csv(tmp_path / "cut.csv", index=False)
    with pytest.raises(UsageError, match="has an alert column but not alert_source: predict it again"):
        evaluate(str(tmp_path / "cut.csv"), str(labels), judged="alert")
    noise = np.random.default_rng(5).normal(0, 0.1, 40)
    table = tmp_path / "t.csv"  # the points the results scored, with 28 before them, a jump at point 4
    table.write_text("ip,timestamp,value\n" + "".join(
        f"a,{stamp(i)},{10 + noise[i + 28] + 50 * (i == 4)}\n" for i in range(-28, 12)))
    out = tmp_path / "e"
    done = run_cli("evaluate", "--results", alert_results(tmp_path / "r.csv", {"a": ([4], [0.0] * 12)}),
                   "--labels", labels, "--flags", "alert", "--sigmas", "3,5", "--baseline", "zscore",
                   "--data", table, "--out", out)
    assert done.returncode == 0, done.stderr
    metrics = pd.read_csv(str(out) + ".csv")
    totals = metrics[metrics["ip"] == TOTAL]
    assert totals[["detector", "level"]].values.tolist() == [["model", "alert"], ["zscore", "warning"],
                                                             ["zscore", "critical"]]
    assert totals["detected"].tolist() == [1, 1, 1] and totals["flagged_points"].iloc[0] == 1
    printed = done.stdout.split("raised by")
    assert printed[0].rstrip().splitlines()[-3].startswith("alert ")
    assert printed[1].splitlines()[-1].split() == ["total", "1", "0"]  # point 4 is in a's window
    raised = json.loads(Path(str(out) + ".json").read_text())["raised"]
    assert list(raised[0]) == RAISED_COLUMNS
    assert {r["alert_source"]: (r["in_window"], r["outside"]) for r in raised}["likelihood"] == (1, 0)
