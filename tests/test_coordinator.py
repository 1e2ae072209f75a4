"""The algorithm end to end through real workers, against an independent numpy computation."""
import os
import subprocess
import sys

import joblib
import numpy as np
import pandas as pd
import pytest

from batchpredict import Params, RunOptions, predict_table
from conftest import BASE_IPS, series_for, weights_for, wide_table


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
