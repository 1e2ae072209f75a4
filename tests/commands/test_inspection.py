"""`batchpredict store check` on a mixed store: every format, and every way an IP can be unusable."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import joblib
import pytest
from conftest import BROKEN, FORMATS, RIGHT_OUTPUT, WRONG_OUTPUT, run_cli

from batchpredict import RunOptions
from batchpredict.commands.inspection import COLUMNS, check_store

REPO = Path(__file__).resolve().parents[2]

# ip -> (status, format, keras major, runtime, timesteps, problem fragment)
EXPECTED = {
    "10.4.0.1": ("ok", "h5", "3.", "keras", "20", "-"),
    "10.4.0.2": ("ok", "keras", "3.", "keras", "20", "-"),
    "10.4.0.3": ("ok", "h5", "2.", "tf_keras", "20", "-"),
    "10.4.0.4": ("ok", "savedmodel", "2.", "tf.saved_model signature serving_default", "12", "-"),
    "10.4.0.5": ("ok", "savedmodel", "-", "tf.saved_model signature serving_default", "20", "-"),
    "10.4.0.6": ("ok", "savedmodel", "-", "tf.saved_model signature predict", "20", "-"),
    "10.4.0.7": ("ok", "savedmodel", "-", "tf.saved_model __call__", "20", "-"),
    "10.4.0.8": ("ok", "keras", "2.", "tf_keras", "variable (--window 20)", "-"),
    "10.4.1.1": ("load_error", "-", "-", "-", "-", "weights-only HDF5"),
    "10.4.1.2": ("load_error", "keras", "3.", "keras", "-", "input shape (None, 20) is not (batch, timesteps, 1)"),
    "10.4.1.3": ("load_error", "-", "-", "-", "-", "neither HDF5 nor a .keras zip"),
    "10.4.0.1-twice": ("load_error", "-", "-", "-", "-", "ambiguous model: model/10.4.0.1-twice.h5 and "
                                                         "model/10.4.0.1-twice.keras both exist"),
    "no-scaler": ("no_model", "h5", "3.", "keras", "20", "no scaler sc/no-scaler.save"),
    "only-std": ("no_model", "-", "-", "-", "-", "no model in model/"),
    "bad.std": ("load_error", "h5", "3.", "keras", "20", "std/std.json entry is not a finite non-negative number"),
    "bad id": ("invalid_input", "-", "-", "-", "-", "invalid IP id 'bad id'"),
}


@pytest.fixture
def mixed_store(formats_store, tmp_path):
    store = shutil.copytree(formats_store[0], tmp_path / "store")
    model, sc = store / "model", store / "sc"
    shutil.copy(model / "10.4.0.1.h5", model / "10.4.0.1-twice.h5")
    shutil.copy(model / "10.4.0.2.keras", model / "10.4.0.1-twice.keras")
    shutil.copy(sc / "10.4.0.1.save", sc / "10.4.0.1-twice.save")
    shutil.copy(model / "10.4.0.1.h5", model / "no-scaler.h5")
    for ip in ("bad.std", "bad id"):
        shutil.copy(model / "10.4.0.1.h5", model / f"{ip}.h5")
        shutil.copy(sc / "10.4.0.1.save", sc / f"{ip}.save")
    stds = json.loads((store / "std" / "std.json").read_text())
    stds.update({"10.4.0.1-twice": 1.0, "no-scaler": 1.0, "only-std": 1.0, "bad.std": "n/a", "bad id": 1.0})
    (store / "std" / "std.json").write_text(json.dumps(stds))
    return store


def parse(stdout: str) -> dict[str, dict[str, str]]:
    lines = stdout.splitlines()
    starts = [lines[0].index(c) for c in COLUMNS]
    cells = [[line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])] for line in lines[1:]]
    return {row[0]: dict(zip(COLUMNS, row)) for row in cells}


def test_store_check_reports_every_ip_of_a_mixed_store(mixed_store):
    done = run_cli("store", "check", "--models", mixed_store, "--workers", "2", "--trust-store")
    assert done.returncode == 1, done.stderr
    rows = parse(done.stdout)
    assert set(rows) == set(EXPECTED) and set(FORMATS) | set(BROKEN) <= set(EXPECTED)
    for ip, (status, fmt, major, runtime, timesteps, problem) in EXPECTED.items():
        row = rows[ip]
        assert (row["status"], row["format"], row["runtime"], row["timesteps"]) == (status, fmt, runtime, timesteps), row
        assert row["keras"].startswith(major) and problem in row["problems"], row
    assert rows["10.4.0.3"]["model"] == "model/10.4.0.3.h5" and rows["10.4.0.4"]["model"] == "model/10.4.0.4"
    assert rows["10.4.0.6"]["scaler"].startswith("Pipeline pickled with scikit-learn ")
    assert "16 IPs" in done.stderr and "ok 8" in done.stderr and "Traceback" not in done.stderr


def test_a_usable_store_checks_all_ok(usable_store):
    rows = check_store(str(usable_store), RunOptions(trust_store=True))
    assert [r.ip for r in rows] == sorted(FORMATS)
    assert all(r.status == "ok" and not r.error for r in rows), [r.error for r in rows]


def test_store_check_says_which_engine_and_pool_each_ip_gets(mixed_store):
    rows = {r.ip: r for r in check_store(str(mixed_store), RunOptions(trust_store=True))}
    for ip in ("10.4.0.1", "10.4.0.3", "10.4.0.8"):
        assert (rows[ip].engine, rows[ip].pool) == ("numpy", "lean"), ip
    assert rows["10.4.0.2"].engine == "keras (numpy engine: layer Lambda 'lambda' is not supported by the numpy engine)"
    assert rows["10.4.0.5"].engine.startswith("keras (numpy engine: a SavedModel directory")
    assert rows["10.4.0.5"].pool == "tensorflow (keras engine)"


@pytest.mark.parametrize("verify", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_model_that_does_not_give_one_value_per_window_fails_the_check(wrong_output_store, verify):
    rows = {r.ip: r for r in check_store(str(wrong_output_store), verify=verify)}
    assert rows[RIGHT_OUTPUT].status == "ok", rows[RIGHT_OUTPUT].error
    for ip, (_, message) in WRONG_OUTPUT.items():
        assert rows[ip].status == "load_error" and message in rows[ip].error, rows[ip].error
        assert not rows[ip].verify


def test_a_store_of_files_the_numpy_engine_reads_is_checked_without_tensorflow():
    """As predict runs it: lean workers only, the TensorFlow forkserver never started (seconds saved)."""
    code = ("from batchpredict.commands.inspection import check_store; from batchpredict.runtime import forkserver; "
            "rows = check_store('models'); print(len(rows), {r.status.value for r in rows}, sorted(forkserver._servers))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["32", "{'ok'}", "['lean']"]


@pytest.fixture
def usable_store(formats_store, tmp_path):
    store = shutil.copytree(formats_store[0], tmp_path / "store")
    for ip in BROKEN:
        next((store / "model").glob(ip + ".*")).unlink()
        (store / "sc" / f"{ip}.save").unlink()
    (store / "std" / "std.json").write_text(json.dumps({ip: 1.0 for ip in FORMATS}))
    return store


@pytest.mark.slow
def test_verify_runs_both_engines_and_enforces_the_tolerance(usable_store):
    # float32 arithmetic in two implementations never agrees to 1e-12, and always to 1e-5
    done = run_cli("store", "check", "--models", usable_store, "--verify", "--tolerance", "1e-12", "--trust-store")
    assert done.returncode == 1, done.stderr
    rows = parse(done.stdout)
    for ip in ("10.4.0.1", "10.4.0.3", "10.4.0.8"):
        assert 0 < float(rows[ip]["verify"]) < 1e-5, rows[ip]
        assert rows[ip]["status"] == "ok"
    assert rows["10.4.0.2"]["verify"] == "keras only"
    assert "verified 3, largest difference " in done.stderr
    assert "3 over 1e-12: 10.4.0.1, 10.4.0.3, 10.4.0.8" in done.stderr, done.stderr


@pytest.mark.slow
def test_an_untrusted_store_check_names_what_a_trusted_run_would_need(usable_store):
    """Without --trust-store the Lambda model is a load_error that says how to allow it, a scaler that
    would run code is one naming its global, nothing runs, and the last line counts them."""
    from conftest import Poison

    marker = usable_store / "ran"
    joblib.dump(Poison(f"open({str(marker)!r}, 'w')"), usable_store / "sc" / "10.4.0.1.save")
    done = run_cli("store", "check", "--models", usable_store)
    assert done.returncode == 1, done.stderr
    rows = parse(done.stdout)
    assert rows["10.4.0.2"]["status"] == "load_error"
    assert "a Lambda layer would run code from the store file; load it only with --trust-store" in \
        rows["10.4.0.2"]["problems"]
    assert rows["10.4.0.1"]["status"] == "load_error" and rows["10.4.0.1"]["problems"] == (
        "scaler 10.4.0.1.save: pickle names builtins.eval, not a known scaler; read it only with --trust-store")
    assert not marker.exists()
    assert "2 need --trust-store: 10.4.0.1, 10.4.0.2" in done.stderr, done.stderr
