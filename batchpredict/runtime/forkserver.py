"""Forkservers by name, each with its own preloaded set: `lean` (numpy) and `full` (TensorFlow).

multiprocess keeps a single forkserver per process; batchpredict needs two, so that a job the
numpy engine can run is forked from a process that never imported TensorFlow. Each server starts
on first use, so a run whose jobs are all lean never pays for importing TensorFlow.

Two costs of multiprocess's launch are left out, both measured per job on the lean path: a worker
does not re-run the coordinator's `__main__` (multiprocess re-imports the main script so that
functions defined there unpickle; every handler batchpredict runs lives in a module, and pytest's
or a benchmark's main costs a worker tens of milliseconds of imports), and the process object is
pickled by the C pickler, with dill's pure-Python one (~4 ms a process) only for what needs it.
"""
from __future__ import annotations

import copyreg
import functools
import io
import os
import pickle
import select
import sys
from typing import Any

import multiprocess as mp
from multiprocess import forkserver, popen_forkserver, spawn, util
from multiprocess.context import reduction, set_spawning_popen

from ..io.store import MODEL_SUFFIXES

PRELOADS = {"lean": ["batchpredict.runtime.preload.lean"], "full": ["batchpredict.runtime.preload.full"]}
_servers: dict[str, forkserver.ForkServer] = {}
_MAIN_KEYS = ("init_main_from_name", "init_main_from_path")


def pool_for(model: str, engine: str) -> str:
    """The forkserver a prediction job starts in. The numpy engine reads model files, so those start lean
    unless --engine keras; a SavedModel directory needs TensorFlow. A lean worker that finds it cannot run a
    job sends it on to the full pool (Job.rerouted)."""
    return "lean" if engine != "keras" and model.endswith(MODEL_SUFFIXES) else "full"


_ForkserverProcess: Any = mp.get_context("forkserver").Process


class Process(_ForkserverProcess):
    """A process forked by the forkserver of its pool."""

    def __init__(self, pool: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pool = _known(pool)

    @staticmethod
    def _Popen(process_obj: Process) -> _Popen:
        return _Popen(process_obj)


class _Popen(popen_forkserver.Popen):
    """popen_forkserver's launch, with the pool's own server and without re-running `__main__`."""

    def _launch(self, process_obj: Process) -> None:
        prep_data = {**_preparation_data(), "name": process_obj._name}
        set_spawning_popen(self)
        try:
            buf = _dumps(prep_data, process_obj)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = _server(process_obj.pool).connect_to_new_process(self._fds)
        # The parent keeps a duplicate of the data pipe's write end: the child's sentinel of its parent.
        _parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))
        try:
            with open(w, "wb", closefd=True) as f:
                f.write(buf.getbuffer())
        except BrokenPipeError:
            pass  # it died reading this (an import that failed): its exit status, as any crash's, says so
        self.pid = forkserver.read_signed(self.sentinel)

    def poll(self, flag: int = os.WNOHANG) -> int | None:
        # multiprocess asks a selector it builds for each call; every process start polls each child.
        if self.returncode is None and flag == os.WNOHANG and not ready([self.sentinel], 0):
            return None
        return super().poll(flag)


def ready(objects: list, timeout: float) -> list:
    """The connections and fds among `objects` that can be read within `timeout` s: multiprocess's
    connection.wait, without the selector it builds for every call."""
    by_fd = {obj if isinstance(obj, int) else obj.fileno(): obj for obj in objects}
    poller = select.poll()
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    return [by_fd[fd] for fd, _ in poller.poll(timeout * 1000)]


def _preparation_data() -> dict:
    """What a worker needs to unpickle its process object (~50 us to gather), again only when the folder
    or the import path it holds has changed."""
    key = (os.getcwd(), tuple(sys.path))
    if key not in _prepared:
        _prepared.clear()
        _prepared[key] = {k: v for k, v in spawn.get_preparation_data("").items() if k not in _MAIN_KEYS}
    return _prepared[key]


_prepared: dict[tuple, dict] = {}


class _CPickler(pickle.Pickler):
    """multiprocess's ForkingPickler (the reducers for connections and fds) on the C pickler."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self.dispatch_table = _dispatch_table()


@functools.cache
def _dispatch_table() -> dict:
    return {**copyreg.dispatch_table, **reduction.ForkingPickler._extra_reducers}


def _dumps(*objects: Any) -> io.BytesIO:
    """The objects pickled one after the other, as the child reads them (dill reads both kinds)."""
    buf = io.BytesIO()
    try:
        for obj in objects:
            _CPickler(buf).dump(obj)
    except (pickle.PicklingError, TypeError, AttributeError):  # e.g. a lambda: dill can
        buf = io.BytesIO()
        for obj in objects:
            reduction.dump(obj, buf)
    return buf


def launch(pool: str) -> None:
    """Start the pool's forkserver unless it is running; it preloads on its own, and the first fork waits for it.

    Call it on a thread that lasts as long as the server should: the kernel kills a forkserver when the
    thread that started it ends (PR_SET_PDEATHSIG, preload/__init__.py), not only with its process.
    """
    _server(_known(pool)).ensure_running()


def _known(pool: str) -> str:
    if pool not in PRELOADS:
        raise ValueError(f"no forkserver named {pool!r}")
    return pool


def _server(pool: str) -> forkserver.ForkServer:
    if pool not in _servers:
        server = forkserver.ForkServer()
        server.set_forkserver_preload(PRELOADS[pool])
        _servers[pool] = server
    return _servers[pool]
