"""engine/activations.py: each activation against its formula in float64, in float32 as the runtimes give it, and
hard_sigmoid as each Keras major computes it."""
from __future__ import annotations

import numpy as np
import pytest

from batchpredict.errors import Unsupported
from batchpredict.scoring.engine.activations import activation_name, get

X = np.concatenate([np.linspace(-12, 12, 241), [-88.0, -30.0, -1e-3, 0.0, 1e-3, 30.0, 88.0]]).astype(np.float32)
SELU = (1.6732632423543772, 1.0507009873554805)
FORMULAS = {  # name -> float64 reference
    "linear": lambda x: x,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "elu": lambda x: np.where(x > 0, x, np.exp(x) - 1),
    "selu": lambda x: SELU[1] * np.where(x > 0, x, SELU[0] * (np.exp(x) - 1)),
    "softsign": lambda x: x / (1 + np.abs(x)),
    "softplus": lambda x: np.log1p(np.exp(x)),
    "swish": lambda x: x / (1 + np.exp(-x)),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "exponential": np.exp,
}


@pytest.mark.parametrize("name", FORMULAS)
@pytest.mark.parametrize("major", [2, 3])
def test_each_activation_is_its_formula_in_float32(name, major):
    x = X[np.abs(X) < 80] if name == "exponential" else X  # exp(88) is over float32's range
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # sigmoid(-88): no overflow, no warning
        y = get(name, major, "LSTM 'lstm' activation")(x)
    assert y.dtype == np.float32 and y.shape == x.shape
    # sigmoid as 0.5 tanh(x / 2) + 0.5 is float32 rounding (~3e-8) away from 1 / (1 + exp(-x)); swish, x times it
    atol = 5e-7 if name in ("swish", "silu") else 1e-7
    np.testing.assert_allclose(y, FORMULAS[name](x.astype(np.float64)), rtol=2e-6, atol=atol)


def test_hard_sigmoid_is_the_saving_keras_majors():
    """Keras 1, 2 and tf_keras: clip(0.2x + 0.5, 0, 1); Keras 3: relu6(x + 3) / 6: the two differ inside (-3, 3)."""
    x = np.array([-4, -3, -2.5, -1, 0, 1, 2.5, 3, 4], np.float32)
    keras2, keras3 = get("hard_sigmoid", 2, "x")(x), get("hard_sigmoid", 3, "x")(x)
    np.testing.assert_allclose(keras2, [0, 0, 0, 0.3, 0.5, 0.7, 1, 1, 1], atol=1e-7)
    np.testing.assert_allclose(keras3, [0, 0, 1 / 12, 1 / 3, 0.5, 2 / 3, 11 / 12, 1, 1], atol=1e-7)
    assert keras2.dtype == keras3.dtype == np.float32


@pytest.mark.parametrize(("identifier", "name"), [
    ("relu", "relu"), (None, "linear"),
    ({"module": "keras.activations", "class_name": "function", "config": "tanh", "registered_name": "function"},
     "tanh"),
    ({"class_name": "Mine", "config": {}}, None), (7, None)])
def test_a_config_names_its_activation_as_text_or_as_keras_3s_function(identifier, name):
    assert activation_name(identifier) == name


@pytest.mark.parametrize(("identifier", "message"), [
    ("gelu", r"^GRU 'gru' recurrent_activation: activation 'gelu' is not supported by the numpy engine$"),
    ({"class_name": "Mine", "config": {}},
     r"^GRU 'gru' recurrent_activation: activation \{'class_name': 'Mine', 'config': \{\}\} is not supported"),
])
def test_any_other_activation_is_unsupported_naming_the_layer(identifier, message):
    with pytest.raises(Unsupported, match=message):
        get(identifier, 2, "GRU 'gru' recurrent_activation")
