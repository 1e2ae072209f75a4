"""The local executor: one forked worker process per job (or per K jobs), supervised.

Data flow, on two threads::

      the consumer's thread                    ┆    the supervisor thread, "batchpredict-supervisor"
                                               ┆
    coordinator ──tasks──► LocalExecutor.run ──batches──► inbox ──► _Supervisor ──start──► forkserver of the task's pool
         ▲       pulled here, at most  ▲       ┆      (+ a byte on    │  ▲                 (lean: numpy; full: TF
         │       `ahead` unanswered    │       ┆      the wake pipe)  │  │                  imported, never run)
         └───────── outcomes ──────────┴──── outbox ◄── outcomes ─────┘  │ pickled outcome      │ fork
                                               ┆                         │                      ▼
                                               ┆                         └────── pipe ──── worker: serve(handler, tasks)
                                               ┆
                                               ┆    supervises: exit status, deadline, RSS, kill -pgid, retries, reaping

The supervisor thread owns the workers and looks at them every poll interval, however long the
consumer takes to plan the next task or to write an outcome down; the consumer pulls `tasks` on its
own thread, so planning never stops supervision. Forkservers are launched on the consumer's thread:
the kernel kills one when the thread that started it ends (forkserver.launch).

Every task ends in exactly one outcome: the handler's own, or one the executor makes when the
worker dies (`crashed`, retried), overruns its deadline (`timeout`) or its memory cap
(`memory_exceeded`). A worker that cannot run a task in its pool says so (`outcome.reroute`),
and the task's `rerouted()` copy runs in the pool it names. Workers are killed by process group
and die with their forkserver (PR_SET_PDEATHSIG), so a killed coordinator leaves none behind.
"""
from __future__ import annotations

import contextlib
import logging
import os
import pickle
import queue
import signal
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import multiprocess as mp
import psutil

from ..errors import UsageError
from ..result import Outcome, Status
from .forkserver import Process, launch, ready
from .workhorse import exit_reason, serve, worker_stderr

Answer = TypeVar("Answer", bound=Outcome)  # a handler's outcome: Result, TrainResult, CheckResult
log = logging.getLogger("batchpredict")

EXIT_GRACE_S = 5.0
_PAGE = os.sysconf("SC_PAGE_SIZE")
LOOKAHEAD_BATCHES = 3  # batches per worker that the supervisor holds beyond those running
# The least default cap a worker may get: a numpy-engine worker peaks near 40 MiB (make bench), so below this every
# job would be killed for memory.
MIN_DEFAULT_MEMORY_MIB = 64
# The consumer waits on the supervisor this long at a time: the kernel may hand a signal to the supervisor's
# thread, and its handler runs on the main thread only once that wakes.
_WAIT_S = 0.1
_END = object()


@dataclass
class _Launch:
    """The supervisor's request that the consumer's thread start a pool's forkserver."""

    pool: str


@dataclass(kw_only=True)
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


def _default_cap(workers: int) -> float:
    """The memory available now, shared by `workers`; UsageError where each share is too small to run a job."""
    available = psutil.virtual_memory().available / 2**20
    if available / workers < MIN_DEFAULT_MEMORY_MIB:
        raise UsageError(f"--workers {workers:,} leaves each worker {available / workers:.3g} MiB of the "
                         f"{available:,.0f} MiB available (a job needs at least {MIN_DEFAULT_MEMORY_MIB}): run "
                         f"at most {int(available // MIN_DEFAULT_MEMORY_MIB):,}, or give --max-worker-memory")
    return available / workers


class LocalExecutor:
    """Runs tasks in forked, supervised worker processes on this machine."""

    name = "local"

    def __init__(self, workers: int = 2, jobs_per_worker: int = 1, timeout: float = 300.0,
                 max_memory_mib: float | None = None, *, retries: int = 1, poll_interval: float = 0.05) -> None:
        self.workers = max(1, workers)
        self.jobs_per_worker = max(1, jobs_per_worker)
        self.timeout = timeout
        self.max_memory_mib = max_memory_mib or _default_cap(self.workers)
        self.retries = retries
        self.poll_interval = poll_interval
        # The supervisor holds this many tasks unanswered (the batches running and LOOKAHEAD_BATCHES more
        # a worker), so that a worker coming free finds its next batch while the consumer plans or writes.
        self.ahead = self.workers * self.jobs_per_worker * (1 + LOOKAHEAD_BATCHES)

    def run(self, handler: Callable[[Any], Answer], tasks: Iterable) -> Iterator[Answer]:
        """Yield one outcome per task, in completion order.

        `tasks` is read on the caller's thread, up to `ahead` tasks before their outcomes, so it may be a
        stream that is still being produced; a None in it is no task, only a moment to pass on the
        outcomes that are done (a producer about to read on). The workers are the supervisor thread's.
        """
        supervisor = _Supervisor(self, handler)
        try:
            supervisor.start()
            source: Iterator | None = iter(tasks)
            while source is not None or supervisor.owed:
                source, paused = self._hand(source, supervisor)
                if paused:
                    yield from cast(Iterator[Answer], supervisor.take_waiting())
                elif supervisor.owed:
                    yield cast(Answer, supervisor.take())  # the handler's own, or task.failed()'s
        finally:
            supervisor.stop()
        supervisor.raise_late()

    def _hand(self, source: Iterator | None, supervisor: _Supervisor) -> tuple[Iterator | None, bool]:
        """Pull tasks and hand them over a batch of K at a time, until the supervisor holds `ahead` of them
        (or as many outcomes wait to be taken), `source` pauses or it ends: (source or None, paused)."""
        batch: list = []
        try:
            while (source is not None and supervisor.backlog + len(batch) < self.ahead
                   and supervisor.waiting < self.ahead):
                task = next(source, _END)
                if task is None:
                    return source, True
                if task is _END:
                    return None, False
                batch.append((task, 1))
                if len(batch) == self.jobs_per_worker:
                    supervisor.hand(batch)
                    batch = []
            return source, False
        finally:
            if batch:
                supervisor.hand(batch)


class _Supervisor:
    """One run's workers, on a thread of their own: it starts them, reads their pipes, enforces deadlines
    and memory caps, retries crashes, reaps departing workers and puts every outcome on the outbox, however
    long the consumer takes between two outcomes. The consumer-side methods (hand, take, take_waiting,
    stop, check) are called on the consumer's thread only."""

    def __init__(self, executor: LocalExecutor, handler: Callable[[Any], Outcome]) -> None:
        self.executor, self.handler = executor, handler
        self._thread = threading.Thread(target=self._run, name="batchpredict-supervisor", daemon=True)
        self.handed = self.produced = self.taken = 0  # tasks handed over, outcomes put, outcomes taken
        self._inbox: queue.SimpleQueue[list] = queue.SimpleQueue()
        self._outbox: queue.SimpleQueue[Outcome | BaseException | _Launch] = queue.SimpleQueue()
        # A forkserver dies with the thread that started it (forkserver.launch), so the consumer's thread
        # starts each: for the pools it hands tasks to, and on request for those tasks are rerouted to.
        self._launched: set[str] = set()
        self._asked: set[str] = set()  # the thread's requests
        self._hungry = True  # a worker could start, and nothing is pending: new tasks wake the thread
        self._stopping = threading.Event()
        # A byte here ends the thread's wait on its workers' pipes: new tasks, or a stop.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._pending: deque = deque()  # (task, attempts) to run, in order
        self._done: list[Outcome] = []  # outcomes of the last look at the workers, not yet put
        self._running: dict[Any, _Worker] = {}
        self._departing: list[tuple[Any, float]] = []  # (process, kill-after) of workers with nothing left to do
        self._started = 0
        self._stderr_dir = tempfile.TemporaryDirectory(prefix="batchpredict-")

    # The consumer's side.

    @property
    def backlog(self) -> int:
        """Tasks handed over and not answered yet."""
        return self.handed - self.produced

    @property
    def waiting(self) -> int:
        """Outcomes put and not taken yet."""
        return self.produced - self.taken

    @property
    def owed(self) -> int:
        return self.handed - self.taken

    def hand(self, batch: list) -> None:
        for pool in {_pool(task) for task, _ in batch} - self._launched:
            self._launch(pool)
        self.handed += len(batch)
        self._inbox.put(batch)
        if self._hungry:
            self._wake()

    def take(self) -> Outcome:
        """The next outcome, waiting for it in short waits: a signal may arrive on the other thread, and the
        main thread runs its handler only once it wakes."""
        while True:
            try:
                outcome = self._taken(self._outbox.get(timeout=_WAIT_S))
            except queue.Empty:
                if not self._thread.is_alive() and self._outbox.empty():
                    raise RuntimeError("the supervisor thread ended without a word") from None
                continue
            if outcome is not None:
                return outcome

    def take_waiting(self) -> Iterator[Outcome]:
        """The outcomes already put, without waiting."""
        for _ in range(self._outbox.qsize()):
            outcome = self._taken(self._outbox.get_nowait())
            if outcome is not None:
                yield outcome

    def stop(self) -> None:
        """End the thread, which kills every worker on its way out, and wait for it."""
        self._stopping.set()
        self._wake()
        while self._thread.is_alive():
            self._thread.join(_WAIT_S)
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._stderr_dir.cleanup()

    def raise_late(self) -> None:
        """Raise what the thread raised after the last outcome was taken (while it shut down)."""
        while not self._outbox.empty():
            item = self._outbox.get_nowait()
            if isinstance(item, BaseException):
                raise item

    def _taken(self, item: Outcome | BaseException | _Launch) -> Outcome | None:
        """The outcome in an item of the outbox; None for a request, done here."""
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, _Launch):
            self._launch(item.pool)
            self._wake()
            return None
        self.taken += 1
        return item

    def _launch(self, pool: str) -> None:
        launch(pool)
        self._launched.add(pool)

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # full: a wake-up is waiting already
            os.write(self._wake_w, b"\0")

    # The thread's side.

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            try:
                while not self._stopping.is_set():
                    self._step()
            finally:
                self._shutdown()
        except BaseException as exc:  # noqa: BLE001 - the consumer raises it
            self._outbox.put(exc)

    def _step(self) -> None:
        """Start workers for what is pending, put the outcomes found last, wait at most a poll interval, then
        look at every worker."""
        while not self._inbox.empty():
            self._pending.extend(self._inbox.get_nowait())
        while self._pending and len(self._running) < self.executor.workers:
            pool = _pool(self._pending[0][0])
            if pool not in self._launched:
                if pool not in self._asked:
                    self._asked.add(pool)
                    self._outbox.put(_Launch(pool))
                break
            self._start(self._next_batch())
        self._deliver()
        # Set before the inbox's last look, so a batch handed meanwhile either is seen here or wakes the poll.
        self._hungry = not self._pending and len(self._running) < self.executor.workers
        wait = 0.0 if self._hungry and not self._inbox.empty() else self.executor.poll_interval
        found = ready([self._wake_r]
                      + [w.conn for w in self._running.values()]
                      + [w.process.sentinel for w in self._running.values()]
                      + [process.sentinel for process, _ in self._departing], wait)
        if self._wake_r in found:
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_r, 4096)
        for key, worker in list(self._running.items()):
            self._collect(worker, found)
            verdict = self._verdict(worker, found)
            if verdict is not None:
                del self._running[key]
                self._finish(worker, *verdict)
        self._reap(found)

    def _emit(self, outcome: Outcome) -> None:
        self._done.append(outcome)

    def _deliver(self) -> None:
        """Put the outcomes of the last look, after the workers that replace theirs have started: the consumer
        they wake takes the GIL at each of a start's system calls, and a worker would wait for its rows."""
        for outcome in self._done:
            self.produced += 1
            self._outbox.put(outcome)
        self._done.clear()

    def _shutdown(self) -> None:
        """Kill every running worker (on error or stop); give departing ones their grace."""
        for worker in self._running.values():
            self._kill(worker.process)
        self._running.clear()
        self._reap(final=True)

    def _reap(self, exited: Collection[Any] = (), final: bool = False) -> None:
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

    def _next_batch(self) -> list:
        """The next batch: up to K tasks in a row that run in the same pool."""
        pending = self._pending
        pool = _pool(pending[0][0])
        batch = [pending.popleft()]
        while pending and len(batch) < self.executor.jobs_per_worker and _pool(pending[0][0]) == pool:
            batch.append(pending.popleft())
        return batch

    def _start(self, batch: list) -> None:
        reader, writer = mp.Pipe(duplex=False)
        self._started += 1
        stderr_path = os.path.join(self._stderr_dir.name, f"worker-{self._started}.err")
        # The tasks travel as bytes of the C pickler: multiprocess pickles a process's arguments with
        # dill's pure-Python pickler, which took ~7 ms for one job's series.
        tasks = pickle.dumps([task for task, _ in batch], protocol=pickle.HIGHEST_PROTOCOL)
        process = Process(_pool(batch[0][0]), target=serve, args=(writer, self.handler, tasks, stderr_path),
                          daemon=False)
        process.start()
        writer.close()
        now = time.monotonic()
        self._running[reader] = _Worker(process=process, conn=reader, batch=batch, deadline=now + self.executor.timeout,
                                        stderr_path=stderr_path, measured=now)

    def _collect(self, worker: _Worker, found: list) -> None:
        """Put the outcomes the worker has sent, queue the tasks it sent elsewhere; each moves its deadline on."""
        while worker.batch and worker.conn in found and ready([worker.conn], 0):
            try:
                outcome = pickle.loads(worker.conn.recv_bytes())
            except (EOFError, OSError):
                break
            task, attempts = worker.batch.pop(0)
            worker.deadline = time.monotonic() + self.executor.timeout
            if outcome.reroute:
                self._pending.append((task.rerouted(outcome.reroute), attempts))
            else:
                self._emit(self._stamp(outcome, attempts, worker))

    def _verdict(self, worker: _Worker, found: list) -> tuple[Status, str] | None:
        """The verdict on a worker that has to go, or None while it may go on."""
        if not worker.batch:
            # Every task answered: the worker exits on its own while the next one starts.
            self._departing.append((worker.process, time.monotonic() + EXIT_GRACE_S))
            return Status.OK, ""
        if worker.process.sentinel in found:
            worker.process.join()
            said = worker_stderr(worker.stderr_path)
            stderr = f"; stderr: {said[-1][:200]}" if said else ""
            return Status.CRASHED, exit_reason(worker.process.exitcode) + stderr
        rss, cap = self._rss(worker), self.executor.max_memory_mib
        if rss > cap:
            self._kill(worker.process)
            return Status.MEMORY_EXCEEDED, (f"worker RSS {rss:.0f} MiB over the cap of "
                                            f"{cap:.0f} MiB (--max-worker-memory); killed")
        # A result waiting in the pipe moves the deadline on at the next collect: no kill for it.
        if time.monotonic() > worker.deadline and not ready([worker.conn], 0):
            self._kill(worker.process)
            return Status.TIMEOUT, f"no result within {self.executor.timeout:g} s (--timeout); worker killed"
        return None

    def _finish(self, worker: _Worker, status: Status, error: str) -> None:
        """Account for the tasks a departing worker did not finish."""
        # Results that raced the exit or the kill are taken before any task is blamed.
        self._collect(worker, [worker.conn])
        worker.conn.close()
        if log.isEnabledFor(logging.DEBUG):
            for line in worker_stderr(worker.stderr_path):
                log.debug("worker %d stderr: %s", worker.process.pid, line)
        with contextlib.suppress(FileNotFoundError):  # a worker that died at once never made it
            os.unlink(worker.stderr_path)
        if not worker.batch:
            return
        (task, attempts), rest = worker.batch[0], worker.batch[1:]
        self._pending.extendleft(reversed(rest))
        if status is Status.CRASHED and attempts <= self.executor.retries:
            self._pending.append((task, attempts + 1))
            return
        self._emit(self._stamp(task.failed(status, error), attempts, worker))

    @staticmethod
    def _stamp(outcome: Outcome, attempts: int, worker: _Worker) -> Outcome:
        outcome.attempts = attempts
        outcome.worker_pid = outcome.worker_pid or worker.process.pid
        outcome.worker_peak_rss_mib = max(outcome.worker_peak_rss_mib or 0.0, worker.peak_mib) or None
        return outcome

    def _rss(self, worker: _Worker) -> float:
        """The worker's RSS, read once a poll interval from its start: most jobs end before the first reading,
        and every job reports its own peak."""
        now = time.monotonic()
        if now - worker.measured < self.executor.poll_interval:
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
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(process.pid, signal.SIGKILL)
        process.join()


def _pool(task: Any) -> str:
    """The forkserver a task runs in: each kind of task says (forkserver.pool_for for a prediction job)."""
    return str(task.pool)
