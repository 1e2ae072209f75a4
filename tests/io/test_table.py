import csv
import gzip

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


def test_wide_labels_are_as_written_when_repeated_empty_or_quoted(tmp_path):
    """pandas would name them `b.1`, `Unnamed: 4` and `b.2`; the output keeps each label as written."""
    table = read_table(write(tmp_path, 'ip,b,b,c,,"b"\n10.0.0.1,1,2,3,4,5\n'))
    assert table[0].labels == ["b", "b", "c", "", "b"]
    assert table[0].values.tolist() == [1, 2, 3, 4, 5]


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
            first[ip] = numbers(cells)
    return [(ip, values, len(lines[ip]) > 1 and lines[ip]) for ip, values in first.items()]


def numbers(cells) -> np.ndarray:
    """A series' cells as design §2 reads them: pd.to_numeric, and an infinity (no measurement) NaN."""
    values = pd.to_numeric(pd.Series(list(cells), dtype=object), errors="coerce").to_numpy(dtype=float)
    return np.where(np.isinf(values), np.nan, values)


def same_numbers(a, b):
    return a.shape == b.shape and bool(np.all((a == b) & (np.signbit(a) == np.signbit(b)) | np.isnan(a) & np.isnan(b)))


def check_wide(path):
    expected = reference_wide(path)
    if all(lines for _, _, lines in expected):  # a long table read as wide, as far as anyone can tell
        with pytest.raises(UsageError, match="every IP of table .* is on several lines"):
            read_table(str(path))
        return
    table = read_table(str(path))
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


@pytest.mark.parametrize("rows", [1, 2, 10_000])
@pytest.mark.parametrize(("header", "layout", "fix"), [
    ("ip,timestamp,value,extra", None, "a long table has exactly the columns ip,timestamp,value"),
    ("ip,timestamp,value", "wide", "leave out --layout wide")])
def test_a_long_table_read_as_wide_is_unusable_not_a_night_of_duplicates(tmp_path, monkeypatch, rows, header,
                                                                           layout, fix):
    """Every IP on several lines: exit 2 naming the likely cause, whatever the chunks, not invalid_input for all."""
    monkeypatch.setattr(readers, "CHUNK_ROWS", rows)
    extra = ",x" * (header.count(",") - 2)
    text = header + "\n" + "".join(f"h{ip},2026-01-01T{hour:02d}:00,{hour}{extra}\n" for ip in range(3)
                                   for hour in range(4))
    with pytest.raises(UsageError, match=rf"^every IP of table .* is on several lines \(h0 on 4\): it looks like a "
                                         rf"long table \(ip,timestamp,value\[,\.\.\.\]\) read as wide; {fix}"):
        read_table(write(tmp_path, text), layout=layout)


def test_a_wide_table_with_one_ip_on_one_line_is_read(tmp_path):
    table = read_table(write(tmp_path, "ip,a\nx,1\nx,2\ny,3\n"))
    assert [(s.ip, bool(s.problem)) for s in table] == [("x", True), ("y", False)]


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
        found[ip] = ([stamps[r] for r in rows], numbers(frame["value"][rows].tolist()), [key[r] for r in rows])
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
    with pytest.raises(UsageError, match="'1' heads 2 columns of the table: it names no one point"):
        after(write(tmp_path, "ip,1,2,1,3\nx,1,2,3,4\n", "twice.csv"), "1")  # once the first of them
    with pytest.raises(UsageError, match="'1.0' is not a timestamp of any IP"):
        after(write(tmp_path, "ip,timestamp,value\na,1,1\n", "l.csv"), "1.0")  # as written: the same number written otherwise is not the label


# --- every line read against its header (docs/design.md §2) ---

def reference_records(path):
    """Each record after the header by the csv module: (the physical line it starts on, its fields)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh, skipinitialspace=True)
        records, before = [], 0
        for fields in reader:
            start, before = before + 1, reader.line_num
            if fields:
                records.append((start, fields))
    return records[0][1], records[1:]


def unreadable_reference(cells):
    """The cells that are neither numbers nor missing marks."""
    values = numbers(cells)
    odd = []
    for cell, value in zip(cells, values):
        text = cell.strip()
        if np.isnan(value) and text not in readers.MISSING:
            try:
                if np.isnan(float(text)):
                    continue
            except ValueError:
                pass
            odd.append(cell)
    return odd


def check_lines(path):
    header, records = reference_records(path)
    width = len(header)
    expected, lost, seen = {}, [], {}
    for line, fields in records:
        ip = fields[0].strip()
        if len(fields) != width:
            if not ip:
                lost.append(line)
                continue
            entry = expected.setdefault(ip, {"bad": None, "values": None})
            entry["bad"] = entry["bad"] or f"line {line}: {len(fields)} fields, the header has {width}"
        elif ip not in expected:
            odd = unreadable_reference(fields[1:])
            expected[ip] = {"bad": None, "values": numbers(fields[1:]),
                            "odd": (len(odd), line, odd[0]) if odd else None}
        else:
            expected[ip].setdefault("again", True)
        seen[ip] = seen.get(ip, 0) + 1
    table = Table(str(path))
    if seen and min(seen.values()) > 1 and any(len(f) == width for _, f in records):
        with pytest.raises(UsageError, match="every IP of table .* is on several lines"):
            list(table.chunks())
        return
    series = [s for chunk in table.chunks() for s in chunk]
    assert [s.ip for s in series] == list(expected)  # nothing shifted, nothing lost, nothing made up
    for s in series:
        want = expected[s.ip]
        if want["bad"]:
            assert (s.problem or table.duplicate_problem(s.ip)).startswith(want["bad"]), (s.ip, s.problem, want)
            continue
        assert same_numbers(s.values, want["values"]), (s.ip, s.values, want["values"])
        problem = s.problem or table.duplicate_problem(s.ip)
        assert problem.startswith("line ") or ("IP appears" in problem) == bool(want.get("again")), (s.ip, problem)
        if want["odd"] and not problem:
            count, line, text = want["odd"]
            assert s.unreadable[0] == count and s.unreadable[1].startswith(f"line {line} ") and s.unreadable[2] == text
        elif not problem:
            assert s.unreadable is None, (s.ip, s.unreadable)
    assert [line.line for line in table.lost_lines] == lost


def random_line(rng, ip, width):
    cells = [random_cell(rng, 0.3) for _ in range(width - 1)]
    if rng.random() < 0.05:
        cells[int(rng.integers(0, len(cells)))] = '"12\n3"'  # a quoted cell over two lines: text, named
    if rng.random() < 0.05:
        cells[int(rng.integers(0, len(cells)))] = '"1,234"'
    change = rng.random()
    if change < 0.08:
        cells += [str(rng.integers(0, 9)) for _ in range(int(rng.integers(1, 4)))]  # more fields
    elif change < 0.14:
        cells = cells[:int(rng.integers(0, len(cells)))]  # fewer
    elif change < 0.17:
        cells.append("")  # a stray trailing comma
    return ",".join([ip, *cells])


@pytest.mark.parametrize("seed", range(8))
def test_a_line_of_other_fields_costs_only_its_own_ip(tmp_path, monkeypatch, seed):
    """Random tables with lines of more or fewer fields than the header (the first one too), blank lines,
    quoted cells over two lines, CRLF, gzip, at chunk sizes from one row up: every other IP reads as the
    rule says, ids never shift, and each bad line is named by its physical line."""
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(readers, "CHUNK_ROWS", int(rng.choice([1, 2, 3, 7, 64])))
    for trial in range(6):
        width = int(rng.integers(2, 7))
        lines = ["ip," + ",".join(f"b{j}" for j in range(width - 1))]
        for r in range(int(rng.integers(1, 40))):
            if rng.random() < 0.05:
                lines.append("")
            ip = "" if rng.random() < 0.04 else f"h{rng.integers(0, 30)}"
            lines.append(random_line(rng, ip, width))
        end = "\r\n" if rng.random() < 0.3 else "\n"
        text = end.join(lines) + (end if rng.random() < 0.8 else "")
        name = f"r{trial}.csv"
        if rng.random() < 0.3:
            path = tmp_path / (name + ".gz")
            path.write_bytes(gzip.compress(text.encode()))
        else:
            path = tmp_path / name
            path.write_bytes(text.encode())
        records = reference_records(path)[1]
        if all(len(f) != width for _, f in records):  # no line fits the header: the table is unreadable
            with pytest.raises(UsageError, match="no data rows|no line of table"):
                check_lines(path)
            continue
        check_lines(path)


def test_the_first_line_with_a_stray_comma_shifts_nothing(tmp_path):
    path = write(tmp_path, "ip,a,b\nx,1,2,\ny,3,4\nz,5,6,7,8\nw,7\n")
    table = read_table(path)
    assert [(s.ip, s.problem) for s in table] == [("x", "line 2: 4 fields, the header has 3"), ("y", ""),
                                                  ("z", "line 4: 5 fields, the header has 3"),
                                                  ("w", "line 5: 2 fields, the header has 3")]
    assert list(table[1].values) == [3.0, 4.0]


def test_a_bad_line_in_a_later_chunk_of_the_c_parsers_floats(tmp_path, monkeypatch):
    """The lines are read only from the chunk that needs them, caught up over the chunks before."""
    monkeypatch.setattr(readers, "CHUNK_ROWS", 3)
    rows = [f"h{i},{i},{i + 1}" for i in range(12)]
    rows[8] += ",9,9"
    path = write(tmp_path, "ip,a,b\n" + "\n".join(rows) + "\n")
    table = read_table(path)
    assert [s.ip for s in table] == [f"h{i}" for i in range(12)]
    assert table[8].problem == "line 10: 5 fields, the header has 3"
    assert [list(s.values) for s in table if s.ip != "h8"] == [[i, i + 1] for i in range(12) if i != 8]


def test_long_bad_lines_and_timestamps_that_do_not_parse(tmp_path):
    text = ("ip,timestamp,value\na,2026-01-01,1\na,2026-01-02,2\na,not a time,5\nb,2026-01-01,1,234\n"
            "b,2026-01-02,3\nc,2026-01-01,oops\nc,2026-01-02,4\nd,2026-01-01\n,2026-01-03,1,2\ne,2026-01-03,6\n")
    table = Table(write(tmp_path, text))
    series = {s.ip: s for chunk in table.chunks() for s in chunk}
    assert list(series) == ["a", "b", "c", "d", "e"]
    assert series["a"].labels == ["2026-01-01", "2026-01-02"] and list(series["a"].values) == [1.0, 2.0]
    assert series["a"].unreadable == (1, "line 4 (timestamp)", "not a time") and not series["a"].problem
    assert series["b"].problem == "line 5: 4 fields, the header has 3"
    assert series["c"].unreadable == (1, "line 7 (value)", "oops")
    assert series["d"].problem == "line 9: 2 fields, the header has 3"
    assert [line.line for line in table.lost_lines] == [10] and table.bad_lines == 3
    assert table.last_label() == "2026-01-03"


def test_rows_vote_for_the_kind_of_timestamps_not_distinct_stamps(tmp_path):
    """Three IPs share two dates; one IP's exporter writes epoch seconds, more distinct stamps than the
    dates but fewer rows: the table is dates, and only that IP is lost, saying why."""
    rows = [f"{ip},2026-01-0{day},{day}" for ip in "abc" for day in (1, 2)]
    rows += [f"e,{1767225600 + 3600 * hour},{hour}" for hour in range(4)]
    table = read_table(write(tmp_path, "ip,timestamp,value\n" + "\n".join(rows) + "\n"))
    assert [(s.ip, s.labels, list(s.values), s.problem) for s in table[:3]] == [
        (ip, ["2026-01-01", "2026-01-02"], [1.0, 2.0], "") for ip in "abc"]
    assert table[3].problem == "its timestamps are numbers where the table's are dates (4, the first on line 8: " \
                               "'1767225600')"


def test_an_ip_none_of_whose_timestamps_reads_says_so(tmp_path):
    text = "ip,timestamp,value\na,1,1\na,2,2\nb,oops,3\nb,2026-01-01,4\nc,3,5\n"
    table = {s.ip: s for s in read_table(write(tmp_path, text))}
    assert table["b"].problem == "its timestamps are unreadable as numbers (2, the first on line 4: 'oops')"
    assert not table["a"].problem and not table["c"].problem and table["c"].labels == ["3"]


def test_parquet_text_cells_that_are_not_numbers_are_named(tmp_path):
    frame = pd.DataFrame({"ip": ["x", "y"], "a": ["1", "oops"], "b": [1.0, 2.0]})
    table = read_table(parquet_of(frame, tmp_path / "t.parquet"))
    assert table[0].unreadable is None and table[1].unreadable == (1, "row 2 (a)", "oops")


@pytest.mark.parametrize("seed", range(6))
def test_a_long_tables_bad_lines_cost_only_their_ips(tmp_path, monkeypatch, seed):
    """Random long tables of dates with rows of other fields and timestamps that are not times: every other
    IP's series is the one of the table without those rows, in time order."""
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(readers, "CHUNK_ROWS", int(rng.choice([1, 3, 50])))
    for trial in range(6):
        rows = []
        for _ in range(int(rng.integers(1, 40))):
            ip, day = f"h{rng.integers(0, 8)}", f"2026-01-{rng.integers(1, 29):02d}"
            value = random_cell(rng, 0.3)
            change = rng.random()
            if change < 0.1:
                rows.append(f"{ip},{day},{value},{rng.integers(0, 9)}")
            elif change < 0.15:
                rows.append(f"{ip},{day}")
            elif change < 0.2:
                rows.append(f"{ip},not a time,{value}")
            else:
                rows.append(f"{ip},{day},{value}")
        path = write(tmp_path, "ip,timestamp,value\n" + "\n".join(rows) + "\n", f"b{trial}.csv")
        _, records = reference_records(path)
        bad, good = {}, {}
        for line, cells in records:
            ip = cells[0].strip()
            if len(cells) != 3:
                bad.setdefault(ip, f"line {line}: {len(cells)} fields, the header has 3")
            good.setdefault(ip, [])
            if len(cells) == 3 and cells[1] != "not a time":
                good[ip].append((pd.Timestamp(cells[1]), len(good[ip]), cells[1], cells[2]))
        dated = sum(len(cells) == 3 and cells[1] != "not a time" for _, cells in records)
        if dated * 2 <= sum(len(cells) == 3 for _, cells in records):
            continue  # mostly not times: the table sorts as text
        table = read_table(path)
        assert [s.ip for s in table] == list(good)
        for series in table:
            if series.ip in bad:
                assert series.problem.startswith(bad[series.ip]), (series.ip, series.problem)
                continue
            points = sorted(good[series.ip])
            assert series.labels == [p[2] for p in points]
            assert same_numbers(series.values, numbers([p[3] for p in points])), series.ip


@pytest.mark.parametrize("text", ["ip,a,b,\nx,1,2\ny,3,4\n", "ip,a\nx,1,\ny,2,\n", "ip,timestamp,value\nx,1\n"])
def test_a_table_none_of_whose_lines_fits_its_header_is_unreadable(tmp_path, text):
    """A header with a trailing comma, or every line with one: the table is read wrong as a whole (exit 2)."""
    with pytest.raises(UsageError, match=r"no line of table .* has the header's \d fields \(line 2: "):
        read_table(write(tmp_path, text))


def test_an_infinite_timestamp_among_numbers_is_unreadable_not_the_latest_point(tmp_path):
    text = "ip,timestamp,value\na,1,1\na,inf,9\na,2,2\nb,1e999,8\nb,1,1\nb,2,2\nb,3,3\n"
    table = {s.ip: s for s in read_table(write(tmp_path, text))}
    assert table["a"].labels == ["1", "2"] and list(table["a"].values) == [1.0, 2.0]
    assert table["a"].unreadable == (1, "line 3 (timestamp)", "inf") and not table["a"].problem
    assert table["b"].labels == ["1", "2", "3"] and table["b"].unreadable == (1, "line 5 (timestamp)", "1e999")
