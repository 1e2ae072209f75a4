"""Turns any model artefact of DESIGN §1 into a predict function, in the worker process.

The runtime is chosen from the file itself: Keras 2 HDF5 files go to `tf_keras` (Keras 3 cannot
read their LSTM configs), Keras 3 files to `keras`, SavedModel directories to their serving
signature. TensorFlow is imported here lazily: the coordinator imports this module's callers only.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .errors import JobError
from .job import Status


@dataclass
class LoadedModel:
    predict: Callable[[np.ndarray], np.ndarray]
    window: int | None  # timesteps the model declares, None when variable
    format: str
    keras_version: str


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def describe(path: str) -> tuple[str, str]:
    """(format, keras_version) of an artefact, read without loading it."""
    if os.path.isdir(path):
        return "savedmodel", _saved_model_keras_version(path)
    if path.endswith(".keras"):
        return "keras", _zip_keras_version(path)
    import h5py

    try:
        with h5py.File(path, "r") as h5:
            version = h5.attrs.get("keras_version", "")
            has_config = "model_config" in h5.attrs
    except OSError as exc:
        raise JobError(Status.LOAD_ERROR, f"{path}: not a readable HDF5 file ({first_line(exc)})") from None
    version = version.decode() if isinstance(version, bytes) else str(version)
    if not has_config:
        raise JobError(Status.LOAD_ERROR, f"{path}: weights-only HDF5 (no model config, keras_version "
                                          f"{version or 'unknown'}); save the whole model with model.save()")
    return "h5", version


def _zip_keras_version(path: str) -> str:
    import json
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            return json.loads(zf.read("metadata.json")).get("keras_version", "")
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return ""


def _saved_model_keras_version(path: str) -> str:
    metadata = os.path.join(path, "keras_metadata.pb")
    return "2" if os.path.exists(metadata) else ""


def is_keras2(version: str) -> bool:
    """Keras 2 wrote '2.x', '2.x.y-tf' or, before 2.1, nothing."""
    return not version or version.startswith("2.")


def load_model(path: str) -> LoadedModel:
    fmt, version = describe(path)
    runtime = "tf.saved_model" if fmt == "savedmodel" else "tf_keras" if fmt == "h5" and is_keras2(version) else "keras"
    try:
        if fmt == "savedmodel":
            predict, shape = _load_saved_model(path)
        else:
            predict, shape = _load_keras(path, runtime)
    except JobError:
        raise
    except Exception as exc:  # noqa: BLE001 - any loader failure is this IP's load_error
        raise JobError(Status.LOAD_ERROR, f"{os.path.basename(path)}: {fmt} keras_version={version or 'none'} "
                                          f"via {runtime}: {first_line(exc)}") from None
    return LoadedModel(predict, _window_of(path, shape), fmt, version)


def _window_of(path: str, shape: tuple) -> int | None:
    if len(shape) != 3 or shape[2] != 1:
        raise JobError(Status.LOAD_ERROR, f"{os.path.basename(path)}: input shape {tuple(shape)} is not "
                                          "(batch, timesteps, 1); batchpredict feeds one feature per step")
    return int(shape[1]) if shape[1] is not None else None


def _load_keras(path: str, runtime: str) -> tuple[Callable, tuple]:
    if runtime == "tf_keras":
        import tf_keras as kx
    else:
        import keras as kx
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = kx.models.load_model(path, compile=False)
    shape = model.inputs[0].shape if getattr(model, "inputs", None) else model.input_shape
    # One window per process: a plain call is cheaper than predict(), which builds a tf.function.
    return (lambda x: np.asarray(model(x, training=False))), tuple(shape)


def _load_saved_model(path: str) -> tuple[Callable, tuple]:
    import tensorflow as tf

    loaded = tf.saved_model.load(path)
    signature = loaded.signatures.get("serving_default")
    if signature is None:
        raise JobError(Status.LOAD_ERROR, f"{os.path.basename(path)}: SavedModel has no serving_default signature")
    (name, spec), = signature.structured_input_signature[1].items()

    def predict(x: np.ndarray) -> np.ndarray:
        outputs = signature(**{name: tf.constant(x, dtype=spec.dtype)})
        return next(iter(outputs.values())).numpy()

    predict.keepalive = loaded  # the signature does not own its variables
    return predict, tuple(spec.shape)


def load_scaler(path: str) -> Any:
    import joblib

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scaler = joblib.load(path)
    except Exception as exc:  # noqa: BLE001 - a pickle can raise anything
        raise JobError(Status.LOAD_ERROR, f"scaler {os.path.basename(path)}: {first_line(exc)}") from None
    if not (hasattr(scaler, "transform") and hasattr(scaler, "inverse_transform")):
        raise JobError(Status.LOAD_ERROR, f"scaler {os.path.basename(path)} is a {type(scaler).__name__}, "
                                          "without transform/inverse_transform")
    return scaler
