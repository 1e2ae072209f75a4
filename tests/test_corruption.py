"""A corrupted, hostile store: one IP per corruption, every row the status and message it must give.

The bundled store (models/, real two-layer LSTMs in .h5 and .keras) is copied, and one IP's file is broken
per case; one run scores them all beside untouched IPs, whose rows must equal a run on the intact store, and
no code in any file runs (the pickles that would run code would create a marker file).
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import h5py
import numpy as np
import pandas as pd
import pytest
from conftest import read_out, run_cli

REPO = Path(__file__).resolve().parents[1]
TIMING = ["duration_ms", "worker_pid", "worker_peak_rss_mib", "attempts"]
BUNDLED = [f"10.0.{i // 10 - 1}.{i}" for i in range(10, 38)]  # even: .h5 models, odd: .keras
CLONES = {f"10.9.{i // 10 - 1}.{i}": ip for i, ip in zip(range(10, 38), BUNDLED)}  # more of the same, to break
H5 = [ip for ip in [*BUNDLED, *CLONES] if int(ip.rsplit(".", 1)[1]) % 2 == 0]
KERAS = [ip for ip in [*BUNDLED, *CLONES] if int(ip.rsplit(".", 1)[1]) % 2 == 1]
HEALTHY = ["2001:db8::1", "2001:db8::2f", "db-primary", "edge-proxy-1.example.net"]


class Runs:
    """Unpickling calls `func(*args)`: code a hostile scaler file would run."""

    def __init__(self, func: Callable, *args: object) -> None:
        self.func, self.args = func, args

    def __reduce__(self):  # noqa: ANN204
        return self.func, self.args


# A pickle (protocol 2) of an instance of nowhere.at.all.Thing, a class of a module nobody has.
ELSEWHERE = b"\x80\x02cnowhere.at.all\nThing\n)\x81."


def config_edit(edit: Callable[[dict], object]) -> Callable[[Path], None]:
    """Rewrite an .h5 model's config attribute; `edit` changes the dict in place or returns new text."""
    def apply(path: Path) -> None:
        with h5py.File(path, "r+") as h5:
            config = json.loads(h5.attrs["model_config"])
            text = edit(config)
            h5.attrs["model_config"] = text if isinstance(text, str) else json.dumps(config)
    return apply


def lstm(config: dict) -> dict:
    return next(layer for layer in config["config"]["layers"] if layer["class_name"] == "LSTM")["config"]


def weights_edit(edit: Callable[[h5py.Group], None]) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        with h5py.File(path, "r+") as h5:
            edit(h5["model_weights"]["lstm_2"]["sequential_1"]["lstm_2"]["lstm_cell"])
    return apply


def reshaped(cell: h5py.Group) -> None:
    del cell["bias"]
    cell["bias"] = np.zeros(255, np.float32)


def nan_weights(cell: h5py.Group) -> None:
    cell["kernel"][...] = np.nan


def file_bytes(data: bytes | Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        path.write_bytes(data(path.read_bytes()) if callable(data) else data)
    return apply


def directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "weights.bin").write_bytes(b"\0" * 64)


def pickled(obj: object) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        path.write_bytes(pickle.dumps(obj))
    return apply


def std_value(value: object) -> Callable[[Path, str], None]:
    def apply(path: Path, ip: str) -> None:  # path: the store's std.json
        stds = json.loads(path.read_text())
        stds[ip] = value
        path.write_text(json.dumps(stds, allow_nan=True))
    return apply


def std_text(text: str) -> Callable[[Path, str], None]:
    """The IP's std.json value as `text`, written as it is: json.dumps cannot write every number a file holds."""
    def apply(path: Path, ip: str) -> None:
        std_value("<raw>")(path, ip)
        path.write_text(path.read_text().replace('"<raw>"', text))
    return apply


# id -> (file kind, how to break it, status, the start (or a fragment, after ...) of its error)
CASES = {
    "h5 truncated": ("model", file_bytes(lambda b: b[: len(b) // 3]), "load_error", "...h5"),
    "h5 empty": ("model", file_bytes(b""), "load_error", "...h5"),
    "h5 text": ("model", file_bytes(b"ip,t000\n10.0.0.1,3.5\n"), "load_error", "...h5"),
    "h5 zero magic": ("model", file_bytes(b"\0" * 4096), "load_error", "...h5"),
    "h5 a directory": ("model", directory, "load_error", "model/{ip}.h5 is a directory, not a model"),
    "h5 units missing": ("model", config_edit(lambda c: lstm(c).pop("units")), "load_error", "...units"),
    "h5 units negative": ("model", config_edit(lambda c: lstm(c).update(units=-4)), "load_error", "...-4"),
    "h5 units a string": ("model", config_edit(lambda c: lstm(c).update(units="many")), "load_error", "...many"),
    "h5 units huge": ("model", config_edit(lambda c: lstm(c).update(units=10**9)), "load_error",
                      "...: its config declares units 1,000,000,000, but the file holds 16,896 weight values for it"),
    "h5 unknown layer": ("model", config_edit(lambda c: c["config"]["layers"][1].update(class_name="Bogus")),
                         "load_error", "...Bogus"),
    "h5 config not json": ("model", config_edit(lambda c: "{oops"), "load_error", "...config"),
    "h5 config not a dict": ("model", config_edit(lambda c: "[1, 2]"), "load_error", "...config"),
    "h5 activation is code": ("model", config_edit(lambda c: lstm(c).update(activation={
        "module": "builtins", "class_name": "function", "config": "exec", "registered_name": "function"})),
        "load_error", "...activation"),
    "h5 weights of another shape": ("model", weights_edit(reshaped), "load_error", "...255"),
    "h5 weights missing": ("model", weights_edit(lambda cell: cell.__delitem__("kernel")), "load_error",
                           "...kernel"),
    "h5 weights NaN": ("model", weights_edit(nan_weights), "error", "model returned nan for a finite window"),
    "keras truncated": ("model", file_bytes(lambda b: b[: len(b) // 2]), "load_error", "...keras"),
    "keras empty": ("model", file_bytes(b""), "load_error", "...keras"),
    "keras text": ("model", file_bytes(b"not a zip\n"), "load_error", "...keras"),
    "keras zero magic": ("model", file_bytes(b"\0" * 4096), "load_error", "...keras"),
    "scaler runs os.system": ("scaler", None, "load_error", "...pickle names posix.system, not a known scaler; "
                                                             "read it only with --trust-store"),
    "scaler of an unknown class": ("scaler", file_bytes(ELSEWHERE), "load_error",
                                   "...pickle names nowhere.at.all.Thing, not a known scaler"),
    "scaler truncated": ("scaler", file_bytes(lambda b: b[: len(b) // 2]), "load_error", "...not read"),
    "scaler holds a dict": ("scaler", pickled({"scale_": 1.0}), "load_error", "...holds a dict, not a fitted scaler"),
    "scaler a directory": ("scaler", directory, "load_error", "sc/{ip}.save is a directory, not a scaler file"),
    "std NaN": ("std", std_value(float("nan")), "load_error", "std/std.json entry is not a finite non-negative"),
    "std negative": ("std", std_value(-1.0), "load_error", "std/std.json entry is not a finite non-negative"),
    "std a string": ("std", std_value("1.5"), "load_error", "std/std.json entry is not a finite non-negative"),
    "std null": ("std", std_value(None), "load_error", "std/std.json entry is not a finite non-negative"),
    "std a list": ("std", std_value([1.0]), "load_error", "std/std.json entry is not a finite non-negative"),
    # Finite, but twice it is not: once bands of ±inf and an `ok` row.
    "std 1e308": ("std", std_value(1e308), "error", "std 1e+308: its ±2σ band around the prediction"),
    # Past Python's 4,300 digits int() refuses it: once a ValueError that refused the whole store (exit 2).
    # Last: json.loads, which the cases before it edit std.json with, refuses it too.
    "std an integer of 5,000 digits": ("std", std_text("1" * 5000), "load_error",
                                       "std/std.json entry is not a finite non-negative number: inf"),
}


def victims() -> dict[str, str]:
    """Case -> the IP it breaks: .h5 cases on .h5 models, .keras on .keras, the rest on either."""
    h5, keras, others = iter(H5), iter(KERAS), iter(H5[::-1] + KERAS[::-1])
    chosen = {}
    for case in CASES:
        chosen[case] = next(h5 if case.startswith("h5") else keras if case.startswith("keras") else others)
    return chosen


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    tmp = tmp_path_factory.mktemp("corrupt")
    clean = Path(shutil.copytree(REPO / "models", tmp / "clean"))
    stds = json.loads((clean / "std" / "std.json").read_text())
    for clone, ip in CLONES.items():
        model = next(p for p in (clean / "model").iterdir() if p.name.rsplit(".", 1)[0] == ip)
        shutil.copy(model, clean / "model" / model.name.replace(ip, clone))
        shutil.copy(clean / "sc" / f"{ip}.save", clean / "sc" / f"{clone}.save")
        stds[clone] = stds[ip]
    (clean / "std" / "std.json").write_text(json.dumps(stds))
    frame = pd.read_csv(REPO / "examples" / "stats.csv", dtype=str, keep_default_na=False)
    copies = frame.set_index("ip").loc[list(CLONES.values())].reset_index()
    copies["ip"] = list(CLONES)
    table = tmp / "stats.csv"
    pd.concat([frame, copies]).to_csv(table, index=False)
    store = Path(shutil.copytree(clean, tmp / "store"))
    marker = tmp / "code-ran"
    chosen = victims()
    for case, (kind, breaks, _, _) in CASES.items():
        ip = chosen[case]
        if kind == "model":
            breaks(next(p for p in (store / "model").iterdir() if p.name.rsplit(".", 1)[0] == ip))
        elif kind == "scaler":
            path = store / "sc" / f"{ip}.save"
            (breaks or pickled(Runs(os.system, f"touch {marker}")))(path)
        else:
            breaks(store / "std" / "std.json", ip)
    runs = {}
    for name, models in (("broken", store), ("clean", clean)):
        out = tmp / name / "a.csv"
        done = run_cli("predict", "--data", table, "--models", models, "--out", out, "--max-worker-memory", "1GiB",
                       "--timeout", "120", timeout=600)
        runs[name] = SimpleNamespace(done=done, frame=read_out(out).set_index("ip"))
    return SimpleNamespace(marker=marker, chosen=chosen, **runs)


@pytest.mark.parametrize("case", list(CASES))
def test_each_corruption_is_one_row_with_its_status_and_message(broken_run, case):
    _, _, status, message = CASES[case]
    ip = broken_run.chosen[case]
    message = message.replace("{ip}", ip)
    row = broken_run.broken.frame.loc[ip]
    assert row["status"] == status, row["error"]
    if message.startswith("..."):
        assert message[3:] in row["error"], row["error"]
    else:
        assert row["error"].startswith(message), row["error"]
    assert "Traceback" not in row["error"] and "\n" not in row["error"]


def test_the_run_finishes_and_every_other_row_is_exact_and_nothing_ran(broken_run):
    assert broken_run.broken.done.returncode == 1, broken_run.broken.done.stderr
    assert "Traceback" not in broken_run.broken.done.stderr
    broken, clean = broken_run.broken.frame, broken_run.clean.frame
    assert list(broken.index) == list(clean.index)
    untouched = [ip for ip in clean.index if ip not in set(broken_run.chosen.values())]
    assert set(HEALTHY) <= set(untouched)
    pd.testing.assert_frame_equal(broken.loc[untouched].drop(columns=TIMING), clean.loc[untouched].drop(columns=TIMING))
    assert not broken_run.marker.exists()


@pytest.mark.slow
def test_a_zip_bomb_is_killed_at_the_memory_cap(tmp_path):
    """A .keras whose weights file inflates to 3 GiB of zeros from a few MB."""
    store = Path(shutil.copytree(REPO / "models", tmp_path / "store"))
    ip = KERAS[0]
    path = store / "model" / f"{ip}.keras"
    with zipfile.ZipFile(path) as original:
        config = original.read("config.json")
        metadata = original.read("metadata.json")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bomb:
        bomb.writestr("metadata.json", metadata)
        bomb.writestr("config.json", config)
        with bomb.open("model.weights.h5", "w", force_zip64=True) as member:
            zeros = bytes(64 << 20)
            for _ in range(48):
                member.write(zeros)
    assert path.stat().st_size < 16 << 20
    out = tmp_path / "a.csv"
    done = run_cli("predict", "--data", REPO / "examples" / "stats.csv", "--models", store, "--out", out,
                   "--max-worker-memory", "1GiB", "--timeout", "120", timeout=600)
    assert done.returncode == 1, done.stderr
    frame = read_out(out).set_index("ip")
    assert frame.loc[ip, "status"] in ("memory_exceeded", "load_error"), frame.loc[ip, "error"]
    assert (frame.drop(ip)["status"] == "ok").all()
