"""The table's file read in chunks, and how a cell becomes a number (io/readers.py), on real CSV and Parquet files.

The rule (docs/design.md §2): a cell's number is what pd.to_numeric makes of the IP's series of cells, anything
that is not a number NaN. test_table.py checks the tables read_table builds from these chunks.
"""
from __future__ import annotations

import decimal
import os
import zipfile

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import without_blocking

from batchpredict.errors import UsageError
from batchpredict.io import readers
from batchpredict.io.readers import (
    CsvFile,
    ParquetFile,
    float_values,
    integer_groups,
    integer_rows,
    open_table_file,
    read_text_csv,
    read_text_records,
    row_numbers,
    text_numbers,
)

TOKENS = ["1", "-0", "0", "+0", "-00", "1.5", "-0.0", "", " ", "x", "nan", "NaN", "inf", "-inf", "NA", "None", "True",
          "false", "1e5", "1E-3", "9007199254740993", "18446744073709551615", "1_000", "0x10", " 7", "7 ", "-", "?",
          ".5", "5.", "1e400", "00012", "-1"]


def same_numbers(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal as numbers and in sign, -0.0 against 0.0 included; NaN equal to NaN."""
    return a.shape == b.shape and bool(np.all((a == b) & (np.signbit(a) == np.signbit(b)) | np.isnan(a) & np.isnan(b)))


def random_rows(rng: np.random.Generator, rows: int, width: int) -> list[list[str]]:
    """Rows of junk, integers only (some with a negative zero), NaN marks and decimals."""
    def cell(integers: float) -> str:
        if rng.random() < integers:
            return str(rng.choice(["0", "1", "-3", "40", "-0"]))
        return str(rng.choice(TOKENS)) if rng.random() < 0.5 else f"{rng.uniform(-1e3, 1e3):.{rng.integers(0, 18)}f}"

    return [[cell(float(rng.choice([0.0, 0.9, 1.0]))) for _ in range(width)] for _ in range(rows)]


def write(tmp_path, text: str, name: str = "t.csv") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- how a cell becomes a number ---

def test_a_cell_that_is_no_number_is_nan_and_minus_zero_depends_on_its_series():
    """In a series of integers only, "-0" is the integer 0 (0.0); beside a NaN it is read as a float, -0.0. An
    infinity, written or by overflow, is no measurement: NaN, as an unreadable cell."""
    values = text_numbers(["1", " 2", "1.5", "1e400", "x", "", "NA", "True", "0x10", "1_000", "-inf"])
    assert same_numbers(values, np.array([1, 2, 1.5] + [np.nan] * 8))
    assert same_numbers(text_numbers(["-0", "1"]), np.array([0.0, 1.0]))
    assert same_numbers(text_numbers(["-0", "x"]), np.array([-0.0, np.nan]))


def test_float_values_read_every_cell_as_in_a_series_of_floats_and_keep_the_shape():
    cells = np.array([["-0", "1"], ["x", "2.5"], ["-00", "7"]], dtype=object)
    assert same_numbers(float_values(cells), np.array([[-0.0, 1], [np.nan, 2.5], [-0.0, 7]]))


@pytest.mark.parametrize("seed", range(4))
def test_row_numbers_are_each_rows_text_numbers(seed):
    rng = np.random.default_rng(seed)
    block = np.array(random_rows(rng, 200, int(rng.integers(1, 6))), dtype=object)
    numbers = row_numbers(block)
    for row in range(len(block)):
        assert same_numbers(numbers[row], text_numbers(block[row])), block[row]


@pytest.mark.parametrize("seed", range(4))
def test_only_the_rows_and_groups_integer_rows_names_read_otherwise_as_a_series(seed):
    """A row (or a group of an IP's values) whose cells read as floats differ from the row read as a series
    is one integer_rows (integer_groups) names: a series without NaN holding a -0.0."""
    rng = np.random.default_rng(seed)
    block = np.array(random_rows(rng, 300, 3), dtype=object)
    floats = float_values(block)
    differ = np.array([not same_numbers(floats[r], text_numbers(block[r])) for r in range(len(block))])
    named = integer_rows(floats)
    assert differ.any() and not (differ & ~named).any()
    assert (named == (~np.isnan(floats).any(axis=1) & (np.signbit(floats) & (floats == 0)).any(axis=1))).all()
    groups = np.repeat(np.arange(len(block)), 3)  # each row a group of three values
    assert integer_groups(groups, floats.ravel(), len(block)).tolist() == np.flatnonzero(named).tolist()


# --- which reader, and what it says of a file it cannot read ---

def parquet(tmp_path, table: pa.Table, name: str = "t.parquet", row_group_size: int = 2) -> str:
    pq.write_table(table, tmp_path / name, row_group_size=row_group_size)
    return str(tmp_path / name)


def test_parquet_is_known_by_its_name_or_by_its_magic_at_both_ends(tmp_path):
    table = pa.table({"ip": ["x"], "a": [1.0]})
    for name in ("t.parquet", "T.PQ", "t.data"):
        assert isinstance(open_table_file(parquet(tmp_path, table, name)), ParquetFile), name
    (tmp_path / "head").write_bytes(b"PAR1ip,a\nx,1\n")  # the magic at the start only
    (tmp_path / "tiny").write_bytes(b"P")
    for name in ("head", "tiny"):
        assert isinstance(open_table_file(str(tmp_path / name)), CsvFile), name
    assert isinstance(open_table_file(write(tmp_path, "ip,a\nx,1\n")), CsvFile)


@pytest.mark.parametrize(("name", "content", "message"), [
    ("none.csv", None, r"^table not found: .*none\.csv$"),
    ("none.parquet", None, r"^table not found: .*none\.parquet$"),
    ("empty.csv", b"", r"^cannot read table .*empty\.csv: No columns to parse from file$"),
    ("bad.parquet", b"PAR1 not really", r"^cannot read table .*bad\.parquet: "),
])
def test_a_file_that_cannot_be_opened_is_a_usage_error_naming_it(tmp_path, name, content, message):
    if content is not None:
        (tmp_path / name).write_bytes(content)
    with pytest.raises(UsageError, match=message):
        open_table_file(str(tmp_path / name))


def test_a_fifo_or_a_device_is_a_usage_error_at_once_not_a_run_blocked_for_good(tmp_path):
    fifo = tmp_path / "t.csv"
    os.mkfifo(fifo)
    for read, what in ((lambda path: open_table_file(path), "table"),
                       (lambda path: read_text_records(path, "results"), "results")):
        for path in (str(fifo), os.devnull):
            raised = without_blocking(lambda: read(path), fifo)  # noqa: B023 - called before the loop goes on
            assert isinstance(raised, UsageError), (what, path, raised)
            assert str(raised) == f"cannot read {what} {path}: not a regular file (a FIFO or a device?)"


def test_an_archive_pandas_cannot_take_is_a_usage_error_naming_it(tmp_path):
    with zipfile.ZipFile(tmp_path / "two.csv.zip", "w") as archive:
        archive.writestr("a.csv", "ip,a\nx,1\n")
        archive.writestr("b.csv", "ip,a\ny,2\n")
    zipfile.ZipFile(tmp_path / "none.csv.zip", "w").close()
    (tmp_path / "other.csv.zip").write_bytes(b"PK\x03\x04" + b"\0" * 64)
    (tmp_path / "other.csv.tar").write_bytes(b"x" * 1024)
    names = ["two.csv.zip", "none.csv.zip", "other.csv.zip", "other.csv.tar"]
    try:
        import zstandard  # noqa: F401 - installed: a .zst of other bytes is the codec's error, an OSError
    except ImportError:
        (tmp_path / "t.csv.zst").write_bytes(b"(\xb5/\xfd" + b"\0" * 16)
        names.append("t.csv.zst")
    for name in names:
        for read in (open_table_file, lambda path: read_text_records(path, "table")):
            with pytest.raises(UsageError, match=rf"^cannot read table .*{name}: "):
                read(str(tmp_path / name))


def test_bytes_that_are_not_utf8_cost_their_cell_or_id_in_a_data_line_and_the_file_in_the_header(tmp_path):
    (tmp_path / "latin.csv").write_bytes(b"ip,a,b\nx,\xff\xfe,1\ny\xe9,2,3\nz,4,5\n")
    (ids, block, notes), = CsvFile(str(tmp_path / "latin.csv")).wide_chunks()
    assert ids == ["x", "y\ufffd", "z"] and block[:, 1].tolist() == [1, 3, 5] and np.isnan(block[0, 0])
    assert notes.unreadable == {0: (1, 0, "\ufffd\ufffd")}
    for name, content in (("head.csv", b"ip,caf\xe9\nx,1\n"), ("utf16.csv", "ip,a\nx,1\n".encode("utf-16")),
                          ("utf16le.csv", "ip,a\nx,1\n".encode("utf-16-le"))):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(UsageError, match=rf"^cannot read table .*{name}: its header is not UTF-8 text"):
            CsvFile(str(tmp_path / name))


def test_read_text_csv_keeps_every_cell_as_written_past_leading_spaces(tmp_path):
    frame = read_text_csv(write(tmp_path, "ip, a\n  x,NA\ny, 1 \nz,\n"), "std file")
    assert frame.columns.tolist() == ["ip", "a"] and frame.values.tolist() == [["x", "NA"], ["y", "1 "], ["z", ""]]
    with pytest.raises(UsageError, match=r"^std file not found: .*nope\.csv$"):
        read_text_csv(str(tmp_path / "nope.csv"), "std file")
    with pytest.raises(UsageError, match=r"^cannot read std file .*: \[Errno 21\] Is a directory"):
        read_text_csv(str(tmp_path), "std file")


def test_read_text_records_reads_every_line_against_the_header(tmp_path):
    """A first line with a stray comma shifts nothing (pandas made the first column the index): it, a short line
    and lines longer still are left out and named, each by its physical line."""
    frame, bad = read_text_records(write(tmp_path, "ip,a,b\nx,1,2,\ny,3,4\n\nz,5\nw,6,7,8,9\nv,8,9\n"), "labels")
    assert frame.columns.tolist() == ["ip", "a", "b"] and frame.values.tolist() == [["y", "3", "4"], ["v", "8", "9"]]
    assert [(line.line, line.fields, line.first) for line in bad] == [(2, 4, "x"), (5, 2, "z"), (6, 5, "w")]
    with pytest.raises(UsageError, match=r"^no line of labels .* has the header's 3 fields \(line 2: 4 fields, "
                                         r"the header has 3\)$"):
        read_text_records(write(tmp_path, "ip,a,b\nx,1,2,\ny,3,4,\n", "all.csv"), "labels")


# --- CSV in chunks ---

def wide_csv(tmp_path, rows: list[list[str]], name: str = "w.csv") -> str:
    width = len(rows[0])
    return write(tmp_path, "ip," + ",".join(f"b{j}" for j in range(width)) + "\n"
                 + "".join(f"ip{r}," + ",".join(row) + "\n" for r, row in enumerate(rows)), name)


@pytest.mark.parametrize("seed", range(5))
def test_csv_chunks_of_any_size_give_each_rows_numbers_by_the_rule(tmp_path, monkeypatch, seed):
    """Whether a chunk goes the C parser's way or the text way (from the first cell it cannot parse, or a
    row the integer rule could change), its numbers are text_numbers of each row's cells."""
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(readers, "CHUNK_ROWS", int(rng.choice([1, 2, 5, 64])))
    for trial in range(4):
        rows = random_rows(rng, int(rng.integers(1, 40)), int(rng.integers(1, 5)))
        if trial % 2:  # numbers and NaN marks only: the C parser's way as far as the integer rule allows
            rows = [[c if c in readers.MISSING or c.lstrip("-").replace(".", "").isdigit() else "1.5" for c in row]
                    for row in rows]
        chunks = list(CsvFile(wide_csv(tmp_path, rows, f"w{trial}.csv")).wide_chunks())
        assert all(0 < len(ids) <= readers.CHUNK_ROWS for ids, _, _ in chunks)
        assert [i for ids, _, _ in chunks for i in ids] == [f"ip{r}" for r in range(len(rows))]
        values = np.concatenate([v for _, v, _ in chunks])
        for r, row in enumerate(rows):
            assert same_numbers(values[r], text_numbers(row)), row


def test_a_row_of_integers_with_a_minus_zero_and_a_column_of_booleans(tmp_path, monkeypatch):
    """The C parser would read "-0" as -0.0 and True and false as 1.0 and 0.0; the rule says 0.0 and NaN."""
    monkeypatch.setattr(readers, "CHUNK_ROWS", 1)
    path = write(tmp_path, "ip,a,b\nz,True,false\nx,-0,1\ny,-0,\n")  # the booleans first, while chunks go fast
    chunks = list(CsvFile(path).wide_chunks())
    assert [ids for ids, _, _ in chunks] == [["z"], ["x"], ["y"]]
    values = np.concatenate([v for _, v, _ in chunks])
    assert same_numbers(values, np.array([[np.nan, np.nan], [0.0, 1.0], [-0.0, np.nan]]))


def test_a_header_only_csv_has_no_chunks(tmp_path):
    assert list(CsvFile(write(tmp_path, "ip,a,b\n")).wide_chunks()) == []
    assert CsvFile(write(tmp_path, "ip, a ,b\n", "h.csv")).header == ["ip", "a ", "b"]


def test_long_csv_chunks_code_ips_and_timestamps_as_written(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "CHUNK_ROWS", 3)
    path = write(tmp_path, "ip,timestamp,value\na,1,2\n b,2,x\na,2,-0\nb\nc,1,7\n")
    (ips, stamps, values, _), (ips2, stamps2, values2, _) = CsvFile(path).long_chunks()
    assert [ips[1][c] for c in ips[0]] == ["a", "b", "a"] and [stamps[1][c] for c in stamps[0]] == ["1", "2", "2"]
    assert same_numbers(values, np.array([2.0, np.nan, -0.0]))  # one value a series: read as floats
    assert [ips2[1][c] for c in ips2[0]] == ["b", "c"] and [stamps2[1][c] for c in stamps2[0]] == ["", "1"]
    assert same_numbers(values2, np.array([np.nan, 7.0]))


def test_cells_read_one_column_again_at_rows_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "CHUNK_ROWS", 2)
    path = write(tmp_path, "ip,a\nx,-0\ny, 1.50\nz,True\nw,0x10\nv,\n")
    assert CsvFile(path).cells(1, np.array([0, 1, 3, 4])) == ["-0", "1.50", "0x10", ""]
    assert CsvFile(path).cells(0, np.array([2])) == ["z"]


# --- Parquet in batches ---

def test_parquet_wide_numbers_as_stored_text_as_a_csvs_cells_anything_else_nan_and_named(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "CHUNK_ROWS", 2)
    table = pa.table({
        "ip": pa.array(["a", None, "c"]),
        "int": pa.array([1, 2, 3], pa.int64()),
        "decimal": pa.array([decimal.Decimal("1.25"), None, decimal.Decimal("3")], pa.decimal128(5, 2)),
        "text": pa.array(["-0", "x", None]),  # each cell on its own, as float_values reads it
        "bool": pa.array([True, False, None]),
        "time": pa.array(pd.to_datetime(["2026-01-01", "2026-01-02", "2026-01-03"])),
        "dictionary": pa.array(["1.5", "2", "1.5"]).dictionary_encode(),
        "float": pa.array([1.5, None, -0.0]),
    })
    file = open_table_file(parquet(tmp_path, table, "t.data"))
    assert file.header == ["ip", "int", "decimal", "text", "bool", "time", "dictionary", "float"]
    chunks = list(file.wide_chunks())
    assert [ids for ids, _, _ in chunks] == [["a", ""], ["c"]]  # a missing id is an empty one
    nan = np.nan
    assert same_numbers(np.concatenate([v for _, v, _ in chunks]), np.array([
        [1, 1.25, -0.0, nan, nan, 1.5, 1.5], [2, nan, nan, nan, nan, 2, nan], [3, 3, nan, nan, nan, 1.5, -0.0]]))
    # The text that is no number and every time there is, named: (how many, the first's column, its text); the
    # booleans are missing cells, as a CSV's true and false are.
    assert [notes.unreadable for _, _, notes in chunks] == [
        {0: (1, 4, "2026-01-01 00:00:00"), 1: (2, 2, "x")}, {0: (1, 4, "2026-01-03 00:00:00")}]


def test_parquet_long_codes_with_a_missing_cell_as_none(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "CHUNK_ROWS", 2)
    table = pa.table({"ip": pa.array([7, 8, 7]),  # ids of any type, as text
                      "ds": pa.array(pd.to_datetime(["2026-01-02", "2026-01-01", None])),
                      "y": pa.array(["1", "-0", "x"])})
    (ips, stamps, values, _), (ips2, stamps2, values2, _) = open_table_file(parquet(tmp_path, table)).long_chunks()
    assert [ips[1][c] for c in ips[0]] == ["7", "8"] and [s[:10] for s in stamps[1]] == ["2026-01-02", "2026-01-01"]
    assert same_numbers(values, np.array([1.0, -0.0]))
    assert [ips2[1][c] for c in ips2[0]] == ["7"] and stamps2[1] == [None] and np.isnan(values2).all()


def test_a_parquet_id_or_timestamp_column_of_a_type_without_text_is_a_usage_error_naming_it(tmp_path):
    values = pa.array([1.0, 2.0])
    for columns, chunks, name, kind in (
            ({"ip": pa.array([[1], [2]]), "a": values}, "wide_chunks", "ip", "list<element: int64>"),
            ({"ip": pa.array([{"x": 1}, {"x": 2}]), "a": values}, "wide_chunks", "ip", "struct<x: int64>"),
            ({"ip": pa.array(["a", "b"]), "timestamp": pa.array([[1], [2]]), "value": values}, "long_chunks",
             "timestamp", "list<element: int64>")):
        path = parquet(tmp_path, pa.table(columns), f"{chunks}-{name}.parquet")
        with pytest.raises(UsageError, match=rf"^cannot read table .*: its column '{name}' is {kind}, not text$"):
            list(getattr(ParquetFile(path), chunks)())


def test_an_infinity_stored_in_parquet_is_an_unreadable_cell_as_in_a_csv(tmp_path):
    table = pa.table({"ip": pa.array(["a", "b"]), "t0": pa.array([1.5, np.inf]), "t1": pa.array([-np.inf, 2.0])})
    [(ids, values, notes)] = list(open_table_file(parquet(tmp_path, table, "t.parquet")).wide_chunks())
    assert same_numbers(values, np.array([[1.5, np.nan], [np.nan, 2.0]]))
    assert notes.unreadable == {0: (1, 1, "-inf"), 1: (1, 0, "inf")}
