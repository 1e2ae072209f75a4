"""Training in isolated workers: a learnable series, crash safety of the store, determinism."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import psutil
import pytest
from conftest import read_out, run_cli, wide_table

from batchpredict.commands.train import REPORT_COLUMNS, TrainResult, ip_seed, merge_stds, windows, write_report
from batchpredict.result import Status
from batchpredict.scoring.features import rolling_series

IPS = ["10.9.0.1", "10.9.0.2", "2001:db8::9"]
EPOCHS = "12"


def sine(ip: str, length: int = 360) -> np.ndarray:
    rng = np.random.default_rng(sum(map(ord, ip)))
    t = np.arange(length)
    return 500 + 200 * np.sin(2 * np.pi * t / 24 + rng.uniform(0, 6)) + rng.normal(0, 10, length)


# Training LSTMs takes minutes of CPU: the tests that train are slow (CI runs them); the default suite
# keeps the ones that do not.
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    history = wide_table(tmp / "history.csv", {ip: sine(ip) for ip in IPS})
    store = tmp / "store"
    done = run_cli("train", "--data", history, "--models", store, "--epochs", EPOCHS, "--seed", "3", timeout=600)
    assert done.returncode == 0, done.stderr
    return tmp, history, store


@pytest.mark.slow
def test_training_fills_the_weights_cache_so_the_first_night_hits(trained):
    """Each model train wrote has its weights cache entry, under the file's sha256 (scoring/engine/cache.py).
    First in this module: a predict on the store would fill the cache too."""
    from batchpredict.scoring.engine import cache

    _, _, store = trained
    models = sorted((store / "model").iterdir())
    assert len(models) == len(IPS)
    for model in models:
        entry = Path(cache.directory()) / (hashlib.sha256(model.read_bytes()).hexdigest() + ".weights")
        assert entry.read_bytes().startswith(cache.MAGIC), model.name


@pytest.mark.slow
def test_trained_store_predicts_ok_and_beats_naive(trained):
    tmp, history, store = trained
    report = pd.read_csv(store / "train_report.csv")
    assert list(report["ip"]) == IPS and (report["status"] == "ok").all()
    table = wide_table(tmp / "tonight.csv", {ip: sine(ip, 400)[-60:] for ip in IPS})
    done = run_cli("predict", "--data", table, "--models", store, "--out", tmp / "a.csv")
    assert done.returncode == 0, done.stderr
    assert (read_out(tmp / "a.csv")["status"] == "ok").all()
    from batchpredict.io import (
        manifest,  # train sealed what it wrote: a byte changed since is a mismatch
    )
    assert sorted(manifest.read(str(store))) == sorted(IPS)
    model = next((store / "model").glob(f"{IPS[0]}.*"))
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0x01
    original = model.read_bytes()
    model.write_bytes(bytes(data))
    try:
        done = run_cli("predict", "--data", table, "--models", store, "--out", tmp / "b.csv")
    finally:
        model.write_bytes(original)
    flipped = read_out(tmp / "b.csv").set_index("ip").loc[IPS[0]]
    assert done.returncode == 1 and flipped["error"].startswith(f"checksum mismatch: {model.relative_to(store)}")
    for row in report.itertuples():
        scaler = joblib.load(store / "sc" / f"{row.ip}.save")
        scaled = scaler.transform(rolling_series(sine(row.ip), 5).reshape(-1, 1)).ravel()
        x, y = windows(scaled, 20)
        held = int(round(len(x) * 0.2))
        naive = float(np.mean((x[-held:, -1, 0] - y[-held:, 0]) ** 2))
        assert row.holdout_loss < naive, (row.ip, row.holdout_loss, naive)


@pytest.mark.slow
def test_same_seed_same_std(trained, tmp_path):
    _, history, store = trained
    again = tmp_path / "store"
    done = run_cli("train", "--data", history, "--models", again, "--epochs", EPOCHS, "--seed", "3",
                   "--ips", IPS[0], timeout=600)
    assert done.returncode == 0, done.stderr
    first = json.loads((store / "std" / "std.json").read_text())
    second = json.loads((again / "std" / "std.json").read_text())
    assert second == {IPS[0]: first[IPS[0]]}


@pytest.mark.slow
def test_killed_trainer_leaves_the_store_intact(trained, tmp_path):
    _, history, store = trained
    stds = (store / "std" / "std.json").read_text()
    models = {p.name: p.read_bytes() for p in (store / "model").iterdir()}
    run = subprocess.Popen([sys.executable, "-m", "batchpredict.cli", "train", "--data", str(history), "--models",
                            str(store), "--epochs", "50", "--workers", "1", "--retries", "0", "--ips", IPS[0]],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    coordinator = psutil.Process(run.pid)
    deadline = time.monotonic() + 120
    victim = None
    while victim is None and time.monotonic() < deadline:
        time.sleep(0.2)
        victim = next((d for d in coordinator.children(recursive=True) if d.ppid() != run.pid), None)
    assert victim is not None, "no trainer seen"
    time.sleep(1.0)  # into the fit
    victim.kill()
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 1 and "crashed" in stderr
    assert (store / "std" / "std.json").read_text() == stds
    assert {p.name: p.read_bytes() for p in (store / "model").iterdir()} == models
    report = pd.read_csv(store / "train_report.csv").set_index("ip")
    assert report.loc[IPS[0], "status"] == "crashed" and report.loc[IPS[1], "status"] == "ok"


def test_merge_stds_keeps_other_entries(tmp_path):
    merge_stds(str(tmp_path), {"a": 1.0})
    merge_stds(str(tmp_path), {"b": 2.0})
    merge_stds(str(tmp_path), {"a": 3.0})
    assert json.loads((tmp_path / "std" / "std.json").read_text()) == {"a": 3.0, "b": 2.0}


@pytest.mark.parametrize(("old", "why"), [
    (b"ip,status\n\xff\xfe,ok\n", "is unreadable"),                  # not UTF-8: a traceback after training
    (b"ip,status\nb,ok\n", "has another header"),                     # its columns are not this report's
    (",".join(REPORT_COLUMNS).encode() + b"\nb,ok\nc" + b",x" * 9 + b"\n", "1 rows without the header's 10"),
])
def test_a_damaged_old_report_is_a_warning_and_no_row_of_it_shifts(tmp_path, caplog, old, why):
    report = tmp_path / "train_report.csv"
    report.write_bytes(old)
    write_report([TrainResult(ip="a", status=Status.OK, model="model/a.h5")], str(report))
    rows = pd.read_csv(report, dtype=str, keep_default_na=False)
    assert list(rows.columns) == REPORT_COLUMNS and "a" in set(rows["ip"]) and "b" not in set(rows["ip"])
    assert why in caplog.text
    if "rows without" in why:  # the whole old row is kept
        assert rows.set_index("ip").loc["c", "status"] == "x"


def test_ip_seed_is_stable_and_distinct():
    assert ip_seed(1, "a") == ip_seed(1, "a") != ip_seed(1, "b") != ip_seed(2, "a")


def test_bad_arguments_exit_2(tmp_path):
    table = wide_table(tmp_path / "h.csv", {"a": sine("a", 60)})
    done = run_cli("train", "--data", table, "--models", tmp_path / "s", "--ips", "zz")
    assert done.returncode == 2 and "not in" in done.stderr


class _Weights:
    """Stands in for a Keras model at the save: bytes, or the error a full disk gives."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    def save(self, path: str) -> None:
        if self.error:
            raise self.error
        Path(path).write_bytes(b"new model")


def _saved(store: Path, model: _Weights) -> str:
    from sklearn.preprocessing import MinMaxScaler

    from batchpredict.commands.train import TrainJob, _save

    job = TrainJob(ip="10.0.0.1", values=[], store=str(store))
    return _save(job, model, MinMaxScaler().fit([[0.0], [1.0]]), std=2.5, scaler_path="sc/10.0.0.1.save")


def test_an_ip_cut_off_between_its_artefacts_is_a_load_error_until_trained_again(tmp_path):
    from batchpredict.errors import JobError
    from batchpredict.io.store import Store

    (tmp_path / "std").mkdir()
    (tmp_path / "std" / "std.json").mkdir()  # its std cannot be written: the run stops after model and scaler
    with pytest.raises(OSError):
        _saved(tmp_path, _Weights())
    assert (tmp_path / "model" / ".10.0.0.1.saving").exists()
    (tmp_path / "std" / "std.json").rmdir()
    merge_stds(str(tmp_path), {"10.0.0.1": 1.0})  # the old std, beside the new model and scaler
    with pytest.raises(JobError, match=r"training run stopped while writing .*train it again") as caught:
        Store(str(tmp_path)).artefacts("10.0.0.1")
    assert caught.value.status == "load_error"
    assert _saved(tmp_path, _Weights()) == "model/10.0.0.1.h5"
    assert Store(str(tmp_path)).artefacts("10.0.0.1").std == 2.5
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["10.0.0.1.h5"]


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"),
                                   RuntimeError("Can't destroy cache")], ids=["ENOSPC", "h5py"])
def test_a_full_disk_while_saving_is_the_ips_error_and_leaves_its_old_artefacts(tmp_path, monkeypatch, error):
    from batchpredict.commands import train
    from batchpredict.errors import JobError

    if isinstance(error, RuntimeError):  # h5py's words for a full disk: the disk itself says it is full
        error.__context__ = None
        monkeypatch.setattr(train, "_ROOM", 2**62)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "10.0.0.1.h5").write_bytes(b"old model")
    with pytest.raises(JobError, match="^no space left on device writing the model, scaler and std of 10.0.0.1"):
        _saved(tmp_path, _Weights(error))
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["10.0.0.1.h5"]  # no marker: nothing replaced
    assert (tmp_path / "model" / "10.0.0.1.h5").read_bytes() == b"old model"


@pytest.mark.parametrize("case", ["a file as the store", "no IP in --ips"])
def test_a_store_that_is_a_file_or_an_empty_ips_list_is_exit_2(tmp_path, case):
    table = wide_table(tmp_path / "h.csv", {"a": sine("a", 60)})
    (tmp_path / "file").write_text("")
    extra = ["--models", tmp_path / "file"] if case == "a file as the store" else ["--models", tmp_path / "s",
                                                                                 "--ips", ",,"]
    done = run_cli("train", "--data", table, *extra)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("values, extra", [(3, []), (60, ["--window", "99999999999999999999"])],
                         ids=["fewer values than --rolling", "a --window past the series"])
def test_a_series_too_short_to_train_is_insufficient_data_not_an_error(tmp_path, values, extra):
    """A long table's IP of 3 values smoothed to nothing and its job ended `error` in the scaler ("Found array
    with 0 sample(s) ... MinMaxScaler"); a --window past every series, `error` in numpy ("Maximum allowed
    dimension exceeded") where the series had too few values for it."""
    table = tmp_path / "h.csv"
    table.write_text("ip,timestamp,value\n" + "".join(f"10.0.0.1,{i},{v}\n" for i, v in enumerate(sine("a", values))))
    done = run_cli("train", "--data", table, "--models", tmp_path / "s", "--epochs", "1", *extra)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    report = pd.read_csv(tmp_path / "s" / "train_report.csv")
    assert report["status"].tolist() == ["insufficient_data"], report.to_dict("records")
    assert report["error"][0].startswith(f"{values} values are too few to train with rolling 5, window ")


@pytest.mark.slow
def test_a_stopped_train_reports_and_seals_the_ips_it_trained(tmp_path):
    """SIGTERM ended train at once and without a word (exit 143, nothing on stderr), before its report and
    manifest were written: an IP it had retrained kept its old manifest entry, and the next night's row was a
    checksum mismatch, as if someone had changed its files."""
    from batchpredict.io import manifest

    first, *rest = [f"10.9.1.{i}" for i in range(4)]
    history = wide_table(tmp_path / "h.csv", {ip: sine(ip, 80) for ip in [first, *rest]})
    store = tmp_path / "store"
    done = run_cli("train", "--data", history, "--models", store, "--epochs", "1", "--ips", first, timeout=600)
    assert done.returncode == 0, done.stderr
    stds = store / "std" / "std.json"
    before = stds.read_bytes()  # the first IP's std is its last file written: then its result goes back at once
    trainer = subprocess.Popen([sys.executable, "-m", "batchpredict.cli", "train", "--data", str(history), "--models",
                                str(store), "--epochs", "1", "--seed", "5", "--workers", "1"],
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while stds.read_bytes() == before and trainer.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1)  # the next IP's worker is training: seconds of TensorFlow
    trainer.terminate()
    stderr = trainer.communicate(timeout=120)[1]
    assert trainer.returncode == 143, stderr
    report = pd.read_csv(store / "train_report.csv")
    assert stderr.splitlines()[-1] == (f"batchpredict: stopped by SIGTERM; the {len(report)} IPs answered before it "
                                       f"are in {store}/train_report.csv and manifest.json; train the others again")
    assert report["ip"].iloc[0] == first and len(report) < 4 and (report["status"] == "ok").all()
    entries = json.loads((store / manifest.FILE).read_text())["ips"]
    assert entries[first] == manifest.entry(str(store), f"model/{first}.h5", f"sc/{first}.save",
                                            json.loads(stds.read_text())[first])


@pytest.mark.parametrize("kind", ["fifo", "folder", "link"])
@pytest.mark.parametrize("which", ["train_report.csv", "std/std.json.lock"])
def test_a_report_or_lock_that_is_no_file_of_its_own_is_exit_2_before_any_ip_trains(tmp_path, which, kind):
    """train read and replaced train_report.csv once every IP had trained: a FIFO there hung it for good, a folder
    was an IsADirectoryError traceback, and neither run wrote the manifest entries of what it had trained. A folder
    as std.json's lock failed every IP after its model and scaler were replaced: each a load_error until trained
    again."""
    import os

    table = wide_table(tmp_path / "h.csv", {"10.9.2.1": sine("a", 60)})
    path = tmp_path / "s" / which
    path.parent.mkdir(parents=True)
    {"fifo": lambda: os.mkfifo(path), "folder": path.mkdir, "link": lambda: path.symlink_to(table)}[kind]()
    done = run_cli("train", "--data", table, "--models", tmp_path / "s", "--epochs", "1", timeout=90)
    described = {"fifo": "a FIFO or a device", "folder": "a folder", "link": "a link"}[kind]
    what = "a report" if which == "train_report.csv" else "a lock"
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"batchpredict: {path} is {described}, not {what}: train writes that file itself; remove it\n"
    assert not list((tmp_path / "s").glob("model/*")) and os.path.lexists(path)
