"""Keras activations in numpy float32, by the name a layer config gives, as each Keras major computes them."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...errors import Unsupported
from .spec import LayerSpec

Activation = Callable[[np.ndarray], np.ndarray]

_ONE, _HALF = np.float32(1.0), np.float32(0.5)
# tf.nn.selu's constants, which both runtimes call.
_SELU_ALPHA, _SELU_SCALE = np.float32(1.6732632423543772), np.float32(1.0507009873554805)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) as 0.5 tanh(x / 2) + 0.5: one transcendental pass and one array, where the exp of
    -|x| took nine passes; it neither overflows nor warns, and differs from it by float32 rounding (~3e-8)."""
    t = np.multiply(x, _HALF, dtype=np.float32)
    np.tanh(t, out=t)
    t *= _HALF
    t += _HALF
    return t


def hard_sigmoid_keras2(x: np.ndarray) -> np.ndarray:
    """Keras 1, standalone Keras 2 and tf_keras (backend.hard_sigmoid): clip(0.2x + 0.5, 0, 1)."""
    return np.clip(x * np.float32(0.2) + _HALF, 0, 1)


def hard_sigmoid_keras3(x: np.ndarray) -> np.ndarray:
    """Keras 3 (backend nn.hard_sigmoid): relu6(x + 3) / 6."""
    return np.clip(x + np.float32(3.0), 0, 6) / np.float32(6.0)


def elu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, np.expm1(x))


def selu(x: np.ndarray) -> np.ndarray:
    return _SELU_SCALE * np.where(x > 0, x, _SELU_ALPHA * np.expm1(x))


def swish(x: np.ndarray) -> np.ndarray:
    return x * sigmoid(x)


_COMMON: dict[str, Activation] = {
    "linear": lambda x: x,
    "tanh": np.tanh,
    "sigmoid": sigmoid,
    "relu": lambda x: np.maximum(x, 0),
    "elu": elu,
    "selu": selu,
    "softsign": lambda x: x / (_ONE + np.abs(x)),
    "softplus": lambda x: np.logaddexp(np.float32(0), x),
    "swish": swish,
    "silu": swish,  # Keras 3's name for swish
    "exponential": np.exp,
}
_HARD_SIGMOID = {2: hard_sigmoid_keras2, 3: hard_sigmoid_keras3}


def activation_name(identifier: object) -> str | None:
    """The builtin name a config gives (a string, or Keras 3's {"class_name": "function", "config": name})."""
    if identifier is None:
        return "linear"
    if isinstance(identifier, dict) and identifier.get("class_name") == "function":
        identifier = identifier.get("config")
    return identifier if isinstance(identifier, str) else None


def get(identifier: object, major: int, where: str) -> Activation:
    """The activation `identifier` names, as Keras `major` (2 or 3) computes it; `where` says whose it is."""
    name = activation_name(identifier)
    if name == "hard_sigmoid":
        return _HARD_SIGMOID[major]
    if name not in _COMMON:
        raise Unsupported(f"{where}: activation {name or identifier!r} is not supported by the numpy engine")
    return _COMMON[name]


def of(spec: LayerSpec, option: str, default: str, major: int) -> Activation:
    """The activation a layer's `option` names (`default` when absent)."""
    return get(spec.config.get(option, default), major, f"{spec} {option}")
