import numpy as np
import pytest

from batchpredict.errors import UsageError
from batchpredict.table import first_after, read_table


def write(tmp_path, text, name="t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_wide_keeps_order_labels_and_turns_junk_into_nan(tmp_path):
    table = read_table(write(tmp_path, "ip,a,b,c\n10.0.0.2,1,x,3\n10.0.0.1,4,,6\n"))
    assert [s.ip for s in table] == ["10.0.0.2", "10.0.0.1"]
    assert table[0].labels == ["a", "b", "c"]
    assert np.isnan(table[0].values[1]) and np.isnan(table[1].values[1])


def test_wide_duplicate_ip_is_one_problem_row(tmp_path):
    table = read_table(write(tmp_path, "ip,a\nx,1\ny,2\nx,3\n"))
    assert [s.ip for s in table] == ["x", "y"]
    assert "2 times" in table[0].problem and not table[1].problem


@pytest.mark.parametrize("header", ["ip,timestamp,value", "unique_id,ds,y"])
def test_long_sorted_by_date_within_ip_labels_as_written(tmp_path, header):
    text = header + "\nb,2026-01-02 00:00,2\na,2026-01-02,20\nb,2026-01-01 00:00,1\na,2026-01-01,10\n"
    table = read_table(write(tmp_path, text))
    assert [s.ip for s in table] == ["b", "a"]
    assert table[0].labels == ["2026-01-01 00:00", "2026-01-02 00:00"] and list(table[0].values) == [1, 2]
    assert list(table[1].values) == [10, 20]


def test_long_numbers_order_numerically_and_text_lexically(tmp_path):
    numeric = read_table(write(tmp_path, "ip,timestamp,value\na,10,1\na,9,2\n"))
    assert numeric[0].labels == ["9", "10"]
    text = read_table(write(tmp_path, "ip,timestamp,value\na,w10,1\na,w09,2\n", "u.csv"))
    assert text[0].labels == ["w09", "w10"]


def test_long_duplicate_timestamp_is_a_problem(tmp_path):
    table = read_table(write(tmp_path, "ip,timestamp,value\na,1,1\na,1,2\n"))
    assert "duplicate timestamp" in table[0].problem


def test_layout_override(tmp_path):
    table = read_table(write(tmp_path, "ip,timestamp,value\na,1,2\n"), layout="wide")
    assert table[0].labels == ["timestamp", "value"]


@pytest.mark.parametrize("text", ["", "ip\n", "ip,a\n"])
def test_unusable_tables_raise_usage_error(tmp_path, text):
    with pytest.raises(UsageError):
        read_table(write(tmp_path, text))


def test_missing_table(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        read_table(str(tmp_path / "nope.csv"))


# Each IP's labels in the file's row order, the label, and each IP's labels after it.
SINCE_CASES = {
    "numbers": ({"a": ["9", "10", "100", "11"], "b": ["2", "9.0", "12"], "c": ["1", "9"]}, "10",
                {"a": ["11", "100"], "b": ["12"], "c": []}),
    "dates": ({"a": ["2026-01-02 00:00", "2026-01-01T12:00", "2026-01-01 06:00"],
               "b": ["2026-01-01T12:00:00+01:00", "2026-01-03"], "c": ["2026-01-01"]}, "2026-01-01T12:00",
              {"a": ["2026-01-02 00:00"], "b": ["2026-01-03"], "c": []}),
    "text": ({"a": ["w10", "w09", "w11"], "b": ["w1", "w2", "x"], "c": ["w09"]}, "w10",
             {"a": ["w11"], "b": ["w2", "x"], "c": []}),
}


@pytest.mark.parametrize("kind", SINCE_CASES)
def test_since_picks_the_points_after_the_label_in_the_tables_order(tmp_path, kind):
    stamps, label, after = SINCE_CASES[kind]
    rows = [f"{ip},{stamp},1" for ip, labels in stamps.items() for stamp in labels]
    table = read_table(write(tmp_path, "ip,timestamp,value\n" + "\n".join(rows) + "\n"))
    found = {series.ip: series.labels[first:] for series, first in zip(table, first_after(table, label))}
    assert found == after


def test_since_in_a_wide_table_is_a_column_and_must_exist(tmp_path):
    table = read_table(write(tmp_path, "ip,3,1,2\nx,1,2,3\ny,4,5,6\n"))
    assert first_after(table, "1") == [2, 2]  # columns are in time order: "after" is to the right
    assert first_after(table, "2") == [3, 3]
    with pytest.raises(UsageError, match="'4' is not a column header"):
        first_after(table, "4")
    long = read_table(write(tmp_path, "ip,timestamp,value\na,1,1\n", "l.csv"))
    with pytest.raises(UsageError, match="'1.0' is not a timestamp of any IP"):
        first_after(long, "1.0")  # as written: the same number written otherwise is not the label
