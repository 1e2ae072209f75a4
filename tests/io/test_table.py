import numpy as np
import pandas as pd
import pytest

from batchpredict.errors import UsageError
from batchpredict.io import table as table_module
from batchpredict.io import readers
from batchpredict.io.table import Table, read_table


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


# --- reading in chunks: every case against the rule read the slow way, whole file and row by row ---

def reference_wide(path):
    """Design §2 the straightforward way: every cell as text, each row's cells through pd.to_numeric."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    first, lines = {}, {}
    for row in range(len(frame)):
        ip = frame.iloc[row, 0].strip()
        lines.setdefault(ip, []).append(row + 2)
        if ip not in first:
            cells = pd.Series(frame.iloc[row, 1:].tolist(), dtype=object)
            first[ip] = pd.to_numeric(cells, errors="coerce").to_numpy(dtype=float)
    return [(ip, values, len(lines[ip]) > 1 and lines[ip]) for ip, values in first.items()]


def same_numbers(a, b):
    return a.shape == b.shape and bool(np.all((a == b) & (np.signbit(a) == np.signbit(b)) | np.isnan(a) & np.isnan(b)))


def check_wide(path):
    table = read_table(str(path))
    expected = reference_wide(path)
    assert [s.ip for s in table] == [ip for ip, _, _ in expected]
    for series, (ip, values, lines) in zip(table, expected):
        assert same_numbers(series.values, values), (ip, series.values, values)
        assert (f"(lines {', '.join(map(str, lines))})" in series.problem) if lines else not series.problem


TOKENS = ["1", "-0", "0", "+0", "-00", "1.5", "-0.0", "", " ", "x", "nan", "NaN", "inf", "-inf", "Infinity", "NA",
          "None", "True", "false", "1e5", "1E-3", "9007199254740993", "18446744073709551615", "-9223372036854775809",
          "1_000", "0x10", "١", " 7", "7 ", "-", "?", ".5", "5.", "1e400", "00012", "123456789012345678901234", "-1"]


def random_cell(rng, integers):
    if rng.random() < integers:
        return str(rng.choice([0, 1, 2, -3, 40]))
    if rng.random() < 0.1:
        return rng.choice(["-0", "-00", "+0"])
    if rng.random() < 0.3:
        return rng.choice(TOKENS)
    return f"{rng.uniform(-1e3, 1e3):.{rng.integers(0, 18)}f}"


@pytest.mark.parametrize("seed", range(6))
def test_chunks_of_any_size_read_as_the_whole_file_row_by_row(tmp_path, monkeypatch, seed):
    """Junk, integers only, negative zeros, NaN marks, duplicates across chunk boundaries, at chunk sizes
    from one row up: each chunk goes the C parser's way or the text way, and both agree with the rule."""
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(readers, "CHUNK_ROWS", int(rng.choice([1, 2, 3, 7, 64])))
    for trial in range(8):
        rows, width = int(rng.integers(1, 50)), int(rng.integers(1, 6))
        integers = float(rng.choice([0.0, 0.6, 0.97, 1.0]))
        ids = [str(rng.choice(["a", "b", " c", "d "])) + str(rng.integers(0, rows // 2 + 1)) for _ in range(rows)]
        text = "ip," + ",".join(f"b{j}" for j in range(width)) + "\n" + "".join(
            ",".join([ids[r]] + [random_cell(rng, integers) for _ in range(width)]) + "\n" for r in range(rows))
        check_wide(write(tmp_path, text, f"w{trial}.csv"))


def test_a_duplicate_chunks_apart_lists_every_line(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "CHUNK_ROWS", 2)
    path = write(tmp_path, "ip,a\nx,1\ny,2\n x,3\nz,4\nw,5\nx ,6\n")
    table = read_table(path)
    assert [s.ip for s in table] == ["x", "y", "z", "w"]
    assert table[0].problem == "IP appears 3 times in the table (lines 2, 4, 7)"
    assert list(table[0].values) == [1.0]


def test_whitespace_around_ids_and_cells(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "CHUNK_ROWS", 1)
    table = read_table(write(tmp_path, "ip, a ,b\n  10.0.0.1\t, 1 ,  2\n10.0.0.2,3 , x \n"))
    assert [s.ip for s in table] == ["10.0.0.1", "10.0.0.2"]
    assert table[0].labels == ["a ", "b"]  # labels as written, past the leading spaces
    assert list(table[0].values) == [1.0, 2.0] and table[1].values[0] == 3.0 and np.isnan(table[1].values[1])


def test_a_column_of_true_and_false_is_not_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "CHUNK_ROWS", 1)  # a one-row chunk: the C parser would say 1.0 and 0.0
    table = read_table(write(tmp_path, "ip,a,b\nx,True,1\ny,false,2\n"))
    assert np.isnan(table[0].values[0]) and np.isnan(table[1].values[0])


@pytest.mark.parametrize("text", ["", "\n", "ip,a\n", "ip\nx\n", "ip,timestamp,value\n"])
def test_empty_and_header_only_tables_raise_usage_error(tmp_path, text):
    with pytest.raises(UsageError, match="no data rows|cannot read table"):
        read_table(write(tmp_path, text))


def reference_long(path):
    """Design §2's long layout the straightforward way: group by IP in order of first appearance,
    order each by its timestamps as numbers, else dates, else text, values through pd.to_numeric."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    frame.columns = ["ip", "timestamp", "value"]
    stamps = frame["timestamp"]
    key = pd.to_numeric(stamps, errors="coerce")
    if key.isna().any():
        key = pd.to_datetime(stamps, errors="coerce", format="mixed", utc=True)
        if key.isna().any():
            key = stamps
    found = {}
    for ip in dict.fromkeys(frame["ip"].str.strip()):
        rows = frame.index[frame["ip"].str.strip() == ip]
        rows = sorted(rows, key=lambda r: key[r])  # sorted() is stable: equal times keep the table's order
        values = pd.to_numeric(pd.Series(frame["value"][rows].tolist(), dtype=object), errors="coerce")
        found[ip] = ([stamps[r] for r in rows], values.to_numpy(dtype=float), [key[r] for r in rows])
    return found


@pytest.mark.parametrize("seed", range(4))
def test_long_tables_in_chunks_read_as_the_rule_says(tmp_path, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(readers, "CHUNK_ROWS", int(rng.choice([1, 3, 50])))
    monkeypatch.setattr(table_module, "CHUNK_IPS", 2)
    stamp = {"numbers": lambda: str(rng.integers(0, 40)), "dates": lambda: f"2026-01-{rng.integers(1, 29):02d}",
             "text": lambda: str(rng.choice(["w1", "w10", "w2", "2026-01-01", "7"]))}
    for trial, kind in enumerate(["numbers", "dates", "text"] * 2):
        integers = float(rng.choice([0.0, 0.9, 1.0]))
        rows = [f"{rng.choice(['a', 'b', ' b', 'c'])},{stamp[kind]()},{random_cell(rng, integers)}"
                for _ in range(int(rng.integers(1, 40)))]
        path = write(tmp_path, "ip,timestamp,value\n" + "\n".join(rows) + "\n", f"l{trial}.csv")
        expected = reference_long(path)
        table = read_table(path)
        assert [s.ip for s in table] == list(expected)
        for series in table:
            labels, values, keys = expected[series.ip]
            assert series.labels == labels and same_numbers(series.values, values), series.ip
            repeated = [labels[i] for i in range(1, len(keys)) if keys[i] == keys[i - 1]]
            assert series.problem == (f"duplicate timestamp {repeated[0]!r} for this IP" if repeated else "")


def parquet_of(frame, path):
    frame.to_parquet(path, index=False, row_group_size=3)
    return str(path)


def test_parquet_wide_reads_as_its_csv(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "CHUNK_ROWS", 2)
    frame = pd.DataFrame({"ip": ["10.0.0.1", " 10.0.0.2", "10.0.0.1", None], "a": [1.5, None, 3.0, 4.0],
                          "b": [1, 2, 3, 4], "c": ["7", "x", None, "-0"]})
    table = read_table(parquet_of(frame, tmp_path / "t.parquet"))
    assert [s.ip for s in table] == ["10.0.0.1", "10.0.0.2", ""]
    assert table[0].labels == ["a", "b", "c"] and table[0].problem.startswith("IP appears 2 times")
    assert same_numbers(np.array([s.values for s in table]), np.array([[1.5, 1, 7], [np.nan, 2, np.nan],
                                                                       [4, 4, -0.0]]))


def test_parquet_long_with_real_timestamps(tmp_path):
    stamps = pd.to_datetime(["2026-01-02", "2026-01-01", "2026-01-01", "2026-01-03"])
    frame = pd.DataFrame({"unique_id": ["b", "a", "b", "b", None], "ds": [*stamps, stamps[0]],
                          "y": [2.0, 10.0, 1.0, 3.0, 5.0]})
    frame["unique_id"] = frame["unique_id"].astype("category")  # a dictionary column
    table = read_table(parquet_of(frame, tmp_path / "t.parquet"))
    assert [s.ip for s in table] == ["b", "a", ""]  # a missing id is an empty one: invalid_input
    assert list(table[0].values) == [1.0, 2.0, 3.0] and table[0].labels[0].startswith("2026-01-01")


def test_parquet_is_known_by_its_bytes_and_a_bad_one_is_a_usage_error(tmp_path):
    frame = pd.DataFrame({"ip": ["x"], "a": [1.0]})
    assert read_table(parquet_of(frame, tmp_path / "t.data"))[0].ip == "x"  # any name: PAR1 at both ends
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(UsageError, match="cannot read table"):
        read_table(str(tmp_path / "bad.parquet"))


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


def after(path, label):
    """Each IP's labels after `label` (--since), as the coordinator asks the table for them."""
    table = Table(path)
    series = [s for chunk in table.chunks() for s in chunk]
    first = table.since(label)
    return {s.ip: s.labels[first(s):] for s in series}


@pytest.mark.parametrize("kind", SINCE_CASES)
def test_since_picks_the_points_after_the_label_in_the_tables_order(tmp_path, kind):
    stamps, label, expected = SINCE_CASES[kind]
    rows = [f"{ip},{stamp},1" for ip, labels in stamps.items() for stamp in labels]
    assert after(write(tmp_path, "ip,timestamp,value\n" + "\n".join(rows) + "\n"), label) == expected


def test_since_in_a_wide_table_is_a_column_and_must_exist(tmp_path):
    path = write(tmp_path, "ip,3,1,2\nx,1,2,3\ny,4,5,6\n")
    assert after(path, "1") == {"x": ["2"], "y": ["2"]}  # columns are in time order: "after" is to the right
    assert after(path, "2") == {"x": [], "y": []}
    with pytest.raises(UsageError, match="'4' is not a column header"):
        after(path, "4")
    with pytest.raises(UsageError, match="'1.0' is not a timestamp of any IP"):
        after(write(tmp_path, "ip,timestamp,value\na,1,1\n", "l.csv"), "1.0")  # as written: the same number written otherwise is not the label
