"""engine/artefact.py: a Keras file read without a runtime: its version, input shape and chain of layers, each
with the arrays the file holds for it (read here again with h5py alone), nested models flattened."""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from enginegen import write_h5

from batchpredict.errors import JobError, Unsupported
from batchpredict.result import Status
from batchpredict.scoring.engine import load
from batchpredict.scoring.engine.artefact import read

MODELS = Path(__file__).parents[3] / "models" / "model"
CHAIN = [("InputLayer", []), ("LSTM", [(1, 256), (64, 256), (256,)]), ("LSTM", [(64, 128), (32, 128), (128,)]),
         ("Dense", [(32, 1), (1,)])]  # the bundled models: LSTM(64) > LSTM(32) > Dense(1) on 20 timesteps


@pytest.mark.parametrize("name", ["10.0.0.10.h5", "10.0.0.11.keras"])
def test_a_bundled_model_reads_as_its_chain(name):
    artefact = read(str(MODELS / name))
    assert (artefact.kind, artefact.major, artefact.input_shape) == (name.split(".")[-1], 3, (None, 20, 1))
    assert artefact.keras_version.startswith("3.")
    assert [(spec.class_name, [w.shape for w in spec.weights]) for spec in artefact.layers] == CHAIN
    assert all(w.dtype == np.float32 for spec in artefact.layers for w in spec.weights)


def test_an_h5_layers_arrays_are_its_weight_names_in_order():
    artefact = read(str(MODELS / "10.0.0.10.h5"))
    with h5py.File(MODELS / "10.0.0.10.h5", "r") as h5:
        for spec in artefact.layers[1:]:
            group = h5["model_weights"][spec.name]
            names = [n.decode() if isinstance(n, bytes) else n for n in group.attrs["weight_names"]]
            assert list(spec.weight_names) == names
            for name, array in zip(names, spec.weights, strict=True):
                np.testing.assert_array_equal(array, group[name][()])


def test_a_keras_zips_arrays_are_found_by_class_numbered_on_repeats():
    artefact = read(str(MODELS / "10.0.0.11.keras"))
    with zipfile.ZipFile(MODELS / "10.0.0.11.keras") as zf, h5py.File(io.BytesIO(zf.read("model.weights.h5"))) as h5:
        for spec, group in zip(artefact.layers[1:], ["lstm/cell", "lstm_1/cell", "dense"], strict=True):
            expected = [h5[f"layers/{group}/vars/{i}"][()] for i in range(len(h5[f"layers/{group}/vars"]))]
            assert len(spec.weights) == len(expected) > 0
            for array, want in zip(spec.weights, expected, strict=True):
                np.testing.assert_array_equal(array, want)


def test_a_nested_sequential_is_flattened_and_declares_the_input_shape(tmp_path):
    inner = {"class_name": "Sequential", "config": {"name": "inner", "layers": [
        {"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [None, 5, 1]}},
        {"class_name": "Dense", "config": {"name": "d1", "units": 2, "activation": "linear"}}]}}
    outer = {"class_name": "Sequential", "config": {"name": "outer", "layers": [
        inner, {"class_name": "Dense", "config": {"name": "d2", "units": 1, "activation": "linear"}}]}}
    rng = np.random.default_rng(0)
    w1, b1, w2, b2 = (rng.normal(size=s).astype(np.float32) for s in ((1, 2), (2,), (2, 1), (1,)))
    path = write_h5(tmp_path / "nested.h5", outer, {"inner": {"d1/kernel:0": w1, "d1/bias:0": b1},
                                                    "d2": {"d2/kernel:0": w2, "d2/bias:0": b2}}, "2.4.0")
    artefact = read(str(path))
    assert [spec.name for spec in artefact.layers] == ["in", "d1", "d2"]
    assert (artefact.input_shape, artefact.major) == ((None, 5, 1), 2)
    np.testing.assert_array_equal(artefact.layers[1].weights[0], w1)
    x = rng.normal(size=(3, 5, 1)).astype(np.float32)
    np.testing.assert_allclose(load(str(path)).predict(x), (x @ w1 + b1) @ w2 + b2, rtol=1e-6)


@pytest.mark.parametrize(("version", "major"), [("2.4.0", 2), ("2.2.4-tf", 2), ("1.2.2", 1), ("3.6.0", 3),
                                                ("", 2)])  # Keras before 2.1 may have written no version
def test_the_keras_major_is_the_files_version(tmp_path, version, major):
    config = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "Dense", "config": {"name": "d", "units": 1, "output_dim": 1, "batch_input_shape": [None, 1]}}]}}
    weights = {"d": {"d/kernel:0": np.ones((1, 1), np.float32), "d/bias:0": np.zeros(1, np.float32)}}
    if major == 1:  # Keras 1 names its Dense's weights W and b
        weights = {"d": {"d_W": np.ones((1, 1), np.float32), "d_b": np.zeros(1, np.float32)}}
    assert read(str(write_h5(tmp_path / "m.h5", config, weights, version))).major == major


def keras_zip(path: Path, files: dict[str, bytes]) -> str:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return str(path)


def test_a_keras_zip_without_a_version_is_keras_3s_and_bad_weights_are_unsupported(tmp_path):
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as h5:
        h5.create_group("layers/dense/vars")
        h5["layers/dense/vars/0"], h5["layers/dense/vars/1"] = np.ones((1, 1), np.float32), np.zeros(1, np.float32)
    config = json.dumps({"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "Dense", "config": {"name": "d", "units": 1, "batch_shape": [None, 1]}}]}}).encode()
    artefact = read(keras_zip(tmp_path / "m.keras", {"config.json": config, "model.weights.h5": buffer.getvalue()}))
    assert (artefact.major, artefact.keras_version, artefact.input_shape) == (3, "", (None, 1))
    bad = keras_zip(tmp_path / "bad.keras", {"config.json": config, "model.weights.h5": b"not HDF5"})
    with pytest.raises(Unsupported, match=r"^bad\.keras: unreadable metadata\.json or model\.weights\.h5 \("):
        read(bad)


def test_a_zip_that_cannot_be_read_is_a_load_error(tmp_path):
    path = Path(keras_zip(tmp_path / "m.keras", {"config.json": b"{}" * 500, "model.weights.h5": b"x" * 1000}))
    data = bytearray(path.read_bytes())
    start = data.index(b"{}{}")
    data[start:start + 4] = b"XXXX"  # the member's CRC no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(JobError, match=r"^m\.keras: unreadable \.keras zip \(BadZipFile: ") as caught:
        read(str(path))
    assert caught.value.status == Status.LOAD_ERROR
