"""Files replaced whole: a reader, or a run killed half-way, never sees half a file."""
from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterable, Iterator

_NAMES = itertools.count()  # with the pid, a temporary file's name


@contextlib.contextmanager
def replaced(path: str, keep_suffix: bool = False, *, durable: bool = True) -> Iterator[str]:
    """A temporary path in `path`'s folder for the caller to fill; on success it becomes `path`.

    The file is fsynced before the rename and the folder after it, so after a crash `path` holds the old
    contents or the new, whole. `keep_suffix` for writers that choose the format by suffix (Keras, h5py).
    `durable=False` skips both fsyncs, for a file whose loss costs nothing: the rename still means a reader
    never sees half of it, but a crash may leave it empty or gone (the weights cache, where that is a miss).
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    name = os.path.basename(path)
    suffix = os.path.splitext(name)[1] if keep_suffix else ".tmp"
    tmp = _temporary(folder, name, suffix)
    try:
        yield tmp
        if durable:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        sync_folder(folder)


def _temporary(folder: str, name: str, suffix: str) -> str:
    """A new empty file in `folder`, created exclusively with the mode open() gives (mkstemp's 0600 would hide
    it from its readers), named by the pid and a count: mkstemp's random names seed a generator anew in each
    process, ~0.3 ms of a fresh worker's history file. A name a dead process left is passed over."""
    while True:
        tmp = os.path.join(folder, f".{name}.{os.getpid()}-{next(_NAMES)}{suffix}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp


def sync_folder(folder: str) -> None:
    """Make a rename (or a file created) in `folder` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, text: str | Iterable[str]) -> None:
    """Write `text` (a string, or its pieces) as the whole new contents of `path`."""
    with replaced(path) as tmp, open(tmp, "w", newline="") as fh:
        fh.writelines([text] if isinstance(text, str) else text)
