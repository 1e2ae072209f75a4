"""One small function per layer kind: (LayerSpec, input shape, Keras major) -> Step; `build` dispatches.

A function checks the options and weights it is given before it returns, so a model the engine
cannot run is refused at load time, naming the first layer or option it cannot take.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ...errors import Unsupported, first_line
from . import activations, products, recurrent
from .spec import LayerSpec, Shape, Step


def dense(spec: LayerSpec, shape: Shape, major: int) -> Step:
    """Applies to the last axis, whatever the rank (keras' Dense on a sequence is per timestep)."""
    spec.refuse("lora_rank", "quantization_config")
    units, use_bias = int(spec.config["units"]), spec.config.get("use_bias", True)
    kernel, *bias = spec.weights_shaped((spec.last_dim(shape), units), *([(units,)] if use_bias else []))
    act = activations.of(spec, "activation", "linear", major)

    def call(x: np.ndarray) -> np.ndarray:
        y = products.rows(x, kernel)
        return act(y + bias[0] if bias else y)

    return Step(call, (*shape[:-1], units), f"Dense({units})")


def identity(spec: LayerSpec, shape: Shape, major: int) -> Step:
    """Dropout and noise layers act only in training; the input layer only declares the shape."""
    spec.weights_shaped()
    return Step(lambda x: x, shape, "" if spec.class_name == "InputLayer" else spec.class_name, iter)


def activation(spec: LayerSpec, shape: Shape, major: int) -> Step:
    name = activations.activation_name(spec.config["activation"])
    return Step(activations.of(spec, "activation", "linear", major), shape, f"Activation({name})")


def reshape(spec: LayerSpec, shape: Shape, major: int) -> Step:
    target = tuple(int(d) for d in spec.config["target_shape"])
    if None in shape:
        raise spec.unsupported(f"reshaping an input of variable shape {(None, *shape)}")
    size, known = math.prod(d for d in shape if d is not None), math.prod(d for d in target if d != -1)
    if target.count(-1) > 1 or known == 0 or (size % known if -1 in target else size != known):
        raise Unsupported(f"{spec}: cannot reshape {(None, *shape)} to {(None, *target)}")
    out = tuple(size // known if d == -1 else d for d in target)
    return Step(lambda x: x.reshape(len(x), *out), out, f"Reshape({', '.join(map(str, out))})")


def flatten(spec: LayerSpec, shape: Shape, major: int) -> Step:
    # channels_first moves the channel axis last before flattening, as both runtimes do.
    channels_first = spec.config.get("data_format") == "channels_first" and len(shape) > 1

    def call(x: np.ndarray) -> np.ndarray:
        return (np.moveaxis(x, 1, -1) if channels_first else x).reshape(len(x), -1)

    return Step(call, (None if None in shape else math.prod(d for d in shape if d is not None),), "Flatten")


BUILDERS: dict[str, Callable[[LayerSpec, Shape, int], Step]] = {
    "Dense": dense,
    "LSTM": recurrent.lstm,
    "GRU": recurrent.gru,
    "SimpleRNN": recurrent.simple_rnn,
    "Activation": activation,
    "Reshape": reshape,
    "Flatten": flatten,
    **dict.fromkeys(["InputLayer", "Dropout", "SpatialDropout1D", "GaussianNoise", "GaussianDropout",
                     "AlphaDropout", "ActivityRegularization"], identity),
}


def build(spec: LayerSpec, shape: Shape, major: int) -> Step:
    """The layer as a function on a batch of `shape` inputs, computed as Keras `major` (2 or 3) does."""
    builder = BUILDERS.get(spec.class_name)
    if builder is None:
        raise Unsupported(f"layer {spec} is not supported by the numpy engine")
    dtype = spec.config.get("dtype")
    policy = dtype.get("config", {}).get("name") if isinstance(dtype, dict) else dtype
    if policy not in (None, "float32"):
        raise spec.unsupported(f"dtype {policy!r}")
    try:
        return builder(spec, shape, major)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise Unsupported(f"{spec}: unreadable config ({first_line(exc)})") from None
