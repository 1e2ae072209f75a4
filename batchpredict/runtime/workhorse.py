"""The work-horse, as rq calls the process forked for a job: what it runs (`serve`), how its outcome goes back,
and, when none came, what its end says (`exit_reason`, the lines of its stderr worth showing).

The executor (executor.py) forks it and reads its pipe and exit status. The forkservers import this module,
not the executor, so a worker's parent holds nothing of the supervisor's (psutil, its queues and threads).
"""
from __future__ import annotations

import ctypes
import os
import pickle
import re
import resource
import signal
import time
from collections.abc import Callable
from typing import Any

from ..result import Outcome, Status

MAX_RESULT_BYTES = 16 * 2**20
_PR_SET_PDEATHSIG = 1

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
