"""Journal, resume, lock and signals, on real runs of the CLI."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import joblib
import pandas as pd
import psutil
import pytest
from conftest import BASE_IPS, POISONS, Poison, read_out, run_cli

from batchpredict import Params, predict_table
from batchpredict.errors import LockHeld, UsageError
from batchpredict.io.journal import Journal, Lock
from batchpredict.io.journal import _line as journal_line
from batchpredict.io.journal import _record as journal_record
from batchpredict.result import Point, Points, Result, Severity, Status

TIMING = ["attempts", "duration_ms", "worker_pid", "worker_peak_rss_mib"]


def start_cli(*args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "batchpredict.cli", "predict", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def journal_results(path: Path) -> list[dict]:
    if not path.exists():
        return []
    records = []
    for line in path.read_bytes().split(b"\n")[1:]:
        with contextlib.suppress(ValueError):  # the line being written
            records.append(journal_record(line))
    return records


def wait_for(predicate, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def test_journal_round_trip_and_torn_last_line(tmp_path):
    path = tmp_path / "j"
    journal = Journal(str(path), "fp")
    assert journal.open(resume=True) == {}
    point = Point(timestamp="t1", observed=3.0, predicted=1.5, std=0.25, lower=(1.0, 0.5), upper=(2.0, 2.5), anomaly=True,
                  severity=Severity.CRITICAL)
    journal.append(Result(ip="a", status=Status.OK, points=[point, dataclasses.replace(point, timestamp="t2")]))
    journal.close(remove=False)
    with open(path, "a") as fh:
        fh.write('{"ip": "b", "sta')  # a run killed mid-write
    again = Journal(str(path), "fp")
    done = again.open(resume=True)
    assert list(done) == ["a"] and done["a"].points == [point, dataclasses.replace(point, timestamp="t2")]
    again.append(Result(ip="c"))
    again.close(remove=False)
    assert [r["ip"] for r in journal_results(path)] == ["a", "c"]


def test_resume_cuts_by_bytes_so_a_line_of_other_than_ascii_keeps_every_result(tmp_path):
    """A load_error's message holds '…' (3 bytes in UTF-8, 1 character): the cut was made at the character count,
    so a resume cut the last whole line short, the next append joined it, and the next resume lost both. A byte
    that is not UTF-8 (a damaged disk) made --resume a UnicodeDecodeError traceback."""
    path = tmp_path / "a.csv.journal"
    journal = Journal(str(path), "fp")
    journal.open(resume=False)
    journal.append(Result(ip="a", status=Status.LOAD_ERROR, error="checksum mismatch: model/a.h5 (sha256 0000… in "
                                                                  "manifest.json, 1234… on disk)"))
    journal.append(Result(ip="b"))
    journal.close(remove=False)
    for ip in ("c", "d"):
        again = Journal(str(path), "fp")
        again.open(resume=True)
        again.append(Result(ip=ip))
        again.close(remove=False)
    assert list(Journal(str(path), "fp").open(resume=True)) == ["a", "b", "c", "d"]
    with open(path, "ab") as fh:
        fh.write(b'{"ip": "e", "status": "ok\xff\n')
    done = Journal(str(path), "fp").open(resume=True)
    assert list(done) == ["a", "b", "c", "d"] and done["a"].error.startswith("checksum mismatch")


def test_a_line_holds_what_json_writes_of_the_result(tmp_path):
    """orjson writes the lines (json where it refuses a record): the same values as json's line, read back."""
    point = Point(timestamp="2026-11-01T00:05", observed=3.0, predicted=1.5, std=0.25, lower=(1.0, 0.5),
                  upper=(2.0, 2.5), anomaly=True, severity=Severity.CRITICAL, std_source="rolling:96", alert=True,
                  score=0.75, alert_source="likelihood")
    result = Result(ip="10.0.0.1", status=Status.OK, points=[point] * 3, duration_ms=23.25, worker_pid=7,
                    worker_peak_rss_mib=35.5, attempts=1, model="model/10.0.0.1.h5", engine="numpy",
                    log=["é ünïcode"], debug=["a \"quoted\" line"])
    for record in (result.to_dict(), {"journal": 1, "fingerprint": "f"}, {"big": 2**70}):
        line = journal_line(record)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert journal_record(line[:-1]) == json.loads(json.dumps(record))
    assert Result.from_dict(journal_record(journal_line(result.to_dict())[:-1])).points == result.points


def test_a_line_changed_since_it_was_written_is_run_again_not_resumed_as_it_reads(tmp_path):
    """A digit changed on disk (or by hand) was a wrong value resumed into the CSV as if the job had said it."""
    path = tmp_path / "a.csv.journal"
    journal = Journal(str(path), "fp")
    journal.open(resume=False)
    for ip in ("a", "b", "c"):
        journal.append(Result(ip=ip, status=Status.OK, duration_ms=12.5))
    journal.close(remove=False)
    header, a, b, c, end = path.read_bytes().split(b"\n")
    assert b'"ip":"b"' in b and b"12.5" in b
    path.write_bytes(b"\n".join([header, a, b.replace(b"12.5", b"17.5"), c, end]))
    done = Journal(str(path), "fp").open(resume=True)
    assert sorted(done) == ["a", "c"] and done["a"].duration_ms == done["c"].duration_ms == 12.5


@pytest.mark.parametrize("forge", [
    lambda points: points.update(severity={**points["severity"], "b64": "CQ=="}),  # severity code 9
    lambda points: points.update(anomaly={**points["anomaly"], "shape": [0], "b64": ""}),  # no anomaly column
    lambda points: points.update(timestamp=5),
], ids=["severity-9", "short-column", "timestamp-not-a-list"])
def test_a_whole_line_of_points_no_run_writes_is_run_again(tmp_path, forge):
    """A line whose CRC matches but whose points no run writes (a severity code of 9, a column one point short) was
    resumed, and the CSV's writing ended in an IndexError traceback: it is no result, its IP runs again."""
    path = tmp_path / "a.csv.journal"
    journal = Journal(str(path), "fp")
    journal.open(resume=False)
    point = Point(timestamp="t1", observed=3.0, predicted=1.5, std=0.25, lower=(1.0, 0.5), upper=(2.0, 2.5),
                  anomaly=True, severity=Severity.CRITICAL)
    journal.append(Result(ip="a", status=Status.OK, points=[point]))
    journal.close(remove=False)
    header, line, end = path.read_bytes().split(b"\n")
    record = journal_record(line)
    forge(record["points"])
    path.write_bytes(header + b"\n" + journal_line(record))
    assert Journal(str(path), "fp").open(resume=True) == {}


def test_journal_of_other_inputs_is_refused(tmp_path):
    path = tmp_path / "j"
    Journal(str(path), "one").open(resume=False)
    with pytest.raises(UsageError, match="another table"):
        Journal(str(path), "two").open(resume=True)


def test_lock_is_exclusive_and_never_stale(tmp_path):
    path = str(tmp_path / "out.lock")
    with Lock(path):
        with pytest.raises(LockHeld):
            Lock(path).__enter__()
    Path(path).write_text("12345\n")  # left behind by a killed run: flock is gone with its holder
    with Lock(path):
        pass


def test_sigterm_mid_run_then_resume(store, tmp_path, clean_run):
    """The last IP's scaler hangs in the first run (a trusted pickle), so the run is still going when the
    signal comes however fast the others are; the resumed run reads the real scaler again."""
    table, out = clean_run.table, tmp_path / "a.csv"
    journal = Path(str(out) + ".journal")
    scaler = store / "sc" / f"{BASE_IPS[-1]}.save"
    real = scaler.read_bytes()
    joblib.dump(Poison(POISONS["hang"]), scaler)
    run = start_cli("--data", table, "--models", store, "--out", out, "--workers", "1", "--trust-store")
    wait_for(lambda: len(journal_results(journal)) >= 3)
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=60)
    scaler.write_bytes(real)
    assert run.returncode == 128 + signal.SIGTERM, stderr
    assert "--resume" in stderr and not out.exists()
    first = {r["ip"] for r in journal_results(journal)}
    assert 3 <= len(first) < len(BASE_IPS)

    done = run_cli("predict", "--data", table, "--models", store, "--out", out, "--resume")
    assert done.returncode == 0, done.stderr
    summary = json.loads(Path(str(out) + ".summary.json").read_text())
    assert summary["jobs_run"] == len(BASE_IPS) - len(first)  # no IP run twice
    pd.testing.assert_frame_equal(read_out(out).drop(columns=TIMING), read_out(clean_run.out).drop(columns=TIMING))
    assert not journal.exists()


@pytest.mark.slow
def test_second_run_on_same_output_exits_75_and_kill_9_then_resume(store, table, tmp_path):
    joblib.dump(Poison(POISONS["hang"]), store / "sc" / f"{BASE_IPS[-1]}.save")
    out = tmp_path / "a.csv"
    journal = Path(str(out) + ".journal")
    first = start_cli("--data", table, "--models", store, "--out", out, "--timeout", "600", "--trust-store")
    wait_for(lambda: len(journal_results(journal)) >= 2)
    began = time.monotonic()
    second = run_cli("predict", "--data", table, "--models", store, "--out", out)
    assert second.returncode == 75 and "another run" in second.stderr
    assert time.monotonic() - began < 15
    descendants = psutil.Process(first.pid).children(recursive=True)
    first.kill()
    first.wait(30)
    assert not psutil.wait_procs(descendants, timeout=15)[1]
    resumed = run_cli("predict", "--data", table, "--models", store, "--out", out, "--resume", "--timeout", "3",
                      "--trust-store")
    assert resumed.returncode == 1, resumed.stderr
    frame = read_out(out)
    assert list(frame["ip"]) == BASE_IPS
    assert frame.set_index("ip").loc[BASE_IPS[-1], "status"] == "timeout"
    assert (frame[frame["ip"] != BASE_IPS[-1]]["status"] == "ok").all()


def test_a_points_run_resumed_mid_way_writes_the_uninterrupted_runs_csv(store, tmp_path, clean_run):
    """As the run above, the last IP's scaler hangs in the first run, however fast the others are."""
    table, reference, out = clean_run.table, tmp_path / "ref.csv", tmp_path / "a.csv"
    predict_table(str(table), str(store), str(reference), params=Params(points=5))
    journal = Path(str(out) + ".journal")
    scaler = store / "sc" / f"{BASE_IPS[-1]}.save"
    real = scaler.read_bytes()
    joblib.dump(Poison(POISONS["hang"]), scaler)
    run = start_cli("--data", table, "--models", store, "--out", out, "--workers", "1", "--points", "5",
                    "--trust-store")
    wait_for(lambda: len(journal_results(journal)) >= 3)
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=60)
    scaler.write_bytes(real)
    assert run.returncode == 128 + signal.SIGTERM, stderr
    first = journal_results(journal)
    assert 3 <= len(first) < len(BASE_IPS) and all(len(Points.from_dict(r["points"])) == 5 for r in first)  # a line per IP
    resumed = run_cli("predict", "--data", table, "--models", store, "--out", out, "--resume")
    assert resumed.returncode == 2 and "another table, store, settings or version" in resumed.stderr  # --points is an input

    done = run_cli("predict", "--data", table, "--models", store, "--out", out, "--resume", "--points", "5")
    assert done.returncode == 0, done.stderr
    summary = json.loads(Path(str(out) + ".summary.json").read_text())
    assert summary["jobs_run"] == len(BASE_IPS) - len(first) and summary["rows"] == 5 * len(BASE_IPS)
    frame = read_out(out)
    assert not frame.duplicated(["ip", "timestamp"]).any()
    pd.testing.assert_frame_equal(frame.drop(columns=TIMING), read_out(reference).drop(columns=TIMING))
    events = Path(str(out) + ".events.csv").read_text()  # the resumed IPs' points from the journal included
    assert events == Path(str(reference) + ".events.csv").read_text() and events.count("\n") > 2


def test_the_lock_is_taken_before_the_table_is_read(store, tmp_path):
    """While another process holds the lock, a run whose table it would refuse at its first look (a FIFO: exit 2)
    exits 75: nothing of the table is read before the lock. (With a million-row long table as its --data, a
    second run exited 75 in 0.55 to 0.69 s on the project's machine.)"""
    import os

    pipe = tmp_path / "table.csv"
    os.mkfifo(pipe)
    out = tmp_path / "a.csv"
    with Lock(f"{out}.lock"):
        second = run_cli("predict", "--data", pipe, "--models", store, "--out", out, timeout=60)
    assert second.returncode == 75 and "another run holds" in second.stderr, second.stderr
    assert not Path(str(out) + ".journal").exists()


@pytest.mark.parametrize("kind", ["folder", "fifo", "link", "dangling"])
@pytest.mark.parametrize("which", [".journal", ".lock"])
@pytest.mark.parametrize("resume", [False, True])
def test_a_journal_or_lock_that_is_no_file_of_its_own_exits_2_and_stays(store, table, tmp_path, kind, which, resume):
    """A journal that was a folder was an IsADirectoryError traceback, a FIFO a traceback with --resume and a run
    blocked for good without; a link (the lock's too) was opened through: its target, any file, truncated and
    written over with the run's journal or pid, and a dangling one created its target."""
    import os

    out, target = tmp_path / "out" / "a.csv", tmp_path / "precious"
    out.parent.mkdir()
    path = Path(str(out) + which)
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        if kind == "link":
            target.write_text("precious\n")
        path.symlink_to(target)
    done = run_cli("predict", "--data", table, "--models", store, "--out", out, *["--resume"] * resume, timeout=60)
    assert done.returncode == 2, done.stderr
    described = {"folder": "a folder", "fifo": "a FIFO or a device"}.get(kind, "a link")
    what = "a lock" if which == ".lock" else "the run's journal"
    assert done.stderr == f"batchpredict: {path} is {described}, not {what}: the run writes that file itself; remove it\n"
    assert not out.exists() and os.path.lexists(path)
    assert target.read_text() == "precious\n" if kind == "link" else not target.exists()


@pytest.mark.parametrize("layout", ["wide", "long"])
def test_the_summary_names_the_last_label_for_the_next_since(base_store, tmp_path, layout):
    from conftest import series_for, wide_table

    data = {ip: series_for(ip) for ip in BASE_IPS[:2]}
    if layout == "wide":
        table, last = wide_table(tmp_path / "t.csv", data), "t039"
    else:  # rows out of order, the latest one in the middle, a bucket only one IP has
        lines = [f"{ip},2024-01-{1 + t // 24:02d} {t % 24:02d}:00,{v}" for ip, values in data.items()
                 for t, v in enumerate(values)]
        lines.insert(5, f"{BASE_IPS[0]},2024-01-02 17:00,3.0")
        table, last = tmp_path / "t.csv", "2024-01-02 17:00"
        table.write_text("ip,timestamp,value\n" + "\n".join(reversed(lines)) + "\n")
    out = tmp_path / "a.csv"
    predict_table(str(table), str(base_store), str(out))
    assert json.loads(Path(str(out) + ".summary.json").read_text())["last_label"] == last
