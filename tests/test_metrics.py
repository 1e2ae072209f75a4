"""The Prometheus textfile: parsed by prometheus-client's own parser, checked against the CSV."""
import os
import stat
import time

import pytest
from conftest import read_out, run_cli, without_blocking
from prometheus_client.parser import text_string_to_metric_families

from batchpredict.errors import BatchPredictError
from batchpredict.metrics import render, write_metrics
from batchpredict.result import Status

SUMMARY = {"status": {"ok": 3}, "severity": {"normal": 3}, "jobs_per_s": 2.0, "jobs_run": 3,
           "worker_peak_rss_mib": 300.0, "coordinator_peak_rss_mib": 80.0}


def samples(text: str) -> dict:
    """{(name, labels as sorted tuple): value}."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_counts_equal_the_csv(every_status_run):
    run = every_status_run
    frame = read_out(run.out)
    found = samples(run.metrics.read_text())
    statuses = frame["status"].value_counts()
    assert set(statuses.index) == {s.value for s in Status}  # the run really has every status
    for status in Status:
        assert found[("batchpredict_ips", (("status", status.value),))] == statuses[status.value]
    severities = frame["severity"].value_counts()
    for severity in ("warning", "critical"):  # one point per IP: each flagged point is an event
        assert found[("batchpredict_anomalies", (("severity", severity),))] == severities[severity] >= 1
        assert found[("batchpredict_events", (("severity", severity),))] == severities[severity]
    assert found[("batchpredict_rows", ())] == len(frame) and found[("batchpredict_skipped_ips", ())] == 0
    assert found[("batchpredict_last_run_success", ())] == 0
    assert found[("batchpredict_last_run_exit_code", ())] == 1
    assert ("batchpredict_last_success_timestamp_seconds", ()) not in found  # never succeeded
    # The run's own span: the session's fixture ran it minutes before this test, however long the suite takes.
    started, ended = every_status_run.span
    assert started <= found[("batchpredict_last_run_timestamp_seconds", ())] <= ended
    assert 0 < found[("batchpredict_last_run_duration_seconds", ())] < 600
    assert found[("batchpredict_jobs_per_second", ())] > 0
    assert found[("batchpredict_worker_peak_rss_bytes", ())] == pytest.approx(
        frame["worker_peak_rss_mib"].max() * 2**20, rel=1e-3)
    assert found[("batchpredict_worker_peak_rss_bytes", ())] > 2**30  # the hog's, caught over the 1 GiB cap
    leftovers = [p.name for p in run.metrics.parent.iterdir() if p.name.startswith((".", run.metrics.name + "."))]
    assert leftovers == []  # no temporary file


def test_a_failed_run_keeps_the_last_success_time(tmp_path):
    path = tmp_path / "m.prom"
    write_metrics(str(path), SUMMARY, 0, time.time() - 5)
    first = samples(path.read_text())
    success = first[("batchpredict_last_success_timestamp_seconds", ())]
    assert first[("batchpredict_last_run_success", ())] == 1 and success == first[
        ("batchpredict_last_run_timestamp_seconds", ())]
    write_metrics(str(path), None, 75, time.time())
    second = samples(path.read_text())
    assert second[("batchpredict_last_success_timestamp_seconds", ())] == success
    assert second[("batchpredict_last_run_success", ())] == 0 and second[("batchpredict_last_run_exit_code", ())] == 75
    assert not [k for k in second if k[0] == "batchpredict_ips"]  # no counts from a run that produced none


def test_the_file_is_the_rendered_text_readable_by_all_in_a_folder_made_for_it(tmp_path):
    path, started = tmp_path / "new" / "m.prom", time.time() - 5
    write_metrics(str(path), SUMMARY, 1, started)
    text = path.read_text()
    assert text == render(SUMMARY, 1, started, samples(text)[("batchpredict_last_run_timestamp_seconds", ())])
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in path.parent.iterdir()] == ["m.prom"]


def test_an_unwritable_metrics_path_is_one_error_and_leaves_nothing(tmp_path):
    (tmp_path / "file").write_text("")
    (tmp_path / "folder.prom").mkdir()
    for path in (tmp_path / "file" / "m.prom", tmp_path / "folder.prom"):
        with pytest.raises(BatchPredictError, match=f"cannot write metrics file {path}: "):
            write_metrics(str(path), SUMMARY, 0, time.time())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder.prom"]
    assert list((tmp_path / "folder.prom").iterdir()) == []


def test_a_metrics_path_that_is_a_fifo_is_one_error_not_a_run_blocked_after_its_output(tmp_path):
    fifo = tmp_path / "m.prom"
    os.mkfifo(fifo)
    raised = without_blocking(lambda: write_metrics(str(fifo), SUMMARY, 0, time.time()), fifo)
    assert isinstance(raised, BatchPredictError), raised
    assert str(raised) == f"cannot write metrics file {fifo}: not a regular file (a FIFO or a device?)"
    assert stat.S_ISFIFO(fifo.stat().st_mode)  # left as it was, not replaced


def test_unset_peak_is_left_out_not_zero():
    text = render({"status": {"no_model": 1}, "severity": {}, "jobs_per_s": None, "jobs_run": 0,
                   "worker_peak_rss_mib": None, "coordinator_peak_rss_mib": 70.0}, 0, 0.0, 1.0)
    found = samples(text)
    assert ("batchpredict_worker_peak_rss_bytes", ()) not in found
    assert found[("batchpredict_ips", (("status", "no_model"),))] == 1


def test_unreadable_table_exits_2_and_says_so_in_the_metrics(store, tmp_path):
    metrics = tmp_path / "m" / "b.prom"
    done = run_cli("predict", "--data", tmp_path / "missing.csv", "--models", store, "--out", tmp_path / "a.csv",
                   "--metrics-file", metrics)
    assert done.returncode == 2 and "table not found" in done.stderr
    found = samples(metrics.read_text())
    assert found[("batchpredict_last_run_success", ())] == 0 and found[("batchpredict_last_run_exit_code", ())] == 2
    assert not (tmp_path / "a.csv").exists()


def test_alerts_are_counted_where_the_alerting_stage_ran(store, tmp_path):
    from conftest import BASE_IPS, series_for, wide_table, write_stds

    write_stds(store, {ip: 60.0 for ip in BASE_IPS})  # wide bands: only the jump is critical
    data = {ip: series_for(ip) for ip in BASE_IPS[:2]}
    data[BASE_IPS[0]][35] += 1500  # a critical run: the fallback's alert (these series are too short)
    table, out, prom = wide_table(tmp_path / "t.csv", data), tmp_path / "a.csv", tmp_path / "m.prom"
    done = run_cli("predict", "--data", table, "--models", store, "--out", out, "--points", "8",
                   "--metrics-file", prom)
    assert done.returncode == 0, done.stderr
    frame = read_out(out)
    alerts = int((frame["alert"] == "true").sum())
    assert alerts == 1 and (frame["alert_source"] == "severity").all()
    assert samples(prom.read_text())[("batchpredict_alerts", ())] == alerts
    assert ", 1 alerts in " in done.stderr
    one = tmp_path / "one.csv"
    run_cli("predict", "--data", table, "--models", store, "--out", one, "--metrics-file", prom)
    assert ("batchpredict_alerts", ()) not in samples(prom.read_text())  # one point per IP: no alerting stage
    assert "alert" not in read_out(one)


def test_a_metrics_file_that_cannot_be_written_leaves_the_runs_exit_code_and_message(store, table, tmp_path):
    """One error line for the metrics; the exit code and the last line are the run's, as if none was asked."""
    (tmp_path / "folder.prom").mkdir()
    metrics = tmp_path / "folder.prom"
    missing = run_cli("predict", "--data", tmp_path / "missing.csv", "--models", store, "--out", tmp_path / "a.csv",
                      "--metrics-file", metrics)
    assert missing.returncode == 2, missing.stderr
    lines = missing.stderr.strip().splitlines()
    assert "table not found" in lines[-1] and "Traceback" not in missing.stderr
    assert any(f"cannot write metrics file {metrics}" in line for line in lines[:-1]), lines
    done = run_cli("predict", "--data", table, "--models", store, "--out", tmp_path / "b.csv", "--metrics-file", metrics)
    assert done.returncode == 0, done.stderr
    assert f"cannot write metrics file {metrics}" in done.stderr and (tmp_path / "b.csv").exists()
