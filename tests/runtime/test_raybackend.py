"""The ray backend: same CSV as the local backend, shards retried when their Ray worker dies."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import joblib
import pandas as pd
import psutil
import pytest
from conftest import (
    BASE_IPS,
    POISONS,
    Poison,
    read_out,
    run_cli,
    series_for,
    wide_table,
)

from batchpredict.job import Job
from batchpredict.result import Status
from batchpredict.runtime.raybackend import INSTALL_HINT, default_shard_size, run_shard
from batchpredict.scoring.prediction import run_job

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="needs the ray package (pip install 'batchpredict[ray]'; make install includes it)")
TIMING = ["duration_ms", "worker_pid", "worker_peak_rss_mib"]
NO_TOKEN = {"RAY_AUTH_MODE": "disabled"}  # the head and its clients agree on no token

# One victim per status a worker can end in; the table adds the statuses settled without one.
FAILING_SCALER = "type('S', (), {'transform': lambda self, x: 1 / 0, 'inverse_transform': lambda self, x: x})()"
VICTIMS = {BASE_IPS[1]: POISONS["hang"], BASE_IPS[2]: POISONS["sigkill"], BASE_IPS[3]: POISONS["hog"],
           BASE_IPS[4]: FAILING_SCALER}
EXPECTED = {BASE_IPS[0]: "load_error", BASE_IPS[1]: "timeout", BASE_IPS[2]: "crashed",
            BASE_IPS[3]: "memory_exceeded", BASE_IPS[4]: "error", "192.0.2.99": "no_model",
            "../etc/passwd": "invalid_input", BASE_IPS[5]: "insufficient_data"}


def kill_ray_worker(real_scaler: str, marker: str | None = None) -> str:
    """Poison code: SIGKILL the Ray worker running this job's shard (an ancestor of the job's
    process); with a marker file, only the first time, then load the real scaler."""
    kill = ("next(p for p in psutil.Process().parents() if ' '.join(p.cmdline()).startswith('ray::')).kill(), "
            "__import__('time').sleep(60)")
    once = f"None if os.path.exists({marker!r}) else (open({marker!r}, 'w').close(), {kill})" if marker else f"({kill})"
    return (f"(lambda os, psutil: {once})(__import__('os'), __import__('psutil')) "
            f"or __import__('joblib').load({real_scaler!r})")


def test_default_shards_give_every_slot_several():
    assert default_shard_size(200, slots=1, workers=2) == 50
    assert default_shard_size(1000, slots=10, workers=2) == 25
    assert default_shard_size(200, slots=100, workers=2) == 2  # never smaller than a shard's own workers
    assert default_shard_size(3, slots=0, workers=1) == 1


def test_store_missing_on_the_node_fails_the_shard_clearly(tmp_path):
    gone = str(tmp_path / "not-mounted")
    jobs = [Job(ip=ip, labels=["t0"], values=[1.0] * 30, store=gone, model=f"model/{ip}.h5", scaler=f"sc/{ip}.save",
                std=1.0, std_mode=("store", 0), method=None) for ip in BASE_IPS[:3]]
    outcomes = run_shard(run_job, jobs, {"workers": 1})
    assert [o.ip for o in outcomes] == BASE_IPS[:3]
    assert {o.status for o in outcomes} == {Status.LOAD_ERROR}
    assert f"store {gone} not visible on node {socket.gethostname()}" in outcomes[0].error


def test_without_ray_the_backend_exits_2_with_the_install_hint(store, table, tmp_path):
    out = tmp_path / "a.csv"
    code = "import sys; sys.modules['ray'] = None; from batchpredict.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "predict", "--data", str(table), "--models", str(store),
                           "--out", str(out), "--backend", "ray"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert INSTALL_HINT in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("reply", [b"", b"HTTP/1.0 400 Bad Request\r\n\r\n"], ids=["silent", "http"])
@pytest.mark.parametrize("scheme, server", [("", "Ray GCS"), ("ray://", "Ray Client server")])
def test_an_address_that_is_no_ray_gcs_exits_2_at_once(store, table, tmp_path, reply, scheme, server):
    """A port that takes connections but is another service's: ray.init would retry it for many minutes."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        answering = threading.Thread(target=_answer, args=(listener, reply), daemon=True)
        answering.start()
        address = f"{scheme}127.0.0.1:{listener.getsockname()[1]}"
        refused_at_once(store, table, tmp_path, address, f"it takes connections but no gRPC handshake, so it is no "
                                                         f"{server} (the port of another service?)", within=60)


@needs_ray
@pytest.mark.timeout(60)
def test_a_ray_client_address_nothing_listens_at_exits_2_at_once(store, table, tmp_path):
    """Ray Client retried a refused port for 30 s before it said so."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # a port of nobody's once closed
        address = f"ray://127.0.0.1:{closed.getsockname()[1]}"
    refused_at_once(store, table, tmp_path, address, "[Errno 111] Connection refused", within=15)


def refused_at_once(store: Path, table: Path, tmp_path: Path, address: str, why: str, *, within: float) -> None:
    """predict --ray-address `address` exits 2 within `within` seconds, saying `why`, and writes nothing."""
    started = time.monotonic()
    done = run_cli("predict", "--data", table, "--models", store, "--out", tmp_path / "a.csv", "--backend", "ray",
                   "--ray-address", address, timeout=90)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"batchpredict: cannot connect to Ray at {address}: {why}"
    assert time.monotonic() - started < within and not (tmp_path / "a.csv").exists()


def _answer(listener: socket.socket, reply: bytes) -> None:
    """Take each connection, send `reply`, and keep it open without a word more."""
    kept = []
    with contextlib.suppress(OSError):  # the listener closed
        while True:
            conn, _ = listener.accept()
            conn.sendall(reply)
            kept.append(conn)


def mixed_store(store, tmp_path):
    """The store poisoned so that every status occurs, and a table with the IPs no worker sees."""
    model = next((store / "model").glob(f"{BASE_IPS[0]}.*"))
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 3])
    for ip, code in VICTIMS.items():
        joblib.dump(Poison(code), store / "sc" / f"{ip}.save")
    data = {ip: series_for(ip) for ip in BASE_IPS}
    data.update({BASE_IPS[5]: ["n/a"] * 40, "192.0.2.99": series_for("x"), "../etc/passwd": series_for("x")})
    return wide_table(tmp_path / "t.csv", data)


def comparable(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.drop(columns=TIMING)
    frame["error"] = frame["error"].str.replace(r"RSS \d+ MiB", "RSS (measured) MiB", regex=True)
    return frame


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_ray_csv_equals_local_on_every_status(store, tmp_path):
    table = mixed_store(store, tmp_path)
    limits = ["--timeout", "10", "--max-worker-memory", "1GiB", "--points", "3",  # results of several rows
              "--trust-store"]  # the poisons are pickles
    local = run_cli("predict", "--data", table, "--models", store, "--out", tmp_path / "local.csv", *limits)
    ray = run_cli("predict", "--data", table, "--models", store, "--out", tmp_path / "ray.csv", *limits,
                  "--backend", "ray", "--workers", "1", "--shard-size", "6")
    assert local.returncode == ray.returncode == 1, ray.stderr
    expected, got = read_out(tmp_path / "local.csv"), read_out(tmp_path / "ray.csv")
    assert dict(zip(got["ip"], got["status"])) == {ip: EXPECTED.get(ip, "ok") for ip in got["ip"]}
    assert got["ip"].value_counts().max() == 3
    pd.testing.assert_frame_equal(comparable(got), comparable(expected), check_exact=True)
    assert "ray: 11 jobs in 2 shards" in ray.stderr
    assert "Traceback" not in ray.stderr


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_shard_whose_ray_worker_dies_is_retried_once_then_crashed(store, table, tmp_path):
    once, always = BASE_IPS[3], BASE_IPS[9]  # one in each shard of 6
    for ip, marker in ((once, str(tmp_path / "killed")), (always, None)):
        shutil.copy(store / "sc" / f"{ip}.save", tmp_path / f"{ip}.real")
        joblib.dump(Poison(kill_ray_worker(str(tmp_path / f"{ip}.real"), marker)), store / "sc" / f"{ip}.save")
    done = run_cli("predict", "--data", table, "--models", store, "--out", tmp_path / "a.csv", "--backend", "ray",
                   "--workers", "1", "--shard-size", "6", "--trust-store")
    assert done.returncode == 1, done.stderr
    assert len(re.findall(r"shard of 6 IPs from \S+ lost, retrying: Ray shard failed: WorkerCrashedError",
                          done.stderr)) == 2
    frame = read_out(tmp_path / "a.csv")
    assert list(frame["ip"]) == BASE_IPS and (frame["attempts"] == 2).all()
    retried, lost = frame.iloc[:6], frame.iloc[6:]
    assert (retried["status"] == "ok").all() and once in retried["ip"].values
    assert (lost["status"] == "crashed").all() and always in lost["ip"].values
    assert lost["error"].str.startswith("Ray shard failed: WorkerCrashedError: The worker died unexpectedly").all()
    assert "Traceback" not in done.stderr


@pytest.fixture
def ray_head(request, tmp_path):
    """An existing one-node cluster, as `ray start --head` makes it, of 2 CPUs unless parametrized; its address."""
    cpus = getattr(request, "param", 2)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    head = subprocess.Popen([str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--port",
                             str(port), "--num-cpus", str(cpus), "--include-dashboard=false", "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **NO_TOKEN})
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.5)
        yield head, f"127.0.0.1:{port}"
    finally:
        processes = _descendants(head.pid)
        head.terminate()  # drains and stops its node
        head.wait(90)
        psutil.wait_procs(processes, timeout=30)


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_joins_an_existing_cluster_and_leaves_it_running(ray_head, store, table, tmp_path):
    head, address = ray_head
    join = ["--backend", "ray", "--ray-address", address]
    too_wide = run_cli("predict", "--data", table, "--models", store, "--out", tmp_path / "b.csv", *join,
                       "--workers", "64", env=NO_TOKEN)
    assert too_wide.returncode == 2, too_wide.stderr
    assert "--workers 64 needs 64 CPUs on one Ray node per shard, but the largest node has 2" in too_wide.stderr
    done = run_cli("predict", "--data", table, "--models", store, "--out", tmp_path / "a.csv", *join, env=NO_TOKEN)
    assert done.returncode == 0, done.stderr
    assert "ray: 12 jobs in 4 shards of up to 3, 1 at once" in done.stderr  # sized from the cluster's 2 CPUs
    assert (read_out(tmp_path / "a.csv")["status"] == "ok").all()
    assert head.poll() is None  # joined, so not shut down


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("ray_head", [1], indirect=True)
def test_shards_no_node_left_can_run_are_crashed_not_waited_for(ray_head, store, table, tmp_path):
    """The only node with the CPUs a shard reserves is lost: Ray would hold its shard and the rest pending for
    ever; they end `crashed`, naming why, and the run exits 1 with every row."""
    _, address = ray_head
    env = {**os.environ, **NO_TOKEN}
    for ip in BASE_IPS:  # every job takes a while, so that the node is lost while its first shard runs
        real = str(shutil.copy(store / "sc" / f"{ip}.save", tmp_path / f"{ip}.real"))
        joblib.dump(Poison(f"__import__('time').sleep(3) or __import__('joblib').load({real!r})"),
                    store / "sc" / f"{ip}.save")
    node = subprocess.Popen([str(Path(sys.executable).with_name("ray")), "start", "--address", address, "--block",
                             "--num-cpus", "2", "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    proc = None
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (raylet := _named(node.pid, "raylet")):
            time.sleep(0.5)
        time.sleep(5)  # registered with the head
        proc = subprocess.Popen([sys.executable, "-m", "batchpredict.cli", "predict", "--data", str(table),
                                 "--models", str(store), "--out", str(tmp_path / "a.csv"), "--backend", "ray",
                                 "--ray-address", address, "--workers", "2", "--shard-size", "4", "--trust-store"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        while time.monotonic() < deadline + 60 and not any(_cmdline(p).startswith("ray::run_shard")
                                                            for p in _descendants(raylet[0].pid)):
            time.sleep(0.5)
        raylet[0].kill()  # the node is lost with its shard
        said, _ = proc.communicate(timeout=240)
    finally:
        for process in (node, proc):
            if process is not None and process.poll() is None:
                process.kill()
        node.wait(60)
    assert proc.returncode == 1, said
    frame = read_out(tmp_path / "a.csv")
    assert list(frame["ip"]) == BASE_IPS, said
    lost = frame[frame["status"] != "ok"]
    assert len(lost) >= 4 and (lost["status"] == "crashed").all(), said
    assert (lost["error"] == "Ray shard failed: no Ray node left with the 2 CPUs a shard reserves (--workers 2); "
                             "the largest alive has 1").all(), said
    assert "Traceback" not in said


def _named(pid: int, name: str) -> list[psutil.Process]:
    return [p for p in _descendants(pid) if p.name() == name]


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("ray_head", [100_000], indirect=True)
def test_workers_over_a_nodes_memory_exit_2_naming_the_node(ray_head, store, table, tmp_path):
    """A node of many CPUs lets a shard reserve --workers of them, but its memory leaves each worker too little:
    the run's usage error (as on one machine), not every IP crashed after a pointless retry."""
    _, address = ray_head
    done = run_cli("predict", "--data", table, "--models", store, "--out", tmp_path / "a.csv", "--backend", "ray",
                   "--ray-address", address, "--workers", "100000", env=NO_TOKEN, timeout=120)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert re.fullmatch(rf"batchpredict: on Ray node {re.escape(socket.gethostname())}: --workers 100,000 leaves "
                        r"each worker .* MiB .*, or give --max-worker-memory", last), done.stderr
    assert "retrying" not in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "a.csv").exists() and not (tmp_path / "a.csv.journal").exists()


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigterm_keeps_the_journal_and_leaves_no_process(store, table, tmp_path):
    joblib.dump(Poison(POISONS["hang"]), store / "sc" / f"{BASE_IPS[0]}.save")
    out, output = tmp_path / "a.csv", tmp_path / "output"
    # SIGUSR1 makes the run print every thread's stack: where it was when it did not stop.
    code = ("import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True); "
            "from batchpredict.cli import main; sys.exit(main(sys.argv[1:]))")
    with open(output, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-c", code, "predict", "--data", str(table), "--models", str(store),
                                 "--out", str(out), "--backend", "ray", "--workers", "1", "--trust-store"],
                                stdout=sink, stderr=subprocess.STDOUT)
    descendants: list[psutil.Process] = []

    def what_happened() -> str:
        """Everything a failure needs to be understood from the log alone."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(1)
        files = sorted(p.name for p in tmp_path.iterdir())
        left = {p.pid: p for p in [*descendants, *_descendants(proc.pid)] if p.is_running()}
        return (f"exit code {proc.poll()}; files {files}; processes left:\n  "
                + "\n  ".join(map(_describe, left.values())) + f"\noutput:\n{output.read_text()}")

    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _shard_running(proc.pid):
            time.sleep(0.5)
        descendants = _descendants(proc.pid)
        assert _shard_running(proc.pid), what_happened()
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(60)
        assert proc.returncode == 128 + signal.SIGTERM, what_happened()
        said = output.read_text()
        assert "stopped by SIGTERM; journal kept" in said and "Traceback" not in said, what_happened()
        assert (tmp_path / "a.csv.journal").exists() and not out.exists(), what_happened()
        _, alive = psutil.wait_procs(descendants, timeout=30)
        assert not alive, what_happened()
    finally:  # a failed run must not leave its Ray instance to the tests after it
        for process in [proc, *descendants]:
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                process.kill()
        proc.wait(30)


def _shard_running(pid: int) -> bool:
    return any(_cmdline(p).startswith("ray::run_shard") for p in _descendants(pid))


def _describe(process: psutil.Process) -> str:
    try:
        return f"{process.pid} (parent {process.ppid()}, {process.status()}): {_cmdline(process)[:120]}"
    except psutil.Error:
        return f"{process.pid}: gone"


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # gone meanwhile
        return ""


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_nights_with_a_history_on_ray_equal_those_on_this_machine(tmp_path):
    """Each shard's workers read and write their IPs' history files in the folder every node sees: two nights
    on Ray, the second from the first's history, give the local backend's rows."""
    root = Path(__file__).resolve().parents[2]
    example = pd.read_csv(root / "examples" / "history.csv", dtype=str, keep_default_na=False).head(8)
    labels = list(example.columns[1:])
    settings = ["--models", root / "models", "--std", "rolling:24", "--since"]
    for backend in ("local", "ray"):
        folder, extra = tmp_path / backend, ["--backend", backend, "--workers", "1", "--shard-size", "3"]
        for night, (first, end) in enumerate(((0, 300), (299 - 30, 360))):
            table = tmp_path / f"{backend}-{night}.csv"
            example[["ip", *labels[first:end]]].to_csv(table, index=False)
            done = run_cli("predict", "--data", table, "--out", folder / f"{night}.csv", *settings,
                           labels[end - 61], "--history", folder / "history", *extra)
            assert done.returncode == 0, done.stderr
    for night in range(2):
        pd.testing.assert_frame_equal(read_out(tmp_path / "ray" / f"{night}.csv").drop(columns=[*TIMING, "attempts"]),
                                      read_out(tmp_path / "local" / f"{night}.csv").drop(columns=[*TIMING, "attempts"]))
