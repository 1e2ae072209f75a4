"""A CSV's records as its lines hold them: where each starts and how many fields it has (docs/design.md §2).

pandas' C parser pads a short line and leaves out a long one without saying which. This reads the file's
bytes beside it, and only from the first chunk that needs it, so a clean table is read once.
"""
from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

BLOCK = 1 << 22  # bytes read at a time
BOM = b"\xef\xbb\xbf"
_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class BadLine:
    """A line with other than the header's number of fields."""

    line: int    # the physical line it starts on; the header's is 1
    fields: int
    first: str   # its first field as written, stripped ("" when it has none)

    def problem(self, width: int) -> str:
        return f"line {self.line}: {self.fields} fields, the header has {width}"


class Lines:
    """The records of a CSV in order, the header first: each one's line and number of fields.

    Blocks without a quote or a lone CR are counted with numpy (a record is a line, its fields its commas
    + 1); from the first that has one, the csv module reads the rest, where a quoted field may span lines
    (a record's line is then the one it starts on). Blank lines hold no record, as for pandas.
    """

    def __init__(self, path: str, block: int = BLOCK) -> None:
        self._block_size = block
        self._handles = pd.io.common.get_handle(path, "rb", compression="infer", is_text=False)
        self._raw: Any = self._handles.handle
        self._read = 0        # physical lines read
        self._tail = b""      # the start of a line not complete yet
        self._started = False
        self._slow: Iterator[tuple[int, int, str]] | None = None
        self.width: int | None = None  # the header's fields
        self._lines, self._fields = _EMPTY, _EMPTY
        self._firsts: dict[int, str] = {}  # pending index -> first field, of records whose count is not width
        self._fill()
        if len(self._lines):
            self.width = int(self._fields[0])
            self._drop(1)

    def close(self) -> None:
        self._handles.close()

    def first_fields(self) -> int | None:
        """The fields of the first record after the header, None without one."""
        while not len(self._lines) and self._fill():
            pass
        return int(self._fields[0]) if len(self._lines) else None

    def take(self, rows: int, limit: int) -> tuple[np.ndarray, dict[int, BadLine], list[tuple[int, BadLine]]]:
        """The next `rows` records of at most `limit` fields (the parser's rows) and the longer ones among
        them (lines it left out): each row's line, the rows whose fields are not the header's, and the
        lines left out with the row they came before."""
        while np.count_nonzero(self._fields <= limit) < rows and self._fill():
            pass
        is_row = self._fields <= limit
        found = np.flatnonzero(is_row)[:rows]
        cut = int(found[-1]) + 1 if len(found) else 0
        row_of: np.ndarray = np.cumsum(is_row[:cut]) - is_row[:cut]  # each record's row, or the row it comes before
        bad: dict[int, BadLine] = {}
        absent: list[tuple[int, BadLine]] = []
        for i, first in sorted(self._firsts.items()):
            if i >= cut:
                break
            line = BadLine(int(self._lines[i]), int(self._fields[i]), first)
            if is_row[i]:
                bad[int(row_of[i])] = line
            else:
                absent.append((int(row_of[i]), line))
        lines = self._lines[found]
        self._drop(cut)
        return lines, bad, absent

    def rest(self) -> list[BadLine]:
        """Every record left: lines the parser left out after its last row."""
        while self._fill():
            pass
        found = [BadLine(int(self._lines[i]), int(self._fields[i]), first) for i, first in sorted(self._firsts.items())]
        self._drop(len(self._lines))
        return found

    def _drop(self, n: int) -> None:
        self._lines, self._fields = self._lines[n:], self._fields[n:]
        self._firsts = {i - n: first for i, first in self._firsts.items() if i >= n}

    def _fill(self) -> bool:
        """Read the next block's records into the pending ones; False at the end of the file."""
        block = self._slow_block() if self._slow is not None else self._block()
        if block is None:
            return False
        lines, fields, firsts = block
        base = len(self._lines)
        self._lines = np.concatenate((self._lines, lines))
        self._fields = np.concatenate((self._fields, fields))
        self._firsts.update({base + i: first for i, first in firsts.items()})
        return True

    def _block(self) -> tuple[np.ndarray, np.ndarray, dict[int, str]] | None:
        while True:
            more = self._raw.read(self._block_size)
            if not self._started:
                self._started, more = True, more.removeprefix(BOM)
            data = self._tail + more
            if not more:  # the end of the file
                self._tail = b""
                if not data:
                    return None
                data += b"" if data.endswith(b"\n") else b"\n"
                break
            end = data.rfind(b"\n") + 1
            if end:
                data, self._tail = data[:end], data[end:]
                break
            self._tail = data
        if b'"' in data or data.count(b"\r") != data.count(b"\r\n"):
            self._slow = self._slow_records(data + self._tail)
            self._tail = b""
            return self._slow_block()
        return self._count(data)

    def _count(self, data: bytes) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
        """The records of whole lines without quotes."""
        a = np.frombuffer(data, np.uint8)
        ends = np.flatnonzero(a == 10)
        fields = np.diff(np.searchsorted(np.flatnonzero(a == 44), ends), prepend=0) + 1
        lines = np.arange(self._read + 1, self._read + 1 + len(ends))
        self._read += len(ends)
        starts = np.concatenate(([0], ends[:-1] + 1))
        blank = [i for i in np.flatnonzero(fields == 1).tolist() if not data[starts[i]:ends[i]].strip()]
        if blank:
            keep = np.ones(len(ends), dtype=bool)
            keep[blank] = False
            fields, lines, starts, ends = fields[keep], lines[keep], starts[keep], ends[keep]
        width = self.width if self.width is not None else (int(fields[0]) if len(fields) else 0)
        odd = np.flatnonzero(fields != width)
        if self.width is None:
            odd = odd[odd > 0]
        firsts = {i: data[starts[i]:ends[i]].split(b",", 1)[0].decode("utf-8", "replace").strip()
                  for i in odd.tolist()}
        return lines, fields, firsts

    def _slow_records(self, data: bytes) -> Iterator[tuple[int, int, str]]:
        """The records of `data` and of the rest of the file, by the csv module."""
        stream: Any = io.BufferedReader(_Chain(data, self._raw))
        source = iter(io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline=""))
        for line in source:
            self._read += 1
            start = self._read
            if '"' in line:
                reader = csv.reader(_prepend(line, source), skipinitialspace=True)
                fields = next(reader, [])
                self._read += reader.line_num - 1
            elif line.strip():
                fields = line.rstrip("\r\n").split(",")
            else:
                continue  # a blank line
            yield start, len(fields), fields[0].strip() if fields else ""

    def _slow_block(self) -> tuple[np.ndarray, np.ndarray, dict[int, str]] | None:
        assert self._slow is not None
        lines: list[int] = []
        fields: list[int] = []
        firsts: dict[int, str] = {}
        for line, count, first in self._slow:
            if self.width is None and not lines:
                self.width = count
            elif count != self.width:
                firsts[len(lines)] = first
            lines.append(line)
            fields.append(count)
            if len(lines) == 100_000:
                break
        if not lines:
            return None
        return np.array(lines, dtype=np.int64), np.array(fields, dtype=np.int64), firsts


def _prepend(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    for line in rest:  # noqa: UP028 - `yield from` would close the file with this generator
        yield line


class _Chain(io.RawIOBase):
    """Bytes already read, then the rest of a file, as one stream."""

    def __init__(self, head: bytes, rest: Any) -> None:
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n], self._head = self._head[:n], self._head[n:]
            return n
        data = self._rest.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)
