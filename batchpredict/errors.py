"""One exception hierarchy; the CLI maps each class to an exit code (docs/design.md §5)."""
from __future__ import annotations

import contextlib
import errno
import signal
import threading
from collections.abc import Callable, Iterator


def first_line(exc: BaseException) -> str:
    """An exception as its type and the first line of its message: a row's one-line error."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def one_line(text: str) -> str:
    """`text` with its line breaks written `\\n`: a path given with one (`--models 'a<newline>b'`), or a store's file
    name holding one, stays on its line of a log or a table."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


class BatchPredictError(Exception):
    """Base of every error batchpredict raises on purpose."""

    exit_code = 1


class UsageError(BatchPredictError):
    """Unusable arguments, or a table/store that cannot be read: nothing is written."""

    exit_code = 2


class LockHeld(BatchPredictError):
    """Another run holds the lock on the same output."""

    exit_code = 75


class OutputError(BatchPredictError):
    """Writing a file of the run failed for want of space, quota, a working disk or permission (EX_IOERR).

    The run stops; what was written before is untouched and the journal keeps every finished job.
    """

    exit_code = 74


# The errors of a disk, not of the program: each stops the run with exit 74, naming the file.
IO_ERRORS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
             errno.EIO: "input/output error", errno.EROFS: "read-only file system",
             errno.EACCES: "permission denied", errno.EFBIG: "file too large (no space left under its limit)"}


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
    """An OSError of IO_ERRORS while writing `path` as an OutputError naming it; any other as it is."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in IO_ERRORS:
            raise
        raise OutputError(f"{IO_ERRORS[exc.errno]} writing {path}") from exc


class Interrupted(BatchPredictError):
    """Stopped by a signal; `then` says what was kept (predict's journal, for `--resume`)."""

    def __init__(self, signum: int, then: str = "journal kept, rerun with --resume") -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}; {then}")
        self.signum = signum
        self.exit_code = 128 + signum


@contextlib.contextmanager
def on_stop(handler: Callable[[int, object], None]) -> Iterator[None]:
    """SIGTERM and SIGINT go to `handler` within the block, the handlers before it restored after; only on the
    main thread, where Python runs signal handlers (a run started on another leaves them to its caller)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def signals_raise() -> contextlib.AbstractContextManager[None]:
    """SIGTERM/SIGINT become Interrupted, so the executor kills its workers on the way out."""
    def handler(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    return on_stop(handler)


class JobError(BatchPredictError):
    """A per-IP failure; `status` is the Status the row gets, the message its `error`."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


class Unsupported(BatchPredictError):
    """The lean path cannot take this artefact (a layer, an option, a scaler class); the message says which.

    Never a row's status by itself: under `--engine auto` the job moves to the TensorFlow path.
    """
