"""What the operator sees while a run goes: a bar on a terminal, plain timed log lines in cron."""
import fcntl
import io
import json
import logging
import os
import pty
import re
import select
import struct
import termios
import time

import pytest
from conftest import BASE_IPS, run_cli, series_for, wide_table

from batchpredict import logs
from batchpredict.progress import Progress
from batchpredict.result import Point, Result, Severity, Status

LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) ")

def point(severity: Severity) -> Point:
    return Point(timestamp="t", observed=1.0, predicted=1.0, std=1.0, lower=(1.0, 1.0), upper=(1.0, 1.0),
                 anomaly=severity is not Severity.NORMAL, severity=severity)


# Anomalies are counted in points: b has two.
RESULTS = [Result(ip="a", points=[point(Severity.NORMAL)]),
           Result(ip="b", points=[point(Severity.CRITICAL), point(Severity.NORMAL), point(Severity.WARNING)]),
           Result(ip="c", status=Status.TIMEOUT, error="no result within 1 s")]


@pytest.fixture
def logging_state():
    """logs.configure rewires the root logger; put pytest's handlers back afterwards."""
    root, saved = logging.getLogger(), (logging.getLogger().handlers[:], logging.getLogger().level)
    yield
    root.handlers[:], level = saved
    root.setLevel(level)
    logs.final.handlers[:] = []
    logs.final.propagate = True


def read_all(fd: int, quiet_for: float = 0.3) -> str:
    chunks = []
    while select.select([fd], [], [], quiet_for)[0]:
        chunks.append(os.read(fd, 65536))
    return b"".join(chunks).decode()


@pytest.mark.parametrize("rows, columns", [(24, 120), (0, 0)])  # some ptys (script, docker exec) say 0x0
def test_a_terminal_gets_a_bar_and_no_progress_log_lines(caplog, rows, columns):
    caplog.set_level(logging.INFO, logger="batchpredict")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    with os.fdopen(slave, "w") as terminal:
        with Progress(interval=0.05, stream=terminal) as progress:
            progress.start(len(RESULTS))
            for result in RESULTS:
                progress.update(result)
            time.sleep(0.2)
        terminal.flush()
        shown = read_all(master)
    os.close(master)
    assert "\r" in shown and "3/3" in shown and "jobs/s" in shown
    assert "anomalies=2" in shown and "failed=1" in shown
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if m.startswith("progress")]
    assert "c: timeout: no result within 1 s" in messages  # failures are warnings, bar or not


def test_without_a_terminal_a_log_line_every_interval(caplog):
    caplog.set_level(logging.INFO, logger="batchpredict")
    stream = io.StringIO()
    with Progress(interval=0.05, stream=stream) as progress:
        progress.start(4)
        for result in RESULTS:
            progress.update(result)
        time.sleep(0.4)
    lines = [r for r in caplog.records if r.getMessage().startswith("progress")]
    assert len(lines) >= 3
    assert lines[-1].getMessage().startswith("progress 3/4 jobs (75%)")
    assert {k: lines[-1].fields[k] for k in ("done", "total", "anomalies", "failed")} == {
        "done": 3, "total": 4, "anomalies": 2, "failed": 1}
    assert stream.getvalue() == ""  # no bar written anywhere


def test_quiet_progress_logs_only_the_failures(caplog):
    caplog.set_level(logging.INFO, logger="batchpredict")
    with Progress(enabled=False, interval=0.01, stream=io.StringIO()) as progress:
        progress.start(3)
        for result in RESULTS:
            progress.update(result)
        time.sleep(0.1)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("WARNING", "c: timeout: no result within 1 s")]


def test_json_logs_are_one_object_a_line(logging_state):
    stream = io.StringIO()
    logs.configure(logging.INFO, "json", stream)
    with Progress(interval=0.05, stream=io.StringIO()) as progress:
        progress.start(3)
        progress.update(RESULTS[1])
        time.sleep(0.2)
    logs.final.info("batchpredict: done", extra={"fields": {"event": "summary", "ips": 3}})
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    progress_lines = [r for r in records if r.get("event") == "progress"]
    assert progress_lines and progress_lines[-1]["done"] == 1 and progress_lines[-1]["total"] == 3
    assert records[-1] == {**records[-1], "level": "INFO", "event": "summary", "ips": 3, "message": "batchpredict: done"}
    assert all(r["time"].endswith("+00:00") for r in records)


def test_quiet_json_keeps_warnings_and_the_final_line(logging_state):
    stream = io.StringIO()
    logs.configure(logging.WARNING, "json", stream)
    logging.getLogger("batchpredict").info("hidden")
    logging.getLogger("batchpredict").warning("x: crashed: SIGKILL")
    logs.final.info("batchpredict: done")
    assert [(r["level"], r["message"]) for r in map(json.loads, stream.getvalue().splitlines())] == [
        ("WARNING", "x: crashed: SIGKILL"), ("INFO", "batchpredict: done")]


def test_cron_run_logs_clean_lines(every_status_run):
    lines = every_status_run.stderr.splitlines()
    assert "\r" not in every_status_run.stderr
    assert all(LOG_LINE.match(line) for line in lines[:-1]), lines
    assert lines[-1].startswith("batchpredict: 14 IPs in ")
    assert [line for line in lines if " INFO progress " in line]
    failed = {ip for ip, status in every_status_run.expected.items() if Status(status).failed}
    warned = {line.split(" WARNING ")[1].split(":")[0] for line in lines if " WARNING " in line}
    assert warned == failed


def test_quiet_leaves_warnings_and_the_summary(store, tmp_path):
    broken = BASE_IPS[2]
    next((store / "model").glob(f"{broken}.*")).write_bytes(b"not a model")
    table = wide_table(tmp_path / "t.csv", {ip: series_for(ip) for ip in BASE_IPS[:3]})
    done = run_cli("predict", "--data", table, "--models", store, "--out", tmp_path / "a.csv", "--quiet",
                   "--progress-interval", "0.1")
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 2, lines
    assert re.match(LOG_LINE.pattern + f"{re.escape(broken)}: load_error: ", lines[0]) and " WARNING " in lines[0]
    assert lines[1].startswith("batchpredict: 3 IPs in ") and "ok 2, load_error 1" in lines[1]


def test_jobs_counted_before_the_table_is_planned(caplog):
    caplog.set_level(logging.INFO, logger="batchpredict")
    with Progress(interval=0.05, stream=io.StringIO()) as progress:
        progress.start(None)  # jobs run while the table is still read
        progress.update(RESULTS[0])
        time.sleep(0.2)
        progress.update(RESULTS[1])
        progress.start(4)  # the whole table is planned
        time.sleep(0.2)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress")]
    assert any(line.startswith("progress 1/? jobs, ") and "ETA ?" in line for line in lines), lines
    assert lines[-1].startswith("progress 2/4 jobs (50%)")
