"""A TensorFlow-free inference engine for the Keras models batchpredict scores with.

    artefact (.h5 / .keras)
        |  artefact.read: model config JSON + weight arrays, no runtime (keras1: Keras 1 names -> Keras 2's)
        v
    [(class_name, config, weights), ...] per layer, in call order; keras_version
        |  layers.build: one small function per layer kind, checked at load
        v
    NumpyModel: x -> f1 -> f2 -> ... -> y, in numpy float32, as the saving runtime computes it

Imports only the standard library, numpy and h5py. A valid model it cannot run raises
errors.Unsupported naming why; the caller then falls back to TensorFlow.
"""
from __future__ import annotations

from .model import NumpyModel, load

__all__ = ["NumpyModel", "load"]
