"""io/history.py: an IP's history file, written whole and read back bit for bit, or refused."""
from __future__ import annotations

import json
import os
import stat
import zlib

import numpy as np
import pytest
from conftest import without_blocking

from batchpredict.io import files, history
from batchpredict.io.history import History, Unreadable


def made(n: int = 50, kept: int = 20) -> History:
    rng = np.random.default_rng(n)
    values = rng.normal(size=n)
    values[[3, 17]] = np.nan
    values[5] = -0.0
    return History(labels=[f"2026-11-01T{i // 12:02d}:{i % 12 * 5:02d}" for i in range(n)], values=values,
                   before=(0.1 + 0.2, 7), key="k" * 64, predicted=rng.normal(size=kept), origin=1234)


def same(a: History, b: History) -> None:
    assert a.labels.dtype == b.labels.dtype and a.labels.tolist() == b.labels.tolist()
    assert a.key == b.key and a.before == b.before and a.origin == b.origin
    for x, y in ((a.values, b.values), (a.predicted, b.predicted)):
        assert x.dtype == y.dtype == np.float64 and x.tobytes() == y.tobytes()  # NaN and -0.0 too


def test_a_history_reads_back_bit_for_bit(tmp_path):
    path = history.path_of(str(tmp_path), "10.0.0.1")
    assert path == str(tmp_path / "10.0.0.1.history")
    written = made()
    history.write(path, written)
    same(history.read(path), written)
    assert [p.name for p in tmp_path.iterdir()] == ["10.0.0.1.history"]  # no temporary file left


def test_labels_of_any_width_and_script_read_back(tmp_path):
    path = str(tmp_path / "a.history")
    for labels in (["é", "day 2", "2026-11-01T00:00:00+01:00"], [""], []):
        written = History(labels=labels, values=np.arange(len(labels), dtype=float), before=(0.0, 0), key="k",
                          predicted=np.empty(0))
        history.write(path, written)
        read = history.read(path)
        same(read, written)
        assert [label.decode() for label in read.labels.tolist()] == labels


@pytest.mark.parametrize("version", [1, 2])
def test_a_file_of_an_earlier_version_is_unreadable(tmp_path, version):
    """Version 1 held the labels as zlib of a JSON list, version 2 no origin: such a file is no history (the night
    says so)."""
    path = tmp_path / "a.history"
    history.write(str(path), made())
    path.write_bytes(path.read_bytes().replace(history.MAGIC, f"batchpredict history {version}\n".encode()))
    with pytest.raises(Unreadable, match="not a history file of this version"):
        history.read(str(path))


def version_3(data: bytes) -> bytes:
    """A file as version 3 wrote it: the CRC in the header, over the rest only."""
    text, body = files.unframed(data, history.MAGIC)
    header = json.dumps({**json.loads(text), "crc32": zlib.crc32(body)}).encode()
    return b"batchpredict history 3\n" + len(header).to_bytes(8, "little") + header + bytes(body)


def test_a_file_of_version_3_still_reads_so_an_upgrade_keeps_the_nights(tmp_path):
    path = tmp_path / "a.history"
    written = made()
    history.write(str(path), written)
    path.write_bytes(version_3(path.read_bytes()))
    same(history.read(str(path)), written)
    damaged = bytearray(path.read_bytes())
    damaged[-20] ^= 0x01
    path.write_bytes(damaged)
    with pytest.raises(Unreadable, match="CRC"):
        history.read(str(path))


def test_every_changed_byte_is_no_history(tmp_path):
    """The header's too: a running sum or an origin one digit off would shift every fill or window, not fail."""
    path = tmp_path / "a.history"
    history.write(str(path), made())
    data = path.read_bytes()
    for position in range(len(data)):
        changed = bytearray(data)
        changed[position] ^= 0x01 if position % 2 else 0x10
        path.write_bytes(changed)
        with pytest.raises(Unreadable):
            history.read(str(path))


def test_no_file_is_no_history(tmp_path):
    assert history.read(str(tmp_path / "none.history")) is None


def test_a_day_of_five_minute_buckets_with_the_defaults_fits_in_64_kib(tmp_path):
    """The values the default ensemble and --std rolling:96 need before a night of 288 points, and the
    predictions of the residuals they need: 2,496 + 20 + 5 + 288 values, 1,356 + 288 predictions."""
    path = str(tmp_path / "a.history")
    history.write(path, made(2496 + 25 + 288, 1356 + 288))
    assert os.path.getsize(path) <= 64 * 1024


@pytest.mark.parametrize(("damage", "why"), [
    (lambda data: data[:len(data) // 2], "torn"),
    (lambda data: b"", "not a history file"),
    (lambda data: data.replace(history.MAGIC, b"batchpredict history 0\n"), "not a history file"),
    (lambda data: b"PK\x03\x04" + data, "not a history file"),
    (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "torn"),
])
def test_a_damaged_or_foreign_file_is_unreadable_saying_why(tmp_path, damage, why):
    path = tmp_path / "a.history"
    history.write(str(path), made())
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(Unreadable, match=why):
        history.read(str(path))


def test_a_file_whose_arrays_and_labels_disagree_is_unreadable(tmp_path):
    path = str(tmp_path / "a.history")
    bad = made()
    history.write(path, History(labels=bad.labels[:-1], values=bad.values, before=bad.before, key=bad.key,
                                predicted=bad.predicted))
    with pytest.raises(Unreadable, match="different lengths"):
        history.read(path)


def test_a_folder_where_the_file_should_be_is_unreadable(tmp_path):
    (tmp_path / "a.history").mkdir()
    with pytest.raises(Unreadable):
        history.read(str(tmp_path / "a.history"))


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_a_device_is_unreadable_at_once(tmp_path, kind):
    """A FIFO would block the worker until --timeout (the IP's row lost), a device such as /dev/zero fill its
    memory: neither is read (here the device of /dev/null, which ends, made where this user may)."""
    path = tmp_path / "a.history"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("this user may not make a device")
    raised = without_blocking(lambda: history.read(str(path)), path)
    assert isinstance(raised, Unreadable) and "not a regular file" in str(raised)


def test_the_ip_reads_back_and_a_file_without_it_is_of_no_ip(tmp_path):
    path = str(tmp_path / "a.history")
    written = made()
    history.write(path, History(labels=written.labels, values=written.values, before=written.before,
                                key=written.key, predicted=written.predicted, origin=written.origin, ip="10.0.0.1"))
    assert history.read(path).ip == "10.0.0.1"
    history.write(path, written)
    assert history.read(path).ip == ""
