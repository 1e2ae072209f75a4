"""Files replaced whole: a reader, or a run killed half-way, never sees half a file."""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator

_UMASK = os.umask(0)
os.umask(_UMASK)


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
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=suffix)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide the file from its readers
        os.close(fd)
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
