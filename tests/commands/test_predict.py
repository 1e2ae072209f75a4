"""The algorithm end to end through real workers, against an independent numpy computation; the table
streamed in chunks."""
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import BASE_IPS, check_against_numpy, read_out, run_cli, series_for, weights_for, wide_table

from batchpredict import Params, RunOptions, UsageError, predict_table
from batchpredict.commands.predict import Plan
from batchpredict.io import output, readers
from batchpredict.io.output import Rows
from batchpredict.io.store import Store
from batchpredict.io.table import Table
from batchpredict.job import Job
from batchpredict.scoring.prediction import run_job

REPO = Path(__file__).resolve().parents[2]

TIMING = ["duration_ms", "worker_pid", "worker_peak_rss_mib"]


def test_wide_matches_numpy(clean_run, base_store):
    check_against_numpy(clean_run.frame, base_store, clean_run.data)
    assert list(clean_run.frame["ip"]) == BASE_IPS


def test_long_layout_in_any_row_order_and_exact_25_values(store, tmp_path):
    data = {ip: series_for(ip, 25) for ip in BASE_IPS}
    rows = [(ip, f"2026-01-{1 + h // 24:02d}T{h % 24:02d}:00", v) for ip in BASE_IPS for h, v in enumerate(data[ip])]
    rows = [rows[i] for i in np.random.default_rng(0).permutation(len(rows))]
    path = tmp_path / "long.csv"
    pd.DataFrame(rows, columns=["ip", "timestamp", "value"]).to_csv(path, index=False)
    frame = predict_table(str(path), str(store), options=RunOptions(workers=2, jobs_per_worker=4))
    check_against_numpy(frame, store, data)
    assert list(frame["ip"]) == list(dict.fromkeys(r[0] for r in rows))  # first appearance in the table
    assert set(frame["timestamp"]) == {"2026-01-02T00:00"}


def test_a_few_ips_of_epoch_seconds_in_a_long_table_of_dates_cost_only_themselves(store, tmp_path):
    """Their distinct stamps outnumber the dates every other IP shares: the rows decide the table's kind."""
    data = {ip: series_for(ip, 25) for ip in BASE_IPS}
    epoch = BASE_IPS[-2:]
    rows = [(ip, str(1767225600 + 3600 * h + k) if ip in epoch else f"2026-01-{1 + h // 24:02d}T{h % 24:02d}:00", v)
            for k, ip in enumerate(BASE_IPS) for h, v in enumerate(data[ip])]
    path = tmp_path / "long.csv"
    pd.DataFrame(rows, columns=["ip", "timestamp", "value"]).to_csv(path, index=False)
    frame = predict_table(str(path), str(store)).set_index("ip")
    dated = frame.drop(epoch)
    assert (dated["status"] == "ok").all()
    assert dated["observed"].tolist() == pytest.approx([data[ip][-5:].mean() for ip in dated.index], rel=1e-12)
    assert frame.loc[epoch, "status"].tolist() == ["invalid_input"] * 2
    assert frame.loc[epoch[0], "error"].startswith("its timestamps are numbers where the table's are dates (25, ")


def test_short_series_in_long_layout_is_insufficient(base_store, tmp_path):
    path = tmp_path / "long.csv"
    rows = [f"{BASE_IPS[0]},{t},{v}" for t, v in enumerate(series_for(BASE_IPS[0])[:24])]
    rows += [f"{BASE_IPS[1]},{t},{v}" for t, v in enumerate(series_for(BASE_IPS[1]))]
    path.write_text("ip,timestamp,value\n" + "\n".join(rows) + "\n")
    frame = predict_table(str(path), str(base_store))
    assert list(frame["status"]) == ["insufficient_data", "ok"]
    assert "need 21" in frame["error"][0]


def test_every_ok_row_ran_in_its_own_process(clean_run):
    frame = clean_run.frame  # strict isolation: one job per worker
    pids = frame["worker_pid"].tolist()
    assert len(set(pids)) == len(BASE_IPS) and os.getpid() not in pids
    assert (frame["worker_peak_rss_mib"] > 0).all()


def test_coordinator_never_imports_tensorflow(store, table):
    code = ("import sys; from batchpredict import predict_table; f = predict_table(sys.argv[1], sys.argv[2]); "
            "assert (f.status == 'ok').all(), f; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'keras', 'tf_keras')))")
    done = subprocess.run([sys.executable, "-c", code, str(table), str(store)], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_custom_sigmas_name_the_columns(store, table):
    frame = predict_table(str(table), str(store), params=Params(sigmas=(3.0, 5.0)))
    assert "upper_3std" in frame.columns and "lower_5std" in frame.columns


@pytest.mark.slow
def test_a_worker_reusing_one_architecture_predicts_as_fresh_workers_do(tmp_path):
    from conftest import build_models, fitted_scaler, write_scaler, write_stds

    ips = [f"10.3.0.{i}" for i in range(6)]
    store = tmp_path / "store"
    build_models(store, [{"ip": ip, "kind": "lstm", "seed": i, "format": "keras" if i % 2 else "h5"}
                         for i, ip in enumerate(ips)])
    for ip in ips:
        write_scaler(store, ip, fitted_scaler(series_for(ip)))
    write_stds(store, {ip: 1.0 for ip in ips})
    table = str(wide_table(tmp_path / "t.csv", {ip: series_for(ip) for ip in ips}))
    fresh = predict_table(table, str(store), options=RunOptions(workers=2, jobs_per_worker=1))
    reused = predict_table(table, str(store), options=RunOptions(workers=1, jobs_per_worker=6))
    assert reused["worker_pid"].nunique() == 1 and fresh["worker_pid"].nunique() == 6
    assert len(set(fresh["predicted"])) == 6  # six different models
    np.testing.assert_allclose(reused["predicted"], fresh["predicted"], rtol=1e-6)


def test_jobs_start_before_the_table_is_read(base_store, tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "CHUNK_ROWS", 2)
    path = wide_table(tmp_path / "t.csv", {ip: series_for(ip) for ip in BASE_IPS})
    with open(path, "ab") as fh:
        fh.write(b'10.9.9.9,"1,' + b",".join([b"1"] * 39) + b"\n")  # a quote never closed, at the very end
    table = Table(str(path))
    jobs = Plan(table, Store(str(base_store)), Params(), engine="auto", rows=Rows(Params().sigmas)).jobs_of(table.chunks())
    assert next(jobs).ip == BASE_IPS[0]
    with pytest.raises(UsageError, match="EOF inside string"):
        list(jobs)


def test_an_ip_found_again_after_its_job_ran_is_invalid_input(base_store, tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "CHUNK_ROWS", 1)
    path = wide_table(tmp_path / "t.csv", {ip: series_for(ip) for ip in BASE_IPS})
    with open(path, "a") as fh:
        fh.write(BASE_IPS[0] + "," + ",".join(map(str, series_for(BASE_IPS[0]))) + "\n")
    frame = predict_table(str(path), str(base_store), out=str(tmp_path / "out.csv"))
    assert list(frame["ip"]) == BASE_IPS
    first = frame.iloc[0]
    assert first["status"] == "invalid_input" and first["error"] == "IP appears 2 times in the table (lines 2, 14)"
    assert (frame["status"][1:] == "ok").all() and pd.isna(first["worker_pid"])
    summary = frame.attrs["summary"]
    assert summary["status"] == {"invalid_input": 1, "ok": len(BASE_IPS) - 1}
    assert summary["jobs_run"] == len(BASE_IPS)  # its job had started before the second line was read
    assert list(read_out(tmp_path / "out.csv")["status"]) == list(frame["status"])


def ten_thousand(dest: Path, n: int = 10_000):
    """A wide table of n IPs with every kind of row, over a store of hard links to the bundled models
    (an IP in 20 has a model, one more in 20 a model without its scaler); what each IP should give."""
    demo = pd.read_csv(REPO / "examples" / "stats.csv", dtype=str)
    stds = json.loads((REPO / "models" / "std" / "std.json").read_text())
    files = {f.name.rsplit(".", 1)[0]: f for f in (REPO / "models" / "model").iterdir()}
    store = dest / "store"
    for sub in ("model", "sc", "std"):
        (store / sub).mkdir(parents=True)
    rng = np.random.default_rng(12)
    lines, expected, store_stds, first_line = [], {}, {}, {}
    for i in range(n):
        ip, host = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", demo["ip"][i % len(demo)]
        values = demo.iloc[i % len(demo), 1:].astype(float).to_numpy() * (1 + rng.normal(0, 0.05))
        cells = [f"{v:.1f}" for v in values]
        want = ("no_model", "no model in model/")
        if i % 20 in (0, 5):
            model = files[host]
            os.link(model, store / "model" / (ip + model.suffix))
            want = ("no_model", "no scaler")
            if i % 20 == 0:
                os.link(REPO / "models" / "sc" / f"{host}.save", store / "sc" / f"{ip}.save")
                store_stds[ip] = stds[host]
                want = ("ok", "")
        if i % 997 == 3:  # an IP of a line far above
            ip = lines[i // 2].split(",")[0].strip()
            expected[ip] = ("invalid_input", f"IP appears 2 times in the table (lines {first_line[ip]}, {i + 2})")
        elif i % 1009 == 7:
            ip, want = ["bad id!", "../etc", "-x", "a/b"][i % 4], ("invalid_input", "")
        elif i % 503 == 11:
            cells, want = ["x"] * len(cells), ("insufficient_data" if want[0] != "no_model" else want[0], "")
        if i % 211 == 13:
            ip = f"  {ip} "
        if i > n // 2 and i % 101 == 17:  # junk from half way: the rest of the table is read as text
            cells[5], cells[9] = "n/a", "oops"
        if i % 307 == 19:
            cells = [c.split(".")[0] for c in cells]
            cells[-3] = "-0"
        if i % 401 == 23:
            cells[-1] = ""
        first_line.setdefault(ip.strip(), i + 2)
        expected.setdefault(ip.strip(), want)
        lines.append(",".join([ip, *cells]))
    (store / "std" / "std.json").write_text(json.dumps(store_stds))
    table = dest / "stats.csv"
    table.write_text(",".join(demo.columns) + "\n" + "\n".join(lines) + "\n")
    return store, table, expected


@pytest.mark.slow
def test_ten_thousand_ips_read_in_chunks_of_any_size_give_one_csv(tmp_path, monkeypatch):
    """The streamed run's CSV is the same whether the table comes a row at a time, in chunks or whole; every
    row has the status its line calls for, and sampled IPs score as run_job scores them in this process."""
    store, table, expected = ten_thousand(tmp_path)
    outputs = {}
    for size in (997, 1, 20_000):
        monkeypatch.setattr(readers, "CHUNK_ROWS", size)
        out = tmp_path / f"out-{size}.csv"
        predict_table(str(table), str(store), out=str(out), options=RunOptions(workers=2, jobs_per_worker=5))
        outputs[size] = pd.read_csv(out, dtype=str, keep_default_na=False).drop(columns=TIMING)
    assert outputs[997].equals(outputs[1]) and outputs[997].equals(outputs[20_000])
    frame = outputs[997].set_index("ip")
    assert list(frame.index) == list(expected)
    for ip, (status, error) in expected.items():
        assert frame.loc[ip, "status"] == status and error in frame.loc[ip, "error"], (ip, frame.loc[ip])
    text = pd.read_csv(table, dtype=str, keep_default_na=False)
    text["ip"] = text["ip"].str.strip()
    text = text.drop_duplicates("ip").set_index("ip")
    stds = json.loads((store / "std" / "std.json").read_text())
    for ip in [ip for ip, (status, _) in expected.items() if status == "ok"][::25]:
        model = next(p.name for p in (store / "model").iterdir() if p.name.rsplit(".", 1)[0] == ip)
        values = [float(v) if v not in ("", "n/a", "oops") else np.nan for v in text.loc[ip]]
        result = run_job(Job(ip=ip, labels=list(text.columns), values=values, store=str(store), model=f"model/{model}",
                             scaler=f"sc/{ip}.save", std=stds[ip], std_mode=("store", 0), method=None))
        [row] = output.rows(result)
        got = frame.loc[ip]
        for column, cell in zip(output.columns((2.0, 4.0))[1:13], row[1:13]):
            assert got[column] == ("" if cell is None else repr(cell) if isinstance(cell, float) else str(cell)), \
                (ip, column)


TIMING = ["attempts", "duration_ms", "worker_pid", "worker_peak_rss_mib"]
POINTS = 8


@pytest.fixture(scope="module")
def points_store(tmp_path_factory):
    """Models whose one batched call must give what one call per window gives: two LSTMs (one with
    variable timesteps, fed --window), and a linear model declaring 12 timesteps, which replace
    --window 20. A 30-column table: 26 smoothed points, so a window of 20 leaves 6 to score."""
    from conftest import SCALERS, build_models, write_scaler, write_stds

    store = tmp_path_factory.mktemp("points") / "store"
    items = {"10.5.0.1": {"kind": "lstm", "format": "h5", "seed": 1},
             "10.5.0.2": {"kind": "linear", "format": "keras", "window": 12, "weights": weights_for("10.5.0.2", 12)},
             "10.5.0.3": {"kind": "lstm", "format": "keras", "window": None, "seed": 3}}
    build_models(store, [{"ip": ip, **item} for ip, item in items.items()])
    data = {ip: series_for(ip, 30) for ip in items}
    data["10.5.0.1"][[2, 27]] = np.nan  # the fill differs at every cut: the mean up to it
    for i, ip in enumerate(items):
        write_scaler(store, ip, SCALERS[i]().fit(data[ip][~np.isnan(data[ip])].reshape(-1, 1)))
    write_stds(store, {ip: 0.4 for ip in items})  # narrow bands: some points flagged
    return store, data


@pytest.mark.parametrize("engine", ["auto", pytest.param("keras", marks=pytest.mark.slow)])
def test_points_n_equals_one_point_runs_on_the_table_cut_off_at_each_point(points_store, tmp_path, engine):
    store, data = points_store
    table = wide_table(tmp_path / "t.csv", data)
    options = RunOptions(workers=2, engine=engine)
    frame = predict_table(str(table), str(store), params=Params(points=POINTS, alert="none"), options=options)
    cuts = []
    for drop in range(POINTS - 1, -1, -1):
        cut = wide_table(tmp_path / f"cut{drop}.csv", {ip: values[:len(values) - drop] for ip, values in data.items()})
        cuts.append(predict_table(str(cut), str(store), options=options))
    expected = pd.concat(cuts).query("status == 'ok'")
    expected = expected.sort_values("ip", key=lambda ips: ips.map(list(data).index), kind="stable")
    assert frame.attrs["summary"]["rows"] == len(frame) == len(expected) == 6 + POINTS + 6
    assert (frame["status"] == "ok").all() and frame["anomaly"].eq("true").any()
    got, want = frame.drop(columns=TIMING).reset_index(drop=True), expected.drop(columns=TIMING).reset_index(drop=True)
    text = ["ip", "timestamp", "anomaly", "severity", "status", "error", "model"]
    pd.testing.assert_frame_equal(got[text], want[text])
    np.testing.assert_allclose(got["observed"], want["observed"], rtol=1e-13)
    np.testing.assert_allclose(got.drop(columns=text + ["observed"]), want.drop(columns=text + ["observed"]),
                               rtol=1e-5)


def long_table(path, stamps: dict[str, range]):
    rows = [f"{ip},{t},{v}" for ip, ts in stamps.items() for t, v in zip(ts, series_for(ip, len(ts)))]
    path.write_text("ip,timestamp,value\n" + "\n".join(rows) + "\n")
    return str(path)


def test_since_scores_every_point_after_the_label_and_an_ip_that_ends_before_it_keeps_one_row(base_store, tmp_path):
    a, b, c = BASE_IPS[:3]
    table = long_table(tmp_path / "t.csv", {a: range(1, 41), b: range(1, 46), c: range(1, 36)})
    frame = predict_table(table, str(base_store), params=Params(since="35"))
    assert frame.groupby("ip", sort=False)["timestamp"].apply(list).to_dict() == {
        a: [str(t) for t in range(36, 41)], b: [str(t) for t in range(36, 46)], c: ["35"]}
    stale = frame[frame["ip"] == c].iloc[0]
    assert (stale["status"], stale["error"]) == ("insufficient_data", "no point after --since '35'")
    summary = frame.attrs["summary"]
    assert (summary["ips"], summary["rows"], summary["skipped"]) == (3, 16, 1)
    points = predict_table(table, str(base_store), params=Params(points=10))
    after = points[points["timestamp"].astype(int) > 35].drop(columns=TIMING).reset_index(drop=True)
    pd.testing.assert_frame_equal(frame[frame["ip"] != c].drop(columns=TIMING).reset_index(drop=True), after)


def test_since_past_every_point_keeps_each_ips_problem_and_its_exit_code(store, tmp_path):
    """The contract's one row per IP of the table: a night with nothing new wrote a header alone, exit 0, where
    an IP's model was ambiguous (load_error), missing (no_model) or its line ragged (invalid_input)."""
    ambiguous, missing, ragged, fine = BASE_IPS[:4]
    model = next((store / "model").glob(f"{ambiguous}.*"))
    shutil.copy(model, model.with_suffix(".h5" if model.suffix == ".keras" else ".keras"))
    next((store / "model").glob(f"{missing}.*")).unlink()
    series = {ip: series_for(ip) for ip in (ambiguous, missing, ragged, fine)}
    path = wide_table(tmp_path / "t.csv", series)
    lines = path.read_text().splitlines()
    lines[3] += ",1.0"  # the ragged IP's line: a field more than the header
    path.write_text("\n".join(lines) + "\n")
    last = lines[0].rsplit(",", 1)[1]
    done = run_cli("predict", "--data", path, "--models", store, "--out", tmp_path / "a.csv", "--since", last)
    frame = read_out(tmp_path / "a.csv").set_index("ip")
    assert frame["status"].to_dict() == {ambiguous: "load_error", missing: "no_model", ragged: "invalid_input",
                                         fine: "insufficient_data"}
    assert frame.loc[fine, "error"] == f"no point after --since {last!r}" and frame.loc[fine, "timestamp"] == last
    assert done.returncode == 1, done.stderr
    assert f"(1 with nothing after {last})" in done.stderr


SMALL_ALERT = "likelihood:window=40,average=2,centre=10,rest=10"  # history 60: short series get there
SMALL_ENSEMBLE = "ensemble:window=40,average=2,centre=10,rest=10,tolerance=2,span=20,day=10,week=40"  # 82 residuals


@pytest.mark.parametrize("method", [SMALL_ALERT, SMALL_ENSEMBLE])
def test_a_point_gets_the_same_alert_from_points_and_from_since(base_store, tmp_path, method):
    """Real workers, a 200-point series with a spike and a level shift: --points 50, --points 120 and
    --since the 150th label score the same points with different history before them in the batch;
    each common point gets the same alert (and rule) and, to float32 rounding of the forward pass, the
    same score."""
    ips = BASE_IPS[:2]
    data = {ip: series_for(ip, 200) for ip in ips}
    data[ips[0]][[160, 161]] += 200.0
    data[ips[1]][170:] += 120.0
    table = str(wide_table(tmp_path / "t.csv", data))
    runs = [predict_table(table, str(base_store), params=Params(alert=method, **which))
            for which in ({"points": 50}, {"points": 120}, {"since": "t149"})]
    assert [len(run) for run in runs] == [100, 240, 100]
    assert all(list(run.columns[-3:]) == ["alert", "score", "alert_source"] for run in runs)
    keyed = [run.set_index(["ip", "timestamp"]) for run in runs]
    for other in keyed[1:]:
        common = keyed[0].index.intersection(other.index)
        assert len(common) == 100
        assert keyed[0].loc[common, "alert"].tolist() == other.loc[common, "alert"].tolist()
        assert keyed[0].loc[common, "alert_source"].tolist() == other.loc[common, "alert_source"].tolist()
        np.testing.assert_allclose(keyed[0].loc[common, "score"].astype(float),
                                   other.loc[common, "score"].astype(float), rtol=1e-4, atol=1e-6)
    alerts = runs[1][runs[1]["alert"] == "true"].groupby("ip")["timestamp"].apply(list).to_dict()
    if method == SMALL_ENSEMBLE:  # with a 20-point span these trending series set new highs: checked above
        assert set(runs[1]["alert_source"]) <= {"ensemble", "likelihood", "extreme", "quiet", "severity"}
        assert runs[1].attrs["summary"]["alerts"] == int((runs[1]["alert"] == "true").sum()) > 0
        return
    # The spike and the shift each page once, at their onset: within the rolling mean's 5 points of it.
    assert alerts.keys() == set(ips) and all(len(found) == 1 for found in alerts.values())
    assert 160 <= int(alerts[ips[0]][0][1:]) < 165 and 170 <= int(alerts[ips[1]][0][1:]) < 175
    assert (runs[1]["alert_source"] == "likelihood").all()
    assert runs[1].attrs["summary"]["alerts"] == 2


def test_each_series_counts_the_alert_spans_in_its_own_step(base_store, tmp_path, caplog):
    """One long table, one IP hourly and one every 5 minutes: the likelihood's two days are 144 points of the
    first (48, and at least a quarter of 576; judged from 36 residual scores on) and 576 of the second (not
    judged in 120 points). --step sets one step for all; a wide table's t000 labels are not times: the
    reference step, said once."""
    hourly, five = BASE_IPS[:2]
    stamps = {ip: [str(t) for t in pd.date_range("2026-03-01", periods=120, freq=freq)]
              for ip, freq in ((hourly, "1h"), (five, "5min"))}
    table = long_table(tmp_path / "t.csv", stamps)

    def judged(**given) -> dict[str, int]:
        frame = predict_table(table, str(base_store), params=Params(points=40, alert="likelihood", **given))
        return frame.groupby("ip", sort=False)["score"].apply(lambda s: int(s.notna().sum())).to_dict()

    assert judged() == {hourly: 40, five: 0}
    assert judged(step="1h") == {hourly: 40, five: 40}
    assert judged(step="5m") == {hourly: 0, five: 0}
    wide = str(wide_table(tmp_path / "w.csv", {ip: series_for(ip, 60) for ip in BASE_IPS[:3]}))
    with caplog.at_level(logging.WARNING, logger="batchpredict"):
        predict_table(wide, str(base_store), params=Params(points=40))
    said = [r.getMessage() for r in caplog.records if "not times" in r.getMessage()]
    assert len(said) == 1 and "'t000'" in said[0] and "5m steps" in said[0], said


@pytest.mark.parametrize("written", ["%Y-%m-%d %H:%M:%S UTC", "%m/%d/%Y %H:%M", "mixed"])
def test_a_long_tables_dates_in_any_format_it_reads_give_the_step(base_store, tmp_path, caplog, written):
    """The table orders a long table's dates in any format pandas reads (mixed ones too), but the step came from
    numpy's ISO 8601 alone: `2026-03-01 01:00:00 UTC` (BigQuery's) or `03/01/2026 01:00` were 'labels are not
    times', and the hourly IP's spans counted in 5-minute steps (its two days 576 points: nothing judged)."""
    hourly, five = BASE_IPS[:2]

    def text(times: pd.DatetimeIndex) -> list[str]:
        if written != "mixed":
            return list(times.strftime(written))
        return [t.strftime(("%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S UTC", "%m/%d/%Y %H:%M")[i % 3])
                for i, t in enumerate(times)]

    stamps = {ip: text(pd.date_range("2026-03-01", periods=120, freq=freq)) for ip, freq in ((hourly, "1h"),
                                                                                             (five, "5min"))}
    with caplog.at_level(logging.WARNING, logger="batchpredict"):
        frame = predict_table(long_table(tmp_path / "t.csv", stamps), str(base_store),
                              params=Params(points=40, alert="likelihood"))
    assert frame.groupby("ip", sort=False)["score"].apply(lambda s: int(s.notna().sum())).to_dict() == {
        hourly: 40, five: 0}
    assert not [r.getMessage() for r in caplog.records if "not times" in r.getMessage()]


def test_a_step_that_is_no_duration_is_a_usage_error(base_store, table):
    with pytest.raises(UsageError, match="--step: not a duration"):
        predict_table(str(table), str(base_store), params=Params(points=5, step="5"))


@pytest.mark.parametrize("knob", ["rolling", "window"])
def test_a_rolling_or_window_past_any_series_is_a_usage_error(base_store, table, knob):
    """--rolling 99999999999999999999 (past int64) made every IP `error`, 'OverflowError: Python int too large to
    convert to C long', with exit 1: the argument, not a job, was what failed."""
    with pytest.raises(UsageError, match=r"^--rolling and --window must be at most 2,147,483,647 \(got "):
        predict_table(str(table), str(base_store), params=Params(**{knob: 10**20}))
    assert predict_table(str(table), str(base_store), params=Params(rolling=50))["status"].eq("insufficient_data").all()


@pytest.mark.parametrize("mode, points", [("rolling:8", 10), ("rolling:8", 60), ("mad:8", 10), ("mad:8", 60)])
def test_each_row_uses_the_std_of_the_residuals_of_the_scored_points_before_it(base_store, tmp_path, mode, points):
    """A --std run must judge each point by the 8 residuals (observed - predicted) of the scored points
    before it, or by the store's std where there are fewer: 60 values leave 36 scorable points, the
    first 8 without 8 before them. Over all 36, the residuals are the run's own rows; over the last
    10, the 8 before the first are scored but not written, so a store run over all 36 gives them,
    equal to float32 rounding (a batch of 18 windows against one of 36)."""
    ips = BASE_IPS[:2]
    data = {ip: series_for(ip, 60) for ip in ips}
    data[ips[0]][[45, 46]] += 40  # outliers inside the residual windows
    table = str(wide_table(tmp_path / "t.csv", data))
    every = predict_table(table, str(base_store), params=Params(points=60))
    frame = predict_table(table, str(base_store), params=Params(points=points, std=mode))
    assert list(frame.columns) == list(every.columns[:5]) + ["std_source"] + list(every.columns[5:])
    kind, count = mode.split(":")
    source, rel = (frame, 1e-12) if points == 60 else (every, 1e-6)
    for ip in ips:
        residuals = source[source["ip"] == ip].set_index("timestamp").eval("observed - predicted")
        store_std = every.loc[every["ip"] == ip, "std"].iloc[0]
        rows = frame[frame["ip"] == ip]
        assert len(rows) == min(points, 36) and (rows["status"] == "ok").all()
        for row in rows.itertuples():
            at = residuals.index.get_loc(row.timestamp)
            before = residuals.iloc[max(0, at - 8):at].to_numpy()
            if len(before) < 8:
                assert (row.std, row.std_source) == (store_std, "store")
                continue
            by_hand = np.std(before, ddof=1) if kind == "rolling" else 1.4826 * np.median(np.abs(before))
            assert row.std == pytest.approx(by_hand, rel=rel) and row.std_source == mode
            assert row.upper_4std == pytest.approx(row.predicted + 4 * row.std, rel=1e-12)
        pd.testing.assert_frame_equal(  # the points themselves are the store run's
            rows[["timestamp", "observed", "predicted"]].reset_index(drop=True),
            every[every["ip"] == ip][["timestamp", "observed", "predicted"]].tail(len(rows)).reset_index(drop=True))


def read_events(path):
    return pd.read_csv(path, dtype={c: str for c in ("ip", "start", "end", "peak_severity", "open")})


def test_events_file_collapses_runs_of_flagged_points_per_ip(store, tmp_path):
    """a: two runs of flags with normal points between them; b: flagged up to its last point (open),
    right after a's last flagged point in the file; c: none. Each raw jump lifts 5 smoothed values
    by 300; with a std of 60 nothing else is flagged, not even the prediction's echo of a jump."""
    from conftest import write_stds

    a, b, c = BASE_IPS[:3]
    write_stds(store, {ip: 60.0 for ip in BASE_IPS})
    data = {ip: series_for(ip) for ip in (a, b, c)}
    data[a][[30, 37]] += 1500
    data[b][38] += 1500
    table, out = wide_table(tmp_path / "t.csv", data), tmp_path / "a.csv"
    frame = predict_table(str(table), str(store), str(out), params=Params(points=12))
    events = read_events(Path(str(out) + ".events.csv"))
    flagged = frame[frame["anomaly"] == "true"].groupby("ip")["timestamp"].apply(list).to_dict()
    assert flagged == {a: [f"t{i:03d}" for i in [*range(30, 35), *range(37, 40)]],
                       b: ["t038", "t039"]}  # a's two runs touch: t034 then t037 is after a gap
    assert events[["ip", "start", "end", "points", "open"]].values.tolist() == [
        [a, "t030", "t034", 5, "false"], [a, "t037", "t039", 3, "true"], [b, "t038", "t039", 2, "true"]]
    for event in events.itertuples():
        rows = frame[(frame["ip"] == event.ip) & frame["timestamp"].between(event.start, event.end)]
        assert event.peak_sigma == pytest.approx(((rows.observed - rows.predicted).abs() / rows["std"]).max())
        assert event.peak_severity == ("critical" if (rows["severity"] == "critical").any() else "warning")
    assert frame.attrs["summary"]["events"] == events["peak_severity"].value_counts().to_dict()
    exact = pd.read_csv(Path(str(out) + ".events.csv"), dtype={"open": str}, float_precision="round_trip")
    assert frame.attrs["events"].values.tolist() == exact.values.tolist()  # the file's rows, from the same Rows
    predict_table(str(table), str(store), str(tmp_path / "one.csv"))
    assert not (tmp_path / "one.csv.events.csv").exists()  # the default one point per IP writes none
