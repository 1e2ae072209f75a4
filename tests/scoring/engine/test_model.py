"""The numpy engine against the runtimes that saved each model: tf_keras (Keras 2) and keras (Keras 3).

tests/enginegen.py saves the models and records their runtimes' predictions, in one subprocess per
session; this process never imports TensorFlow. test_refusals.py covers hand-made files.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import enginegen
import h5py
import numpy as np
import pytest
from conftest import SHARED
from enginegen import write_h5

from batchpredict.errors import JobError, Unsupported
from batchpredict.result import Status
from batchpredict.scoring.engine import NumpyModel, load
from batchpredict.scoring.engine.artefact import read

HERE = Path(__file__).resolve().parents[2]  # tests/, where enginegen.py lives
REAL = SHARED / "fixtures" / "real-models"
REAL_MISSING = (f"needs {REAL} (the team's shared folder beside the repository, or set BATCHPREDICT_SHARED "
                "to a copy of it)")
QUICK = ["lstm", "gru", "hard_sigmoid", "old_gru", "keras1_lstm", *sorted(enginegen.REFUSED)]
COMPARED = [pytest.param(name, marks=() if case in QUICK else pytest.mark.slow)
            for case in enginegen.CASES if case not in enginegen.REFUSED | enginegen.FILES.keys()
            for name in enginegen.files(case)]


@pytest.fixture(scope="session")
def made(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """(folder of saved models, {file name: its runtime's input and output}): the QUICK cases, or every
    case when a selected slow test needs them, and the real files' references."""
    full = any(item.get_closest_marker("slow") and "made" in getattr(item, "fixturenames", ())
               for item in request.session.items)
    folder = tmp_path_factory.mktemp("engine")
    spec = folder / "spec.json"
    spec.write_text(json.dumps({"dir": str(folder), "cases": list(enginegen.CASES) if full else QUICK,
                                "real": [str(p) for p in sorted(REAL.glob("*.h5"))], "out": str(folder / "refs.json")}))
    done = subprocess.run([sys.executable, str(HERE / "enginegen.py"), str(spec)], capture_output=True, text=True,
                          timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, json.loads((folder / "refs.json").read_text())


def assert_predicts(model: NumpyModel, reference: dict) -> None:
    """The runtime's output on its batch of windows, to 1e-5 relative."""
    x, expected = np.asarray(reference["input"], np.float32), np.asarray(reference["output"], np.float32)
    y = model.predict(x)
    assert y.dtype == np.float32 and y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", COMPARED)
def test_predicts_as_the_saving_runtime(made: tuple[Path, dict], name: str) -> None:
    folder, refs = made
    model = load(str(folder / name))
    assert_predicts(model, refs[name])
    runtime, kind = name.rsplit("-", 1)[1].split(".")
    assert (model.kind, model.keras_version[:2]) == (kind, "2." if runtime == "tf_keras" else "3.")
    assert model.input_shape == (None, *enginegen.CASES[name.rsplit("-", 1)[0]][1])
    assert str(model) == model.describe() and model.describe().startswith("numpy engine: ")


@pytest.mark.parametrize("runtime", enginegen.RUNTIMES)
def test_hard_sigmoid_is_the_saving_keras_major_s(made: tuple[Path, dict], runtime: str) -> None:
    """Keras 2: clip(0.2x + 0.5, 0, 1); Keras 3: relu6(x + 3) / 6. The other one's gives other numbers."""
    folder, refs = made
    name = f"hard_sigmoid-{runtime}.h5"
    artefact = read(str(folder / name))
    major = artefact.major
    assert major == (2 if runtime == "tf_keras" else 3)
    assert NumpyModel(artefact).describe().endswith(f"; hard_sigmoid as Keras {major}")
    other = NumpyModel(dataclasses.replace(artefact, major=5 - major))
    x = np.asarray(refs[name]["input"], np.float32)
    assert np.abs(other.predict(x) - np.asarray(refs[name]["output"])).max() > 1e-3


def _rewrite(path: Path, version: str, edit: Callable[[dict], dict]) -> Path:
    with h5py.File(path, "r+") as h5:
        h5.attrs["keras_version"] = version
        h5["model_weights"].attrs["keras_version"] = version
        h5.attrs["model_config"] = json.dumps(edit(json.loads(h5.attrs["model_config"])))
    return path


def test_keras_2_1_gru_without_reset_after(made: tuple[Path, dict], tmp_path: Path) -> None:
    """Keras <= 2.1 wrote no reset_after: its GRU is reset_after=False (tf_keras 2.21 refuses the file)."""
    folder, refs = made

    def drop_reset_after(config: dict) -> dict:
        for layer in config["config"]["layers"]:
            layer["config"].pop("reset_after", None)
        return config

    path = _rewrite(Path(shutil.copy(folder / "old_gru-tf_keras.h5", tmp_path / "old.h5")), "2.1.6", drop_reset_after)
    model = load(str(path))
    assert model.keras_version == "2.1.6" and "GRU(4, reset_after=False)" in model.describe()
    assert_predicts(model, refs["old_gru-tf_keras.h5"])


def keras1_file(path: Path, source: Path, merged: bool) -> Path:
    """The tf_keras model at `source` (an RNN, then Dense) rewritten as Keras 1.2.2 wrote it: Keras 1 config
    keys, weights per gate with TensorFlow names (lstm_1_W_i:0, ...) or merged with Theano ones (gru_1_W)."""
    rnn, dense = [spec for spec in read(str(source)).layers if spec.weights]
    units, name = rnn.config["units"], f"{rnn.class_name.lower()}_1"
    gates = {"LSTM": "ifco", "GRU": "zrh"}[rnn.class_name]
    if merged:
        arrays = {f"{name}_{kind}": array for kind, array in zip("WUb", rnn.weights)}
    else:
        arrays = {f"{name}_{kind}_{gate}:0": array[..., n * units:(n + 1) * units]
                  for kind, array in zip("WUb", rnn.weights) for n, gate in enumerate(gates)}
        arrays = dict(reversed(arrays.items()))  # the engine goes by name, not position
    timesteps = read(str(source)).input_shape[1]
    shape = {"input_dim": 1, "input_length": timesteps} if merged else {"batch_input_shape": [None, timesteps, 1]}
    config = {"class_name": "Sequential", "config": [
        {"class_name": rnn.class_name, "config": {
            "name": name, "output_dim": units, "activation": "tanh", "init": "glorot_uniform",
            "return_sequences": False, "go_backwards": False, "stateful": False, "unroll": False,
            "consume_less": "gpu" if merged else "cpu", "dropout_W": 0.0, "dropout_U": 0.0, "trainable": True,
            **shape, **({} if merged else {"inner_activation": "hard_sigmoid"})}},  # hard_sigmoid: the default
        {"class_name": "Dense", "config": {"name": "dense_1", "output_dim": 1, "activation": "linear", "bias": True,
                                           "input_dim": units, "trainable": True}}]}
    weights = {name: arrays, "dense_1": {"dense_1_W": dense.weights[0], "dense_1_b": dense.weights[1]}}
    return write_h5(path, config, weights, "1.2.2")


@pytest.mark.parametrize(("case", "merged"), [("keras1_lstm", False), ("old_gru", True)])
def test_keras_1_file(made: tuple[Path, dict], tmp_path: Path, case: str, merged: bool) -> None:
    folder, refs = made
    model = load(str(keras1_file(tmp_path / "k1.h5", folder / f"{case}-tf_keras.h5", merged)))
    assert model.keras_version == "1.2.2" and model.describe().endswith("hard_sigmoid as Keras 2")
    assert_predicts(model, refs[f"{case}-tf_keras.h5"])


@pytest.mark.parametrize("name", sorted(p.name for p in REAL.glob("*.h5")) or ["(none)"])
def test_real_files_predict_as_their_runtime(made: tuple[Path, dict], name: str) -> None:
    """Files people saved (../shared/fixtures/real-models/PROVENANCE.md), against tf_keras or keras by version."""
    if not REAL.is_dir():
        pytest.skip(REAL_MISSING)
    model = load(str(REAL / name))
    assert_predicts(model, made[1][f"real/{name}"])
    if model.keras_version == "2.2.4":  # hard_sigmoid gates, timesteps left open (fed 20)
        assert model.input_shape == (None, None, 1) and "hard_sigmoid as Keras 2" in str(model)


REFUSALS = {  # case -> what the message says
    "conv1d": r"^layer Conv1D 'conv1d\w*' is not supported by the numpy engine$",
    "masking": r"^layer Masking 'masking\w*' is not supported by the numpy engine$",
    "stateful": r"^LSTM 'lstm\w*': stateful=True is not supported by the numpy engine$",
}


@pytest.mark.parametrize("name", [name for case in REFUSALS for name in enginegen.files(case)])
def test_refuses_what_it_cannot_run(made: tuple[Path, dict], name: str) -> None:
    with pytest.raises(Unsupported, match=REFUSALS[name.split("-")[0]]):
        load(str(made[0] / name))


@pytest.mark.parametrize("name", enginegen.files("weights_only"))
def test_weights_only_hdf5_is_a_load_error(made: tuple[Path, dict], name: str) -> None:
    with pytest.raises(JobError, match=rf"^{name}: weights-only HDF5 \(no model config, keras_version \S+\)") as caught:
        load(str(made[0] / name))
    assert caught.value.status == Status.LOAD_ERROR


def test_predict_refuses_a_window_of_another_shape(made: tuple[Path, dict]) -> None:
    model = load(str(made[0] / "lstm-keras.keras"))
    with pytest.raises(ValueError, match=r"input of shape \(2, 4, 1\) where the model takes \(None, 5, 1\)"):
        model.predict(np.zeros((2, 4, 1), np.float32))


def test_imports_neither_tensorflow_nor_the_heavy_libraries(made: tuple[Path, dict]) -> None:
    code = ("import sys, numpy as np; from batchpredict.scoring.engine import load; "
            f"load({str(made[0] / 'gru-tf_keras.keras')!r}).predict(np.zeros((1, 5, 1))); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'tensorflow', 'keras', 'tf_keras', 'sklearn', 'pandas', 'scipy', 'matplotlib'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
    assert "tensorflow" not in sys.modules
