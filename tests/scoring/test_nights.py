"""scoring/nights.py and `predict --history`: nights continued from the history equal one stateless run over
the whole table, however a night ends, on the bundled LSTMs and their example series."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import psutil
import pytest
from conftest import POISONS, Poison, read_out, run_cli

from batchpredict.io import history, manifest
from batchpredict.job import Job, Params
from batchpredict.scoring import nights

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "history.csv"
MODELS = ROOT / "models"
IPS = ["10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14", "10.0.0.15"]
TIMING = ["attempts", "duration_ms", "worker_pid", "worker_peak_rss_mib"]
# A small ensemble (hourly buckets), so that the history is cut to what the rules need within the example.
ALERT = "ensemble:window=48,centre=24,rest=8,span=48,day=24,week=96,tolerance=2"
SETTINGS = ["--std", "rolling:24", "--alert", ALERT, "--workers", "2"]
BEFORE = 30  # buckets of each night's table before the first it scores: more than --window + --rolling


def job(labels: list[str], values: list[float]) -> Job:
    return Job(ip="10.0.0.1", labels=labels, values=values, store=str(MODELS), model="model/10.0.0.10.h5",
               scaler="sc/10.0.0.10.save", std=1.0, std_mode=("store", 0), method=None)


def kept(folder: Path, labels: list[str], values: list[float], predicted: int = 0) -> None:
    history.write(history.path_of(str(folder), "10.0.0.1"),
                  history.History(labels=labels, values=np.asarray(values, float), before=(10.0, 4), key="k",
                                  predicted=np.arange(predicted, dtype=float)))


HOURS = [f"2026-11-01T{h:02d}:00" for h in range(24)]


def labels_of(joined: nights.Joined) -> list[str]:
    """Every label of the joined values: the history's before the table, then the table's."""
    if joined.encoded is None:
        return joined.labels
    assert [label.decode() for label in joined.encoded[joined.offset:].tolist()] == joined.labels
    return [label.decode() for label in joined.encoded.tolist()]


def test_the_history_before_the_tables_first_label_comes_first_and_the_table_wins(tmp_path):
    kept(tmp_path, HOURS[:10], list(range(10)), predicted=6)
    joined = nights.join(job(HOURS[6:12], [60.0] * 6), str(tmp_path), "k")
    assert labels_of(joined) == HOURS[:12] and joined.offset == 6 and not joined.note
    assert joined.values.tolist() == [0, 1, 2, 3, 4, 5] + [60.0] * 6 and joined.before == (10.0, 4)
    assert joined.stored.tolist() == [0.0, 1.0]  # the predictions of buckets 4 and 5, before the table's first


def test_predictions_of_another_model_are_not_reused(tmp_path):
    kept(tmp_path, HOURS[:10], list(range(10)), predicted=6)
    joined = nights.join(job(HOURS[6:12], [60.0] * 6), str(tmp_path), "another key")
    assert joined.offset == 6 and joined.stored is None


def test_a_table_one_step_after_the_history_continues_it(tmp_path):
    kept(tmp_path, HOURS[:10], list(range(10)))
    joined = nights.join(job(HOURS[10:12], [1.0, 2.0]), str(tmp_path), "k")
    assert joined.offset == 10 and labels_of(joined) == HOURS[:12]


@pytest.mark.parametrize(("labels", "why"), [
    (HOURS[12:14], "do not line up"),                       # a gap of two hours
    (["a", "b"], "do not line up"),                         # labels that are not times, and not the history's
    ([HOURS[6], "2026-11-01T07:30"], "do not line up"),    # the same first bucket, then another step
])
def test_a_history_of_another_series_is_no_history(tmp_path, labels, why):
    kept(tmp_path, HOURS[:10], list(range(10)))
    joined = nights.join(job(labels, [1.0, 2.0]), str(tmp_path), "k")
    assert joined.offset == 0 and labels_of(joined) == labels and why in joined.note


def test_a_table_reaching_back_before_the_history_is_read_alone_and_silently(tmp_path):
    kept(tmp_path, HOURS[5:10], list(range(5)))
    joined = nights.join(job(HOURS[:12], [1.0] * 12), str(tmp_path), "k")
    assert joined.offset == 0 and joined.before is None and not joined.note


def test_the_history_of_another_ip_is_no_history_though_its_labels_line_up(tmp_path):
    """A file copied or linked under another IP's name: a wide table's IPs share their labels, so only the name in
    the file tells its values are not this IP's."""
    other = history.History(labels=HOURS[:10], values=np.arange(10.0), before=(10.0, 4), key="k",
                            predicted=np.arange(6.0), ip="10.0.0.2")
    history.write(history.path_of(str(tmp_path), "10.0.0.1"), other)
    joined = nights.join(job(HOURS[6:12], [60.0] * 6), str(tmp_path), "k")
    assert joined.offset == 0 and joined.before is None and joined.values.tolist() == [60.0] * 6
    assert joined.note.endswith("it is the history of 10.0.0.2")
    history.write(history.path_of(str(tmp_path), "10.0.0.1"), replace(other, ip="10.0.0.1"))
    assert nights.join(job(HOURS[6:12], [60.0] * 6), str(tmp_path), "k").offset == 6  # its own: joined


def test_a_history_of_no_values_is_no_history_not_an_error(tmp_path):
    kept(tmp_path, [], [])
    joined = nights.join(job(HOURS[:2], [1.0, 2.0]), str(tmp_path), "k")
    assert joined.offset == 0 and joined.values.tolist() == [1.0, 2.0] and "holds no values" in joined.note


def test_leave_names_the_ip_in_its_file(tmp_path):
    joined = nights.Joined(labels=HOURS[:2], values=np.array([1.0, 2.0]), before=None)
    nights.leave(job(HOURS[:2], [1.0, 2.0]), str(tmp_path), joined, keep=2, predicted=np.array([1.0]), current="k")
    assert history.read(history.path_of(str(tmp_path), "10.0.0.1")).ip == "10.0.0.1"


def test_leave_keeps_the_last_values_with_the_running_sum_of_those_before_them(tmp_path):
    values = np.array([1.0, np.nan, 0.1, 0.2, 0.3, 4.0])
    joined = nights.Joined(labels=HOURS[:6], values=values, before=(0.7, 2))
    nights.leave(job(HOURS[:6], list(values)), str(tmp_path), joined, keep=2, predicted=np.array([9.0, 8.0, 7.0]),
                 current="k")
    left = history.read(history.path_of(str(tmp_path), "10.0.0.1"))
    assert left.labels.tolist() == [label.encode() for label in HOURS[4:6]] and left.values.tolist() == [0.3, 4.0] and left.predicted.tolist() == [8.0, 7.0]
    assert left.before == (float(np.cumsum([0.7, 1.0, 0.1, 0.2])[-1]), 5)  # summed in order, NaN not counted


def test_the_key_changes_with_the_model_file_the_window_and_the_engine(tmp_path):
    store = Path(shutil.copytree(MODELS, tmp_path / "store"))
    one = Job(ip="10.0.0.10", labels=[], values=[], store=str(store), model="model/10.0.0.10.h5",
              scaler="sc/10.0.0.10.save", std=1.0, std_mode=("store", 0), method=None, params=Params())
    first = nights.key(one, window=20, engine="numpy")
    assert first == nights.key(one, window=20, engine="numpy")
    # The model's digest as the weights cache computed it (LoadedModel.digest): the same key, not hashed again.
    assert nights.key(one, window=20, engine="numpy", model=manifest.digest(str(store / one.model))) == first
    assert len({first, nights.key(one, window=12, engine="numpy"), nights.key(one, window=20, engine="keras")}) == 3
    shutil.copy(store / "model" / "10.0.0.12.h5", store / "model" / "10.0.0.10.h5")  # retrained
    assert nights.key(one, window=20, engine="numpy") != first


# ----------------------------------------------------------------------------------- nights, end to end

@pytest.fixture(scope="module")
def example() -> pd.DataFrame:
    frame = pd.read_csv(EXAMPLE, dtype=str, keep_default_na=False)
    return frame[frame["ip"].isin(IPS)].reset_index(drop=True)


def night(example: pd.DataFrame, path: Path, first: int, end: int) -> Path:
    example[["ip", *example.columns[1 + first:1 + end]]].to_csv(path, index=False)
    return path


def predict(*args: object) -> subprocess.CompletedProcess:
    return run_cli("predict", "--models", MODELS, *SETTINGS, "-q", *map(str, args))


def rows(path: Path) -> pd.DataFrame:
    return read_out(path).drop(columns=TIMING)


def same(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    """The same rows, every float to the bit (pandas compares them to 1e-5 unless told)."""
    pd.testing.assert_frame_equal(got, expected, check_exact=True)


def stateless(example: pd.DataFrame, tmp: Path, end: int, since: str) -> pd.DataFrame:
    """What one run sees on a table that holds every bucket since the history began."""
    table = night(example, tmp / f"whole-{end}.csv", 0, end)
    done = predict("--data", table, "--out", tmp / f"whole-{end}.out.csv", "--since", since)
    assert done.returncode == 0, done.stderr
    return rows(tmp / f"whole-{end}.out.csv")


def start(*args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "batchpredict.cli", "predict", "--models", MODELS, *SETTINGS,
                             *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def journaled(out: Path) -> int:
    journal = Path(f"{out}.journal")
    return max(0, len(journal.read_text().splitlines()) - 1) if journal.exists() else 0


def wait_for(predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


@pytest.mark.slow
def test_five_nights_from_the_history_equal_one_run_over_the_whole_table(example, tmp_path):
    """The first night fills the history; then nights of a day each: one run twice, one stopped by SIGTERM
    and resumed, one whose coordinator is killed with SIGKILL and resumed, one after an IP's model was
    retrained, and one with a torn history file and another IP's file of another series."""
    labels = list(example.columns[1:])
    folder = tmp_path / "history"
    first = predict("--data", night(example, tmp_path / "n0.csv", 0, 200), "--out", tmp_path / "n0.out.csv",
                    "--points", "40", "--history", folder)
    assert first.returncode == 0, first.stderr
    assert sorted(p.name for p in folder.glob("*.history")) == [f"{ip}.history" for ip in IPS]

    def tonight(end: int, tag: str) -> tuple[Path, Path, str]:
        since = labels[end - 24 - 1]
        return night(example, tmp_path / f"{tag}.csv", end - 24 - BEFORE, end), tmp_path / f"{tag}.out.csv", since

    # Night 1, then the same night again: the history it wrote holds tonight, and changes nothing.
    table, out, since = tonight(224, "n1")
    for again in (False, True):
        done = run_cli("predict", "--models", MODELS, *SETTINGS, "--data", table, "--out", out, "--since", since,
                       "--history", folder, "-v")
        assert done.returncode == 0, done.stderr
        reused = re.findall(r"history: (\d+) values before the table, (\d+) of (\d+) predictions", done.stderr)
        assert len(reused) == len(IPS)
        # The night before's predictions, up to its last bucket; a rerun holds tonight's too, and computes none.
        assert all(int(kept) == int(of) if again else 0 < int(kept) < int(of) for _, kept, of in reused)
        same(rows(out), stateless(example, tmp_path, 224, since))
    sizes = [p.stat().st_size for p in folder.glob("*.history")]
    assert max(sizes) < 64 * 1024

    # Night 2, stopped by SIGTERM while its last IP's scaler hangs, then resumed.
    table, out, since = tonight(248, "n2")
    store = Path(shutil.copytree(MODELS, tmp_path / "store"))
    scaler = store / "sc" / f"{IPS[-1]}.save"
    real = scaler.read_bytes()
    joblib.dump(Poison(POISONS["hang"]), scaler)
    run = subprocess.Popen([sys.executable, "-m", "batchpredict.cli", "predict", "--models", store, *SETTINGS[:4],
                            "--workers", "1", "--trust-store", "--data", table, "--out", out, "--since", since,
                            "--history", folder], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: journaled(out) >= 3)
    run.send_signal(signal.SIGTERM)
    assert run.communicate(timeout=60) and run.returncode == 128 + signal.SIGTERM
    scaler.write_bytes(real)
    done = run_cli("predict", "--models", store, *SETTINGS, "--data", table, "--out", out, "--since", since,
                   "--history", folder, "--resume", "--trust-store")
    assert done.returncode == 0, done.stderr
    same(rows(out), stateless(example, tmp_path, 248, since))

    # Night 3: the coordinator killed with SIGKILL mid-night (its workers go with it), then resumed.
    table, out, since = tonight(272, "n3")
    joblib.dump(Poison(POISONS["hang"]), scaler)
    run = subprocess.Popen([sys.executable, "-m", "batchpredict.cli", "predict", "--models", store, *SETTINGS[:4],
                            "--workers", "1", "--trust-store", "--timeout", "600", "--data", table, "--out", out,
                            "--since", since, "--history", folder], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: journaled(out) >= 3)
    workers = psutil.Process(run.pid).children(recursive=True)
    run.kill()
    run.wait(30)
    psutil.wait_procs(workers, timeout=15)
    scaler.write_bytes(real)
    done = run_cli("predict", "--models", store, *SETTINGS, "--data", table, "--out", out, "--since", since,
                   "--history", folder, "--resume", "--trust-store")
    assert done.returncode == 0, done.stderr
    same(rows(out), stateless(example, tmp_path, 272, since))

    # Night 4: one IP retrained (another model file): its predictions are computed again from the values kept.
    shutil.copy(store / "model" / "10.0.0.12.h5", store / "model" / f"{IPS[0]}.h5")
    table, out, since = tonight(296, "n4")
    done = run_cli("predict", "--models", store, *SETTINGS, "--data", table, "--out", out, "--since", since,
                   "--history", folder, "-v")
    assert done.returncode == 0, done.stderr
    assert re.search(rf"{IPS[0]}: history: \d+ values before the table, 0 of \d+ predictions", done.stderr)
    whole = night(example, tmp_path / "whole-296.csv", 0, 296)
    assert run_cli("predict", "--models", store, *SETTINGS, "--data", whole, "--out", tmp_path / "w296.csv",
                   "--since", since).returncode == 0
    same(rows(out), rows(tmp_path / "w296.csv"))

    # Night 5: a torn file, a file of another series and one of the first version (its labels a JSON list) are
    # no history, said once; the others go on.
    torn, foreign, older = (folder / f"{ip}.history" for ip in IPS[1:4])
    torn.write_bytes(torn.read_bytes()[:100])
    older.write_bytes(older.read_bytes().replace(history.MAGIC, b"batchpredict history 1\n"))
    other = history.read(str(foreign))
    history.write(str(foreign), history.History(labels=[f"x{i}" for i in range(len(other.labels))],
                                                values=other.values, before=other.before, key=other.key,
                                                predicted=other.predicted))
    table, out, since = tonight(320, "n5")
    done = run_cli("predict", "--models", store, *SETTINGS, "--data", table, "--out", out, "--since", since,
                   "--history", folder)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(f"{IPS[1]}: no history: ") == 1 and "torn" in done.stderr
    assert done.stderr.count(f"{IPS[2]}: no history: ") == 1 and "do not line up" in done.stderr
    assert done.stderr.count(f"{IPS[3]}: no history: ") == 1 and "not a history file of this version" in done.stderr
    got = rows(out).set_index("ip")
    whole = night(example, tmp_path / "whole-320.csv", 0, 320)
    assert run_cli("predict", "--models", store, *SETTINGS, "--data", whole, "--out", tmp_path / "w320.csv",
                   "--since", since).returncode == 0
    reference = rows(tmp_path / "w320.csv").set_index("ip")
    same(got.drop(index=IPS[1:4]), reference.drop(index=IPS[1:4]))
    alone = tmp_path / "alone.csv"  # the three without history: as a run over tonight's table alone
    assert run_cli("predict", "--models", store, *SETTINGS, "--data", table, "--out", alone,
                   "--since", since).returncode == 0
    same(got.loc[IPS[1:4]], rows(alone).set_index("ip").loc[IPS[1:4]])
    summary = json.loads(Path(f"{out}.summary.json").read_text())
    assert summary["status"] == {"ok": len(IPS)}


@pytest.mark.slow
@pytest.mark.parametrize(("first", "points", "engine", "alert"), [
    (440, 37, "auto", ALERT), (440, 70, "auto", ALERT), (440, 37, "keras", ALERT), (2, 37, "auto", ALERT + ",smooth=3w"),
    (1, 37, "auto", ALERT + ",smooth=3w")])
def test_a_night_of_any_length_gives_the_bits_of_one_run(example, tmp_path, first, points, engine, alert):
    """With --std rolling:400 a run over the whole table predicts 400 windows before tonight's, tonight's at other
    places of a wider batch than a night from its history puts them: each is predicted in its own place of its
    own block (engine/products.py), or BLAS rounds it otherwise (this failed on an AVX-512 OpenBLAS with
    batches padded alone). TensorFlow (--engine keras) is called a block at a time. The value rules' mean over
    3 weeks (504 buckets) reaches further back than --window + --rolling and the 400 residuals: the history keeps
    that much, even after a night that wrote two points, and after a night of one point, which gives no alerts:
    the history keeps what --alert's rules need all the same."""
    labels, folder, end = list(example.columns[1:]), tmp_path / "history", 600 + points
    settings = ["--std", "rolling:400", "--alert", alert, *SETTINGS[4:], "--engine", engine]

    def run(*args: object) -> None:
        done = run_cli("predict", "--models", MODELS, *settings, "-q", *map(str, args))
        assert done.returncode == 0, done.stderr

    run("--data", night(example, tmp_path / "n0.csv", 0, 600), "--out", tmp_path / "n0.out.csv", "--points", first,
        "--history", folder)
    since = labels[end - points - 1]
    run("--data", night(example, tmp_path / "n1.csv", end - points - BEFORE, end), "--out", tmp_path / "n1.out.csv",
        "--since", since, "--history", folder)
    run("--data", night(example, tmp_path / "whole.csv", 0, end), "--out", tmp_path / "whole.out.csv",
        "--since", since)
    same(rows(tmp_path / "n1.out.csv"), rows(tmp_path / "whole.out.csv"))


@pytest.mark.slow
def test_a_second_run_on_the_same_history_exits_75(example, tmp_path):
    store = Path(shutil.copytree(MODELS, tmp_path / "store"))
    joblib.dump(Poison(POISONS["hang"]), store / "sc" / f"{IPS[-1]}.save")
    table = night(example, tmp_path / "t.csv", 0, 100)
    first = subprocess.Popen([sys.executable, "-m", "batchpredict.cli", "predict", "--models", store, "--data", table,
                              "--out", tmp_path / "a.csv", "--history", tmp_path / "h", "--trust-store",
                              "--timeout", "600"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: journaled(tmp_path / "a.csv") >= 2)
        second = run_cli("predict", "--models", store, "--data", table, "--out", tmp_path / "b.csv",
                         "--history", tmp_path / "h")
        assert second.returncode == 75 and "another run holds" in second.stderr, second.stderr
        assert not (tmp_path / "b.csv").exists()
    finally:
        first.kill()
        first.wait(30)


@pytest.mark.slow
def test_a_full_disk_under_the_history_is_exit_74_and_resume_finishes_the_night(example, tmp_path):
    from test_input_corruption import resize, tmpfs

    folder = tmp_path / "disk"
    with tmpfs(folder, "16m"):
        first = predict("--data", night(example, tmp_path / "n0.csv", 0, 200), "--out", tmp_path / "n0.out.csv",
                        "--points", "40", "--history", folder)
        assert first.returncode == 0, first.stderr
        disk = os.statvfs(folder)
        resize(folder, f"{(disk.f_blocks - disk.f_bfree) * disk.f_frsize}")  # not one more page
        labels = list(example.columns[1:])
        table, out, since = night(example, tmp_path / "n1.csv", 200 - BEFORE, 224), tmp_path / "n1.out.csv", labels[199]
        done = predict("--data", table, "--out", out, "--since", since, "--history", folder)
        assert done.returncode == 74, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert re.match(rf"batchpredict: no space left on device writing {folder}/[\w.]+\.history; ", last), last
        assert "Traceback" not in done.stderr and not out.exists()
        resize(folder, "16m")
        again = predict("--data", table, "--out", out, "--since", since, "--history", folder, "--resume")
        assert again.returncode == 0, again.stderr
        same(rows(out), stateless(example, tmp_path, 224, since))
