"""`<store>/manifest.json`: what the store held when it was trained or sealed, checked before each use.

Per IP, the sha256 and size of every file its job reads (the `.h5`/`.keras`, or each file of a SavedModel
directory, and the scaler) and the sha256 of its `std.json` value, with the version that wrote them.
`train` and `store seal` write it; each worker checks its IP's files against it before it loads them, so
hashing never sits in the coordinator's path. A store without a manifest is read as before.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from importlib import metadata

from ..errors import JobError, UsageError
from ..result import Status
from .files import read_json, write_atomic

FILE = "manifest.json"
_WHOLE = 16 << 20  # files up to this size are hashed from one read: a chunked read's buffer is new pages in a worker


def read(root: str) -> dict[str, dict] | None:
    """The manifest's entries by IP, or None when the store has none; UsageError when it is unreadable."""
    path = os.path.join(root, FILE)
    if not os.path.lexists(path):
        return None
    data = read_json(path, root)
    entries = data.get("ips") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise UsageError(f"cannot read {path}: no object \"ips\" in it")
    return entries


def entry(root: str, model: str, scaler: str, std: float) -> dict:
    """One IP's record: its files (relative to the store) with their sha256 and size, and its std's."""
    return {"files": {rel: digest(os.path.join(root, rel)) for rel in files_of(root, model, scaler)},
            "std": _text_digest(json.dumps(std))}


def files_of(root: str, model: str, scaler: str) -> list[str]:
    """The files a job reads: the model file, or every file of a SavedModel directory, then the scaler."""
    path = os.path.join(root, model)
    if not os.path.isdir(path):
        return [model, scaler]
    found = [os.path.relpath(os.path.join(folder, name), root)
             for folder, _, names in os.walk(path) for name in names]
    return sorted(found) + [scaler]


def write(root: str, entries: dict[str, dict], keep: bool = False) -> str:
    """Write the manifest atomically (with `keep`, over the entries of the one there); its path."""
    entries = {**(read(root) or {}), **entries} if keep else entries
    document = {"written_by": f"batchpredict {_version()}", "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "ips": dict(sorted(entries.items()))}
    path = os.path.join(root, FILE)
    write_atomic(path, json.dumps(document, indent=1) + "\n")
    return path


def check(root: str, sealed: dict, model: str, scaler: str, *, std: float) -> None:
    """JobError(load_error) naming the first file the job reads (or its std) that differs from `sealed`, or a
    file `sealed` lists that is gone. Only the job's own files are read: the manifest cannot point elsewhere."""
    reads = files_of(root, model, scaler)
    try:
        listed, std_digest = dict(sealed["files"]), str(sealed["std"])
        wanted = {rel: (str(listed[rel]["sha256"]), int(listed[rel]["size"])) for rel in reads if rel in listed}
    except (KeyError, TypeError, ValueError) as exc:
        raise JobError(Status.LOAD_ERROR, f"{FILE}: this IP's entry is unreadable ({type(exc).__name__}: {exc})"
                       ) from None
    for rel in reads:
        if rel not in wanted:
            raise JobError(Status.LOAD_ERROR, f"checksum mismatch: {rel} is not in {FILE}")
        sha, size = wanted[rel]
        got = digest(os.path.join(root, rel)) if os.path.getsize(os.path.join(root, rel)) == size else None
        if got is None or got["sha256"] != sha:
            on_disk = "another size" if got is None else _short(got["sha256"])
            raise JobError(Status.LOAD_ERROR, f"checksum mismatch: {rel} (sha256 {_short(sha)} in {FILE}, "
                                              f"{on_disk} on disk)")
    gone = sorted(set(listed) - set(reads))
    if gone:
        raise JobError(Status.LOAD_ERROR, f"checksum mismatch: {gone[0]} is in {FILE} but not among the files read")
    if _text_digest(json.dumps(std)) != std_digest:
        raise JobError(Status.LOAD_ERROR, f"checksum mismatch: std/std.json entry {std!r} is not the one in {FILE}")


def digest(path: str) -> dict:
    """A file's sha256 and size, as an entry records them: also the weights cache's key of a model file, which
    the loaded model carries on (loading.LoadedModel.digest), so that a job hashes its model once."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        hashed = hashlib.sha256(fh.read()) if size <= _WHOLE else hashlib.file_digest(fh, "sha256")
    return {"sha256": hashed.hexdigest(), "size": size}


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _short(sha: str) -> str:
    return sha[:12] + ("…" if len(sha) > 12 else "")


def _version() -> str:
    try:
        return metadata.version("batchpredict")
    except metadata.PackageNotFoundError:
        return "unknown"
