"""Execution backends behind one small interface, chosen by name.

Each backend imports its executor when constructed: the command line reads BACKENDS for --backend's
choices, and its --help should not pay for multiprocess and psutil.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..errors import UsageError
from ..job import RunOptions

if TYPE_CHECKING:  # result.py imports numpy, which --help does without
    from ..result import Outcome

# Whatever a handler answers (a Result, a TrainResult, a CheckResult), the executor yields the same.
Answer = TypeVar("Answer", bound="Outcome")


class Executor(Protocol):
    name: str

    def run(self, handler: Callable[[Any], Answer], tasks: Iterable) -> Iterator[Answer]: ...


def local_settings(options: RunOptions) -> dict:
    """LocalExecutor's arguments; the ray backend runs a LocalExecutor with them inside each shard."""
    return dict(workers=options.workers, jobs_per_worker=options.jobs_per_worker, timeout=options.timeout,
                max_memory_mib=options.max_worker_memory_mib, retries=options.retries)


def _local(options: RunOptions) -> Executor:
    from .executor import LocalExecutor

    return LocalExecutor(**local_settings(options))


def _ray(options: RunOptions) -> Executor:
    from .raybackend import RayExecutor  # imports ray itself only when constructed

    return RayExecutor(local_settings(options), address=options.ray_address, shard_size=options.shard_size)


BACKENDS: dict[str, Callable[[RunOptions], Executor]] = {"local": _local, "ray": _ray}


def make_executor(options: RunOptions) -> Executor:
    try:
        factory = BACKENDS[options.backend]
    except KeyError:
        raise UsageError(f"unknown backend {options.backend!r}; choose from {', '.join(sorted(BACKENDS))}") from None
    return factory(options)
