"""Where a job runs and with which engine: lean workers (no TensorFlow, no scikit-learn) by default,
the TensorFlow pool for what they cannot run, and never a store's pickle on the lean path."""
import dataclasses
import shutil
from pathlib import Path

import joblib
import numpy as np
import pytest
from conftest import (
    BASE_IPS,
    FORMATS,
    Poison,
    read_out,
    run_cli,
    series_for,
    wide_table,
)
from leanprobe import run_and_list_modules

from batchpredict import RunOptions, predict_table
from batchpredict.commands.predict import Plan
from batchpredict.io.output import Rows
from batchpredict.io.store import Store
from batchpredict.io.table import Table
from batchpredict.job import Params
from batchpredict.runtime.executor import LocalExecutor


def jobs_of(store, tmp_path, ips, engine="auto"):
    table = Table(str(wide_table(tmp_path / "t.csv", {ip: series_for(ip) for ip in ips})))
    plan = Plan(table, Store(str(store)), Params(), engine=engine, rows=Rows(Params().sigmas))
    return [job for job in plan.jobs_of(table.chunks()) if job]


def test_a_lean_worker_never_imports_tensorflow_keras_or_sklearn(base_store, tmp_path):
    jobs = jobs_of(base_store, tmp_path, BASE_IPS[:4])
    assert {job.pool for job in jobs} == {"lean"}
    results = list(LocalExecutor(workers=2).run(run_and_list_modules, jobs))
    assert len(results) == 4
    for result in results:
        assert result.status == "ok" and result.engine == "numpy", result.error
        assert "heavy modules: " in result.debug[-1] and result.debug[-1].endswith(": "), result.debug[-1]


def test_the_tensorflow_pool_has_tensorflow(base_store, tmp_path):
    """The probe can fail: the same handler in the TensorFlow pool lists what that pool preloads."""
    [job] = jobs_of(base_store, tmp_path, BASE_IPS[:1], engine="keras")
    [result] = LocalExecutor(workers=1).run(run_and_list_modules, [job])
    assert result.status == "ok" and result.engine == "keras"
    assert "tensorflow" in result.debug[-1] and "sklearn" in result.debug[-1]


@pytest.mark.parametrize("trusted", [False, True])
def test_a_pickle_that_would_run_code_runs_only_with_trust_store_and_in_the_tensorflow_pool(store, tmp_path, trusted):
    """Without --trust-store the restricted unpickler refuses it before anything runs, in either pool,
    and the row names the global. With it, the lean pool still refuses it and the TensorFlow pool runs
    it once; the pickle writes down whether TensorFlow was loaded where it ran."""
    victim, marker = BASE_IPS[2], tmp_path / "ran-in"
    code = f"open({str(marker)!r}, 'a').write(str('tensorflow' in __import__('sys').modules) + ' ')"
    joblib.dump(Poison(code), store / "sc" / f"{victim}.save")
    table = wide_table(tmp_path / "t.csv", {ip: series_for(ip) for ip in BASE_IPS[:4]})
    done = run_cli("predict", "--data", table, "--models", store, "--out", tmp_path / "a.csv", "-v",
                   *["--trust-store"] * trusted)
    assert done.returncode == 1, done.stderr
    frame = read_out(tmp_path / "a.csv").set_index("ip")
    assert frame.loc[victim, "status"] == "load_error"
    assert (frame.drop(victim)["status"] == "ok").all()
    if not trusted:
        assert frame.loc[victim, "error"] == (f"scaler {victim}.save: pickle names builtins.eval, not a known "
                                              "scaler; read it only with --trust-store")
        assert not marker.exists()
        return
    assert "is a int" in frame.loc[victim, "error"]  # the pickle returns a number, not a scaler
    assert marker.read_text() == "True "
    assert f"{victim}: scaler {victim}.save: pickle names builtins.eval" in done.stderr


@pytest.fixture(scope="module")
def lambda_store(formats_store, tmp_path_factory):
    """The formats store's Keras 3 model with a Lambda layer, which the numpy engine does not run."""
    store = tmp_path_factory.mktemp("lambda") / "store"
    ip = "10.4.0.2"
    for sub, name in (("model", f"{ip}.keras"), ("sc", f"{ip}.save")):
        (store / sub).mkdir(parents=True)
        shutil.copy(formats_store[0] / sub / name, store / sub / name)
    (store / "std").mkdir()
    (store / "std" / "std.json").write_text('{"10.4.0.2": 0.5}')
    return store, wide_table(store.parent / "t.csv", {ip: series_for(ip)})


def test_a_lambda_layer_runs_with_keras_under_auto_only_in_a_trusted_store(lambda_store):
    store, table = lambda_store
    frame = predict_table(str(table), str(store), options=RunOptions(trust_store=True))
    assert frame["status"].tolist() == ["ok"] and frame.attrs["summary"]["engines"] == {"keras": 1}
    [row] = predict_table(str(table), str(store)).itertuples()
    assert row.status == "load_error" and row.error.startswith("10.4.0.2.keras: keras keras_version=3.")
    assert ": a Lambda layer would run code from the store file; load it only with --trust-store; numpy engine: " \
           "layer Lambda 'lambda' is not supported" in row.error, row.error


def test_an_unsupported_layer_is_a_load_error_under_engine_numpy(lambda_store, tmp_path):
    store, table = lambda_store
    done = run_cli("predict", "--data", table, "--models", store, "--out", tmp_path / "a.csv", "--engine", "numpy")
    assert done.returncode == 1, done.stderr
    [error] = read_out(tmp_path / "a.csv")["error"]
    assert "numpy engine: layer Lambda 'lambda' is not supported" in error, error


def test_engine_keras_and_savedmodels_are_planned_for_the_tensorflow_pool(formats_store, tmp_path):
    jobs = jobs_of(formats_store[0], tmp_path, list(FORMATS))
    pools = {job.ip: job.pool for job in jobs}
    assert pools == {ip: "full" if fmt.startswith(("keras2-savedmodel", "keras3-export", "tf-module")) else "lean"
                     for ip, (fmt, _) in FORMATS.items()}
    assert {job.pool for job in jobs_of(formats_store[0], tmp_path, list(FORMATS), "keras")} == {"full"}


def test_a_rerouted_job_keeps_why_for_the_debug_log(base_store, tmp_path):
    [job] = jobs_of(base_store, tmp_path, BASE_IPS[:1])
    moved = job.rerouted("10.1.0.1: scaler x.save: pickle names os.system")
    assert (moved.pool, moved.notes, dataclasses.replace(moved, pool="lean", notes=())) == \
        ("full", ("10.1.0.1: scaler x.save: pickle names os.system",), job)


@pytest.mark.parametrize("name", ["10.0.0.10.h5", "10.0.0.11.keras"])
def test_a_windows_prediction_is_the_same_whichever_windows_come_with_it(name):
    """Each window at its place in a block of its own (engine/products.py): BLAS rounds a product's columns by
    where they fall in the call and by its width, so batched as they come, a window's prediction depends on the
    batch (checked: this fails with at=None on an AVX-512 OpenBLAS), and a night continued from its history
    would differ from one run over the whole table."""
    from batchpredict.scoring import loading, prediction, scalers

    root = Path(__file__).resolve().parents[2] / "models"
    model = loading.load_model(str(root / "model" / name), "numpy", lean=True, trust=False)
    scaler = scalers.read_scaler(str(root / "sc" / (name.rsplit(".", 1)[0] + ".save")))
    inputs = np.random.default_rng(3).uniform(0, 2000, size=(700, 20))
    whole = prediction._predicted(model, scaler, inputs, at=np.arange(700) + 13)
    for start, count in [(0, 1), (5, 37), (100, 313), (333, 288), (650, 50), (1, 699), (3, 32), (19, 64)]:
        at = np.arange(start, start + count) + 13
        part = prediction._predicted(model, scaler, inputs[start:start + count], at=at)
        assert part.tobytes() == whole[start:start + count].tobytes(), (start, count)
    gaps = np.array([2, 3, 40, 41, 200])  # windows the history already held predictions of between them
    assert prediction._predicted(model, scaler, inputs[gaps], at=gaps + 13).tobytes() == whole[gaps].tobytes()