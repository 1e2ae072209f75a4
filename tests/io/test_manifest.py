"""manifest.json: a sealed store scores as before; any byte changed since, anywhere it is read, is one row."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import pandas as pd
import pytest
from conftest import read_out, run_cli

from batchpredict.io import manifest

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "examples" / "stats.csv"
TIMING = ["duration_ms", "worker_pid", "worker_peak_rss_mib"]


@pytest.fixture(scope="module")
def unsealed_run(tmp_path_factory) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("plain") / "a.csv"
    assert run_cli("predict", "--data", TABLE, "--models", REPO / "models", "--out", out).returncode == 0
    return read_out(out).set_index("ip").drop(columns=TIMING)


@pytest.fixture
def sealed(tmp_path) -> Path:
    store = Path(shutil.copytree(REPO / "models", tmp_path / "store"))
    done = run_cli("store", "seal", "--models", store)
    assert done.returncode == 0, done.stderr
    assert f"batchpredict store seal: 32 IPs -> {store / 'manifest.json'}" in done.stderr
    return store


def flip_a_weight(path: Path) -> None:
    """One byte inside a weights array: a valid file with other weights."""
    with h5py.File(path) as h5:
        offset = h5["model_weights/lstm_2/sequential_1/lstm_2/lstm_cell/kernel"].id.get_offset()
    data = bytearray(path.read_bytes())
    data[offset + 5] ^= 0x40
    path.write_bytes(bytes(data))


def predict(store: Path, out: Path, *args: str) -> tuple[int, pd.DataFrame]:
    done = run_cli("predict", "--data", TABLE, "--models", store, "--out", out, *args)
    return done.returncode, read_out(out).set_index("ip").drop(columns=TIMING)


def test_a_sealed_store_scores_as_before(sealed, unsealed_run, tmp_path):
    document = json.loads((sealed / "manifest.json").read_text())
    assert document["written_by"].startswith("batchpredict ") and len(document["ips"]) == 32
    entry = document["ips"]["10.0.0.10"]
    assert set(entry["files"]) == {"model/10.0.0.10.h5", "sc/10.0.0.10.save"}
    assert entry["files"]["model/10.0.0.10.h5"]["size"] == (sealed / "model" / "10.0.0.10.h5").stat().st_size
    code, frame = predict(sealed, tmp_path / "a.csv")
    assert code == 0
    pd.testing.assert_frame_equal(frame, unsealed_run)


@pytest.mark.parametrize("what", ["weight", "scaler", "std"])
def test_a_change_since_sealing_is_a_checksum_mismatch_for_that_ip_only(sealed, unsealed_run, tmp_path, what):
    ip = "10.0.0.12"
    if what == "weight":
        flip_a_weight(sealed / "model" / f"{ip}.h5")
        expected = f"checksum mismatch: model/{ip}.h5 (sha256 "
    elif what == "scaler":
        shutil.copy(sealed / "sc" / "10.0.0.14.save", sealed / "sc" / f"{ip}.save")  # another IP's, valid
        expected = f"checksum mismatch: sc/{ip}.save (sha256 "
    else:
        stds = json.loads((sealed / "std" / "std.json").read_text())
        stds[ip] *= 2
        (sealed / "std" / "std.json").write_text(json.dumps(stds))
        expected = "checksum mismatch: std/std.json entry "
    code, frame = predict(sealed, tmp_path / "a.csv")
    assert code == 1
    row = frame.loc[ip]
    assert row["status"] == "load_error" and row["error"].startswith(expected), row["error"]
    if what != "std":
        assert " in manifest.json, " in row["error"] and row["error"].endswith(" on disk)")
    pd.testing.assert_frame_equal(frame.drop(ip), unsealed_run.drop(ip))
    check = run_cli("store", "check", "--models", sealed)
    assert check.returncode == 1 and expected in check.stdout


def test_an_ip_the_manifest_does_not_list_is_a_load_error_unless_allowed(sealed, unsealed_run, tmp_path):
    entries = manifest.read(str(sealed))
    del entries["db-primary"]
    manifest.write(str(sealed), entries)
    code, frame = predict(sealed, tmp_path / "a.csv")
    assert code == 1 and frame.loc["db-primary", "status"] == "load_error"
    assert frame.loc["db-primary", "error"] == ("not in manifest.json: seal the store (batchpredict store seal "
                                                "--models DIR) or pass --allow-unsealed")
    code, frame = predict(sealed, tmp_path / "b.csv", "--allow-unsealed")
    assert code == 0
    pd.testing.assert_frame_equal(frame, unsealed_run)


def test_an_unreadable_manifest_stops_the_run(sealed, tmp_path):
    (sealed / "manifest.json").write_text("{oops")
    done = run_cli("predict", "--data", TABLE, "--models", sealed, "--out", tmp_path / "a.csv")
    assert done.returncode == 2 and "cannot read" in done.stderr and "manifest.json" in done.stderr


def test_only_the_files_a_job_reads_are_checked_and_each_must_be_listed(sealed, tmp_path):
    """An entry that lists other files (one outside the store, say) instead of the IP's own: its own files
    are unlisted, the listed ones never read; an entry of the wrong shape is one row too."""
    entries = manifest.read(str(sealed))
    entries["10.0.0.12"]["files"] = {"../../etc/shadow": {"sha256": "0" * 64, "size": 1},
                                     **{k: v for k, v in entries["10.0.0.12"]["files"].items() if k.startswith("sc/")}}
    entries["10.0.0.14"] = {"files": {"model/10.0.0.14.h5": "a string"}, "std": None}
    manifest.write(str(sealed), entries)
    code, frame = predict(sealed, tmp_path / "a.csv")
    assert code == 1
    assert frame.loc["10.0.0.12", "error"] == "checksum mismatch: model/10.0.0.12.h5 is not in manifest.json"
    assert frame.loc["10.0.0.14", "error"].startswith("manifest.json: this IP's entry is unreadable (")
    assert (frame.drop(["10.0.0.12", "10.0.0.14"])["status"] == "ok").all()


@pytest.mark.parametrize("damaged", [{}, [], 0])
def test_an_empty_or_mistyped_entry_is_a_load_error_not_an_unsealed_ip(sealed, tmp_path, damaged):
    """A falsy entry is a damaged manifest's: the IP's files (changed here) must not run unchecked."""
    entries = manifest.read(str(sealed))
    entries["10.0.0.12"] = damaged
    manifest.write(str(sealed), entries)
    flip_a_weight(sealed / "model" / "10.0.0.12.h5")
    code, frame = predict(sealed, tmp_path / "a.csv")
    assert code == 1 and frame.loc["10.0.0.12", "status"] == "load_error"
    assert frame.loc["10.0.0.12", "error"].startswith("manifest.json: this IP's entry is unreadable (")
    check = run_cli("store", "check", "--models", sealed)
    assert check.returncode == 1 and "this IP's entry is unreadable" in check.stdout
