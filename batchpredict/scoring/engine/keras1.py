"""Keras 1.x layers rewritten as Keras 2 wrote them, so one set of layer functions runs both.

Keras 1 named config keys differently (output_dim, inner_activation, bias, input_dim/input_length)
and stored recurrent weights either per gate (W_i, U_i, b_i, ...) or merged (W, U, b, gates
already in Keras 2's order). Its GRU resets before the recurrent matmul: reset_after=False.
No installed runtime reads Keras 1 files, so what the engine cannot run in one is a load error.
"""
from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import numpy as np

from ...errors import JobError, Unsupported
from ...result import Status
from .spec import LayerSpec

_RENAMED = {"output_dim": "units", "inner_activation": "recurrent_activation", "bias": "use_bias",
            "input_dtype": "dtype"}
_GATES = {"LSTM": "ifco", "GRU": "zrh", "SimpleRNN": ""}  # Keras 2's column order of the merged weights
_WEIGHT = re.compile(r"(?:^|_)([WUb])(?:_([a-z]))?(?::\d+)?$")  # lstm_1_W_i:0, dense_1_b, ...


def translate(spec: LayerSpec) -> LayerSpec:
    config = {_RENAMED.get(key, key): value for key, value in spec.config.items()}
    gates = _GATES.get(spec.class_name)
    if "batch_input_shape" not in config and config.get("input_dim") is not None:
        config["batch_input_shape"] = ([None, config.get("input_length"), config["input_dim"]] if gates is not None
                                       else [None, config["input_dim"]])
    if gates is not None:
        config.setdefault("recurrent_activation", "hard_sigmoid")  # Keras 1's default
        return LayerSpec(spec.class_name, config, _merged(spec, "WUb", gates), spec.weight_names)
    if spec.class_name == "Dense":
        return LayerSpec(spec.class_name, config, _merged(spec, "Wb" if config.get("use_bias", True) else "W", ""),
                         spec.weight_names)
    return LayerSpec(spec.class_name, config, spec.weights, spec.weight_names)


def _merged(spec: LayerSpec, kinds: str, gates: str) -> tuple[np.ndarray, ...]:
    """The weights of `kinds` (W: kernel, U: recurrent kernel, b: bias), each merged or joined from its gates."""
    found = {}
    for name, array in zip(spec.weight_names, spec.weights, strict=True):
        match = _WEIGHT.search(name)
        if match is None:
            raise Unsupported(f"{spec}: weight {name!r} is none of Keras 1's W, U, b")
        found[match.groups()] = array
    merged: list[np.ndarray] = []
    used: set[tuple[str, str | None]] = set()
    for kind in kinds:
        keys = [(kind, None)] if (kind, None) in found or not gates else [(kind, gate) for gate in gates]
        if not all(key in found for key in keys):
            names = ", ".join(f"{k}_{g}" if g else k for k, g in keys)
            raise Unsupported(f"{spec}: weights {list(spec.weight_names)} lack Keras 1's {names}")
        merged.append(np.concatenate([found[key] for key in keys], axis=-1))
        used.update(keys)
    if used != set(found):
        raise Unsupported(f"{spec}: weights {list(spec.weight_names)} are not just Keras 1's {', '.join(kinds)}")
    return tuple(merged)


@contextlib.contextmanager
def reasons(major: int) -> Iterator[None]:
    """In a Keras 1 file (`major` 1), turns Unsupported into the load error no runtime could avoid."""
    try:
        yield
    except Unsupported as exc:
        if major != 1:
            raise
        raise JobError(Status.LOAD_ERROR, f"Keras 1.x file: {exc}") from None
