"""`--history DIR`: each IP's recent values and the model's predictions of them, kept between nights.

    DIR/<ip>.history ──read by the IP's worker──► values before tonight's table + tonight's table
         ▲                                          └─ stored predictions where the model and scaler are the same
         └── written by that worker after its job: the last values and predictions the next night needs

A file is a magic line, a JSON header, the labels (zlib of a JSON list) and the raw float64 arrays, with a
CRC: nothing in it runs. Anything else (torn by a crash, another version, a CRC that does not match) is no
history, and the IP is scored from its table alone. `before` is the running sum and count of every numeric
value the file no longer holds: a missing value's fill is the mean of all the values before it
(features.scored_windows), so it stays exact however far back the series began.
"""
from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass

import numpy as np

from .files import replaced

MAGIC = b"batchpredict history 1\n"
SUFFIX = ".history"


class Unreadable(Exception):
    """A history file that is not one this version wrote whole; its message says why."""


@dataclass(frozen=True, kw_only=True)
class History:
    labels: list[str]          # of `values`, in time order, as the table wrote them
    values: np.ndarray         # the raw values (float64, NaN for missing)
    before: tuple[float, int]  # sum and count of the numeric values before the first of `values`
    key: str                   # what the predictions were computed with (model and scaler files, window, ...)
    predicted: np.ndarray      # the model's predictions of the last len(predicted) of `values`: their residuals


def path_of(folder: str, ip: str) -> str:
    """The IP's file; ids are checked before any job (Store.check_ip), so the name stays in `folder`."""
    return os.path.join(folder, ip + SUFFIX)


def read(path: str) -> History | None:
    """The file's history; None where there is no file; Unreadable where it is not a whole file of this
    version."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Unreadable(exc.strerror or str(exc)) from None
    if not data.startswith(MAGIC):
        raise Unreadable("not a history file of this version")
    try:
        start = len(MAGIC) + 8
        length = int.from_bytes(data[len(MAGIC):start], "little")
        header = json.loads(data[start:start + length])
        body = memoryview(data)[start + length:]
        if zlib.crc32(body) != header["crc32"]:
            raise ValueError("CRC mismatch")
        packed = int(header["labels"])
        labels = json.loads(zlib.decompress(body[:packed]))
        count, kept = int(header["values"]), int(header["predicted"])
        arrays = np.frombuffer(body[packed:], dtype="<f8")
        if len(arrays) != count + kept or len(labels) != count or kept > count:
            raise ValueError("arrays and labels of different lengths")
        return History(labels=[str(label) for label in labels], values=arrays[:count].astype(float),
                       before=(float(header["before"][0]), int(header["before"][1])), key=str(header["key"]),
                       predicted=arrays[count:].astype(float))
    except (zlib.error, ValueError, KeyError, TypeError, IndexError) as exc:
        raise Unreadable(f"torn or damaged ({exc})") from None


def write(path: str, history: History) -> None:
    """The file replaced whole. Not fsynced: a file a crash leaves torn is no history, never a wrong row."""
    # The labels compressed (a tenth of their size), the numbers raw: zlib would spend milliseconds on them
    # for a few percent.
    labels = zlib.compress(json.dumps(history.labels).encode(), 1)
    body = labels + np.concatenate([history.values, history.predicted]).astype("<f8").tobytes()
    header = json.dumps({"values": len(history.values), "predicted": len(history.predicted), "labels": len(labels),
                         "before": list(history.before), "key": history.key, "crc32": zlib.crc32(body)}).encode()
    with replaced(path, durable=False) as temporary, open(temporary, "wb") as out:
        out.write(MAGIC + len(header).to_bytes(8, "little") + header + body)
