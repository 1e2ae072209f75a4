"""scripts/nab_to_long.py: a folder of NAB files to one long stats table that batchpredict reads."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SHARED

from batchpredict.io.table import read_table

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "nab_to_long.py"
NAB = SHARED / "data" / "nab" / "realAWSCloudwatch"


def convert(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_hosts_are_file_stems_and_a_repeated_timestamp_keeps_its_first_row(tmp_path):
    folder = tmp_path / "nab"
    folder.mkdir()
    (folder / "b_host.csv").write_text("timestamp,value\n2014-03-09 01:55:00,1\n2014-03-09 03:00:00,2\n"
                                       "2014-03-09 03:00:00,3\n2014-03-09 03:05:00,4\n")
    (folder / "a.host-1.csv").write_text("timestamp,value\n2014-01-01 00:00:00,5\n2014-01-01 00:05:00,6\n")
    done = convert(folder, "--out", tmp_path / "long.csv")
    assert done.returncode == 0, done.stderr
    assert "b_host: 1 rows repeat an earlier timestamp" in done.stderr
    assert (tmp_path / "long.csv").read_text() == (
        "ip,timestamp,value\na.host-1,2014-01-01 00:00:00,5\na.host-1,2014-01-01 00:05:00,6\n"
        "b_host,2014-03-09 01:55:00,1\nb_host,2014-03-09 03:00:00,2\nb_host,2014-03-09 03:05:00,4\n")
    assert convert(folder, "--head", "0.5", "--out", tmp_path / "head.csv").returncode == 0
    assert [len(s.values) for s in read_table(str(tmp_path / "head.csv"))] == [1, 1]


def test_a_file_that_is_not_nab_is_exit_2(tmp_path):
    (tmp_path / "x.csv").write_text("time,v\n1,2\n")
    done = convert(tmp_path, "--out", tmp_path / "out" / "long.csv")
    assert done.returncode == 2 and "expected the header timestamp,value" in done.stderr
    assert not (tmp_path / "out" / "long.csv").exists()
    assert convert(tmp_path / "none", "--out", tmp_path / "l.csv").returncode == 2
    assert convert(tmp_path, "--head", "0", "--out", tmp_path / "l.csv").returncode == 2


@pytest.mark.skipif(not NAB.is_dir(), reason=f"NAB data not found at {NAB} (../shared/data/nab)")
def test_nab_realawscloudwatch_reads_as_17_clean_hosts(tmp_path):
    done = convert(NAB, "--out", tmp_path / "long.csv")
    assert done.returncode == 0, done.stderr
    series = read_table(str(tmp_path / "long.csv"))
    assert sorted(s.ip for s in series) == sorted(path.stem for path in NAB.glob("*.csv"))
    assert len(series) == 17 and not [s.ip for s in series if s.problem]
    assert sum(len(s.values) for s in series) == 67740 - 22  # 11 repeats in each of two files


def test_resampled_to_1_minute_by_linear_interpolation_and_to_15_minutes_and_1_hour_by_bucket_means(tmp_path):
    folder = tmp_path / "nab"
    folder.mkdir()
    # 5-minute points off the hour's grid, a repeated timestamp (dropped first) and a 10-minute gap.
    (folder / "h.csv").write_text("timestamp,value\n2014-01-01 00:52:00,0\n2014-01-01 00:57:00,5\n"
                                  "2014-01-01 00:57:00,99\n2014-01-01 01:02:00,15\n2014-01-01 01:12:00,5\n"
                                  "2014-01-01 01:17:00,20\n")
    tables = {}
    for step in ("1min", "15min", "1h"):
        done = convert(folder, "--resample", step, "--out", tmp_path / f"{step}.csv")
        assert done.returncode == 0, done.stderr
        text = (tmp_path / f"{step}.csv").read_text().splitlines()
        assert text[0] == "ip,timestamp,value" and all(line.startswith("h,2014-01-01 ") for line in text[1:])
        tables[step] = [tuple(line.split(",")[1:]) for line in text[1:]]
    minutes = [f"2014-01-01 {m // 60:02d}:{m % 60:02d}:00" for m in range(52, 78)]
    values = ["0", "1", "2", "3", "4", "5", "7", "9", "11", "13", "15", "14", "13", "12", "11", "10", "9", "8",
              "7", "6", "5", "8", "11", "14", "17", "20"]
    assert tables["1min"] == list(zip(minutes, values, strict=True))
    # 00:45 holds 00:52 and 00:57 (0, 5), 01:00 01:02 and 01:12 (15, 5), 01:15 01:17; the hour 01:00 all three.
    assert tables["15min"] == [("2014-01-01 00:45:00", "2.5"), ("2014-01-01 01:00:00", "10"),
                               ("2014-01-01 01:15:00", "20")]
    assert tables["1h"] == [("2014-01-01 00:00:00", "2.5"), ("2014-01-01 01:00:00", "13.3333333333")]
    for step in tables:  # each reads as a clean host of batchpredict's
        series = read_table(str(tmp_path / f"{step}.csv"))
        assert [(s.ip, len(s.values)) for s in series] == [("h", len(tables[step]))] and not series[0].problem
    # --head takes the first half of the resampled rows: a training table at the new step.
    assert convert(folder, "--resample", "1min", "--head", "0.5", "--out", tmp_path / "head.csv").returncode == 0
    assert (tmp_path / "head.csv").read_text().splitlines()[1:] == [f"h,{t},{v}" for t, v in
                                                                   list(zip(minutes, values, strict=True))[:13]]
    assert convert(folder, "--resample", "5min", "--out", tmp_path / "x.csv").returncode == 2
