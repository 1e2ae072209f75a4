"""engine/keras1.py: Keras 1.x layers as Keras 2 wrote them (config keys, weights per gate or merged), and what
the engine cannot run in a Keras 1 file a load error. test_model.py runs whole Keras 1 files against tf_keras."""
from __future__ import annotations

import numpy as np
import pytest

from batchpredict.errors import JobError, Unsupported
from batchpredict.result import Status
from batchpredict.scoring.engine.keras1 import reasons, translate
from batchpredict.scoring.engine.spec import LayerSpec

UNITS = 2


def gate_weights(name: str, gates: str, features: int = 1) -> dict[str, np.ndarray]:
    """Per-gate weights with TensorFlow names; every array's values say which it is (kind, gate)."""
    shapes = {"W": (features, UNITS), "U": (UNITS, UNITS), "b": (UNITS,)}
    return {f"{name}_{kind}_{gate}:0": np.full(shapes[kind], 10 * "WUb".index(kind) + n, np.float32)
            for kind in "WUb" for n, gate in enumerate(gates)}


def layer(class_name: str, weights: dict[str, np.ndarray], **config: object) -> LayerSpec:
    return LayerSpec(class_name, {"name": f"{class_name.lower()}_1", **config}, tuple(weights.values()),
                     tuple(weights))


@pytest.mark.parametrize(("class_name", "gates"), [("LSTM", "ifco"), ("GRU", "zrh")])
def test_per_gate_weights_join_in_keras_2s_gate_order_whatever_the_files(class_name, gates):
    weights = gate_weights(f"{class_name.lower()}_1", gates)
    shuffled = dict(reversed(weights.items()))  # the engine goes by name, not by position
    spec = translate(layer(class_name, shuffled, output_dim=UNITS, input_dim=1, input_length=20))
    kernel, recurrent, bias = spec.weights
    assert kernel.shape == (1, len(gates) * UNITS) and recurrent.shape == (UNITS, len(gates) * UNITS)
    for array, kind in ((kernel, 0), (recurrent, 10), (bias, 20)):
        assert array.reshape(-1, len(gates), UNITS)[0, :, 0].tolist() == [kind + n for n in range(len(gates))]
    assert spec.config["units"] == UNITS and "output_dim" not in spec.config
    assert spec.config["batch_input_shape"] == [None, 20, 1]
    assert spec.config["recurrent_activation"] == "hard_sigmoid"  # Keras 1's default


def test_merged_weights_and_renamed_keys_are_taken_as_they_are():
    merged = {"lstm_1_W": np.ones((1, 8), np.float32), "lstm_1_U": np.ones((2, 8), np.float32),
              "lstm_1_b": np.zeros(8, np.float32)}
    spec = translate(layer("LSTM", merged, output_dim=UNITS, inner_activation="sigmoid", input_dtype="float32",
                           batch_input_shape=[None, 5, 1]))
    assert [w.shape for w in spec.weights] == [(1, 8), (2, 8), (8,)]
    assert (spec.config["recurrent_activation"], spec.config["dtype"], spec.config["batch_input_shape"]) == (
        "sigmoid", "float32", [None, 5, 1])


def test_a_dense_with_or_without_bias():
    weights = {"dense_1_W": np.ones((5, 1), np.float32), "dense_1_b": np.zeros(1, np.float32)}
    with_bias = translate(layer("Dense", weights, output_dim=1, input_dim=5))
    assert [w.shape for w in with_bias.weights] == [(5, 1), (1,)] and with_bias.config["batch_input_shape"] == [None, 5]
    without = translate(layer("Dense", {"dense_1_W": np.ones((5, 1), np.float32)}, output_dim=1, bias=False))
    assert without.config["use_bias"] is False and [w.shape for w in without.weights] == [(5, 1)]


def test_other_layers_only_have_their_keys_renamed():
    spec = translate(layer("Dropout", {}, p=0.5, input_dtype="float32"))
    assert spec.config == {"name": "dropout_1", "p": 0.5, "dtype": "float32"} and spec.weights == ()


@pytest.mark.parametrize(("weights", "message"), [
    ({k: v for k, v in gate_weights("lstm_1", "ifco").items() if k != "lstm_1_b_o:0"},
     r"^LSTM 'lstm_1': weights \[.*\] lack Keras 1's b_i, b_f, b_c, b_o$"),
    ({**gate_weights("lstm_1", "ifco"), "lstm_1_gamma": np.zeros(2, np.float32)},
     r"^LSTM 'lstm_1': weight 'lstm_1_gamma' is none of Keras 1's W, U, b$"),
    ({**gate_weights("lstm_1", "ifco"), "lstm_1_W": np.zeros((1, 8), np.float32)},
     r"^LSTM 'lstm_1': weights \[.*\] are not just Keras 1's W, U, b$"),  # merged and per gate at once
])
def test_weights_that_are_not_keras_1s_are_unsupported(weights, message):
    with pytest.raises(Unsupported, match=message):
        translate(layer("LSTM", weights, output_dim=UNITS))


def test_in_a_keras_1_file_unsupported_is_the_load_error_no_runtime_avoids():
    with pytest.raises(JobError, match=r"^Keras 1\.x file: layer X is not supported$") as caught, reasons(1):
        raise Unsupported("layer X is not supported")
    assert caught.value.status == Status.LOAD_ERROR
    with pytest.raises(Unsupported, match=r"^layer X"), reasons(2):  # a runtime may run a Keras 2 file
        raise Unsupported("layer X is not supported")
