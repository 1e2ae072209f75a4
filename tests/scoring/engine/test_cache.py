"""The weights cache: a model read once is read again without HDF5, with the same numbers, and a bad entry
is a miss, never a wrong model."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import engine_models, engine_runs, without_blocking

from batchpredict.io import files, manifest
from batchpredict.scoring.engine import artefact, cache, load

MODELS = Path(__file__).parents[3] / "models" / "model"


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("BATCHPREDICT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.weights")) if folder.is_dir() else []


@pytest.mark.parametrize("path", engine_models(), ids=lambda p: p.name)
def test_a_model_from_the_cache_predicts_the_same_numbers(path, folder, monkeypatch):
    if not engine_runs(path):
        pytest.skip("a model the numpy engine does not run")
    for entry in entries(folder):
        entry.unlink()
    first = load(str(path))
    assert first.source == "file" and len(entries(folder)) == 1
    x = np.random.default_rng(0).normal(size=(7, *[d or 20 for d in first.input_shape[1:]])).astype(np.float32)

    def no_hdf5(*args, **kwargs):
        raise AssertionError("the cached model opened its file with h5py")

    monkeypatch.setattr(cache, "read", no_hdf5)
    again = load(str(path))
    assert again.source == "cache" and again.describe() == first.describe()
    np.testing.assert_array_equal(again.predict(x), first.predict(x))
    assert first.digest == again.digest == manifest.digest(str(path))  # the cache's key, carried on


def test_without_the_cache_a_model_carries_no_digest(monkeypatch):
    monkeypatch.setenv("BATCHPREDICT_CACHE", "off")
    assert load(str(MODELS / "10.0.0.10.h5")).digest is None


def corruptions(data: bytes) -> dict[str, bytes]:
    flipped = bytearray(data)
    flipped[-9] ^= 0x40  # a bit of the last array: the CRC no longer matches
    header, payload = files.unframed(data, cache.MAGIC) if data.startswith(cache.MAGIC) else (b"", memoryview(b""))
    # Headers that their CRC covers, as a writer of another kind would frame them: the reader's own checks.
    reframed = {"a header that is not JSON": header[:-3] + b"}}}", "an object dtype": header.replace(b'"<f4"', b'"|O8"', 1)}
    return {"empty": b"", "truncated": data[:len(data) // 2], "other magic": b"x" + data[1:],
            "a flipped bit": bytes(flipped), "version 1": data.replace(cache.MAGIC, b"batchpredict weights 1\n"),
            **{kind: files.framed(cache.MAGIC, text, bytes(payload)) for kind, text in reframed.items()},
            "text": b"import os; os.system('x')\n"}


def test_every_changed_byte_of_an_entry_is_a_miss(folder):
    """Header included: an array's offset or shape one digit off would give other weights, not a crash."""
    load(str(MODELS / "10.0.0.10.h5"))
    (entry,) = entries(folder)
    data = entry.read_bytes()
    assert cache._read(str(entry)) is not None
    _, payload = files.unframed(data, cache.MAGIC)
    arrays = len(data) - len(payload) - 4
    # Every byte up to the arrays (magic, length, header), then every 101st of the arrays, and the CRC.
    for position in [*range(arrays), *range(arrays, len(data) - 4, 101), *range(len(data) - 4, len(data))]:
        changed = bytearray(data)
        changed[position] ^= 0x01 if position % 2 else 0x10
        entry.write_bytes(changed)
        assert cache._read(str(entry)) is None, position


@pytest.mark.parametrize("kind", list(corruptions(b"x" * 64)))
def test_a_bad_entry_is_a_miss_and_is_written_again(kind, folder):
    path = MODELS / "10.0.0.10.h5"
    expected = load(str(path))
    (entry,) = entries(folder)
    entry.write_bytes(corruptions(entry.read_bytes())[kind])
    model = load(str(path))
    assert model.source == "file"
    x = np.full((3, 20, 1), 0.5, np.float32)
    np.testing.assert_array_equal(model.predict(x), expected.predict(x))
    assert load(str(path)).source == "cache"  # the entry was rewritten whole


def test_an_entry_is_keyed_by_the_files_content(folder, tmp_path):
    copy = tmp_path / "m.h5"
    shutil.copy(MODELS / "10.0.0.10.h5", copy)
    load(str(copy))
    assert load(str(MODELS / "10.0.0.10.h5")).source == "cache"  # the same bytes: the same entry
    shutil.copy(MODELS / "10.0.0.12.h5", copy)
    assert load(str(copy)).source == "file" and len(entries(folder)) == 2


def test_a_fifo_where_the_entry_goes_is_a_miss_at_once_and_is_replaced(folder):
    path = MODELS / "10.0.0.10.h5"
    load(str(path))
    (entry,) = entries(folder)
    entry.unlink()
    os.mkfifo(entry)
    assert without_blocking(lambda: load(str(path)), entry).source == "file"
    assert entry.is_file() and load(str(path)).source == "cache"


def test_off_and_an_unwritable_folder_still_load(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHPREDICT_CACHE", "off")
    assert load(str(MODELS / "10.0.0.10.h5")).source == "file"
    (tmp_path / "a file").write_text("")
    monkeypatch.setenv("BATCHPREDICT_CACHE", str(tmp_path / "a file" / "cache"))  # no folder can be made there
    model, source, _ = cache.load(str(MODELS / "10.0.0.10.h5"))
    assert source.startswith("file (weights cache ") and "not written" in source and model.layers


def test_the_default_folder_is_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("BATCHPREDICT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.directory() == str(tmp_path / "batchpredict")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.directory() == os.path.join(os.path.expanduser("~"), ".cache", "batchpredict")


def test_a_missing_or_unreadable_file_gets_the_readers_error(folder, tmp_path):
    with pytest.raises(Exception) as direct:
        artefact.read(str(tmp_path / "none.h5"))
    with pytest.raises(type(direct.value), match="none.h5"):
        load(str(tmp_path / "none.h5"))

