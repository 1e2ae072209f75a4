"""The local executor: one forked worker process per job (or per K jobs), supervised.

Data flow::

    coordinator ──tasks──► LocalExecutor.run ──start──► forkserver of the task's pool
         ▲                      │   ▲                      (lean: numpy; full: TF imported, never run)
         │ outcomes             │   │ pickled outcome        │ fork
         └──────────────────────┘   │                        ▼
                                    └──────── pipe ──── worker: serve(handler, tasks), exit
                                 supervises: exit status, deadline, RSS (psutil), kill -pgid

Every task ends in exactly one outcome: the handler's own, or one the executor makes when the
worker dies (`crashed`, retried), overruns its deadline (`timeout`) or its memory cap
(`memory_exceeded`). A worker that cannot run a task in its pool says so (`outcome.reroute`),
and the task's `rerouted()` copy runs in the pool it names. Workers are killed by process group
and die with their forkserver (PR_SET_PDEATHSIG), so a killed coordinator leaves none behind.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import pickle
import re
import resource
import signal
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import multiprocess as mp
import psutil

from ..result import Outcome, Status
from .forkserver import Process, ready

log = logging.getLogger("batchpredict")

MAX_RESULT_BYTES = 16 * 2**20
EXIT_GRACE_S = 5.0
_PR_SET_PDEATHSIG = 1
_PAGE = os.sysconf("SC_PAGE_SIZE")


# TensorFlow's start-up chatter on stderr (absl pre-init INFO lines, CUDA probing on a CPU
# machine) says nothing an operator can act on; TF_CPP_MIN_LOG_LEVEL no longer hides it.
_NOISE = re.compile(r"^[IW]\d{4} |absl::InitializeLog|cuInit|cuda_platform|cudart_stub|cuda drivers"
                    r"|rebuild TensorFlow with the appropriate|^\s*$")


def worker_stderr(path: str) -> list[str]:
    """The lines of a worker's stderr file worth showing."""
    try:
        with open(path, errors="replace") as fh:
            return [line.rstrip() for line in fh if not _NOISE.search(line)]
    except FileNotFoundError:
        return []


def serve(conn: Any, handler: Callable[[Any], Outcome], tasks: bytes, stderr_path: str) -> None:
    """Worker process entry: run each task (pickled), send each outcome as soon as it exists."""
    os.setpgid(0, 0)
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the forkserver died before the prctl took effect
        os._exit(1)
    os.dup2(os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), 2)
    for task in pickle.loads(tasks):
        start = time.perf_counter()
        outcome = handler(task)
        outcome.duration_ms = (time.perf_counter() - start) * 1000
        _send(conn, outcome, task)
    conn.close()


def _send(conn: Any, outcome: Outcome, task: Any) -> None:
    outcome.worker_pid = os.getpid()
    outcome.worker_peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    try:
        payload = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
        if len(payload) > MAX_RESULT_BYTES:
            raise ValueError(f"{len(payload)} bytes, over {MAX_RESULT_BYTES}")
    except Exception as exc:  # noqa: BLE001 - an unsendable result must not hang the job
        failed = task.failed(Status.ERROR, f"result could not be sent back: {type(exc).__name__}: {exc}"[:300])
        failed.duration_ms, failed.worker_pid = outcome.duration_ms, outcome.worker_pid
        failed.worker_peak_rss_mib = outcome.worker_peak_rss_mib
        payload = pickle.dumps(failed)
    conn.send_bytes(payload)


def exit_reason(exitcode: int | None) -> str:
    """Why a worker ended without a result, naming the likely cause."""
    if exitcode is None:
        return "worker vanished without an exit status"
    if exitcode < 0:
        sig = signal.Signals(-exitcode)
        hint = {signal.SIGKILL: ": possibly out of memory (kernel OOM killer)",
                signal.SIGSEGV: ": segmentation fault in native code (model or HDF5 file?)",
                signal.SIGABRT: ": aborted in native code"}.get(sig, "")
        return f"worker killed by {sig.name}{hint}"
    return f"worker exited with code {exitcode} before returning a result"


@dataclass
class _Worker:
    process: Any
    conn: Any
    batch: list  # [(task, attempts)], the head is the task running now
    deadline: float
    peak_mib: float = 0.0
    stderr_path: str = ""
    measured: float = 0.0  # when its RSS was last read (or it started)


def rss_mib(pid: int) -> float:
    """A process's resident memory, from /proc as psutil reads it (without psutil's ~0.3 ms a process)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE / 2**20
    except (OSError, ValueError, IndexError):  # gone already
        return 0.0


class LocalExecutor:
    """Runs tasks in forked, supervised worker processes on this machine."""

    name = "local"

    def __init__(self, workers: int = 2, jobs_per_worker: int = 1, timeout: float = 300.0,
                 max_memory_mib: float | None = None, retries: int = 1, poll_interval: float = 0.05) -> None:
        self.workers = max(1, workers)
        self.jobs_per_worker = max(1, jobs_per_worker)
        self.timeout = timeout
        self.max_memory_mib = max_memory_mib or psutil.virtual_memory().available / 2**20 / self.workers
        self.retries = retries
        self.poll_interval = poll_interval
        self._running: dict[Any, _Worker] = {}
        self._departing: list[tuple[Any, float]] = []  # (process, kill-after) of workers with nothing left to do
        self._started = 0

    def run(self, handler: Callable[[Any], Outcome], tasks: Iterable) -> Iterator[Outcome]:
        """Yield one outcome per task, in completion order.

        `tasks` is read as workers come free, so it may be a stream that is still being produced; a
        None in it is no task, only a moment to look at the workers (a producer with nothing to run yet).
        """
        source = iter(tasks)
        pending: deque = deque()
        stderr_dir = tempfile.TemporaryDirectory(prefix="batchpredict-")
        try:
            while source is not None or pending or self._running:
                while len(self._running) < self.workers:
                    if source is not None and len(pending) < self.jobs_per_worker:
                        source = self._pull(source, pending)
                    if not pending:
                        break
                    self._start(handler, self._take(pending), stderr_dir.name)
                if not self._running:
                    continue
                found = ready([w.conn for w in self._running.values()]
                              + [w.process.sentinel for w in self._running.values()]
                              + [process.sentinel for process, _ in self._departing], self.poll_interval)
                for key, worker in list(self._running.items()):
                    yield from self._collect(worker, found, pending)
                    verdict = self._check(worker, found)
                    if verdict is not None:
                        del self._running[key]
                        yield from self._finish(worker, *verdict, pending)
                self._reap(found)
        finally:
            self.shutdown()
            stderr_dir.cleanup()

    def shutdown(self) -> None:
        """Kill every running worker (on error or signal); give departing ones their grace."""
        for worker in self._running.values():
            self._kill(worker.process)
        self._running.clear()
        self._reap(final=True)

    def _reap(self, exited: list = (), final: bool = False) -> None:
        """Forget workers that have exited (their sentinel in `exited`); kill those that overstay their grace."""
        for entry in list(self._departing):
            process, kill_after = entry
            if final:
                process.join(max(0.0, kill_after - time.monotonic()))
            elif process.sentinel not in exited and time.monotonic() <= kill_after:
                continue
            if process.sentinel in exited or process.exitcode is not None:
                process.join()
            else:
                self._kill(process)
            self._departing.remove(entry)

    def _pull(self, source: Iterator, pending: deque) -> Iterator | None:
        """Tasks from `source` until a worker's batch is there or it pauses (None); None once it ends."""
        for task in source:
            if task is None:
                return source
            pending.append((task, 1))
            if len(pending) >= self.jobs_per_worker:
                return source
        return None

    def _take(self, pending: deque) -> list:
        """The next batch: up to K tasks in a row that run in the same pool."""
        pool = _pool(pending[0][0])
        batch = [pending.popleft()]
        while pending and len(batch) < self.jobs_per_worker and _pool(pending[0][0]) == pool:
            batch.append(pending.popleft())
        return batch

    def _start(self, handler: Callable, batch: list, stderr_dir: str) -> None:
        reader, writer = mp.Pipe(duplex=False)
        self._started += 1
        stderr_path = os.path.join(stderr_dir, f"worker-{self._started}.err")
        # The tasks travel as bytes of the C pickler: multiprocess pickles a process's arguments with
        # dill's pure-Python pickler, which took ~7 ms for one job's series.
        tasks = pickle.dumps([task for task, _ in batch], protocol=pickle.HIGHEST_PROTOCOL)
        process = Process(_pool(batch[0][0]), target=serve, args=(writer, handler, tasks, stderr_path), daemon=False)
        process.start()
        writer.close()
        now = time.monotonic()
        self._running[reader] = _Worker(process, reader, batch, now + self.timeout, stderr_path=stderr_path,
                                        measured=now)

    def _collect(self, worker: _Worker, found: list, pending: deque) -> Iterator[Outcome]:
        """Yield the outcomes the worker has sent, queue the tasks it sent elsewhere; each moves its deadline on."""
        while worker.batch and worker.conn in found and ready([worker.conn], 0):
            try:
                outcome = pickle.loads(worker.conn.recv_bytes())
            except (EOFError, OSError):
                break
            task, attempts = worker.batch.pop(0)
            worker.deadline = time.monotonic() + self.timeout
            if outcome.reroute:
                pending.append((task.rerouted(outcome.reroute), attempts))
            else:
                yield self._stamp(outcome, attempts, worker)

    def _check(self, worker: _Worker, found: list) -> tuple[Status, str] | None:
        """The verdict on a worker that has to go, or None while it may go on."""
        if not worker.batch:
            # Every task answered: the worker exits on its own while the next one starts.
            self._departing.append((worker.process, time.monotonic() + EXIT_GRACE_S))
            return Status.OK, ""
        if worker.process.sentinel in found:
            worker.process.join()
            said = worker_stderr(worker.stderr_path)
            return Status.CRASHED, exit_reason(worker.process.exitcode) + (f"; stderr: {said[-1][:200]}" if said else "")
        rss = self._rss(worker)
        if rss > self.max_memory_mib:
            self._kill(worker.process)
            return Status.MEMORY_EXCEEDED, (f"worker RSS {rss:.0f} MiB over the cap of "
                                            f"{self.max_memory_mib:.0f} MiB (--max-worker-memory); killed")
        # A result waiting in the pipe moves the deadline on at the next collect: no kill for it.
        if time.monotonic() > worker.deadline and not ready([worker.conn], 0):
            self._kill(worker.process)
            return Status.TIMEOUT, f"no result within {self.timeout:g} s (--timeout); worker killed"
        return None

    def _finish(self, worker: _Worker, status: Status, error: str, pending: deque) -> Iterator[Outcome]:
        """Account for the tasks a departing worker did not finish."""
        # Results that raced the exit or the kill are taken before any task is blamed.
        yield from self._collect(worker, [worker.conn], pending)
        worker.conn.close()
        if log.isEnabledFor(logging.DEBUG):
            for line in worker_stderr(worker.stderr_path):
                log.debug("worker %d stderr: %s", worker.process.pid, line)
        with contextlib.suppress(FileNotFoundError):  # a worker that died at once never made it
            os.unlink(worker.stderr_path)
        if not worker.batch:
            return
        (task, attempts), rest = worker.batch[0], worker.batch[1:]
        pending.extendleft(reversed(rest))
        if status is Status.CRASHED and attempts <= self.retries:
            pending.append((task, attempts + 1))
            return
        yield self._stamp(task.failed(status, error), attempts, worker)

    def _stamp(self, outcome: Outcome, attempts: int, worker: _Worker) -> Outcome:
        outcome.attempts = attempts
        outcome.worker_pid = outcome.worker_pid or worker.process.pid
        outcome.worker_peak_rss_mib = max(outcome.worker_peak_rss_mib or 0.0, worker.peak_mib) or None
        return outcome

    def _rss(self, worker: _Worker) -> float:
        """The worker's RSS, read once a poll interval from its start: most jobs end before the first reading,
        and every job reports its own peak."""
        now = time.monotonic()
        if now - worker.measured < self.poll_interval:
            return 0.0
        worker.measured = now
        rss = rss_mib(worker.process.pid)
        worker.peak_mib = max(worker.peak_mib, rss)
        return rss

    @staticmethod
    def _kill(process: Any) -> None:
        # The group takes the worker's own children too; the worker may not have made
        # its group yet, hence the plain kill as well.
        for kill in (os.killpg, os.kill):
            try:
                kill(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        process.join()


def _pool(task: Any) -> str:
    """The forkserver a task runs in: its own choice, or TensorFlow's for tasks that make none."""
    return getattr(task, "pool", "full")
