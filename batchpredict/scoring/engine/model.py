"""NumpyModel: a Keras model's forward pass as a chain of numpy layer functions, checked whole at load."""
from __future__ import annotations

import numpy as np

from ...errors import JobError
from ...result import Status
from . import activations, cache, keras1
from .artefact import Artefact
from .layers import build
from .recurrent import stepped
from .spec import Step


class NumpyModel:
    """Predicts as the Keras runtime that saved the artefact would, in float32, without TensorFlow."""

    def __init__(self, artefact: Artefact, source: str = "file", digest: dict | None = None) -> None:
        if all(spec.class_name == "InputLayer" for spec in artefact.layers):
            # It would pass its input on as the prediction; Keras refuses to build it.
            raise JobError(Status.LOAD_ERROR, "the model has no layers")
        self.source = source  # where the weights came from: the model `file`, or the weights `cache`
        self.digest = digest  # the model file's sha256 and size (io.manifest.digest), where the cache hashed it
        self.kind = artefact.kind
        self.keras_version = artefact.keras_version
        self.input_shape = artefact.input_shape
        # Keras 1 and 2 compute hard_sigmoid alike; only Keras 3 changed it.
        self._major = 3 if artefact.major == 3 else 2
        shape, self._steps = artefact.input_shape[1:], []
        for spec in artefact.layers:
            step = build(spec, shape, self._major)
            self._steps.append(step)
            shape = step.shape
        self.output_shape = (None, *shape)
        self._runs = _runs(self._steps)
        self._hard_sigmoid = any(activations.activation_name(spec.config.get(option)) == "hard_sigmoid"
                                 for spec in artefact.layers for option in ("activation", "recurrent_activation"))

    def predict(self, x: np.ndarray) -> np.ndarray:
        """x: (batch, *input_shape[1:]); the model's output for each of the batch, float32."""
        x = np.asarray(x, dtype=np.float32)
        expected = self.input_shape[1:]
        if x.ndim != len(self.input_shape) or any(
                d is not None and d != n for d, n in zip(expected, x.shape[1:], strict=True)):
            raise ValueError(f"input of shape {x.shape} where the model takes {self.input_shape}")
        with np.errstate(all="ignore"):  # overflow gives inf, silently, as in the runtimes
            for run in self._runs:
                x = run[0].call(x) if len(run) == 1 else _in_step(run, x)
        return x.astype(np.float32, copy=False)

    def describe(self) -> str:
        """One line for the debug log: the chain, and which hard_sigmoid it computes."""
        chain = " > ".join(step.label for step in self._steps if step.label)
        return f"numpy engine: {chain}" + (f"; hard_sigmoid as Keras {self._major}" if self._hard_sigmoid else "")

    __str__ = describe


def _runs(steps: list[Step]) -> list[list[Step]]:
    """The steps in runs to take in step over time: a forward recurrent layer, then while the run gives a
    sequence, each next layer that can step with it (a forward recurrent layer, a layer passing its input on)."""
    runs: list[list[Step]] = []
    for step in steps:
        last = runs[-1] if runs else None
        if (last is not None and last[0].recurrent and last[0].over_time is not None and len(last[-1].shape) == 2
                and step.over_time is not None):
            last.append(step)
        else:
            runs.append([step])
    return runs


def _in_step(run: list[Step], x: np.ndarray) -> np.ndarray:
    """A run's output: its layers stepped together over the timesteps of x (batch, timesteps, features)."""
    over_times = [step.over_time for step in run if step.over_time is not None]
    assert len(over_times) == len(run)  # _runs takes only layers that step over time
    return stepped(over_times, x, len(run[-1].shape) == 2)


def load(path: str) -> NumpyModel:
    """The artefact at `path` as a NumpyModel.

    Unsupported: a valid model the engine cannot run (the message names the first layer or option);
    JobError(load_error): a file no runtime could read (not a model, weights only, a Keras 1 file
    the engine cannot take). A file read before comes from the weights cache (cache.py), without HDF5.
    """
    artefact, source, digest = cache.load(path)
    with keras1.reasons(artefact.major):
        return NumpyModel(artefact, source, digest)
