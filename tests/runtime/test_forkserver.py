"""The forkservers (runtime/forkserver.py): real servers, real forked workers, what each pool's workers are.

The lean server is started once for this process (as by every test that runs a job), a fraction of a second;
the full one imports TensorFlow, so its test is slow.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import multiprocess as mp
import psutil
import pytest
from leanprobe import ENVIRONMENT, describe_worker, wait_for

from batchpredict.runtime import forkserver
from batchpredict.runtime.forkserver import Process, launch, pool_for, ready

# What only the full pool imports (design.md §6), and what neither pool's server does (the coordinator's).
FULL_ONLY = {"tensorflow", "keras", "tf_keras", "sklearn", "joblib", "h5py"}
COORDINATORS = {"pandas", "matplotlib", "pytest", "_pytest"}
EXIT = lambda code: os._exit(code)  # noqa: E731 - a lambda: the C pickler cannot, dill can


def run(pool: str, target, *args, timeout: float = 60):  # noqa: ANN001
    """Forks a worker of the pool on `target(*args)`, waits for it; returns the process."""
    worker = Process(pool, target=target, args=args)
    worker.start()
    worker.join(timeout)
    assert worker.exitcode is not None, f"the {pool} worker is still running after {timeout} s"
    return worker


def described(pool: str) -> dict:
    """describe_worker's answer from a fresh worker of the pool, through a pipe handed to it."""
    here, there = mp.Pipe(duplex=False)
    worker = Process(pool, target=describe_worker, args=(there,))
    worker.start()
    there.close()
    assert ready([here], 60), f"no answer from the {pool} worker"
    facts = here.recv()
    worker.join(30)
    assert worker.exitcode == 0 and facts["pid"] == worker.pid
    return {**facts, "top": {name.split(".")[0] for name in facts["modules"]}}


@pytest.fixture(scope="module")
def lean() -> None:
    launch("lean")


@pytest.mark.parametrize(("model", "engine", "pool"), [
    ("model/10.0.0.1.h5", "auto", "lean"), ("model/10.0.0.1.keras", "numpy", "lean"),
    ("model/10.0.0.1.h5", "keras", "full"), ("model/10.0.0.1.keras", "keras", "full"),
    ("model/10.0.0.1", "auto", "full"), ("model/10.0.0.1", "numpy", "full")])  # a SavedModel directory
def test_a_model_file_starts_lean_unless_the_engine_is_keras(model, engine, pool):
    assert pool_for(model, engine) == pool


def test_there_are_two_pools_by_name():
    assert sorted(forkserver.PRELOADS) == ["full", "lean"]
    for call in (lambda: Process("gpu", target=EXIT, args=(0,)), lambda: launch("gpu")):
        with pytest.raises(ValueError, match=r"^no forkserver named 'gpu'$"):
            call()


def test_ready_gives_the_readable_ones_of_fds_and_connections_as_given():
    r, w = os.pipe()
    here, there = mp.Pipe(duplex=False)
    try:
        started = time.monotonic()
        assert ready([r, here], 0.2) == [] and time.monotonic() - started >= 0.15  # it waited its timeout
        there.send("x")
        assert ready([r, here], 0) == [here]
        os.write(w, b"x")
        assert sorted(map(id, ready([r, here], 1))) == sorted(map(id, [r, here]))
        here.recv()
        os.read(r, 1)
        os.close(w)  # a closed end is readable: the reader learns of the EOF
        assert ready([r, here], 1) == [r]
    finally:
        os.close(r)
        here.close()
        there.close()


@pytest.mark.parametrize(("target", "args", "code"), [
    (os._exit, (0,), 0), (os._exit, (3,), 3), (EXIT, (5,), 5),  # the lambda goes through dill's pickler
    (signal.raise_signal, (signal.SIGKILL,), -signal.SIGKILL), (int, ("not a number",), 1)])  # an exception: 1
def test_a_worker_ends_with_its_exit_status(lean, target, args, code):
    assert run("lean", target, *args).exitcode == code


def test_a_running_worker_is_alive_until_it_exits(lean, tmp_path):
    go = tmp_path / "go"
    worker = Process("lean", target=wait_for, args=(str(go),))
    worker.start()
    for _ in range(20):  # poll() answers at once, not by waiting on the worker
        started = time.monotonic()
        assert worker.exitcode is None and worker.is_alive()
        assert time.monotonic() - started < 0.05
    go.touch()
    worker.join(30)
    assert worker.exitcode == 0 and not worker.is_alive()


def test_a_lean_worker_is_forked_from_its_server_with_the_lean_set_only(lean):
    """It is a child of the lean forkserver, not of this process (which has imported pandas, pytest and
    scikit-learn): numpy and the numpy engine imported, none of the full set nor this process's main."""
    facts = described("lean")
    server = psutil.Process(facts["ppid"])
    assert facts["ppid"] != os.getpid() and server.ppid() == os.getpid()
    assert "forkserver" in " ".join(server.cmdline())
    assert facts["lean"] is True
    assert {"numpy", "batchpredict.scoring.engine", "batchpredict.scoring.scalers",
            "batchpredict.runtime.workhorse"} <= set(facts["modules"])
    assert facts["top"] & (FULL_ONLY | COORDINATORS) == set()
    assert facts["main"] != sys.modules["__main__"].__file__  # pytest's main did not run there
    assert {"sklearn", "pandas", "pytest"} <= {name.split(".")[0] for name in sys.modules}  # this process's
    assert described("lean")["ppid"] == facts["ppid"]  # one server forks every worker of its pool


def test_a_worker_inherits_the_environment_its_server_set(lean):
    expected = {name: os.environ.get(name, value) for name, value in ENVIRONMENT.items()}  # setdefault
    assert described("lean")["env"] == expected


def test_a_worker_runs_in_this_processs_folder_and_imports_from_its_path(lean, tmp_path, monkeypatch):
    """The worker is given the folder and sys.path of the moment it is started, not of the first start."""
    described("lean")  # a start before the change
    (tmp_path / "forkserver_probe.py").write_text(textwrap.dedent("""
        import os

        def where(conn):
            conn.send(os.getcwd())
            conn.close()
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import forkserver_probe

    monkeypatch.delitem(sys.modules, "forkserver_probe")
    here, there = mp.Pipe(duplex=False)
    worker = Process("lean", target=forkserver_probe.where, args=(there,))
    worker.start()
    there.close()
    worker.join(30)
    assert worker.exitcode == 0, "the worker could not import a module of the path it was started with"
    assert here.recv() == str(tmp_path)


@pytest.mark.slow
def test_the_full_pool_is_a_server_of_its_own_with_tensorflow(lean):
    """The full server imports TensorFlow, Keras and scikit-learn for its workers; the lean server, a
    different process, still has none of them, nor does this process's coordinator code need them."""
    launch("full")
    full, lean_worker = described("full"), described("lean")
    assert full["ppid"] != lean_worker["ppid"]
    assert full["lean"] is False and FULL_ONLY <= full["top"]
    assert lean_worker["top"] & FULL_ONLY == set()
    for pid, tensorflow in ((full["ppid"], True), (lean_worker["ppid"], False)):
        with open(f"/proc/{pid}/maps") as maps:  # the server's own memory: TensorFlow's libraries or not
            assert ("tensorflow" in maps.read()) is tensorflow


ORPHAN = textwrap.dedent("""
    import os, sys, time
    if os.fork():
        os._exit(0)  # the coordinator, gone before its forkserver reaches the prctl
    deadline = time.monotonic() + 10
    while os.getppid() != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    print(os.getpid(), os.getppid() == 1, flush=True)
    for fd in (1, 2):  # so that the test's read ends here, whatever this process does next
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    import batchpredict.runtime.preload  # what a forkserver runs first
    time.sleep(60)  # a set that takes long to import
""")


def test_a_forkserver_whose_coordinator_died_before_it_started_exits_at_once():
    """Under load the coordinator may die between a forkserver's start and its PR_SET_PDEATHSIG, which then never
    fires: the server imported TensorFlow before it noticed, outliving a kill -9 by tens of seconds."""
    done = subprocess.run([sys.executable, "-c", ORPHAN], capture_output=True, text=True, timeout=60)
    pid, orphaned = done.stdout.split()
    if orphaned != "True":
        pytest.skip("orphans are not reparented to pid 1 here (a subreaper)")
    gone, alive = psutil.wait_procs([psutil.Process(int(pid))], timeout=10) if psutil.pid_exists(int(pid)) else ([], [])
    for process in alive:
        process.kill()
    assert not alive


UNARMED = textwrap.dedent("""
    import ctypes, subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", (
        "import ctypes, sys, time; import batchpredict.runtime.preload; "
        "ctypes.CDLL(None).prctl(1, 0); print('ready', flush=True); time.sleep(60)")],  # no death signal armed
        stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\\n"
    print(child.pid, flush=True)
    child.wait()
""")


def test_a_forkserver_leaves_when_its_coordinator_dies_even_without_the_death_signal():
    """The parent watch, whatever became of PR_SET_PDEATHSIG: such a server outlived a kill -9 of its coordinator
    with a hung worker of its own, which keeps the server's pipe open."""
    coordinator = subprocess.Popen([sys.executable, "-c", UNARMED], stdout=subprocess.PIPE, text=True)
    server = psutil.Process(int(coordinator.stdout.readline()))
    coordinator.kill()
    coordinator.wait(10)
    gone, alive = psutil.wait_procs([server], timeout=10)
    for process in alive:
        process.kill()
    assert not alive
