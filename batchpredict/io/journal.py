"""Append-only record of finished jobs, so an interrupted run can `--resume`."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
from typing import IO

from ..errors import LockHeld, UsageError
from ..result import Result


def fingerprint(table: str, store: str, settings: dict) -> str:
    """Identifies a run's inputs: the table's bytes, the store's path and the algorithm's knobs."""
    digest = hashlib.sha256()
    with open(table, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    digest.update(json.dumps([os.path.realpath(store), settings], sort_keys=True).encode())
    return digest.hexdigest()


class Journal:
    """`<out>.journal`: a header line with the fingerprint, then one JSON result per line."""

    def __init__(self, path: str, fingerprint: str) -> None:
        self.path = path
        self.fingerprint = fingerprint
        self._fh: IO[str] | None = None

    def open(self, resume: bool) -> dict[str, Result]:
        """Start the journal; with `resume`, return the results it already holds."""
        done = self._read() if resume and os.path.exists(self.path) else {}
        self._fh = open(self.path, "a" if done else "w")  # noqa: SIM115 - open for the run; close() closes it
        if not done:
            self._write({"journal": 1, "fingerprint": self.fingerprint})
        return done

    def _read(self) -> dict[str, Result]:
        with open(self.path, "r+") as fh:
            text = fh.read()
            # Cut the line a killed run was writing, so that appends start on a line of their own.
            fh.truncate(text.rfind("\n") + 1)
        lines = text.split("\n")
        try:
            header = json.loads(lines[0])
        except ValueError:
            header = {}
        if header.get("fingerprint") != self.fingerprint:
            raise UsageError(f"{self.path} belongs to another table, store or settings; "
                             "rerun without --resume to start over")
        done = {}
        for line in lines[1:]:
            try:
                result = Result.from_dict(json.loads(line))
            except (ValueError, TypeError, KeyError):
                continue  # the cut line, or the empty one after the last newline
            done[result.ip] = result
        return done

    def append(self, result: Result) -> None:
        self._write(result.to_dict())

    def _write(self, record: dict) -> None:
        assert self._fh is not None
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()

    def close(self, remove: bool) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None
        if remove and os.path.exists(self.path):
            os.unlink(self.path)


class Lock:
    """flock on `<out>.lock`: the kernel drops it when its holder dies, so no lock goes stale."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> Lock:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockHeld(f"another run holds {self.path}; it is writing the same output") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
