"""Append-only record of finished jobs, so an interrupted run can `--resume`."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import zlib
from typing import IO, Any

import orjson

from ..errors import LockHeld, UsageError, writing
from ..result import Result
from .files import foreign


def fingerprint(table: str, store: str, settings: dict) -> str:
    """Identifies a run's inputs: the table's bytes, the store's path and the algorithm's knobs."""
    digest = hashlib.sha256()
    with open(table, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    digest.update(json.dumps([os.path.realpath(store), settings], sort_keys=True).encode())
    return digest.hexdigest()


VERSION = 2  # each line with its CRC (version 1's had none: a journal of it is another version's, not resumed)


class Journal:
    """`<out>.journal`: a header line with the fingerprint, then one JSON result per line."""

    def __init__(self, path: str, fingerprint: str) -> None:
        self.path = path
        self.fingerprint = fingerprint
        self._fh: IO[bytes] | None = None
        self._failed = False  # a write failed: what is in the file is every line written whole, and a part

    def open(self, resume: bool) -> dict[str, Result]:
        """Start the journal; with `resume`, return the results it already holds."""
        _own(self.path, "the run's journal")
        with writing(self.path):
            done = self._read() if resume and os.path.exists(self.path) else {}
            self._fh = open(self.path, "ab" if done else "wb")  # noqa: SIM115 - open for the run; close() closes it
        if not done:
            self._write({"journal": VERSION, "fingerprint": self.fingerprint})
        return done

    def _read(self) -> dict[str, Result]:
        with open(self.path, "rb+") as fh:
            data = fh.read()
            # Cut the line a killed run was writing, so that appends start on a line of their own: at a byte
            # offset, which a character's (an error's '…') is not.
            fh.truncate(data.rfind(b"\n") + 1)
        lines = data.split(b"\n")
        try:
            header = _record(lines[0])
        except ValueError:
            header = {}
        if not isinstance(header, dict) or header.get("fingerprint") != self.fingerprint:
            raise UsageError(f"{self.path} belongs to another table, store, settings or version; "
                             "rerun without --resume to start over")
        done = {}
        for line in lines[1:]:
            try:
                result = Result.from_dict(_record(line))
            except (ValueError, TypeError, KeyError):
                continue  # the cut line, the empty one after the last newline, or a damaged one: run again
            done[result.ip] = result
        return done

    def append(self, result: Result) -> None:
        self._write(result.to_dict())

    def _write(self, record: dict) -> None:
        assert self._fh is not None
        try:
            with writing(self.path):
                self._fh.write(_line(record))
                self._fh.flush()
        except BaseException:
            self._failed = True  # a line cut short is cut off by the next --resume
            raise

    def close(self, remove: bool) -> None:
        if self._fh:
            fh, self._fh = self._fh, None
            # After a failed write, closing flushes what is left of that line and may fail the same way.
            with contextlib.suppress(OSError) if self._failed else contextlib.nullcontext():
                fh.close()
        if remove and os.path.exists(self.path):
            os.unlink(self.path)


def _line(record: dict) -> bytes:
    """A record as one JSON line, then a tab (which JSON never holds raw) and the JSON's CRC32: a line changed since
    (a digit, a byte) is no result, and its job runs again on --resume. orjson's JSON (a night's result of 288
    points in a quarter of json's time), json's for what orjson refuses. A result holds no float that is not finite
    (orjson would write null for it): its points travel as the bytes of their arrays (Points.to_dict)."""
    try:
        text = orjson.dumps(record)
    except TypeError:
        text = json.dumps(record).encode()
    return b"%s\t%08x\n" % (text, zlib.crc32(text))


def _record(line: bytes) -> Any:
    """What _line wrote on `line`; ValueError where the line is not one it wrote whole."""
    text, tab, crc = line.rpartition(b"\t")
    if not tab or crc != b"%08x" % zlib.crc32(text):
        raise ValueError("not a whole journal line")
    return json.loads(text)


class Lock:
    """flock on `<out>.lock` (or `<history>/.lock`): the kernel drops it when its holder dies, so no lock goes
    stale."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> Lock:
        _own(self.path, "a lock")
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UsageError(f"cannot create the lock {self.path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockHeld(f"another run holds {self.path}; it is writing the same files") from None
        with contextlib.suppress(OSError):  # the pid is for a person to read; a full disk is the journal's to say
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _own(path: str, what: str) -> None:
    """UsageError where `path`, which the run opens in place and writes, is no regular file of its own
    (files.foreign)."""
    kind = foreign(path)
    if kind:
        raise UsageError(f"{path} is {kind}, not {what}: the run writes that file itself; remove it")


def check_writable(out: str) -> None:
    """UsageError unless a file can be created beside `out` (its folder created if need be)."""
    folder = os.path.dirname(os.path.abspath(out))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, path = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(out)}.", suffix=".check")
        os.close(fd)
        os.unlink(path)
    except OSError as exc:
        raise UsageError(f"cannot create a file beside --out {out}: {exc.strerror or exc}") from None
