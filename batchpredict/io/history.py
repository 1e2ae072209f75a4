"""`--history DIR`: each IP's recent values and the model's predictions of them, kept between nights.

    DIR/<ip>.history ──read by the IP's worker──► values before tonight's table + tonight's table
         ▲                                          └─ stored predictions where the model and scaler are the same
         └── written by that worker after its job: the last values and predictions the next night needs

A file is a magic line, a JSON header, the raw float64 arrays and the labels (their UTF-8 bytes at a fixed width,
each byte position's column after the other, zlib-compressed: timestamps compress to a few hundred bytes), and a
CRC of the header and the rest (files.framed): nothing in it runs. Anything else (torn by a crash, another
version, a CRC that does not match) is no history, and the IP is scored from its table alone. `before` is the
running sum and count of every numeric value the file no longer holds: a missing value's fill is the mean of all
the values before it (features.scored_windows), so it stays exact however far back the series began.
"""
from __future__ import annotations

import json
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .files import NotRegular, framed, open_regular, replaced, unframed

# Version 4: the CRC covers the header too. Version 3 (its CRC in the header, over the rest) is still read, so that
# an upgrade keeps the nights kept; version 2 had no `origin`, version 1 held the labels as a JSON list: no history.
MAGIC = b"batchpredict history 4\n"
_HEADER_CRC = b"batchpredict history 3\n"
SUFFIX = ".history"


class Unreadable(Exception):
    """A history file that is not one this version wrote whole; its message says why."""


def encoded(labels: Sequence[str]) -> np.ndarray:
    """Labels as a history holds them: their UTF-8 bytes, one fixed-width entry each (numpy's `S`, which drops a
    label's trailing NUL bytes: a label is compared and kept with them dropped, never written to a row from here)."""
    try:
        return np.array(labels, dtype="S")  # ASCII, numpy's own encoding: UTF-8's bytes where it takes them
    except UnicodeEncodeError:
        return np.array([label.encode() for label in labels], dtype="S")


@dataclass(frozen=True, kw_only=True)
class History:
    labels: np.ndarray         # of `values`, in time order, as the table wrote them (`encoded`; a list is encoded)
    values: np.ndarray         # the raw values (float64, NaN for missing)
    before: tuple[float, int]  # sum and count of the numeric values before the first of `values`
    key: str                   # what the predictions were computed with (model and scaler files, window, ...)
    predicted: np.ndarray      # the model's predictions of the last len(predicted) of `values`: their residuals
    origin: int = 0            # the place of values[0] in the series since the history began (prediction.py)
    ip: str = ""               # whose series it is: a file copied or linked under another IP's name is no history
    # of it (nights.join); "" in files written before the header named it

    def __post_init__(self) -> None:
        if not isinstance(self.labels, np.ndarray) or self.labels.dtype.kind != "S":
            object.__setattr__(self, "labels", encoded(list(self.labels)))


def path_of(folder: str, ip: str) -> str:
    """The IP's file; ids are checked before any job (Store.check_ip), so the name stays in `folder`."""
    return os.path.join(folder, ip + SUFFIX)


def read(path: str) -> History | None:
    """The file's history; None where there is no file; Unreadable where it is not a whole file of this
    version."""
    try:
        with open_regular(path) as fh:
            # The magic line first: a large file that is no history (a link to a log, a core dump) is not read whole.
            magic = fh.read(len(MAGIC))
            if magic not in (MAGIC, _HEADER_CRC):
                raise Unreadable("not a history file of this version")
            data = magic + fh.read()
    except FileNotFoundError:
        return None
    except NotRegular:
        raise Unreadable("not a regular file") from None
    except OSError as exc:
        raise Unreadable(exc.strerror or str(exc)) from None
    try:
        text, body = unframed(data, magic, closed=magic == MAGIC)
        header = json.loads(text)
        if magic == _HEADER_CRC and zlib.crc32(body) != header["crc32"]:
            raise ValueError("CRC mismatch")
        count, kept, width = int(header["values"]), int(header["predicted"]), int(header["width"])
        floats = 8 * (count + kept)
        if kept > count or width < 1 or floats > len(body):
            raise ValueError("arrays and labels of different lengths")
        arrays = np.frombuffer(body[:floats], dtype="<f8")
        columns = np.frombuffer(zlib.decompress(body[floats:]), dtype=np.uint8)
        if len(columns) != width * count:
            raise ValueError("arrays and labels of different lengths")
        labels = np.ascontiguousarray(columns.reshape(width, count).T).view(f"S{width}").reshape(count)
        return History(labels=labels, values=arrays[:count].astype(float),
                       before=(float(header["before"][0]), int(header["before"][1])), key=str(header["key"]),
                       predicted=arrays[count:].astype(float), origin=int(header["origin"]),
                       ip=str(header.get("ip", "")))
    except (zlib.error, ValueError, KeyError, TypeError, IndexError) as exc:
        raise Unreadable(f"torn or damaged ({exc})") from None


def write(path: str, history: History) -> None:
    """The file replaced whole. Not fsynced: a file a crash leaves torn is no history, never a wrong row."""
    # The labels compressed a byte position at a time (the same few characters down each column of timestamps:
    # 45 KB to ~0.4 KB, in a tenth of a millisecond), the numbers raw: zlib would spend milliseconds on them for
    # a few percent.
    labels = history.labels
    width = labels.dtype.itemsize
    columns = np.frombuffer(labels.tobytes(), dtype=np.uint8).reshape(len(labels), width).T
    body = (np.concatenate([history.values, history.predicted]).astype("<f8").tobytes()
            + zlib.compress(columns.tobytes(), 1))
    header = json.dumps({"values": len(history.values), "predicted": len(history.predicted), "width": width,
                         "before": list(history.before), "key": history.key, "origin": history.origin,
                         "ip": history.ip}).encode()
    with replaced(path, durable=False) as temporary, open(temporary, "wb") as out:
        out.write(framed(MAGIC, header, body))
