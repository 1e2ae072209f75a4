"""The algorithm end to end through real workers, against an independent numpy computation; the table
streamed in chunks."""
import json
import os
import subprocess
import sys
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pytest

from batchpredict import Params, RunOptions, UsageError, predict_table
from batchpredict import export, tablefile
from batchpredict.coordinator import Plan
from batchpredict.job import Job
from batchpredict.export import Rows
from batchpredict.store import Store
from batchpredict.table import Table
from batchpredict.worker import run_job
from conftest import BASE_IPS, read_out, series_for, weights_for, wide_table

REPO = Path(__file__).resolve().parents[1]

TIMING = ["duration_ms", "worker_pid", "worker_peak_rss_mib"]


def expected_row(values, weights, bias, scaler, std, rolling=5, window=20):
    raw = pd.Series(values, dtype=float)
    smoothed = raw.rolling(rolling).mean()[rolling - 1:].fillna(raw.mean()).to_numpy()
    inputs, observed = smoothed[-window - 1:-1], smoothed[-1]
    x = scaler.transform(inputs.reshape(-1, 1)).ravel().astype(np.float32)
    predicted = scaler.inverse_transform([[float(x @ np.float32(weights) + np.float32(bias))]])[0, 0]
    return observed, predicted


def check_against_numpy(frame, store, data):
    stds = pd.read_json(store / "std" / "std.json", typ="series")
    for i, ip in enumerate(BASE_IPS):
        row = frame.set_index("ip").loc[ip]
        scaler = joblib.load(store / "sc" / f"{ip}.save")
        observed, predicted = expected_row(data[ip], weights_for(ip), 0.01 * i, scaler, stds[ip])
        assert row["status"] == "ok", row["error"]
        assert row["observed"] == pytest.approx(observed, rel=1e-12)
        assert row["predicted"] == pytest.approx(predicted, rel=1e-5)
        assert row["upper_2std"] == pytest.approx(row["predicted"] + 2 * stds[ip])
        outside = not (row["lower_2std"] <= row["observed"] <= row["upper_2std"])
        assert row["anomaly"] == ("true" if outside else "false")


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
    monkeypatch.setattr(tablefile, "CHUNK_ROWS", 2)
    path = wide_table(tmp_path / "t.csv", {ip: series_for(ip) for ip in BASE_IPS})
    with open(path, "a") as fh:
        fh.write("10.9.9.9,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,"
                 "34,35,36,37,38,39,40,41\n")  # one field too many, at the very end
    table = Table(str(path))
    jobs = Plan(table, Store(str(base_store)), Params(), "auto", Rows(Params().sigmas)).jobs_of(table.chunks())
    assert next(jobs).ip == BASE_IPS[0]
    with pytest.raises(UsageError, match="Expected 41 fields in line 14, saw 42"):
        list(jobs)


def test_an_ip_found_again_after_its_job_ran_is_invalid_input(base_store, tmp_path, monkeypatch):
    monkeypatch.setattr(tablefile, "CHUNK_ROWS", 1)
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
        monkeypatch.setattr(tablefile, "CHUNK_ROWS", size)
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
        result = run_job(Job(ip, list(text.columns), values, str(store), f"model/{model}", f"sc/{ip}.save",
                             stds[ip]))
        row = export.row(result)
        got = frame.loc[ip]
        for column, cell in zip(export.columns((2.0, 4.0))[1:13], row[1:13]):
            assert got[column] == ("" if cell is None else repr(cell) if isinstance(cell, float) else str(cell)), \
                (ip, column)
