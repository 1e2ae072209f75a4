"""Handlers that tests run in real worker processes, in a module that imports nothing heavy.

A worker unpickles its handler by importing the handler's module; from here that costs a lean
worker nothing it would not import anyway, so what a test sees of it is the worker's own.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass

from batchpredict.job import Job
from batchpredict.result import Outcome, Result, Status
from batchpredict.scoring import prediction

HEAVY = ("tensorflow", "keras", "tf_keras", "sklearn", "joblib", "pandas", "matplotlib")
# Code a test plants in a worker: through a pickled scaler (conftest.Poison) or a handler's task.
POISONS = {
    "sigkill": "__import__('os').kill(__import__('os').getpid(), 9)",
    "sigsegv": "__import__('os').kill(__import__('os').getpid(), 11)",
    "exit0": "__import__('os')._exit(0)",
    "raise": "1/0",
    "hang": "__import__('time').sleep(10**6)",
    "hog": "[b'x' * 2**26 for _ in iter(int, 1)]",
}


def run_and_list_modules(job: Job) -> Result:
    """The real job, then which heavy modules its worker had imported, as its last debug line."""
    result = prediction.run_job(job)
    result.debug.append("heavy modules: " + ",".join(m for m in HEAVY if m in sys.modules))
    return result


@dataclass
class Task:
    ip: str
    action: str = "ok"
    pool: str = "full"

    def failed(self, status: Status, error: str) -> Outcome:
        return Outcome(ip=self.ip, status=status, error=error)

    def rerouted(self, reason: str) -> Task:
        return Task(self.ip, self.action, "full")


@dataclass
class Weird(Outcome):
    payload: object = None


def handler(task: Task) -> Outcome:
    """Does what the task's action says; a plain outcome says which kind of worker ran it."""
    if task.action.startswith("noted-"):  # the test learns which process runs it, and since when
        with open(task.ip + ".tmp", "w") as fh:
            fh.write(f"{os.getpid()} {time.monotonic()}")  # CLOCK_MONOTONIC: the same in every process
        os.replace(task.ip + ".tmp", task.ip)
        task = Task(task.ip, task.action.removeprefix("noted-"), task.pool)
    if task.action == "full-only" and prediction.LEAN:
        return Outcome(ip=task.ip, reroute="needs the TensorFlow pool")
    if task.action in POISONS:
        eval(POISONS[task.action])
    if task.action == "unpicklable":
        return Weird(ip=task.ip, payload=lambda: None)
    if task.action == "huge":
        return Weird(ip=task.ip, payload=b"x" * (32 * 2**20))
    if task.action == "crash-once" and not os.path.exists(task.ip):
        open(task.ip, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return Outcome(ip=task.ip, error=f"lean={prediction.LEAN}")


def describe_worker(conn) -> None:  # noqa: ANN001 - a multiprocess Connection
    """Sends back what the process it runs in is: its pid and its parent's, its pool, what it has imported,
    its main module's file, its folder and the environment its forkserver set."""
    conn.send({"pid": os.getpid(), "ppid": os.getppid(), "lean": prediction.LEAN, "modules": sorted(sys.modules),
               "main": getattr(sys.modules["__main__"], "__file__", None), "cwd": os.getcwd(),
               "env": {k: os.environ.get(k) for k in ENVIRONMENT}})
    conn.close()


# What batchpredict/runtime/preload/__init__.py sets (with setdefault) for every worker.
ENVIRONMENT = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPP_MIN_LOG_LEVEL": "2"}


def wait_for(path: str) -> None:
    """Returns once `path` exists (a test's go-ahead), or exits 2 after 30 s."""
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            os._exit(2)
        time.sleep(0.005)
