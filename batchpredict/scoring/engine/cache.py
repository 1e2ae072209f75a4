"""An artefact's numpy copy, so a worker reads a model it has read before with no HDF5 library at all.

    model file ──sha256──► <cache>/<sha256>.weights ── hit: one read, a JSON header, views of raw numbers
                                     └── miss: artefact.read (h5py), then the copy written atomically

The cache is the operator's own folder, never the store: BATCHPREDICT_CACHE, else $XDG_CACHE_HOME/batchpredict,
else ~/.cache/batchpredict; `off` turns it off. So whoever writes the store cannot plant weights in it, and a
sealed store's checks cover everything a job reads from the store. Keyed by the file's content, an entry is never
stale. An entry holds JSON and raw numbers, nothing that runs; one that is not exactly what this module writes
(another format, a CRC that does not match, a dtype other than a plain number) is a miss, and rewritten.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
from typing import Any

import numpy as np
import orjson

from ...errors import BatchPredictError
from ...io import manifest
from ...io.files import NotRegular, framed, open_regular, replaced, unframed
from .artefact import Artefact, read
from .spec import LayerSpec

# Version 2: the CRC covers the header too (an array's offset or shape changed is a miss); an entry of version 1 is a
# miss, and rewritten.
MAGIC = b"batchpredict weights 2\n"
_DTYPES = {"<f4", "<f8", "<f2", "<i4", "<i8"}
_ALIGN = 64


def directory() -> str | None:
    """The cache folder from the environment, or None when it is off."""
    chosen = os.environ.get("BATCHPREDICT_CACHE", "")
    if chosen.lower() == "off":
        return None
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "batchpredict")


def load(path: str) -> tuple[Artefact, str, dict | None]:
    """The artefact at `path`, from the cache when it holds the file's content; where it came from (`cache`, or
    `file` with a word on the cache when it could not be written); and the file's manifest.digest, the cache's
    key, None where the cache is off or the path is no file."""
    folder = directory()
    if folder is None or os.path.isdir(path):
        return read(path), "file", None
    try:
        hashed = manifest.digest(path)
    except OSError:
        return read(path), "file", None  # which words what is wrong with it
    entry = os.path.join(folder, hashed["sha256"] + ".weights")
    found = _read(entry)
    if found is not None:
        return found, "cache", hashed
    artefact = read(path)
    try:
        write(entry, artefact)
    except OSError as exc:
        return artefact, f"file (weights cache {folder} not written: {exc.strerror or exc})", hashed
    return artefact, "file", hashed


def fill(path: str) -> None:
    """The model file's entry written, where the numpy engine reads the file: `train` fills the cache, so
    the night after it hits. What the engine cannot read is the night's to report, not this call's."""
    with contextlib.suppress(BatchPredictError, OSError):
        load(path)


def write(entry: str, artefact: Artefact) -> None:
    """The artefact's copy at `entry`, atomically: a reader sees the whole entry or none."""
    layers, chunks, offset = [], [], 0
    for spec in artefact.layers:
        arrays = []
        for weight in spec.weights:
            data = np.ascontiguousarray(weight, dtype=weight.dtype.newbyteorder("<"))
            pad = -offset % _ALIGN
            chunks += [b"\0" * pad, data.tobytes()]
            offset += pad
            arrays.append({"dtype": data.dtype.str, "shape": list(data.shape), "offset": offset})
            offset += data.nbytes
        layers.append({"class_name": spec.class_name, "config": spec.config, "weight_names": list(spec.weight_names),
                       "arrays": arrays})
    payload = b"".join(chunks)
    header = json.dumps({"kind": artefact.kind, "keras_version": artefact.keras_version, "major": artefact.major,
                         "input_shape": list(artefact.input_shape), "layers": layers}).encode()
    # Not fsynced: an entry a crash leaves short fails its CRC, is a miss, and is written again.
    with replaced(entry, durable=False) as temporary, open(temporary, "wb") as out:
        out.write(framed(MAGIC, header, payload))


def _read(entry: str) -> Artefact | None:
    """The entry's artefact, or None for anything but a whole, well-formed entry."""
    try:
        with open_regular(entry) as fh:  # a FIFO there would block the worker until --timeout
            data = fh.read()
    except (OSError, NotRegular):
        return None
    try:
        text, payload = unframed(data, MAGIC)
        header = _json(text)
        layers = tuple(LayerSpec(str(layer["class_name"]), _mapping(layer["config"]),
                                 tuple(_array(payload, a) for a in layer["arrays"]),
                                 tuple(str(name) for name in layer["weight_names"])) for layer in header["layers"])
        return Artefact(str(header["kind"]), str(header["keras_version"]), int(header["major"]),
                        tuple(None if d is None else int(d) for d in header["input_shape"]), layers)
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
        return None


def _json(text: bytes) -> Any:
    """orjson's parse (a third of json's time and page faults in a fresh worker); json's for what orjson refuses
    and json.dumps may have written (NaN, integers beyond 64 bits)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _array(payload: memoryview, described: dict) -> np.ndarray:
    dtype = str(described["dtype"])
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype}")
    shape = tuple(int(d) for d in described["shape"])
    offset, count = int(described["offset"]), math.prod(shape)
    if min(shape, default=0) < 0 or offset < 0:
        raise ValueError("negative shape or offset")
    return np.frombuffer(payload, dtype=np.dtype(dtype), count=count, offset=offset).reshape(shape)


def _mapping(value: Any) -> dict:
    if not isinstance(value, dict):
        raise TypeError("a layer config that is not a mapping")
    return value
