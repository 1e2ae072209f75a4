"""Shared test fixtures: real stores of real Keras models, built once per session in a subprocess."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import joblib
import numpy as np
import pandas as pd
import pytest
from leanprobe import POISONS  # noqa: F401 - the tests take it from here
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler

from batchpredict import RunOptions, predict_table
from batchpredict.scoring.features import scored_windows

HERE = Path(__file__).parent
# Every worker a test starts inherits this: the weights cache of the run, never the user's own.
os.environ.setdefault("BATCHPREDICT_CACHE", tempfile.mkdtemp(prefix="batchpredict-cache-"))
# The team's shared folder beside the repo; BATCHPREDICT_SHARED points elsewhere (e.g. from a worktree).
SHARED = Path(os.environ.get("BATCHPREDICT_SHARED") or HERE.parent.parent / "shared")


def engine_models() -> list[Path]:
    """The bundled models, and the real ones of shared/ where it is there: what the engine's tests run."""
    bundled = HERE.parent / "models" / "model"
    found = sorted(bundled.glob("*.h5")) + sorted(bundled.glob("*.keras"))
    real = SHARED / "fixtures" / "real-models"
    return found + (sorted(real.glob("*.h5")) if real.is_dir() else [])


def engine_runs(path: Path) -> bool:
    """Whether the numpy engine takes the model: those it refuses are not the caller's test."""
    from batchpredict.scoring.engine import load

    try:
        load(str(path))
    except Exception:  # noqa: BLE001 - any refusal
        return False
    return True
BASE_IPS = [f"10.1.0.{i}" for i in range(1, 11)] + ["2001:db8::7", "host-a.example"]


class Poison:
    """Unpickling runs `code` in whichever process loads it (a worker)."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):  # noqa: ANN204
        return (eval, (self.code,))




def series_for(ip: str, length: int = 40) -> np.ndarray:
    rng = np.random.default_rng(sum(map(ord, ip)))
    t = np.arange(length)
    return np.round(100 + 20 * np.sin(t / 4) + rng.normal(0, 2, length), 3)


def last_window(values: np.ndarray, window: int = 20, rolling: int = 5) -> np.ndarray:
    """The window of smoothed values a run feeds the model for the series' last point, as run_job cuts it."""
    return scored_windows(values, rolling, window, len(values) - 1)[1][-1]


def weights_for(ip: str, window: int = 20) -> list[float]:
    rng = np.random.default_rng(sum(map(ord, ip)) + 1)
    w = rng.uniform(0, 1, window)
    return (w / w.sum()).tolist()


def build_models(store: Path, models: list[dict], references: list[dict] = ()) -> dict[str, float]:
    """Saves each model with its runtime (tests/storegen.py); returns the in-process predictions of
    every item with an "input" window and of every reference (see storegen's docstring)."""
    store.mkdir(parents=True, exist_ok=True)
    spec, refs = store / "spec.json", store / "refs.json"
    spec.write_text(json.dumps({"store": str(store), "models": models, "references": list(references),
                                "refs": str(refs)}))
    subprocess.run([sys.executable, str(HERE / "storegen.py"), str(spec)], check=True, timeout=300,
                   capture_output=True)
    spec.unlink()
    predictions = json.loads(refs.read_text())
    refs.unlink()
    return predictions


def write_scaler(store: Path, ip: str, obj: object) -> None:
    (store / "sc").mkdir(parents=True, exist_ok=True)
    joblib.dump(obj, store / "sc" / f"{ip}.save")


def fitted_scaler(values: np.ndarray) -> MinMaxScaler:
    return MinMaxScaler().fit(pd.Series(values).rolling(5).mean().dropna().to_numpy().reshape(-1, 1))


def write_stds(store: Path, stds: dict) -> None:
    (store / "std").mkdir(parents=True, exist_ok=True)
    (store / "std" / "std.json").write_text(json.dumps(stds))


def wide_table(path: Path, data: dict[str, np.ndarray | list]) -> Path:
    length = max(len(v) for v in data.values())
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["ip"] + [f"t{i:03d}" for i in range(length)])
        for ip, values in data.items():
            writer.writerow([ip] + list(values))
    return path


@pytest.fixture(scope="session")
def base_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 IPs with linear Keras models (half .h5, half .keras), scalers and stds."""
    store = tmp_path_factory.mktemp("base") / "store"
    build_models(store, [{"ip": ip, "kind": "linear", "format": "h5" if i % 2 else "keras",
                          "weights": weights_for(ip), "bias": 0.01 * i} for i, ip in enumerate(BASE_IPS)])
    for ip in BASE_IPS:
        write_scaler(store, ip, fitted_scaler(series_for(ip)))
    write_stds(store, {ip: 1.5 + i / 10 for i, ip in enumerate(BASE_IPS)})
    return store


# A mixed store: ip -> (storegen format, timesteps the model declares; None: variable, fed --window).
# Each is an LSTM; the .keras one starts with a Lambda layer, which Keras' safe_mode would refuse.
FORMATS = {
    "10.4.0.1": ("h5", 20),
    "10.4.0.2": ("keras", 20),
    "10.4.0.3": ("keras2-h5", 20),
    "10.4.0.4": ("keras2-savedmodel", 12),
    "10.4.0.5": ("keras3-export", 20),
    "10.4.0.6": ("tf-module", 20),
    "10.4.0.7": ("tf-module-call", 20),
    "10.4.0.8": ("keras2-keras", None),
}
BROKEN = {  # ip -> (storegen item or raw bytes, error fragment)
    "10.4.1.1": ({"kind": "linear", "format": "keras2-weights"},
                 r"10\.4\.1\.1\.h5: weights-only HDF5 \(no model config, keras_version 2\.\S+\)"),
    "10.4.1.2": ({"kind": "flat", "format": "keras"},
                 r"10\.4\.1\.2\.keras: keras keras_version=3\.\S+ via (keras|numpy): input shape \(None, 20\) is not"),
    "10.4.1.3": (b"\x89HDF\r\n\x1a\n truncated",
                 r"10\.4\.1\.3\.h5: neither HDF5 nor a \.keras zip \(OSError: "),
}
SCALERS = [lambda: MinMaxScaler(), lambda: StandardScaler(), lambda: make_pipeline(StandardScaler(), MinMaxScaler())]


@pytest.fixture(scope="session")
def formats_store(tmp_path_factory):
    """Every format, each IP with its own kind of scaler; returns (store, the saving runtimes' predictions)."""
    store = tmp_path_factory.mktemp("formats") / "store"
    items = []
    for i, (ip, (fmt, window)) in enumerate(FORMATS.items()):
        scaler = SCALERS[i % len(SCALERS)]().fit(series_for(ip).reshape(-1, 1))
        write_scaler(store, ip, scaler)
        inputs = last_window(series_for(ip), window or 20)
        items.append({"ip": ip, "kind": "lambda-lstm" if fmt == "keras" else "lstm", "format": fmt, "window": window,
                      "seed": i,
                      "input": scaler.transform(inputs.reshape(-1, 1)).ravel().tolist()})
    for ip, (made, _) in BROKEN.items():
        write_scaler(store, ip, MinMaxScaler().fit([[0.0], [1.0]]))
        if isinstance(made, dict):
            items.append({"ip": ip, **made})
    refs = build_models(store, items)
    (store / "model" / "10.4.1.3.h5").write_bytes(BROKEN["10.4.1.3"][0])
    write_stds(store, {ip: 0.5 for ip in [*FORMATS, *BROKEN]})
    return store, refs


# ip -> (storegen item, the error): models that do not give one value per window. 10.5.0.5's config is
# emptied of its layers after it is saved.
WRONG_OUTPUT = {
    "10.5.0.1": ({"kind": "dense3", "format": "h5"}, "the model outputs (None, 3) per window, not one value"),
    "10.5.0.2": ({"kind": "sequence", "format": "h5"}, "the model outputs (None, 20, 1) per window, not one value"),
    "10.5.0.3": ({"kind": "dense3", "format": "keras2-h5"}, "the model outputs (None, 3) per window, not one value"),
    "10.5.0.4": ({"kind": "dense3", "format": "keras3-export"},
                 "the model outputs (None, 3) per window, not one value"),
    "10.5.0.5": ({"kind": "linear", "format": "h5"}, "has no layers"),
}
RIGHT_OUTPUT = "10.5.0.9"  # beside them, scored


@pytest.fixture(scope="session")
def wrong_output_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """WRONG_OUTPUT's models, and RIGHT_OUTPUT's linear one, each with a scaler and a std."""
    import h5py

    store = tmp_path_factory.mktemp("outputs") / "store"
    build_models(store, [{"ip": ip, **item} for ip, (item, _) in WRONG_OUTPUT.items()]
                 + [{"ip": RIGHT_OUTPUT, "kind": "linear", "format": "h5"}])
    with h5py.File(store / "model" / "10.5.0.5.h5", "r+") as h5:
        config = json.loads(h5.attrs["model_config"])
        config["config"]["layers"] = []
        h5.attrs["model_config"] = json.dumps(config)
    for ip in [*WRONG_OUTPUT, RIGHT_OUTPUT]:
        write_scaler(store, ip, fitted_scaler(series_for(ip)))
    write_stds(store, dict.fromkeys([*WRONG_OUTPUT, RIGHT_OUTPUT], 1.0))
    return store


@pytest.fixture
def store(base_store: Path, tmp_path: Path) -> Path:
    """A private copy of the base store, free to poison."""
    return Path(shutil.copytree(base_store, tmp_path / "store"))


@pytest.fixture
def table(tmp_path: Path) -> Path:
    return wide_table(tmp_path / "stats.csv", {ip: series_for(ip) for ip in BASE_IPS})


def run_cli(*args: str, timeout: float = 240, env: dict | None = None, cpus: set[int] | None = None,
            module: str = "batchpredict.cli") -> subprocess.CompletedProcess:
    """`cpus`: the CPUs the process may run on, as `taskset` would pin it."""
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})},
                          preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)


def without_blocking(read: Callable[[], object], fifo: Path) -> object:
    """What `read()` returns or raises, called on a thread; the test fails where it is still waiting on the FIFO
    `fifo` after 10 s (then a writer's end lets it go, so that the test ends)."""
    answer: list[object] = []

    def reading() -> None:
        try:
            answer.append(read())
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            answer.append(exc)

    reader = threading.Thread(target=reading, daemon=True)
    reader.start()
    reader.join(timeout=10)
    blocked = reader.is_alive()
    if blocked:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=10)
    assert not blocked, f"blocked on {fifo}"
    return answer[0]


def read_out(path: Path) -> pd.DataFrame:
    """An output CSV: text columns as text ('' when empty), numeric columns as numbers (NaN when empty)."""
    text = ["ip", "timestamp", "std_source", "anomaly", "severity", "status", "error", "model", "alert", "alert_source"]
    frame = pd.read_csv(path, dtype={c: str for c in text}, keep_default_na=False)
    numeric = [c for c in frame.columns if c not in text]
    frame[numeric] = frame[numeric].apply(lambda col: pd.to_numeric(col.replace("", np.nan)))
    return frame


@pytest.fixture(scope="session")
def clean_run(base_store: Path, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """The base store scored as it is, strict isolation, 2 workers: the reference every test that
    compares against an untouched run reads, computed once."""
    tmp = tmp_path_factory.mktemp("clean")
    data = {ip: series_for(ip) for ip in BASE_IPS}
    table, out = wide_table(tmp / "stats.csv", data), tmp / "anomalies.csv"
    frame = predict_table(str(table), str(base_store), out=str(out), options=RunOptions(workers=2, jobs_per_worker=1))
    return SimpleNamespace(data=data, table=table, out=out, frame=frame)


@pytest.fixture(scope="session")
def every_status_run(base_store: Path, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """One CLI run without a terminal whose rows take every status, with warning and critical anomalies."""
    import h5py

    tmp = tmp_path_factory.mktemp("every")
    store = Path(shutil.copytree(base_store, tmp / "store"))
    hang, crash, hog, broken, wrong, short, warning, critical = BASE_IPS[3:11]
    for ip, kind in ((hang, "hang"), (crash, "sigkill"), (hog, "hog")):
        write_scaler(store, ip, Poison(POISONS[kind]))
    next((store / "model").glob(f"{broken}.*")).write_bytes(os.urandom(4096))
    with h5py.File(store / "model" / f"{wrong}.h5", "r+") as h5:  # a bias of NaN: the model returns NaN
        biases: list = []
        h5["model_weights"].visititems(lambda name, obj: biases.append(obj) if name.endswith("/bias") else None)
        for bias in biases:
            bias[...] = np.nan
    stds = json.loads((store / "std" / "std.json").read_text())
    write_stds(store, {**stds, warning: 100.0})
    data = {hang: series_for(hang)}  # first, so its timeout overlaps the other jobs
    data.update({ip: series_for(ip) for ip in BASE_IPS if ip != hang})
    data[short] = ["n/a"] * 40  # nothing numeric
    for ip in (warning, critical):  # the last smoothed point jumps by 300, the window does not move
        data[ip][-1] += 1500
    data["192.0.2.99"] = series_for("192.0.2.99")
    data["../etc/passwd"] = series_for("x")
    table = wide_table(tmp / "stats.csv", data)
    out, metrics = tmp / "out" / "anomalies.csv", tmp / "out" / "batchpredict.prom"
    started = time.time()
    done = run_cli("predict", "--data", table, "--models", store, "--out", out, "--metrics-file", metrics,
                   "--trust-store", "--timeout", "10", "--max-worker-memory", "1GiB", "--progress-interval", "0.5")
    assert done.returncode == 1, done.stderr
    expected = {hang: "timeout", crash: "crashed", hog: "memory_exceeded", broken: "load_error", wrong: "error",
                short: "insufficient_data", "192.0.2.99": "no_model", "../etc/passwd": "invalid_input",
                warning: "ok", critical: "ok"}
    return SimpleNamespace(table=table, store=store, out=out, metrics=metrics, stderr=done.stderr,
                           expected=expected, warning=warning, critical=critical, span=(started, time.time()))


def expected_row(values, weights, bias, scaler, std, rolling=5, window=20):
    raw = pd.Series(values, dtype=float)
    smoothed = raw.rolling(rolling).mean()[rolling - 1:].fillna(raw.mean()).to_numpy()
    inputs, observed = smoothed[-window - 1:-1], smoothed[-1]
    x = scaler.transform(inputs.reshape(-1, 1)).ravel().astype(np.float32)
    predicted = scaler.inverse_transform([[float(x @ np.float32(weights) + np.float32(bias))]])[0, 0]
    return observed, predicted


def check_against_numpy(frame, store, data):
    stds = pd.read_json(store / "std" / "std.json", typ="series")
    for i, ip in enumerate(BASE_IPS):
        row = frame.set_index("ip").loc[ip]
        scaler = joblib.load(store / "sc" / f"{ip}.save")
        observed, predicted = expected_row(data[ip], weights_for(ip), 0.01 * i, scaler, stds[ip])
        assert row["status"] == "ok", row["error"]
        assert row["observed"] == pytest.approx(observed, rel=1e-12)
        assert row["predicted"] == pytest.approx(predicted, rel=1e-5)
        assert row["upper_2std"] == pytest.approx(row["predicted"] + 2 * stds[ip])
        outside = not (row["lower_2std"] <= row["observed"] <= row["upper_2std"])
        assert row["anomaly"] == ("true" if outside else "false")
