"""Files replaced whole (a reader, or a run killed half-way, never sees half a file), a store's JSON files read
as nothing but data, and the framing of the binary files a run keeps for itself (histories, cached weights)."""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import stat
import zlib
from collections.abc import Iterable, Iterator
from typing import IO, Any

from ..errors import UsageError, writing

_NAMES = itertools.count()  # with the pid, a temporary file's name
_LENGTH = 8  # bytes of a frame's header length, little-endian, after its magic line
_CRC = 4     # bytes of a frame's closing CRC32, little-endian


@contextlib.contextmanager
def replaced(path: str, keep_suffix: bool = False, *, durable: bool = True) -> Iterator[str]:
    """A temporary path in `path`'s folder for the caller to fill; on success it becomes `path`.

    The file is fsynced before the rename and the folder after it, so after a crash `path` holds the old
    contents or the new, whole. `keep_suffix` for writers that choose the format by suffix (Keras, h5py).
    `durable=False` skips both fsyncs, for a file whose loss costs nothing: the rename still means a reader
    never sees half of it, but a crash may leave it empty or gone (the weights cache, where that is a miss).
    """
    with replaced_together([path], keep_suffix, durable=durable) as (tmp,):
        yield tmp


@contextlib.contextmanager
def replaced_together(paths: list[str], keep_suffix: bool = False, *, durable: bool = True) -> Iterator[list[str]]:
    """replaced() for files that belong together: a temporary path each; once all are filled (and fsynced),
    they replace `paths` one right after another, in order, and the folders are synced once after. The last
    path is the set's commit: a reader who finds it new finds the others new too. On failure none is replaced."""
    temporaries: list[str] = []
    try:
        for path in paths:
            folder = os.path.dirname(os.path.abspath(path))
            os.makedirs(folder, exist_ok=True)
            name = os.path.basename(path)
            temporaries.append(_temporary(folder, name, os.path.splitext(name)[1] if keep_suffix else ".tmp"))
        yield temporaries
        if durable:
            for tmp in temporaries:
                with open(tmp, "rb+") as fh:
                    os.fsync(fh.fileno())
        # Back to back, after every slow step: a process killed now is killed between two renames only in
        # the microseconds they take.
        for tmp, path in zip(temporaries, paths, strict=True):
            os.replace(tmp, path)
    except BaseException:
        for tmp in temporaries:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        raise
    if durable:
        for folder in dict.fromkeys(os.path.dirname(os.path.abspath(path)) for path in paths):
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


def remove_leftovers(folder: str, names: Iterable[str] | None = None) -> int:
    """Remove the temporary files of `names` (None: of any file) in `folder` that processes no longer alive left
    (a run killed half-way through replaced()); how many. Those of a live process are its own, being written."""
    named = "|".join(re.escape(name) for name in names) if names is not None else ".+"
    pattern = re.compile(rf"\.(?:{named})\.(\d+)-\d+(?:\.[^.]+)?")
    removed = 0
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            found = pattern.fullmatch(entry.name)
            if found and entry.is_file(follow_symlinks=False) and not _alive(int(found.group(1))):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def sync_folder(folder: str) -> None:
    """Make a rename (or a file created) in `folder` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, text: str | Iterable[str]) -> None:
    """Write `text` (a string, or its pieces) as the whole new contents of `path`; UsageError where `path` is a
    FIFO or a device (special()), which the rename would replace: a report's page, evaluate's PREFIX.json. A disk
    that takes no more is OutputError (exit 74) naming `path`: `evaluate --out` and `store seal` on a full disk
    were an OSError traceback."""
    if special(path):
        raise UsageError(f"{path} is a FIFO or a device, not a file to write over")
    with writing(path), replaced(path) as tmp:
        write_text(tmp, text)


def write_text(path: str, text: str | Iterable[str]) -> None:
    """Write `text` (a string, or its pieces) to `path` as it is: into a temporary path of replaced()."""
    with open(path, "w", newline="") as fh:
        fh.writelines([text] if isinstance(text, str) else text)


def read_json(path: str, root: str) -> Any:
    """The JSON document at `path`, a file of the folder `root` (a store); UsageError naming it where it resolves
    outside `root`, is not a regular file (a FIFO would block the run for good, a device never end) or holds no
    JSON (nested past the parser's depth included). An integer past Python's 4,300 digits reads as a float
    (inf): one bad value, as std.json's NaN is, not a document the whole store is refused for."""
    if outside(root, path):
        raise UsageError(f"{path} resolves outside {root}")
    try:
        with open_regular(path, "r") as fh:
            return json.load(fh, parse_int=_integer)
    except NotRegular:
        raise UsageError(f"{path} is not a regular file") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise UsageError(f"cannot read {path}: {type(exc).__name__}: {str(exc)[:200]}") from None


def _integer(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:  # past sys.get_int_max_str_digits()
        return float(text)


class NotRegular(Exception):
    """A path that is no regular file: a FIFO, a device, a socket."""


def open_regular(path: str, mode: str = "rb") -> IO[Any]:
    """`path` opened for reading, or NotRegular where it is no regular file: opened without waiting, since a FIFO
    would block its reader until someone writes to it, and checked, since a device (/dev/zero) never ends."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    # Checked before open() wraps it: on a folder open() raises IsADirectoryError naming the descriptor, not the
    # path ("Is a directory: 4"), and leaves the descriptor open.
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegular(path)
    return open(fd, mode)  # noqa: SIM115 - returned to the caller's `with`


def special(path: str) -> bool:
    """Whether `path` is there but neither a regular file nor a folder: a FIFO, which would block whoever reads
    it until someone writes, a device (/dev/zero never ends; a rename over /dev/null as root replaces it), a
    socket. A path that is missing or cannot be looked at is not: its reader or writer says why."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def foreign(path: str) -> str | None:
    """What `path` is where it is there but no regular file of its own (a link, a folder, a FIFO or a device), for a
    file a run opens in place to write or update it (its journal, its lock, train's report): opened through a link
    it would truncate or read the link's target (any file, as root), a FIFO would block the run, a folder raise.
    None where it is a regular file, or missing, or cannot be looked at (its opener says why)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    return "a link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "a FIFO or a device"


def outside(root: str, path: str) -> bool:
    """Whether `path`, its links followed, lies outside `root` (itself resolved)."""
    real = os.path.realpath(root)
    return os.path.commonpath([real, os.path.realpath(path)]) != real


def framed(magic: bytes, header: bytes, payload: bytes) -> bytes:
    """A frame: the magic line, the header's length, the header, the payload, then a CRC32 of all but the magic
    line, so that a changed byte of the header (an array's offset, a running sum) fails as the payload's would."""
    inner = len(header).to_bytes(_LENGTH, "little") + header + payload
    return magic + inner + zlib.crc32(inner).to_bytes(_CRC, "little")


def unframed(data: bytes, magic: bytes, *, closed: bool = True) -> tuple[bytes, memoryview]:
    """A frame's (header, payload), once its magic line and CRC are checked; ValueError saying which failed.
    `closed=False` reads a frame of a format whose CRC, in its header, covers the payload only (the caller
    checks it)."""
    if not data.startswith(magic):
        raise ValueError("another magic line")
    view = memoryview(data)
    if closed:
        if len(data) < len(magic) + _LENGTH + _CRC:
            raise ValueError("too short")
        if zlib.crc32(view[len(magic):-_CRC]) != int.from_bytes(view[-_CRC:], "little"):
            raise ValueError("CRC mismatch")
        view = view[:-_CRC]
    start = len(magic) + _LENGTH
    length = int.from_bytes(view[len(magic):start], "little")
    if start + length > len(view):
        raise ValueError("a header longer than the file")
    return bytes(view[start:start + length]), view[start + length:]
