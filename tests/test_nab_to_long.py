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
