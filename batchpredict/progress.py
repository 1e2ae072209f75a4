"""How far a run is: a tqdm bar on a terminal, one log line every N seconds otherwise (cron).

A log file never gets a bar: its carriage returns turn a log into noise.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from typing import IO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from .result import Result

log = logging.getLogger("batchpredict")


def is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def terminal_size(stream: IO[str]) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(stream.fileno())
        return size.columns, size.lines
    except (AttributeError, ValueError, OSError):
        return 0, 0


class Progress:
    """Fed one finished result at a time (`coordinator.predict`'s on_start and on_result)."""

    def __init__(self, enabled: bool = True, interval: float = 30.0, stream: IO[str] | None = None) -> None:
        self.enabled = enabled
        self.interval = interval
        self.stream = stream or sys.stderr
        self.done = self.anomalies = self.failed = 0
        self.total: int | None = 0
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar: tqdm | None = None
        self._cleanup = contextlib.ExitStack()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, total: int | None) -> None:
        """Jobs begin: `total` is None while the table is still being planned; told again once it is."""
        with self._lock:
            self.total = total
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()
        if not self.enabled or total == 0 or self._bar is not None or self._thread is not None:
            return
        if is_terminal(self.stream):
            sized = all(terminal_size(self.stream))  # a pty may say 0x0 (script, docker exec): tqdm would hide
            self._bar = tqdm(total=total, initial=self.done, unit=" jobs", desc="predict", file=self.stream,
                             dynamic_ncols=sized, ncols=None if sized else 100, nrows=None if sized else 24,
                             postfix=self._postfix())
            # Log lines are printed above the bar instead of through it.
            self._cleanup.enter_context(logging_redirect_tqdm())
        else:
            self._thread = threading.Thread(target=self._tick, name="batchpredict-progress", daemon=True)
            self._thread.start()

    def update(self, result: Result) -> None:
        with self._lock:
            self.done += 1
            self.anomalies += result.anomalies
            self.failed += result.status.failed
        if result.status.failed:
            log.warning("%s: %s: %s", result.ip, result.status.value, result.error)
        if self._bar is not None:
            self._bar.set_postfix(self._postfix(), refresh=False)
            self._bar.update(1)

    def fields(self) -> dict:
        """The state as numbers: done, total, jobs_per_s, eta_s, anomalies, failed."""
        with self._lock:
            done, total = self.done, self.total
            anomalies, failed = self.anomalies, self.failed
        elapsed = time.monotonic() - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 and total is not None else None
        return {"done": done, "total": total, "jobs_per_s": round(rate, 3),
                "eta_s": None if eta is None else round(eta, 1), "anomalies": anomalies, "failed": failed}

    def line(self) -> str:
        f = self.fields()
        eta = "?" if f["eta_s"] is None else tqdm.format_interval(f["eta_s"])
        if f["total"] is None:  # the table is still being planned
            done = f"{f['done']}/? jobs"
        else:
            done = f"{f['done']}/{f['total']} jobs ({100 * f['done'] / f['total'] if f['total'] else 100.0:.0f}%)"
        return (f"progress {done}, {f['jobs_per_s']:.1f} jobs/s, ETA {eta}, anomalies {f['anomalies']}, "
                f"failed {f['failed']}")

    def _postfix(self) -> dict:
        return {"anomalies": self.anomalies, "failed": self.failed}

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            log.info(self.line(), extra={"fields": {"event": "progress", **self.fields()}})

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            self._bar.close()
        self._cleanup.close()
