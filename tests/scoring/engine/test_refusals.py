"""The numpy engine on hand-made files: what it refuses, and how (no runtime involved).

Unsupported: a valid model the engine cannot run (the caller falls back to TensorFlow), the message
naming the first layer or option; JobError(load_error): a file no runtime could read.
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from enginegen import write_h5

from batchpredict.errors import JobError, Unsupported
from batchpredict.result import Status
from batchpredict.scoring.engine import load

LSTM_WEIGHTS = {"lstm": {"lstm/kernel:0": np.zeros((1, 8), np.float32),
                         "lstm/recurrent_kernel:0": np.zeros((2, 8), np.float32),
                         "lstm/bias:0": np.zeros(8, np.float32)}}


def sequential(*layers: dict, shape: list | None = None) -> dict:
    first = [{"class_name": "InputLayer",
              "config": {"name": "input_1", "batch_input_shape": shape, "dtype": "float32"}}]
    return {"class_name": "Sequential", "config": {"name": "s", "layers": (first if shape else []) + list(layers)}}


def lstm(**config: object) -> dict:
    return {"class_name": "LSTM", "config": {"name": "lstm", "units": 2, **config}}


def functional(layers: list[dict], inputs: list, outputs: list) -> dict:
    return {"class_name": "Functional", "config": {"name": "f", "layers": layers, "input_layers": inputs,
                                                   "output_layers": outputs}}


def node(*names: str) -> list:
    """Keras 2 inbound_nodes of one call on the named layers' outputs."""
    return [[[name, 0, 0, {}] for name in names]]


def keras3_node(*names: str, **kwargs: object) -> list:
    tensors = [{"class_name": "__keras_tensor__", "config": {"shape": [None, 5, 1], "keras_history": [name, 0, 0]}}
               for name in names]
    return [{"args": tensors if len(tensors) == 1 else [tensors], "kwargs": kwargs}]


INPUT = {"class_name": "InputLayer", "name": "in", "config": {"name": "in", "batch_input_shape": [None, 5, 1]},
         "inbound_nodes": []}
IN = [None, 5, 1]
UNSUPPORTED = {  # id -> (model_config, weights, keras_version, message pattern)
    "not json": ("{oops", LSTM_WEIGHTS, "2.4.0", r"^m\.h5: unreadable model config \(JSONDecodeError: "),
    "a list": ("[1, 2]", LSTM_WEIGHTS, "2.4.0", r"^m\.h5: unreadable model config \(TypeError: "),
    "no layer config": (sequential({"class_name": "LSTM"}), {}, "2.4.0",
                        r"^m\.h5: unreadable model config \(KeyError: 'config'\)$"),
    "no units": (sequential({"class_name": "LSTM", "config": {"name": "lstm"}}, shape=IN), LSTM_WEIGHTS, "2.4.0",
                 r"^LSTM 'lstm': unreadable config \(KeyError: 'units'\)$"),
    "weights shapes": (sequential(lstm(units=3), shape=IN), LSTM_WEIGHTS, "2.4.0",
                       r"^LSTM 'lstm': weights of shapes \[\(1, 8\), \(2, 8\), \(8,\)\] where the config implies "
                       r"\[\(1, 12\), \(3, 12\), \(12,\)\]$"),
    "subclassed": ({"class_name": "MyModel", "config": {}}, {}, "3.3.3",
                   r"^model class MyModel is not supported by the numpy engine$"),
    "no input shape": (sequential(lstm()), LSTM_WEIGHTS, "2.4.0", r"^m\.h5: the model config declares no input shape$"),
    "mixed precision": (sequential(lstm(dtype={"class_name": "Policy", "config": {"name": "mixed_float16"}}), shape=IN),
                        LSTM_WEIGHTS, "2.4.0", r"^LSTM 'lstm': dtype 'mixed_float16' is not supported by the numpy"),
    "bfloat16": (sequential(lstm(dtype={"class_name": "DTypePolicy", "config": {"name": "bfloat16"}}), shape=IN),
                 LSTM_WEIGHTS, "3.5.0", r"^LSTM 'lstm': dtype 'bfloat16' is not supported by the numpy engine$"),
    "float64 weights": (sequential(lstm(), shape=IN), {"lstm": {k: v.astype(np.float64) for k, v in
                                                                LSTM_WEIGHTS["lstm"].items()}}, "2.4.0",
                        r"^LSTM 'lstm': weight dtype float64 is not supported by the numpy engine$"),
    "return_state": (sequential(lstm(return_state=True), shape=IN), LSTM_WEIGHTS, "2.4.0",
                     r"^LSTM 'lstm': return_state=True is not supported by the numpy engine$"),
    "time_major": (sequential(lstm(time_major=True), shape=IN), LSTM_WEIGHTS, "2.4.0",
                   r"^LSTM 'lstm': time_major=True is not supported by the numpy engine$"),
    "gelu": (sequential(lstm(activation="gelu"), shape=IN), LSTM_WEIGHTS, "2.4.0",
             r"^LSTM 'lstm' activation: activation 'gelu' is not supported by the numpy engine$"),
    "custom activation": (sequential(lstm(recurrent_activation={"class_name": "Mine", "config": {}}), shape=IN),
                          LSTM_WEIGHTS, "3.1.0", r"^LSTM 'lstm' recurrent_activation: activation \{'class_name'"),
    "lambda first": (sequential({"class_name": "Lambda", "config": {"name": "lambda"}}, lstm(), shape=IN),
                     LSTM_WEIGHTS, "2.4.0", r"^layer Lambda 'lambda' is not supported by the numpy engine$"),
    "keras 4": (sequential(lstm(), shape=IN), LSTM_WEIGHTS, "4.0.0",
                r"^keras_version '4\.0\.0' is not supported by the numpy engine$"),
    "two inputs": (functional([INPUT, {**INPUT, "name": "in2"}], [["in", 0, 0], ["in2", 0, 0]], [["in", 0, 0]]),
                   {}, "2.4.0", r"^a model of 2 inputs and 1 outputs is not supported by the numpy engine"),
    "a branch": (functional([INPUT, {**lstm(), "name": "lstm", "inbound_nodes": node("in")},
                             {"class_name": "Add", "name": "add", "config": {"name": "add"},
                              "inbound_nodes": node("in", "lstm")}], [["in", 0, 0]], [["add", 0, 0]]),
                 LSTM_WEIGHTS, "2.4.0", r"^Add 'add' takes 2 inputs; the numpy engine runs a single chain$"),
    "keras 3 branch": (functional([INPUT, {"class_name": "Add", "name": "add", "config": {"name": "add"},
                                           "inbound_nodes": keras3_node("in", "in")}], ["in", 0, 0], ["add", 0, 0]),
                       {}, "3.6.0", r"^Add 'add' takes several inputs; the numpy engine runs a single chain$"),
    "shared layer": (functional([INPUT, {**lstm(), "name": "lstm", "inbound_nodes": keras3_node("in") * 2}],
                                ["in", 0, 0], ["lstm", 0, 0]),
                     LSTM_WEIGHTS, "3.6.0", r"^LSTM 'lstm' is called 2 times; the numpy engine runs a single chain$"),
    "masked call": (functional([INPUT, {**lstm(), "name": "lstm", "inbound_nodes": keras3_node("in", mask="m")}],
                               ["in", 0, 0], ["lstm", 0, 0]),
                    LSTM_WEIGHTS, "3.6.0", r"^LSTM 'lstm': calling it with mask is not supported by the numpy engine$"),
    "a dangling layer": (functional([INPUT, {**lstm(), "name": "lstm", "inbound_nodes": node("in")},
                                     {**lstm(name="other"), "name": "other", "inbound_nodes": node("in")}],
                                    [["in", 0, 0]], [["lstm", 0, 0]]),
                         LSTM_WEIGHTS, "2.4.0", r"^a model whose layers \['in', 'lstm', 'other'\] do not form one"),
}


@pytest.mark.parametrize("case", UNSUPPORTED)
def test_unsupported_names_why(tmp_path: Path, case: str) -> None:
    config, weights, version, message = UNSUPPORTED[case]
    with pytest.raises(Unsupported, match=message):
        load(str(write_h5(tmp_path / "m.h5", config, weights, version)))


@pytest.mark.parametrize(("version", "activation"), [
    ("2.0.8", "relu"), ("3.0.0", {"module": "keras.activations", "class_name": "function", "config": "relu",
                                  "registered_name": "function"})])
def test_a_hand_made_functional_dense(tmp_path: Path, version: str, activation: object) -> None:
    """Keras 2.0 wrote inbound nodes without kwargs; Keras 3 may write an activation as a dict.
    A Dense computes act(x @ W + b) on the last axis."""
    kernel, bias = np.array([[0.5, -1.0]], np.float32), np.array([0.25, 0.0], np.float32)
    config = functional([INPUT, {"class_name": "Dense", "name": "d", "inbound_nodes": [[["in", 0, 0]]],
                                 "config": {"name": "d", "units": 2, "activation": activation, "use_bias": True}}],
                        [["in", 0, 0]], [["d", 0, 0]])
    model = load(str(write_h5(tmp_path / "m.h5", config, {"d": {"d/kernel:0": kernel, "d/bias:0": bias}}, version)))
    x = np.arange(10, dtype=np.float32).reshape(2, 5, 1) - 4
    np.testing.assert_array_equal(model.predict(x), np.maximum(x @ kernel + bias, 0))
    assert (model.input_shape, model.keras_version, str(model)) == ((None, 5, 1), version, "numpy engine: Dense(2)")


def test_input_shape_from_build_input_shape(tmp_path: Path) -> None:
    """tf.keras 2.x wrote a Sequential built by model.build(shape) with no InputLayer, its shape aside."""
    config = sequential({"class_name": "Dense", "config": {"name": "d", "units": 1, "activation": "linear"}})
    config["config"]["build_input_shape"] = [None, 5, 1]
    weights = {"d": {"d/kernel:0": np.full((1, 1), 2.0, np.float32), "d/bias:0": np.ones(1, np.float32)}}
    model = load(str(write_h5(tmp_path / "m.h5", config, weights, "2.4.0")))
    assert model.input_shape == (None, 5, 1)
    np.testing.assert_array_equal(model.predict(np.ones((1, 5, 1))), np.full((1, 5, 1), 3.0, np.float32))


KERAS1 = {  # id -> (layers of a Keras 1 Sequential config (a list), weights, message after "Keras 1.x file: ")
    "Convolution1D": ([{"class_name": "Convolution1D", "config": {"name": "convolution1d_1", "nb_filter": 2,
                                                                  "batch_input_shape": IN}}],
                      {"convolution1d_1": {"convolution1d_1_W": np.zeros((3, 1, 1, 2), np.float32)}},
                      r"layer Convolution1D 'convolution1d_1' is not supported by the numpy engine$"),
    "a missing gate": ([{"class_name": "LSTM", "config": {"name": "lstm_1", "output_dim": 2, "batch_input_shape": IN}}],
                       {"lstm_1": {f"lstm_1_{k}_{g}": np.zeros((1, 2) if k == "W" else (2, 2) if k == "U" else 2,
                                                                 np.float32) for k in "WUb" for g in "icfo"
                                   if (k, g) != ("b", "o")}},
                       r"LSTM 'lstm_1': weights \[.*\] lack Keras 1's b_i, b_f, b_c, b_o$"),
    "an odd weight": ([{"class_name": "Dense", "config": {"name": "dense_1", "output_dim": 1, "input_dim": 5}}],
                      {"dense_1": {"dense_1_W": np.zeros((5, 1), np.float32),
                                   "dense_1_gamma": np.zeros(1, np.float32)}},
                      r"Dense 'dense_1': weight 'dense_1_gamma' is none of Keras 1's W, U, b$"),
    "no config": ([{"class_name": "Dense"}], {}, r"m\.h5: unreadable model config \(KeyError: 'config'\)$"),
}


@pytest.mark.parametrize("case", KERAS1)
def test_keras_1_file_the_engine_cannot_run_is_a_load_error(tmp_path: Path, case: str) -> None:
    """No runtime reads Keras 1 files: nothing to fall back to."""
    layers, weights, message = KERAS1[case]
    path = write_h5(tmp_path / "m.h5", {"class_name": "Sequential", "config": layers}, weights, "1.2.2")
    with pytest.raises(JobError, match="^Keras 1.x file: " + message) as caught:
        load(str(path))
    assert caught.value.status == Status.LOAD_ERROR


CONTRADICTED = {  # id -> (model_config, weights, keras_version, message): a size declared past the weights held
    "units": (sequential(lstm(units=10**9), shape=IN), LSTM_WEIGHTS, "2.4.0",
              "LSTM 'lstm': its config declares units 1,000,000,000, but the file holds 32 weight values for it"),
    "output_dim": ({"class_name": "Sequential", "config": [
        {"class_name": "Dense", "config": {"name": "dense_1", "output_dim": 10**6, "input_dim": 5}}]},
        {"dense_1": {"dense_1_W": np.zeros((5, 1), np.float32), "dense_1_b": np.zeros(1, np.float32)}}, "1.2.2",
        "Dense 'dense_1': its config declares output_dim 1,000,000, but the file holds 6 weight values for it"),
    "filters": (sequential({"class_name": "Conv1D", "config": {"name": "conv", "filters": 10**6, "kernel_size": [3]}},
                           shape=IN),
                {"conv": {"conv/kernel:0": np.zeros((3, 1, 2), np.float32), "conv/bias:0": np.zeros(2, np.float32)}},
                "2.4.0", "Conv1D 'conv': its config declares filters 1,000,000, but the file holds 8 weight values for it"),
}


@pytest.mark.parametrize("case", CONTRADICTED)
def test_a_size_past_the_weights_held_is_a_load_error(tmp_path: Path, case: str) -> None:
    """Not Unsupported: TensorFlow, given it, built the layer the config declares (10**9 units ran until --timeout)."""
    config, weights, version, message = CONTRADICTED[case]
    with pytest.raises(JobError) as caught:
        load(str(write_h5(tmp_path / "m.h5", config, weights, version)))
    assert (caught.value.status, str(caught.value)) == (Status.LOAD_ERROR, message)


def _truncated_hdf5(path: Path) -> None:
    write_h5(path, sequential(lstm(), shape=IN), LSTM_WEIGHTS, "2.4.0")
    path.write_bytes(path.read_bytes()[:1500])


@pytest.mark.parametrize("make", [lambda p: p.write_bytes(np.random.default_rng(0).bytes(4096)), _truncated_hdf5],
                         ids=["random bytes", "truncated HDF5"])
def test_a_file_no_runtime_reads_is_a_load_error(tmp_path: Path, make: object) -> None:
    path = tmp_path / "m.h5"
    make(path)
    with pytest.raises(JobError, match=r"^m\.h5: neither HDF5 nor a \.keras zip \(OSError: ") as caught:
        load(str(path))
    assert caught.value.status == Status.LOAD_ERROR


def test_savedmodel_directories_and_other_zips_are_unsupported(tmp_path: Path) -> None:
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    with pytest.raises(Unsupported, match=r"^sm: a SavedModel directory is not supported by the numpy engine$"):
        load(str(tmp_path / "sm"))
    with zipfile.ZipFile(tmp_path / "m.keras", "w") as zf:
        zf.writestr("notes.txt", json.dumps({}))
    with pytest.raises(Unsupported, match=r"^m\.keras: a zip without config\.json and model\.weights\.h5"):
        load(str(tmp_path / "m.keras"))
