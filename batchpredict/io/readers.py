"""The stats table's file, CSV or Parquet, read in chunks of rows; and how a cell becomes a number.

A cell's number is what `pd.to_numeric` makes of the IP's series of cells (docs/design.md §2):
anything that is not a number is NaN. Reading every cell as text and converting it is slow (200,000
IPs of 60 buckets: 11.9 s), so pandas' C parser reads the value columns as floats itself (0.94 s)
while every cell is a number or a MISSING mark, where it gives the same numbers. The first chunk
holding anything else, or a row the integer rule could change (`integer_rows`), sends that chunk
and the rest of the file through the text path.
"""
from __future__ import annotations

import contextlib
import itertools
import lzma
import math
import tarfile
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from ..errors import UsageError
from .files import special
from .lines import BadLine, Lines

CHUNK_ROWS = 10_000
PARQUET_MAGIC = b"PAR1"
# The missing marks: cells that hold no number and are not named for it (docs/design.md §2, the contract's
# empty, NA, N/A, NaN, null and -, as spelled), which the C parser may make NaN itself. The words for true and
# false must be here too: a column of nothing else would be parsed as booleans, 1.0 and 0.0. Any other text
# (`None`, `?`) makes the parser fail, and the text path names it.
MISSING = ["", "nan", "NaN", "NAN", "-nan", "NA", "N/A", "n/a", "NULL", "null", "-",
           "True", "TRUE", "true", "False", "FALSE", "false"]

_MARKS = frozenset(MISSING)

Chunk = TypeVar("Chunk", bound=tuple)
Codes = tuple[np.ndarray, list]  # a column's cells as (codes, distinct values), None for a missing cell


@dataclass
class Notes:
    """What a chunk's lines and cells say beside its numbers (docs/design.md §2)."""

    start: int = 0  # the file's rows before the chunk
    lines: np.ndarray | None = None  # each row's physical line (the header's is 1), where the lines were read
    bad: dict[int, BadLine] = field(default_factory=dict)  # rows whose line has other than the header's fields
    absent: list[tuple[int, BadLine]] = field(default_factory=list)  # lines the parser left out, each with
    # the row it came before
    unreadable: dict[int, tuple[int, int, str]] = field(default_factory=dict)  # row -> (cells that are not
    # numbers, the first one's column among the values, its text)
    padded: bool = False  # a row may be a short line's (its last cell is empty): its line must be read
    rows_are_lines: bool = True  # a CSV's; a Parquet file has rows only

    def where(self, row: int) -> str:
        """The row's place in the file, as an error names it: `line 14` (`row 13` in Parquet)."""
        if not self.rows_are_lines:
            return f"row {self.start + row + 1}"
        return f"line {int(self.lines[row]) if self.lines is not None else self.start + row + 2}"


def unreadable_cells(cells: np.ndarray, values: np.ndarray) -> dict[int, tuple[int, int, str]]:
    """Per row of a block (a column is a block of one), its cells that hold neither a number nor a missing
    mark (MISSING, a NaN however spelled): (how many, the first one's column, its text)."""
    if not values.size:
        return {}
    nan = np.isnan(values).reshape(len(values), -1)
    if not nan.any():
        return {}
    texts = cells.reshape(len(values), -1)
    found: dict[int, tuple[int, int, str]] = {}
    for row, column in zip(*np.nonzero(nan), strict=True):
        text = texts[row, column]
        if isinstance(text, str) and _unreadable(text):
            count, first, first_text = found.get(row, (0, int(column), text))
            found[int(row)] = (count + 1, first, first_text)
    return found


def _unreadable(text: str) -> bool:
    text = text.strip()
    if text in _MARKS:
        return False
    try:
        return not math.isnan(float(text))  # "nan", "-NaN" ...: a NaN as written, not text
    except ValueError:
        return True


def text_numbers(cells: Any) -> np.ndarray:
    """One series' cells as numbers, as pd.to_numeric reads them; anything else is NaN, and so is an infinity
    (`inf`, `1e999`): no measurement, an unreadable cell (unreadable_cells names it)."""
    numbers = np.array(pd.to_numeric(pd.Series(cells, dtype=object), errors="coerce"), dtype=float)
    numbers[np.isinf(numbers)] = np.nan
    return numbers


def float_values(cells: np.ndarray) -> np.ndarray:
    """Each cell (an array of any shape) as text_numbers reads it in a series that is not all integers."""
    # The float appended keeps to_numeric off its integer path, where "-0" would be 0.0, not -0.0.
    return text_numbers(np.append(cells.ravel(), np.nan))[:-1].reshape(cells.shape)


def integer_rows(block: np.ndarray) -> np.ndarray:
    """Rows of a block of float values that text_numbers may read otherwise as one series."""
    return _read_again(np.isnan(block).any(axis=1), _negative_zero(block).any(axis=1))


def integer_groups(group: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """The groups (values[i] belongs to group[i]) that text_numbers may read otherwise as one series."""
    missing, negative_zero = (np.bincount(group, weights=mask, minlength=groups) > 0
                              for mask in (np.isnan(values), _negative_zero(values)))
    return np.flatnonzero(_read_again(missing, negative_zero))


def _read_again(missing: np.ndarray | np.bool_, negative_zero: np.ndarray | np.bool_) -> np.ndarray:
    """The number rule: a series with no NaN may be all integers, which to_numeric reads as integers: the
    same numbers (both round correctly), except that "-0" is 0.0 there. So only a series with no NaN and
    a -0.0 can differ from its cells read as floats, and it is read again as a series."""
    return np.asarray(~missing & negative_zero)


def _negative_zero(values: np.ndarray) -> np.ndarray:
    return np.signbit(values) & (values == 0)


def row_numbers(cells: np.ndarray) -> np.ndarray:
    """text_numbers of each row of a block of text cells, with one to_numeric for the whole block."""
    block = float_values(cells)
    for row in np.flatnonzero(integer_rows(block)):
        block[row] = text_numbers(cells[row])
    return block


def open_table_file(path: str) -> TableFile:
    """Parquet by its name (.parquet, .pq) or its magic bytes at both ends, else CSV."""
    regular_file(path, "table")
    return ParquetFile(path) if _is_parquet(path) else CsvFile(path)


def regular_file(path: str, what: str) -> None:
    """UsageError where `path` is there but no regular file: a file is read more than once (its first line, then
    its chunks, its lines beside them), which a FIFO or a device cannot give, and a FIFO nobody writes to would
    block the run for good."""
    if special(path):  # a missing or unreadable path, or a folder: the reader names it
        raise UsageError(f"cannot read {what} {path}: not a regular file (a FIFO or a device?)")


def _is_parquet(path: str) -> bool:
    if path.lower().endswith((".parquet", ".pq")):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
            fh.seek(-4, 2)
            return head == PARQUET_MAGIC and fh.read(4) == PARQUET_MAGIC
    except OSError:
        return False


@contextlib.contextmanager
def _readable(path: str, what: str, errors: tuple[type[BaseException], ...]) -> Iterator[None]:
    """What pandas or pyarrow raise on a file that cannot be read, as a UsageError naming it."""
    try:
        yield
    except FileNotFoundError:
        raise UsageError(f"{what} not found: {path}") from None
    except errors as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"cannot read {what} {path}: {detail}") from None


# A compressed file cut short or not what its name says (gzip.BadGzipFile is an OSError) is unreadable too, as is
# an archive that is none (a .zip or .tar of other bytes) or whose module is not installed (.zst: zstandard).
_CSV_ERRORS = (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError, IsADirectoryError,
               PermissionError, EOFError, OSError, zlib.error, lzma.LZMAError, zipfile.BadZipFile, tarfile.TarError,
               ImportError)
# Where a file is opened and no cell is read as a number, a ValueError is the file's too: pandas' for a zip of
# several files or none. (Elsewhere a ValueError is the C parser's, meeting a cell that is no number.)
_OPEN_ERRORS = (*_CSV_ERRORS, ValueError)
_TEXT = dict(keep_default_na=False, skipinitialspace=True)  # every cell as written, leading spaces skipped


def read_text_csv(path: str, what: str, **options: Any) -> pd.DataFrame:
    """A whole CSV with every cell as written; UsageError naming `what` when it cannot be read at all."""
    # index_col=False: a first line longer than the header would make the first column the index, shifting all.
    with _readable(path, what, _OPEN_ERRORS):
        return pd.read_csv(path, dtype=str, index_col=False, **{**_TEXT, **options})


def read_text_records(path: str, what: str) -> tuple[pd.DataFrame, list[BadLine]]:
    """read_text_csv with each line read against the header, as the stats table's are (docs/design.md §2): the
    rows of lines of other fields than the header's left out, and those lines, in file order. UsageError when
    no line has the header's fields: the file is read wrong as a whole."""
    regular_file(path, what)
    with _readable(path, what, _OPEN_ERRORS):
        lines = Lines(path)
        try:
            limit = max(lines.width or 0, lines.first_fields() or 0)  # the parser's width (CsvFile.limit)
            with warnings.catch_warnings():  # pandas' warning names no line: the lines below do
                warnings.simplefilter("ignore", pd.errors.ParserWarning)
                frame = read_text_csv(path, what, on_bad_lines="skip")  # longer lines are left out, found below
            _, bad, absent = lines.take(len(frame), limit)
            rest = lines.rest()
        finally:
            lines.close()
    found = sorted([*bad.values(), *(line for _, line in absent), *rest], key=lambda line: line.line)
    if found and len(bad) == len(frame):
        raise UsageError(f"no line of {what} {path} has the header's {len(frame.columns)} fields "
                         f"({found[0].problem(len(frame.columns))})")
    return frame.drop(index=list(bad)).reset_index(drop=True), found


class CsvFile:
    """A CSV table, tokenised by pandas' C parser as a whole-file read would be, each line read against the
    header: a line of other fields is named (`Notes.bad`, `Notes.absent`), never shifts the table."""

    def __init__(self, path: str) -> None:
        self.path = path
        # The header's labels as written: pandas' own names would rename a repeated label (`x.1`) or an empty one
        # (`Unnamed: 3`), so the parser is given positions as names instead.
        first = read_text_csv(path, "table", header=None, nrows=1, encoding_errors="replace")
        self.header = [str(c) for c in first.iloc[0].tolist()] if len(first) else []
        self.names = [str(i) for i in range(len(self.header))]  # the parser's column names
        # Bytes that are not UTF-8 in a data line cost that line's cell or IP (read as U+FFFD); in the header,
        # the whole file is likely in another encoding.
        if any("\ufffd" in label or "\x00" in label for label in self.header):
            raise UsageError(f"cannot read table {path}: its header is not UTF-8 text (another encoding, UTF-16?)")
        # A first data line longer than the header sets how many fields the parser takes (index_col=False keeps
        # it from reading the extra ones as the index): it and every line up to that long are rows, truncated.
        with _readable(path, "table", _CSV_ERRORS):
            first = Lines(path, block=1 << 16)
            try:
                fields = first.first_fields()
            finally:
                first.close()
        self.limit = max(len(self.header), fields or 0)

    def wide_chunks(self) -> Iterator[tuple[list[str], np.ndarray, Notes]]:
        """(ids as written, values, notes) for each chunk of rows."""

        def fast(frame: pd.DataFrame) -> tuple[list[str], np.ndarray, Notes] | None:
            block = frame.iloc[:, 1:].to_numpy(dtype=float)
            if integer_rows(block).any() or np.isinf(block).any():  # an infinity is an unreadable cell: exact()
                return None
            return frame.iloc[:, 0].tolist(), block, Notes(padded=bool(np.isnan(block[:, -1:]).any()))

        def exact(frame: pd.DataFrame) -> tuple[list[str], np.ndarray, Notes]:
            cells = frame.iloc[:, 1:].to_numpy(dtype=object)
            block = row_numbers(cells)
            notes = Notes(unreadable=unreadable_cells(cells, block), padded=bool(np.isnan(block[:, -1:]).any()))
            return frame.iloc[:, 0].tolist(), block, notes

        return self._chunks(self.names[1:], fast, exact)

    def long_chunks(self) -> Iterator[tuple[Codes, Codes, np.ndarray, Notes]]:
        """(IP codes, timestamp codes, float values, notes) for each chunk of rows; see LongPoints."""

        def chunk(frame: pd.DataFrame, values: np.ndarray, notes: Notes) -> tuple[Codes, Codes, np.ndarray, Notes]:
            notes.padded = bool(np.isnan(values).any())
            return _factorize(frame.iloc[:, 0]), _factorize(frame.iloc[:, 1]), values, notes

        def exact(frame: pd.DataFrame) -> tuple[Codes, Codes, np.ndarray, Notes]:
            cells = frame.iloc[:, 2].to_numpy(dtype=object)
            values = float_values(cells)
            return chunk(frame, values, Notes(unreadable=unreadable_cells(cells, values)))

        def fast(frame: pd.DataFrame) -> tuple[Codes, Codes, np.ndarray, Notes] | None:
            values = frame.iloc[:, 2].to_numpy(dtype=float)
            return None if np.isinf(values).any() else chunk(frame, values, Notes())

        return self._chunks(self.names[2:3], fast, exact)

    def cells(self, column: int, rows: np.ndarray) -> list:
        """The text of one column at the given rows (sorted), read again from the file."""
        found: list = []
        start = 0
        for frame, _ in self._frames(()):
            end = start + len(frame)
            found += frame.iloc[rows[(rows >= start) & (rows < end)] - start, column].tolist()
            start = end
        return found

    def _chunks(self, numbers: list[str], fast: Callable[[pd.DataFrame], Chunk | None],
                exact: Callable[[pd.DataFrame], Chunk]) -> Iterator[Chunk]:
        """`fast` on chunks whose `numbers` columns the C parser read as floats, until a cell is neither a
        number nor MISSING or `fast` declines a chunk; from that chunk on, `exact` on chunks of text. Each
        chunk's notes name its lines that are not the header's width, once the lines are read (_Beside)."""
        beside = _Beside(self)
        try:
            done = 0
            try:
                for frame, warned in self._frames(numbers):
                    chunk = fast(frame)
                    if chunk is None:
                        break
                    yield beside.note(chunk, len(frame), warned)
                    done += 1
                else:
                    yield from beside.end(fast)
                    return
            except ValueError:  # the C parser met a cell that is not a number
                pass
            for frame, warned in itertools.islice(self._frames(()), done, None):
                yield beside.note(exact(frame), len(frame), warned)
            yield from beside.end(exact)
        finally:
            beside.close()

    def _frames(self, numbers: list[str] | tuple[()]) -> Iterator[tuple[pd.DataFrame, bool]]:
        """Each chunk of rows, and whether the parser left out a line (one with more than `limit` fields)."""
        types: dict[str, Any] = {**dict.fromkeys(self.names, object), **dict.fromkeys(numbers, np.float64)}
        with _readable(self.path, "table", _CSV_ERRORS), pd.read_csv(
                self.path, dtype=types, na_values=dict.fromkeys(numbers, MISSING), chunksize=CHUNK_ROWS,
                index_col=False, on_bad_lines="warn", encoding_errors="replace", header=0, names=self.names,
                **_TEXT) as reader:
            last: pd.DataFrame | None = None
            while True:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", pd.errors.ParserWarning)
                    frame = next(reader, None)
                warned = any(str(w.message).startswith("Skipping line") for w in caught)
                if frame is None:
                    if warned:  # the last lines were left out: an empty chunk says so
                        # The first data line sets `limit`, so some frame came before. (An empty frame of the
                        # header's columns, made up front, cost ~50 us a column: 10 s for 200,000.)
                        assert last is not None
                        yield last.iloc[:0], True
                    return
                if len(frame) or warned:
                    yield frame, warned
                last = frame


class _Beside:
    """The file's lines (lines.Lines), read beside its chunks from the first chunk that needs them: a line
    the parser left out, a row whose last cell is empty (a short line is padded), or an unreadable cell."""

    def __init__(self, file: CsvFile) -> None:
        self.file = file
        self.rows = 0
        with _readable(file.path, "table", _CSV_ERRORS):
            self.lines = Lines(file.path) if file.limit > len(file.header) else None

    def note(self, chunk: Chunk, rows: int, warned: bool) -> Chunk:
        notes: Notes = chunk[-1]
        with _readable(self.file.path, "table", _CSV_ERRORS):
            if self.lines is None and (warned or notes.padded or notes.unreadable):
                self.lines = Lines(self.file.path)
                self.lines.take(self.rows, self.file.limit)  # the rows before this chunk, planned already
            if self.lines is not None:
                notes.lines, notes.bad, notes.absent = self.lines.take(rows, self.file.limit)
        notes.start = self.rows
        self.rows += rows
        return chunk

    def end(self, make: Callable[[pd.DataFrame], Any]) -> Iterator[Any]:
        """A chunk of no rows holding the lines left out after the last row, if any."""
        if self.lines is None:
            return
        with _readable(self.file.path, "table", _CSV_ERRORS):
            rest = self.lines.rest()
        if rest:
            chunk = make(pd.DataFrame({name: pd.Series(dtype=object) for name in self.file.names}))
            notes: Notes = chunk[-1]
            notes.start, notes.lines, notes.absent = self.rows, np.zeros(0, dtype=np.int64), [(0, b) for b in rest]
            yield chunk

    def close(self) -> None:
        if self.lines is not None:
            self.lines.close()


def _factorize(column: pd.Series) -> Codes:
    codes, uniques = pd.factorize(column.to_numpy(dtype=object), use_na_sentinel=False)
    return codes, [u if isinstance(u, str) else None for u in uniques]


class ParquetFile:
    """A Parquet table (pyarrow): numeric columns are numbers as stored, text cells read as a CSV's are,
    each on its own (float_values), anything else NaN and named unreadable."""

    def __init__(self, path: str) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.path = path
        self._errors = (pa.ArrowException, OSError, ValueError)
        with _readable(path, "table", self._errors):
            self.schema = pq.read_schema(path)
        self.header = list(self.schema.names)

    def wide_chunks(self) -> Iterator[tuple[list[str], np.ndarray, Notes]]:
        self._check_texts(1)
        start = 0
        for batch in self._batches():
            read = [_parquet_numbers(column) for column in batch.columns[1:]]
            values = np.column_stack([numbers for numbers, _ in read])
            notes = Notes(start=start, rows_are_lines=False, unreadable=_unreadable_columns(read, len(values)))
            yield [ip or "" for ip in _texts(batch.column(0)).to_pylist()], values, notes
            start += len(values)

    def long_chunks(self) -> Iterator[tuple[Codes, Codes, np.ndarray, Notes]]:
        self._check_texts(2)
        start = 0
        for batch in self._batches():
            values, cells = _parquet_numbers(batch.column(2))
            notes = Notes(start=start, rows_are_lines=False,
                          unreadable=unreadable_cells(cells, values) if cells is not None else {})
            yield _dictionary(batch.column(0)), _dictionary(batch.column(1)), values, notes
            start += len(values)

    def _check_texts(self, columns: int) -> None:
        """UsageError where one of the first `columns` (the IP's, a long table's timestamps) is of a type that has
        no text (lists, structs, maps): they are read as text, and the cast would fail on the first batch."""
        import pyarrow as pa
        import pyarrow.compute as pc

        for column in list(self.schema)[:columns]:
            kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
            try:
                pc.cast(pa.array([], kind), pa.string())
            except pa.ArrowNotImplementedError:
                raise UsageError(f"cannot read table {self.path}: its column {column.name!r} is {kind}, "
                                 f"not text") from None

    def _batches(self) -> Iterator[Any]:
        import pyarrow.parquet as pq

        # Without pre_buffer, pyarrow holds a row group's pages, not every column chunk it has read.
        with _readable(self.path, "table", self._errors), pq.ParquetFile(self.path, pre_buffer=False) as file:
            for batch in file.iter_batches(batch_size=CHUNK_ROWS):
                if batch.num_rows:
                    yield batch


def _texts(column: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column if pa.types.is_string(column.type) else pc.cast(column, pa.string())


def _dictionary(column: Any) -> Codes:
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(_texts(column), null_encoding="encode")
    return encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary.to_pylist()


def _parquet_numbers(column: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """A column's numbers, and its cells where they are text (read as a CSV's)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        values = pc.cast(column, pa.float64(), safe=False).to_numpy(zero_copy_only=False)
        infinite = np.isinf(values)
        if not infinite.any():
            return values, None
        texts = np.full(len(values), None, dtype=object)
        texts[infinite] = values[infinite].astype(str)  # named unreadable, as a CSV's "inf" is
        return np.where(infinite, np.nan, values), texts
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        cells = np.array(_texts(column).to_pylist(), dtype=object)
        return float_values(cells), cells
    # Booleans, times, lists, structs hold no measurement: each cell that is there is named unreadable, as a CSV's
    # text is (a column of them was NaN with nothing said).
    cells = np.array([None if cell is None else str(cell) for cell in column.to_pylist()], dtype=object)
    return np.full(len(column), np.nan), cells


def _unreadable_columns(read: list[tuple[np.ndarray, np.ndarray | None]], rows: int) -> dict[int, tuple[int, int, str]]:
    """unreadable_cells of a batch's text columns, per row, over all of them."""
    found: dict[int, tuple[int, int, str]] = {}
    for column, (values, cells) in enumerate(read):
        if cells is None:
            continue
        for row, (count, _, text) in unreadable_cells(cells, values).items():
            total, first, first_text = found.get(row, (0, column, text))
            found[row] = (total + count, first, first_text)
    return found


TableFile = CsvFile | ParquetFile
