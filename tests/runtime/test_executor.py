"""Every job ends in exactly one row, whatever its worker does: a fault table on real processes."""
from __future__ import annotations

import os
import signal
import threading
import time

import joblib
import pandas as pd
import psutil
import pytest
from conftest import (
    BASE_IPS,
    POISONS,
    Poison,
    build_models,
    fitted_scaler,
    read_out,
    run_cli,
    series_for,
    wide_table,
    write_scaler,
    write_stds,
)
from leanprobe import Task, handler

from batchpredict.errors import UsageError
from batchpredict.result import Status
from batchpredict.runtime.executor import MIN_DEFAULT_MEMORY_MIB, LocalExecutor
from batchpredict.runtime.workhorse import exit_reason

VICTIM = BASE_IPS[3]
RESULT_COLUMNS = ["ip", "timestamp", "observed", "predicted", "lower_2std", "upper_4std", "anomaly", "severity",
                  "status"]


def poison_scaler(store, kind):
    joblib.dump(Poison(POISONS[kind]), store / "sc" / f"{VICTIM}.save")


def poison_model(store, data: bytes):
    model = next((store / "model").glob(f"{VICTIM}.*"))
    model.write_bytes(data(model.read_bytes()) if callable(data) else data)


SLOW = pytest.mark.slow
FAULTS = [
    # (poison, extra args, status, error fragment). A crash (with its retry) stays in the default suite;
    # the other cases are slow, and their statuses are met there too (every_status_run, test_loading).
    pytest.param(lambda s: poison_scaler(s, "sigsegv"), [], "crashed", "SIGSEGV", id="sigsegv"),
    pytest.param(lambda s: poison_scaler(s, "sigkill"), [], "crashed", "SIGKILL: possibly out of memory",
                 id="sigkill", marks=SLOW),
    pytest.param(lambda s: poison_scaler(s, "exit0"), [], "crashed", "exited with code 0", id="exit0", marks=SLOW),
    pytest.param(lambda s: poison_scaler(s, "raise"), [], "load_error", "ZeroDivisionError", id="raise", marks=SLOW),
    pytest.param(lambda s: poison_scaler(s, "hang"), ["--timeout", "4"], "timeout", "within 4 s", id="hang",
                 marks=SLOW),
    pytest.param(lambda s: poison_scaler(s, "hog"), ["--max-worker-memory", "1GiB"], "memory_exceeded",
                 "over the cap", id="hog", marks=SLOW),
    pytest.param(lambda s: poison_model(s, lambda b: b[: len(b) // 3]), [], "load_error", VICTIM, id="truncated",
                 marks=SLOW),
    pytest.param(lambda s: poison_model(s, os.urandom(4096)), [], "load_error", VICTIM, id="random", marks=SLOW),
]


@pytest.mark.parametrize("engine", ["auto", pytest.param("numpy", marks=SLOW)])
@pytest.mark.parametrize("poison, args, status, fragment", FAULTS)
def test_fault_table(store, table, tmp_path, clean_run, poison, args, status, fragment, engine):
    poison(store)
    out = tmp_path / "a.csv"
    done = run_cli("predict", "--data", table, "--models", store, "--out", out, "--engine", engine, "--trust-store",
                   *args)  # the poisons are pickles: they run in a trusted store only
    assert done.returncode == 1, done.stderr
    frame = read_out(out)
    assert list(frame["ip"]) == BASE_IPS
    victim = frame.set_index("ip").loc[VICTIM]
    assert victim["status"] == status and fragment in victim["error"], victim["error"]
    assert victim["attempts"] == (2 if status == "crashed" else 1)
    others = frame[frame["ip"] != VICTIM][RESULT_COLUMNS].reset_index(drop=True)
    clean = read_out(clean_run.out)
    expected = clean[clean["ip"] != VICTIM][RESULT_COLUMNS].reset_index(drop=True)
    pd.testing.assert_frame_equal(others, expected, check_exact=True)
    if status == "memory_exceeded":
        assert victim["worker_peak_rss_mib"] > 1024
    assert not [pid for pid in frame["worker_pid"].dropna() if psutil.pid_exists(int(pid))]


@pytest.mark.slow
def test_model_returning_nan_is_error(tmp_path):
    store = tmp_path / "store"
    build_models(store, [{"ip": "n1", "kind": "nan"}])
    write_scaler(store, "n1", fitted_scaler(series_for("n1")))
    write_stds(store, {"n1": 1.0})
    table = wide_table(tmp_path / "t.csv", {"n1": series_for("n1")})
    done = run_cli("predict", "--data", table, "--models", store, "--out", tmp_path / "a.csv")
    frame = read_out(tmp_path / "a.csv")
    assert done.returncode == 1 and frame["status"][0] == "error" and "nan" in frame["error"][0].lower()


# Executor-level cases: the handlers (tests/leanprobe.py) run in the forked workers.
@pytest.mark.parametrize("action, status, fragment", [
    ("sigsegv", Status.CRASHED, "SIGSEGV"),
    ("exit0", Status.CRASHED, "exited with code 0"),
    pytest.param("hang", Status.TIMEOUT, "within 4 s", marks=SLOW),
    pytest.param("hog", Status.MEMORY_EXCEEDED, "over the cap", marks=SLOW),
])
def test_lean_workers_fail_as_tensorflow_workers_do(action, status, fragment):
    tasks = [Task("a", pool="lean"), Task("b", action, pool="lean"), Task("c", pool="lean")]
    results = list(LocalExecutor(workers=2, timeout=4, max_memory_mib=300).run(handler, tasks))
    by_ip = {r.ip: r for r in results}
    assert len(results) == 3 and by_ip["a"].error == by_ip["c"].error == "lean=True"
    assert by_ip["b"].status is status and fragment in by_ip["b"].error, by_ip["b"].error
    assert by_ip["b"].attempts == (2 if status is Status.CRASHED else 1)


def test_workers_too_many_for_the_memory_are_a_usage_error_unless_their_cap_is_given():
    """Each share of the memory available would be under what a job needs: every job killed for memory."""
    too_many = int(psutil.virtual_memory().available / 2**20 / MIN_DEFAULT_MEMORY_MIB) * 2
    with pytest.raises(UsageError, match=f"--workers {too_many:,} leaves each worker .* MiB"):
        LocalExecutor(workers=too_many)
    assert LocalExecutor(workers=too_many, max_memory_mib=100).max_memory_mib == 100
    assert LocalExecutor(workers=too_many // 4).max_memory_mib >= MIN_DEFAULT_MEMORY_MIB


@pytest.mark.parametrize("jobs_per_worker", [1, 3])
def test_a_task_a_lean_worker_cannot_run_moves_to_the_tensorflow_pool(jobs_per_worker):
    tasks = [Task(f"t{i}", "full-only" if i % 2 else "ok", pool="lean") for i in range(6)]
    results = list(LocalExecutor(workers=2, jobs_per_worker=jobs_per_worker).run(handler, tasks))
    assert sorted(r.ip for r in results) == [t.ip for t in tasks]
    for r in results:
        assert r.status is Status.OK and r.attempts == 1 and not r.reroute
        assert r.error == ("lean=False" if int(r.ip[1]) % 2 else "lean=True"), r


@pytest.mark.parametrize("action, status, fragment", [
    ("unpicklable", Status.ERROR, "could not be sent back"),
    ("huge", Status.ERROR, "over"),
])
def test_unsendable_result_becomes_error(action, status, fragment):
    results = list(LocalExecutor(workers=2).run(handler, [Task("a"), Task("b", action), Task("c")]))
    by_ip = {r.ip: r for r in results}
    assert len(results) == 3 and by_ip["a"].status is Status.OK and by_ip["c"].status is Status.OK
    assert by_ip["b"].status is status and fragment in by_ip["b"].error


def test_crash_is_retried_and_attempts_counted(tmp_path):
    marker = str(tmp_path / "m")
    [result] = LocalExecutor(workers=1, retries=1).run(handler, [Task(marker, "crash-once")])
    assert result.status is Status.OK and result.attempts == 2


@pytest.mark.parametrize("jobs_per_worker", [1, 3])
def test_batch_worker_crash_requeues_the_rest(tmp_path, jobs_per_worker):
    tasks = [Task(f"t{i}") for i in range(5)] + [Task(str(tmp_path / "m"), "crash-once")] + [Task("z")]
    results = list(LocalExecutor(workers=2, jobs_per_worker=jobs_per_worker).run(handler, tasks))
    assert sorted(r.ip for r in results) == sorted(t.ip for t in tasks)
    assert all(r.status is Status.OK for r in results)


@pytest.mark.parametrize("code, fragment", [(-9, "SIGKILL"), (-11, "SIGSEGV"), (3, "code 3"), (None, "vanished")])
def test_exit_reasons_name_the_cause(code, fragment):
    assert fragment in exit_reason(code)


@pytest.mark.slow
def test_no_worker_outlives_a_killed_coordinator(store, table, tmp_path):
    poison_scaler(store, "hang")
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "batchpredict.cli", "predict", "--data", str(table), "--models",
                             str(store), "--out", str(tmp_path / "a.csv"), "--workers", "2",
                             "--trust-store"],  # the hanging pickle runs in a trusted store only
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    coordinator = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    workers: list[psutil.Process] = []
    while time.monotonic() < deadline and not workers:  # workers are the forkserver's children
        time.sleep(0.2)
        workers = [d for d in coordinator.children(recursive=True) if _parent(d) not in (proc.pid, None)]
    descendants = coordinator.children(recursive=True)
    assert workers, "no worker seen"
    proc.kill()
    proc.wait(30)
    gone, alive = psutil.wait_procs(descendants, timeout=15)
    assert not alive


def _parent(process: psutil.Process) -> int | None:
    """Its parent's pid, or None when it exited since it was listed (jobs finish all the time)."""
    try:
        return process.ppid()
    except psutil.NoSuchProcess:
        return None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ten_percent_poisoned_store_completes_with_every_row(tmp_path):
    from conftest import (
        build_models,
        fitted_scaler,
        series_for,
        weights_for,
        wide_table,
        write_scaler,
        write_stds,
    )

    ips = [f"10.7.{i // 250}.{i % 250}" for i in range(70)]
    poisons = {ips[5]: "sigsegv", ips[15]: "sigkill", ips[25]: "exit0", ips[35]: "raise", ips[45]: "hang",
               ips[55]: "hog", ips[65]: "nan"}
    expected = {"sigsegv": "crashed", "sigkill": "crashed", "exit0": "crashed", "raise": "load_error",
                "hang": "timeout", "hog": "memory_exceeded", "nan": "error"}
    store = tmp_path / "store"
    build_models(store, [{"ip": ip, "kind": "nan" if poisons.get(ip) == "nan" else "linear",
                          "weights": weights_for(ip)} for ip in ips])
    for ip in ips:
        kind = poisons.get(ip)
        write_scaler(store, ip, Poison(POISONS[kind]) if kind in POISONS else fitted_scaler(series_for(ip)))
    write_stds(store, {ip: 2.0 for ip in ips})
    table = wide_table(tmp_path / "t.csv", {ip: series_for(ip) for ip in ips})
    done = run_cli("predict", "--data", table, "--models", store, "--out", tmp_path / "a.csv", "--trust-store",
                   # 30 s: on a slow host the hog's TensorFlow worker took more than 10 s to reach the cap
                   "--timeout", "30", "--max-worker-memory", "1.2GiB", timeout=540)
    assert done.returncode == 1, done.stderr
    frame = read_out(tmp_path / "a.csv").set_index("ip")
    assert list(frame.index) == ips
    for ip in ips:
        want = expected[poisons[ip]] if ip in poisons else "ok"
        assert frame.loc[ip, "status"] == want, (ip, frame.loc[ip, "error"])
    healthy = frame[~frame.index.isin(poisons)]
    assert healthy["predicted"].notna().all() and healthy["anomaly"].isin(["true", "false"]).all()


@pytest.mark.parametrize("jobs_per_worker", [1, 3])
def test_tasks_are_read_on_the_consumers_thread_a_bounded_way_ahead(jobs_per_worker):
    """A stream is read where the outcomes are taken, at most `ahead` unanswered tasks (and as many outcomes
    not taken) before them; a None in it only lets the executor pass on the outcomes done."""
    read, readers = [], set()

    def stream():
        for i in range(100):
            read.append(i)
            readers.add(threading.current_thread())
            yield Task(f"t{i}")
            if i % 4 == 0:
                yield None

    executor = LocalExecutor(workers=2, jobs_per_worker=jobs_per_worker)
    seen = [(r.ip, len(read)) for r in executor.run(handler, stream())]
    assert sorted(ip for ip, _ in seen) == sorted(f"t{i}" for i in range(100))
    assert readers == {threading.current_thread()}
    assert all(count - taken < 2 * executor.ahead < 100 for taken, (_, count) in enumerate(seen))


# The supervisor thread, whatever the consumer does. A `noted-` task's worker writes its pid and start.
def noted(path: str, within: float = 20.0) -> tuple[int, float]:
    """The pid and start (time.monotonic) of the worker running the `noted-` task of `path`."""
    deadline = time.monotonic() + within
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"no worker ran {path}"
        time.sleep(0.01)
    with open(path) as fh:
        pid, started = fh.read().split()
    return int(pid), float(started)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def busy(seconds: float) -> None:
    """Planning as the coordinator does it: on the CPU, holding the GIL but for the interpreter's switches."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def supervisors() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("batchpredict")]


@pytest.mark.parametrize("planning", [lambda: time.sleep(0.01), lambda: busy(0.01)], ids=["sleeping", "computing"])
def test_a_hanging_job_is_killed_on_time_while_the_consumer_plans(tmp_path, planning):
    timeout, path = 1.0, str(tmp_path / "hang")
    killed_after: list[float] = []

    def tasks():
        yield Task(path, "noted-hang", pool="lean")
        pid, started = noted(path)
        while time.monotonic() < started + 4 * timeout and not gone(pid):  # the next task takes long to plan
            planning()
        killed_after.append(time.monotonic() - started)
        yield Task("next", pool="lean")

    results = {r.ip: r for r in LocalExecutor(workers=2, timeout=timeout).run(handler, tasks())}
    assert killed_after[0] < timeout + 0.5, killed_after
    assert results[path].status is Status.TIMEOUT and results["next"].status is Status.OK


def test_a_worker_over_the_memory_cap_is_killed_on_time_while_the_consumer_is_slow(tmp_path):
    path = str(tmp_path / "hog")
    tasks = [Task("a", pool="lean"), Task(path, "noted-hog", pool="lean"), Task("b", pool="lean")]
    killed_after: list[float] = []
    results = {}
    for outcome in LocalExecutor(workers=2, timeout=30, max_memory_mib=300).run(handler, tasks):
        results[outcome.ip] = outcome
        if not killed_after:  # slow with its first outcome (the hog eats ~2 GiB/s unchecked, hence the cap)
            pid, started = noted(path)
            while time.monotonic() < started + 2 and not gone(pid):
                time.sleep(0.01)
            killed_after.append(time.monotonic() - started)
        time.sleep(0.2)
    assert killed_after[0] < 1.0, killed_after
    assert results[path].status is Status.MEMORY_EXCEEDED and "over the cap" in results[path].error
    assert results["a"].status is results["b"].status is Status.OK


@pytest.mark.parametrize("stop", ["close", "raise"])
def test_a_consumer_that_stops_early_leaves_no_worker_and_no_thread(tmp_path, stop):
    paths = [str(tmp_path / f"hang{i}") for i in range(2)]
    tasks = [Task("a", pool="lean"), *(Task(p, "noted-hang", pool="lean") for p in paths), Task("z", pool="lean")]
    pids: list[int] = []
    executor = LocalExecutor(workers=2, timeout=60)
    if stop == "close":
        run = executor.run(handler, tasks)
        next(run)
        pids += [noted(p)[0] for p in paths]
        run.close()
    else:  # as the coordinator consumes: the generator goes (and closes) with the exception
        with pytest.raises(RuntimeError, match="the consumer failed"):
            for _ in executor.run(handler, tasks):
                pids += [noted(p)[0] for p in paths]
                raise RuntimeError("the consumer failed")
    assert all(gone(pid) for pid in pids) and len(pids) == 2
    assert not supervisors()


def test_an_error_on_the_supervisor_thread_reaches_the_consumer(tmp_path):
    path = str(tmp_path / "hang")
    pids: list[int] = []

    def tasks():
        yield Task(path, "noted-hang", pool="lean")
        pids.append(noted(path)[0])
        yield Task("unpicklable", threading.Lock(), pool="lean")  # the supervisor pickles a worker's tasks

    with pytest.raises(TypeError, match="pickle"):
        list(LocalExecutor(workers=2, timeout=60).run(handler, tasks()))
    assert gone(pids[0]) and not supervisors()


def test_a_signal_reaches_a_consumer_waiting_for_an_outcome(tmp_path):
    """Whichever thread the kernel hands the signal to, the main thread's handler runs within a moment."""
    path = str(tmp_path / "hang")
    pids: list[int] = []
    sent: list[float] = []

    class Stop(Exception):
        pass

    def stop(signum, frame):
        raise Stop

    def signal_once_running():
        pids.append(noted(path)[0])
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, stop)
    sender = threading.Thread(target=signal_once_running)
    try:
        sender.start()
        with pytest.raises(Stop):
            list(LocalExecutor(workers=1, timeout=60).run(handler, [Task(path, "noted-hang", pool="lean")]))
        stopped = time.monotonic()
    finally:
        sender.join()
        signal.signal(signal.SIGUSR1, previous)
    assert stopped - sent[0] < 0.5 and gone(pids[0]) and not supervisors()


def test_a_worker_that_dies_reading_its_job_is_a_crashed_row_not_the_runs_end(tmp_path, monkeypatch):
    """Its handler's module gone from disk (a package upgraded while the night runs): the worker dies unpickling
    its process while the coordinator still writes it, a broken pipe there; its jobs end crashed, the run goes on."""
    (tmp_path / "vanishing.py").write_text("def handler(task):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import vanishing

    (tmp_path / "vanishing.py").unlink()
    big = Task("a" * 2**21)  # more than a pipe holds: the write is under way when the worker dies
    results = list(LocalExecutor(workers=1, retries=1, timeout=30).run(vanishing.handler, [big, Task("b")]))
    assert [(r.ip[:1], r.status) for r in results] == [("a", Status.CRASHED), ("b", Status.CRASHED)]
    assert all("exited with code 1" in r.error for r in results), results[0].error
