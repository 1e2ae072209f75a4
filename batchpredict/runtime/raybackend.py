"""The ray backend: shards of IPs on a Ray cluster, each job still isolated in its own process.

Data flow::

    coordinator ──shard (its slice of the jobs)──► Ray task, max_calls=1 (its Ray worker exits after)
         ▲                                             │ LocalExecutor on that node: forkserver,
         │ outcomes, a shard at a time (ray.wait)      │ one process per job, same timeout and
         └─────────────────────────────────────────────┘ memory cap as on one machine

A shard whose Ray worker dies (node lost, Ray's OOM killer) is resubmitted `retries` times (Ray's
own retries are off, so the count is ours), then its IPs are `crashed` with the Ray error. The
nodes read the artefacts themselves: the store must be at the same path on every node.
This module imports without ray; `import ray` happens when the backend is chosen.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import Interrupted, UsageError, first_line
from ..result import Outcome, Status
from .executor import Answer, LocalExecutor

log = logging.getLogger("batchpredict")

INSTALL_HINT = "--backend ray needs the ray package: pip install 'batchpredict[ray]'"
SHARDS_PER_SLOT = 4  # shards submitted at once per slot; as many more as finish
LOOKAHEAD = 10_000   # tasks read before the first shard
NODE_CHECK_S = 5.0   # a wait this long with no shard back looks whether a node can still run one


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    return ray


def default_shard_size(jobs: int, slots: int, workers: int) -> int:
    """Several shards per slot, so a lost shard or a slow node is a small share of the run; at
    least `workers` jobs, so a shard keeps busy the CPUs it reserves."""
    return max(workers, math.ceil(jobs / (max(1, slots) * SHARDS_PER_SLOT)))


def run_shard(handler: Callable[[Any], Outcome], tasks: list, settings: dict) -> list[Outcome]:
    """The Ray task: the shard's jobs through the local executor of whichever node runs it."""
    missing = sorted({task.store for task in tasks if hasattr(task, "store") and not os.path.isdir(task.store)})
    if missing:
        error = (f"store {missing[0]} not visible on node {socket.gethostname()}: every Ray node needs the "
                 "store at the same path (shared storage or a synced copy)")
        return [task.failed(Status.LOAD_ERROR, error) for task in tasks]
    try:
        executor = LocalExecutor(**settings)
    except UsageError as exc:  # settings this node cannot run (--workers over its memory): the run's exit 2
        raise UsageError(f"on Ray node {socket.gethostname()}: {exc}") from None
    return list(executor.run(handler, tasks))


RAY_CLIENT_PORT = 10001  # ray:// without a port: Ray Client's own default


def _check_reachable(address: str) -> None:
    """A GCS `host:port`, or a Ray Client server's `ray://host[:port]`, must answer first, and speak gRPC: ray.init
    retries a dead GCS, or a port of something else (a web server, a silent listener), for many minutes, and
    Ray Client a refused port for 30 s."""
    client = address.startswith("ray://")
    target = address.removeprefix("ray://").split("/", 1)[0] if client else address
    if client and not target.rpartition(":")[2].isdigit():
        target += f":{RAY_CLIENT_PORT}"
    host, colon, port = target.rpartition(":")
    if "://" in target or not colon or not port.isdigit():
        return  # auto, or another scheme: ray.init says what it makes of it
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        raise UsageError(f"cannot connect to Ray at {address}: {exc}") from None
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return  # the handshake below is plain gRPC; a TLS cluster's GCS would never take it
    import grpc  # a dependency of ray's

    with grpc.insecure_channel(target) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=10)
        except grpc.FutureTimeoutError:
            raise UsageError(f"cannot connect to Ray at {address}: it takes connections but no gRPC handshake, so it "
                             f"is no {'Ray Client server' if client else 'Ray GCS'} (the port of another service?)"
                             ) from None


def _signals_surface(call: Callable, *args: Any, **kwargs: Any) -> Any:
    """Ray runs Python signal handlers inside its blocking calls and wraps what they raise in a
    SystemError; a stop must come out as itself (Interrupted: exit 128+N, journal kept)."""
    try:
        return call(*args, **kwargs)
    except SystemError as exc:
        if isinstance(exc.__cause__, (Interrupted, SystemExit)):
            raise exc.__cause__ from None
        raise


def _interruptible(call: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call a blocking Ray function (ray.wait, ray.get) so that a stop ends it within a second.

    While it blocks, Ray runs the Python signal handlers but gives up only for a KeyboardInterrupt.
    Anything else a handler raises (the coordinator's Interrupted) is held until the call returns
    by itself, i.e. until some shard ends, which under load or with a hanging job is minutes after
    the stop. So during the call what a handler raises rides in a KeyboardInterrupt, and comes out
    as itself.
    """
    if threading.current_thread() is not threading.main_thread():
        return call(*args, **kwargs)
    raised: list[BaseException] = []

    def carried(handler: Callable) -> Callable:
        def carry(signum: int, frame: Any) -> None:
            try:
                handler(signum, frame)
            except BaseException as exc:
                raised.append(exc)
                raise KeyboardInterrupt from exc
        return carry

    handlers = {sig: handler for sig in (signal.SIGTERM, signal.SIGINT) if callable(handler := signal.getsignal(sig))}
    for sig, handler in handlers.items():
        signal.signal(sig, carried(handler))
    try:
        return call(*args, **kwargs)
    except KeyboardInterrupt:
        if raised:
            raise raised[0] from None
        raise
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _batches(tasks: Iterator, size: int) -> Iterator[list]:
    while batch := list(itertools.islice(tasks, size)):
        yield batch


class RayExecutor:
    """Runs tasks in shards on a Ray cluster; `settings` are the LocalExecutor's inside each shard."""

    name = "ray"

    def __init__(self, settings: dict, address: str | None = None, shard_size: int | None = None) -> None:
        self.ray = import_ray()
        self.settings = settings
        self.address = address
        self.shard_size = shard_size
        self.workers = settings["workers"]
        self.retries = settings["retries"]

    def run(self, handler: Callable[[Any], Answer], tasks: Iterable) -> Iterator[Answer]:
        """Yield one outcome per task, a shard at a time in completion order.

        Up to LOOKAHEAD tasks are read before the first shard, to size the shards from their number;
        a longer stream is cut into shards of the size that many would get, read as shards finish.
        """
        source = (task for task in tasks if task is not None)  # None: a pause in a stream (executor.py)
        ahead = list(itertools.islice(source, LOOKAHEAD + 1))
        if not ahead:
            return
        ray = self.ray
        started = self._connect()
        running: dict[Any, tuple[list, int]] = {}
        try:
            # Each shard reserves the CPUs of its local workers, so Ray packs shards onto nodes.
            remote = ray.remote(max_calls=1, max_retries=0, num_cpus=self.workers)(run_shard)

            def submit(shard: list, attempt: int) -> None:
                running[remote.remote(handler, shard, self.settings)] = (shard, attempt)

            slots = self._slots()
            size = self.shard_size or default_shard_size(len(ahead), slots, self.workers)
            shards = _batches(itertools.chain(ahead, source), size)
            for shard in itertools.islice(shards, slots * SHARDS_PER_SLOT):
                submit(shard, 1)
            if len(ahead) > LOOKAHEAD:
                log.info("ray: over %d jobs, in shards of up to %d, %d at once", LOOKAHEAD, size, slots)
            else:
                log.info("ray: %d jobs in %d shards of up to %d, %d at once", len(ahead), -(-len(ahead) // size),
                         size, slots)
            while running:
                ref = self._wait(running)
                if ref is None:
                    yield from self._stranded([*running.values(), *((shard, 0) for shard in shards)])
                    return
                shard, attempt = running.pop(ref)
                for more in itertools.islice(shards, 1):
                    submit(more, 1)
                outcomes = self._outcomes(ref, shard, attempt)
                if outcomes is None:
                    submit(shard, attempt + 1)
                    continue
                for outcome in outcomes:
                    outcome.attempts = max(outcome.attempts, 1) + attempt - 1  # earlier shard tries count
                    yield outcome
        finally:
            if started:
                # Stopping the local instance ends its workers, and their forkservers and jobs
                # with them. A force-cancel first can race a shard's reply and abort the driver
                # inside Ray (task_manager.cc "unexpected system state", seen with Ray 2.60).
                ray.shutdown()
            else:
                for ref in running:
                    with contextlib.suppress(Exception):  # best effort: the cluster may be gone already
                        ray.cancel(ref, force=True)

    def _outcomes(self, ref: Any, shard: list, attempt: int) -> list | None:
        """A finished shard's outcomes; None where it is to be tried again."""
        ray = self.ray
        try:
            return _interruptible(ray.get, ref)
        except ray.exceptions.RayError as exc:
            if isinstance(cause := getattr(exc, "cause", None), UsageError):
                raise cause from None  # run_shard's own (--workers over a node's memory): every try meets it
            error = f"Ray shard failed: {first_line(exc)}"
            if attempt <= self.retries:
                log.warning("ray: shard of %d IPs from %s lost, retrying: %s", len(shard), shard[0].ip, error)
                return None
            return [task.failed(Status.CRASHED, error) for task in shard]

    def _connect(self) -> bool:
        """Join the cluster at `address`, or start a local Ray; True when this call connected."""
        ray = self.ray
        if ray.is_initialized():  # the caller's own ray.init(): use it, leave it connected
            return False
        if self.address:
            _check_reachable(self.address)
        local = {"include_dashboard": False} if self.address is None else {}
        # ray.init installs a SIGTERM handler that exits; the coordinator's own must stay, so
        # that a stop keeps the journal and ends with 128+N.
        previous = signal.getsignal(signal.SIGTERM)
        try:
            _signals_surface(ray.init, address=self.address or "local", log_to_driver=False,
                             logging_level=logging.WARNING, **local)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            where = f"connect to Ray at {self.address}" if self.address else "start a local Ray"
            raise UsageError(f"cannot {where}: {first_line(exc)}") from None
        except SystemExit as exc:  # from Ray's handler: SIGTERM came while ray.init ran
            ray.shutdown()
            if exc.code != signal.SIGTERM:
                raise
            raise Interrupted(signal.SIGTERM) from None
        finally:
            if previous is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, previous)
        return True

    def _wait(self, running: dict) -> Any:
        """The next shard back; None once no node alive could run one, as the nodes that could are lost: Ray
        would hold the shards pending for ever."""
        while True:
            done, _ = _interruptible(self.ray.wait, list(running), num_returns=1, timeout=NODE_CHECK_S)
            if done:
                return done[0]
            if self._largest_node() < self.workers:
                return None

    def _stranded(self, shards: list[tuple[list, int]]) -> Iterator[Any]:
        """Every IP of shards no node left can run (those lost with the nodes, and those not yet sent) `crashed`."""
        error = (f"Ray shard failed: no Ray node left with the {self.workers} CPUs a shard reserves "
                 f"(--workers {self.workers}); the largest alive has {self._largest_node():g}")
        log.error("ray: %s", error)
        for shard, attempt in shards:
            for task in shard:
                outcome = task.failed(Status.CRASHED, error)
                outcome.attempts = attempt
                yield outcome

    def _cpus(self) -> list[float]:
        """The CPUs of each node alive."""
        return [node["Resources"].get("CPU", 0) for node in self.ray.nodes() if node["Alive"]]

    def _largest_node(self) -> float:
        return max(self._cpus(), default=0)

    def _slots(self) -> int:
        """Shards that can run at once; a node smaller than one shard could never run any."""
        cpus = self._cpus()
        if not cpus or max(cpus) < self.workers:
            raise UsageError(f"--workers {self.workers} needs {self.workers} CPUs on one Ray node per shard, "
                             f"but the largest node has {max(cpus, default=0):g}; lower --workers")
        return sum(int(c // self.workers) for c in cpus)
