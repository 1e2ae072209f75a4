"""LSTM, GRU and SimpleRNN, stepped over time in numpy as the Keras cells do (gate orders: LSTM i f c o, GRU z r h).

A timestep's arrays are laid out (features, batch), the transpose of Keras': each gate is then a block of
whole rows, and every elementwise pass runs over contiguous memory (twice as fast as over column slices on a
night's batch). An LSTM computes its gates in one matrix product of its stacked operand [h; x; 1], bias
included, into buffers allocated once a sequence: a fresh worker pays a page fault for each page it first
touches. Each cell otherwise sums its terms in the order its Keras source does, so float32 rounding stays
close to the runtime's.
"""
from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from . import activations, products
from .spec import LayerSpec, Shape, Step

State = tuple[np.ndarray, ...]
Cell = Callable[[np.ndarray, State], tuple[np.ndarray, State]]  # (x_t projected, state) -> (output, state)
OverTime = Callable[[Iterable[np.ndarray]], Iterator[np.ndarray]]
_HALF = np.float32(0.5)


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


def _layer(spec: LayerSpec, shape: Shape, units: int, over_time: OverTime, *, note: str = "") -> Step:
    """A recurrent layer from its `over_time`: each timestep's output (units, batch) from each timestep's
    input (features, batch), valid until the next is asked for.

    A forward layer also runs in step with the recurrent layer before it (model.predict): no array of every
    timestep's gates or of a whole sequence between them (megabytes on a night's batch).
    """
    backwards, sequences = spec.config.get("go_backwards", False), spec.config.get("return_sequences", False)

    def call(x: np.ndarray) -> np.ndarray:
        return stepped([over_time], x, sequences, backwards, where=str(spec))

    label = f"{spec.class_name}({units}{', go_backwards' if backwards else ''}{note})"
    return Step(call, (shape[0], units) if sequences else (units,), label, None if backwards else over_time, True)


def stepped(over_times: list[OverTime], x: np.ndarray, sequences: bool, backwards: bool = False, *, where: str = ""
            ) -> np.ndarray:
    """Layers' `over_time`s chained over the timesteps of x (batch, timesteps, features), each timestep passed
    on as (features, batch): (batch, timesteps, units) for a sequence, else the last output, (batch, units).

    The outputs are copied as they come, since each is overwritten by the next; going backwards, keras keeps
    them in the order it computed them. `where`: the layer an input without timesteps is named for."""
    if x.shape[1] == 0:
        raise ValueError(f"{where + ': ' if where else ''}an input with no timesteps")
    order = range(x.shape[1] - 1, -1, -1) if backwards else range(x.shape[1])
    flow: Iterator[np.ndarray] = (x[:, t].T for t in order)
    for over_time in over_times:
        flow = over_time(flow)
    if not sequences:
        return np.ascontiguousarray(collections.deque(flow, maxlen=1)[0].T)  # the others dropped as they come
    batch, steps = x.shape[:2]
    stacked: np.ndarray | None = None
    for t, y in enumerate(flow):
        if stacked is None:
            stacked = np.empty((batch, steps, len(y)), np.float32)
        stacked[:, t] = y.T
    assert stacked is not None
    return stacked


def _cell_over_time(units: int, project: Callable[[np.ndarray], np.ndarray], cell: Cell, states: int) -> OverTime:
    def over_time(steps: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        state: State | None = None
        for x in steps:
            if state is None:
                state = (np.zeros((units, x.shape[1]), np.float32),) * states
            output, state = cell(project(x), state)
            yield output

    return over_time


def _projection(kernel: np.ndarray, bias: np.ndarray | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """kernel.T @ x (+ bias) on x (features, batch); with one feature, the products alone (a matrix product of
    depth 1 is its product, and BLAS's is five times slower on a night's batch)."""
    weights = np.ascontiguousarray(kernel.T)
    column = None if bias is None else bias[:, None]
    if kernel.shape[0] == 1:
        return (lambda x: weights * x) if column is None else (lambda x: weights * x + column)
    return (lambda x: products.columns(weights, x)) if column is None else (
        lambda x: products.columns(weights, x) + column)


def lstm(spec: LayerSpec, shape: Shape, major: int) -> Step:
    units, kernel, recurrent, bias = _recurrent(spec, shape, 4, lambda u: (4 * u,))
    act, rec = _gate_activations(spec, major)
    features, u = kernel.shape[0], units
    # The weights of [h; x; 1]: the gates in one product. Keras' gates are i f c o; stored as i f o c, the three
    # sigmoid gates are one block.
    weights = np.empty((4 * u, u + features + (bias is not None)), np.float32)
    for to, of in ((slice(0, 2 * u), slice(0, 2 * u)), (slice(2 * u, 3 * u), slice(3 * u, 4 * u)),
                   (slice(3 * u, 4 * u), slice(2 * u, 3 * u))):
        weights[to, :u], weights[to, u:u + features] = recurrent[:, of].T, kernel[:, of].T
        if bias is not None:
            weights[to, -1] = bias[of]
    # tanh and sigmoid, the defaults, are one tanh pass over every gate: sigmoid(z) = 0.5 tanh(z / 2) + 0.5
    # (activations.sigmoid), with the halving in the sigmoid gates' weights, exact in float32.
    fused = act is np.tanh and rec is activations.sigmoid
    if fused:
        weights[:3 * u] *= _HALF

    def over_time(steps: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        operand = z = c = None
        for x in steps:
            if operand is None:
                operand = np.zeros((u + features + (bias is not None), x.shape[1]), np.float32)
                operand[u + features:] = 1
                z = np.empty((4 * u, x.shape[1]), np.float32)
                c = np.zeros((u, x.shape[1]), np.float32)
            assert z is not None and c is not None
            operand[u:u + features] = x
            products.columns(weights, operand, out=z)
            if fused:
                np.tanh(z, out=z)
                sigmoids = z[:3 * u]
                sigmoids *= _HALF
                sigmoids += _HALF
            else:
                z[:3 * u] = rec(z[:3 * u])
                z[3 * u:] = act(z[3 * u:])
            candidate = z[3 * u:]
            c *= z[u:2 * u]
            candidate *= z[:u]
            c += candidate
            h = operand[:u]
            if fused:
                np.tanh(c, out=h)
            else:
                h[...] = act(c)
            h *= z[2 * u:3 * u]
            yield h

    return _layer(spec, shape, units, over_time)


def gru(spec: LayerSpec, shape: Shape, major: int) -> Step:
    # Keras <= 2.1 and Keras 1 had no reset_after: their GRU applies the reset gate before the recurrent matmul.
    reset_after = spec.config.get("reset_after", False)
    units, kernel, recurrent, bias = _recurrent(spec, shape, 3, lambda u: (2, 3 * u) if reset_after else (3 * u,))
    act, rec = _gate_activations(spec, major)
    input_bias, recurrent_bias = (bias[0], bias[1]) if reset_after and bias is not None else (bias, None)
    # Without reset_after, the candidate's recurrent columns wait for the reset gate.
    gates_kernel = np.ascontiguousarray((recurrent if reset_after else recurrent[:, :2 * units]).T)
    candidate_kernel = np.ascontiguousarray(recurrent[:, 2 * units:].T)
    inner_bias = None if recurrent_bias is None else recurrent_bias[:, None]

    def cell(xw: np.ndarray, state: State) -> tuple[np.ndarray, State]:
        h, = state
        inner = products.columns(gates_kernel, h)
        if inner_bias is not None:
            inner = inner + inner_bias
        zr = rec(xw[:2 * units] + inner[:2 * units])
        z, r = zr[:units], zr[units:]
        x_h = xw[2 * units:]
        hh = act(x_h + (r * inner[2 * units:] if reset_after else products.columns(candidate_kernel, r * h)))
        h = z * h + (1 - z) * hh
        return h, (h,)

    return _layer(spec, shape, units, _cell_over_time(units, _projection(kernel, input_bias), cell, 1),
                  note="" if reset_after else ", reset_after=False")


def simple_rnn(spec: LayerSpec, shape: Shape, major: int) -> Step:
    units, kernel, recurrent, bias = _recurrent(spec, shape, 1, lambda u: (u,))
    act = activations.of(spec, "activation", "tanh", major)
    recurrent_t = np.ascontiguousarray(recurrent.T)

    def cell(xw: np.ndarray, state: State) -> tuple[np.ndarray, State]:
        h = act(xw + products.columns(recurrent_t, state[0]))
        return h, (h,)

    return _layer(spec, shape, units, _cell_over_time(units, _projection(kernel, bias), cell, 1))
