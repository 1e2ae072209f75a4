"""LSTM, GRU and SimpleRNN, stepped over time in numpy as the Keras cells do (gate orders: LSTM i f c o, GRU z r h).

Each cell sums its terms in the order its Keras source does, so float32 rounding stays close to the runtime's.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from . import activations
from .spec import LayerSpec, Shape, Step

State = tuple[np.ndarray, ...]
Cell = Callable[[np.ndarray, State], tuple[np.ndarray, State]]  # (x_t projected, state) -> (output, state)


def _recurrent(spec: LayerSpec, shape: Shape, gates: int, bias_shape: Callable[[int], tuple]) \
        -> tuple[int, np.ndarray, np.ndarray, np.ndarray | None]:
    """What every recurrent layer checks and reads: units, kernel, recurrent kernel, bias (None without)."""
    spec.refuse("stateful", "return_state", "time_major")
    if len(shape) != 2:
        raise spec.unsupported(f"an input of shape {(None, *shape)} (not (batch, timesteps, features))")
    units, features, use_bias = int(spec.config["units"]), spec.last_dim(shape), spec.config.get("use_bias", True)
    shapes = [(features, gates * units), (units, gates * units)] + ([bias_shape(units)] if use_bias else [])
    kernel, recurrent, *bias = spec.weights_shaped(*shapes)
    return units, kernel, recurrent, (bias[0] if bias else None)


def _gate_activations(spec: LayerSpec, major: int) -> tuple[activations.Activation, activations.Activation]:
    return (activations.of(spec, "activation", "tanh", major),
            activations.of(spec, "recurrent_activation", "sigmoid", major))


def _layer(spec: LayerSpec, shape: Shape, units: int, project: Callable[[np.ndarray], np.ndarray],
           cell: Cell, states: int, note: str = "") -> Step:
    """Runs `cell` over time as keras' RNN layer does, each timestep's inputs projected in its step.

    A forward layer also runs in step with the recurrent layer before it (`over_time`, model.predict): no
    array of every timestep's gates or of a whole sequence between them (megabytes on a night's batch, each
    page a fault in a fresh worker).
    """
    backwards, sequences = spec.config.get("go_backwards", False), spec.config.get("return_sequences", False)

    def over_time(steps: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        state: State | None = None
        for x in steps:
            if state is None:
                state = (np.zeros((len(x), units), np.float32),) * states
            output, state = cell(project(x), state)
            yield output

    def call(x: np.ndarray) -> np.ndarray:
        if x.shape[1] == 0:
            raise ValueError(f"{spec}: an input with no timesteps")
        order = range(x.shape[1] - 1, -1, -1) if backwards else range(x.shape[1])
        outputs = list(over_time(x[:, t] for t in order))
        # Going backwards, keras keeps the outputs in the order it computed them.
        return np.stack(outputs, axis=1) if sequences else outputs[-1]

    label = f"{spec.class_name}({units}{', go_backwards' if backwards else ''}{note})"
    return Step(call, (shape[0], units) if sequences else (units,), label, None if backwards else over_time, True)


def _projection(kernel: np.ndarray, bias: np.ndarray | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """x @ kernel (+ bias); with one feature, the products alone (a matrix product of depth 1 is its product,
    and BLAS's is five times slower on a night's batch)."""
    if kernel.shape[0] == 1:
        row = kernel[0]
        return (lambda x: x * row) if bias is None else (lambda x: x * row + bias)
    return (lambda x: x @ kernel) if bias is None else (lambda x: x @ kernel + bias)


def lstm(spec: LayerSpec, shape: Shape, major: int) -> Step:
    units, kernel, recurrent, bias = _recurrent(spec, shape, 4, lambda u: (4 * u,))
    act, rec = _gate_activations(spec, major)
    # Keras' gates are i f c o; stored as i f o c, the three sigmoid gates are one slice: one call each
    # activation a step, on no value it does not need. The same values, so the same sums.
    order = np.r_[0:2 * units, 3 * units:4 * units, 2 * units:3 * units]
    kernel, recurrent = kernel[:, order], np.ascontiguousarray(recurrent[:, order])
    bias = None if bias is None else bias[order]
    sigmoids = slice(0, 3 * units)

    def cell(xw: np.ndarray, state: State) -> tuple[np.ndarray, State]:
        h, c = state
        z = h @ recurrent
        np.add(xw, z, out=z)
        if bias is not None:
            z += bias
        gates = rec(z[:, sigmoids])
        candidate = act(z[:, 3 * units:])
        candidate *= gates[:, :units]
        c = gates[:, units:2 * units] * c
        c += candidate
        h = act(c)
        h *= gates[:, 2 * units:]
        return h, (h, c)

    return _layer(spec, shape, units, _projection(kernel), cell, 2)


def gru(spec: LayerSpec, shape: Shape, major: int) -> Step:
    # Keras <= 2.1 and Keras 1 had no reset_after: their GRU applies the reset gate before the recurrent matmul.
    reset_after = spec.config.get("reset_after", False)
    units, kernel, recurrent, bias = _recurrent(spec, shape, 3, lambda u: (2, 3 * u) if reset_after else (3 * u,))
    act, rec = _gate_activations(spec, major)
    input_bias, recurrent_bias = (bias[0], bias[1]) if reset_after and bias is not None else (bias, None)
    # Without reset_after, the candidate's recurrent columns wait for the reset gate.
    gates_kernel = recurrent if reset_after else recurrent[:, :2 * units]

    def cell(xw: np.ndarray, state: State) -> tuple[np.ndarray, State]:
        h, = state
        inner = h @ gates_kernel
        if recurrent_bias is not None:
            inner = inner + recurrent_bias
        zr = rec(xw[:, :2 * units] + inner[:, :2 * units])
        z, r = zr[:, :units], zr[:, units:]
        x_h = xw[:, 2 * units:]
        hh = act(x_h + (r * inner[:, 2 * units:] if reset_after else (r * h) @ recurrent[:, 2 * units:]))
        h = z * h + (1 - z) * hh
        return h, (h,)

    return _layer(spec, shape, units, _projection(kernel, input_bias), cell, 1,
                  "" if reset_after else ", reset_after=False")


def simple_rnn(spec: LayerSpec, shape: Shape, major: int) -> Step:
    units, kernel, recurrent, bias = _recurrent(spec, shape, 1, lambda u: (u,))
    act = activations.of(spec, "activation", "tanh", major)

    def cell(xw: np.ndarray, state: State) -> tuple[np.ndarray, State]:
        h = act(xw + state[0] @ recurrent)
        return h, (h,)

    return _layer(spec, shape, units, _projection(kernel, bias), cell, 1)
