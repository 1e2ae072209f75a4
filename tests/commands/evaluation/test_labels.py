"""evaluation/labels.py: NAB JSON and CSV windows, and what a bad label file gets."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from conftest import SHARED, run_cli, without_blocking
from test_evaluate import HOSTS, results_csv, stamp

from batchpredict.commands.evaluation.labels import label_id, parse_times, read_labels
from batchpredict.errors import UsageError


def ns(text: str) -> int:
    return int(np.datetime64(text, "ns").astype(np.int64))


def test_nab_keys_are_file_names_whose_stem_is_the_id():
    assert label_id("realAWSCloudwatch/ec2_cpu_utilization_24ae8d.csv") == "ec2_cpu_utilization_24ae8d"
    assert label_id("10.0.0.1") == "10.0.0.1" and label_id("host-a.example") == "host-a.example"
    assert label_id("data\\iio_us-east-1_i-a2eb1cd9_NetworkIn.CSV") == "iio_us-east-1_i-a2eb1cd9_NetworkIn"


def test_nab_json_windows_are_parsed_as_dates(tmp_path):
    path = tmp_path / "combined_windows.json"
    path.write_text(json.dumps({
        "realAWSCloudwatch/ec2_cpu_utilization_53ea38.csv": [
            ["2014-02-23 11:45:00.000000", "2014-02-24 04:25:00.000000"],
            ["2014-02-19 10:50:00.000000", "2014-02-20 03:30:00.000000"]],
        "artificialNoAnomaly/art_flatline.csv": []}))
    labels = read_labels(str(path))
    assert labels.windows["ec2_cpu_utilization_53ea38"].tolist() == [  # sorted by start
        [ns("2014-02-19T10:50"), ns("2014-02-20T03:30")], [ns("2014-02-23T11:45"), ns("2014-02-24T04:25")]]
    assert labels.windows["art_flatline"].shape == (0, 2) and not labels.warnings and not labels.excluded


def test_times_compare_alike_whatever_their_format():
    assert len(set(parse_times(["2014-02-19 10:50:00.000000", "2014-02-19T10:50:00", "2014-02-19 10:50Z",
                                "2014-02-19 11:50:00+01:00"]).tolist())) == 1
    assert (parse_times(["t1", "1392807000", "", "soon"]) == np.iinfo(np.int64).min).all()


@pytest.mark.parametrize("text, message", [
    ("{not json", "is not valid JSON"),
    ('{"a":' * 100_000 + "1" + "}" * 100_000, "is not valid JSON"),  # nested past the parser's depth
    ('{"a": [[1' + "0" * 5000 + ', 2]]}', "is not valid JSON"),  # an integer past Python's 4,300 digits
    ('["a", "b"]', "needs exactly the columns ip,start,end"),  # not an object: read as CSV, which it is not
    ("ip,begin,end\na,2014-01-01,2014-01-02\n", "needs exactly the columns ip,start,end"),
    ("ip," + ",".join(f"t{i}" for i in range(48)) + "\n", "not ip,t0,t1,t2,... (49 columns)"),  # a stats table
    ("", "cannot read labels"),
    ('{"a": [["2014-01-02", "2014-01-01"]], "b": [["x", "2014-01-01"]]}', "no usable label windows"),
    ('{"a": 3}', "window 1 is 3, not [start, end]"),
])
def test_unusable_label_files_are_a_usage_error(tmp_path, text, message):
    path = tmp_path / "labels"
    path.write_text(text)
    with pytest.raises(UsageError) as raised:
        read_labels(str(path))
    assert message in str(raised.value) and str(path) in str(raised.value)


def test_a_bad_window_leaves_its_id_out_with_a_warning_and_the_rest_is_scored(tmp_path):
    path = tmp_path / "l.csv"
    path.write_text("ip , start, end\n"
                    "a,2014-01-01 00:00,2014-01-01 01:00\n"
                    "b,2014-01-02 00:00,2014-01-01 00:00\n"
                    "c,yesterday-ish,2014-01-01 00:00\n"
                    "d,2014-01-01 00:00,2014-01-01 02:00\n"
                    "d,2014-01-01 01:00,2014-01-01 03:00\n")
    labels = read_labels(str(path))
    assert set(labels.windows) == {"a", "d"} and set(labels.excluded) == {"b", "c"}
    assert "ends before it starts" in labels.excluded["b"] and "not a date" in labels.excluded["c"]
    assert labels.windows["d"].tolist() == [[ns("2014-01-01T00:00"), ns("2014-01-01T03:00")]]
    assert "overlapping windows merged for 1 ids: d" in labels.warnings


def test_a_line_of_other_fields_leaves_its_ip_out_and_shifts_nothing(tmp_path):
    """A trailing comma on the first line made pandas read every start as the IP; as in the stats table, such a
    line costs its own IP, and one without an IP is named."""
    path = tmp_path / "l.csv"
    path.write_text("ip,start,end\n"
                    "a,2014-01-01 00:00,2014-01-01 01:00,\n"
                    "b,2014-01-02 00:00,2014-01-02 01:00\n"
                    "a,2014-01-03 00:00,2014-01-03 01:00\n"
                    ",2014-01-01 00:00,2014-01-01 01:00,x\n")
    labels = read_labels(str(path))
    assert set(labels.windows) == {"b"} and labels.excluded == {"a": "line 2: 4 fields, the header has 3"}
    assert labels.windows["b"].tolist() == [[ns("2014-01-02T00:00"), ns("2014-01-02T01:00")]]
    assert f"labels {path}: line 5: 4 fields, the header has 3, and no IP: left out" in labels.warnings
    path.write_text("ip,start,end\na,2014-01-01 00:00,2014-01-01 01:00,\nb,2014-01-02 00:00,2014-01-02 01:00,\n")
    with pytest.raises(UsageError, match=r"^no line of labels .* has the header's 3 fields \(line 2: "):
        read_labels(str(path))


def test_two_keys_naming_one_id_are_combined(tmp_path):
    path = tmp_path / "l.json"
    path.write_text(json.dumps({"x/h.csv": [["2014-01-01", "2014-01-02"]], "y/h.csv": [["2014-02-01", "2014-02-02"]]}))
    labels = read_labels(str(path))
    assert len(labels.windows["h"]) == 2 and "x/h.csv, y/h.csv all name id h" in labels.warnings[0]


def test_cli_leaves_out_an_ip_with_bad_labels_and_says_so(tmp_path):
    results = results_csv(tmp_path / "r.csv", HOSTS)
    labels = tmp_path / "l.json"
    labels.write_text(json.dumps({"a.csv": [[stamp(3), stamp(6)]], "b.csv": [[stamp(3), stamp(2)]]}))
    done = run_cli("evaluate", "--results", results, "--labels", labels)
    assert done.returncode == 0, done.stderr
    assert "labels for b: window 1 ends before it starts" in done.stderr and "b is left out" in done.stderr
    ips = {line.split()[3] for line in done.stdout.splitlines() if line.strip() and not line.startswith("threshold")}
    assert ips == {"a", "c", "total"}


@pytest.mark.skipif(not (SHARED / "data" / "nab").is_dir(), reason="NAB data not found at ../shared/data/nab")
def test_nab_combined_windows_read_whole():
    labels = read_labels(str(SHARED / "data" / "nab" / "combined_windows.json"))
    hosts = [path.stem for path in (SHARED / "data" / "nab" / "realAWSCloudwatch").glob("*.csv")]
    assert len(hosts) == 17 and set(hosts) <= set(labels.windows)
    assert not labels.excluded and not labels.warnings
    assert sum(len(labels.windows[host]) for host in hosts) > 17


def test_labels_that_are_a_fifo_or_a_device_are_a_usage_error_at_once(tmp_path):
    fifo = tmp_path / "labels.csv"
    os.mkfifo(fifo)
    for path in (str(fifo), os.devnull):
        raised = without_blocking(lambda: read_labels(path), fifo)  # noqa: B023 - called before the loop goes on
        assert isinstance(raised, UsageError) and str(raised) == (
            f"cannot read labels {path}: not a regular file (a FIFO or a device?)")
