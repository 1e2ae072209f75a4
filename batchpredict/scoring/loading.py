"""Turns any model artefact of the store (docs/design.md §1) into a predict function, in the worker process.

Two engines compute the forward pass. `numpy` (batchpredict.scoring.engine) reads the config and weights
of an HDF5 or `.keras` file and needs no TensorFlow; `auto` takes it wherever it supports the
model. `keras` chooses the runtime from the file itself, never from its name: Keras 2 files (HDF5
or `.keras` whose `keras_version` is 2.x, or HDF5 without one) go to `tf_keras`, the Keras 2
runtime, because Keras 3 cannot read their LSTM configs; Keras 3 files go to `keras`; SavedModel
directories are called through their serving signature. TensorFlow is imported lazily, and only
in workers of the TensorFlow pool.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import JobError, Unsupported, first_line
from ..result import Status
from .scalers import Scaler

_KERAS_VERSION = re.compile(rb'"keras_version":\s*"([^"]+)"')


@dataclass(frozen=True)
class ModelFormat:
    kind: str           # "h5", "keras" or "savedmodel"
    keras_version: str  # as the artefact states it, "" when it does not
    runtime: str        # "tf_keras", "keras" or "tf.saved_model"; "numpy" once the numpy engine took it

    def __str__(self) -> str:
        return f"{self.kind} keras_version={self.keras_version or 'none'} via {self.runtime}"


@dataclass
class LoadedModel:
    predict: Callable[[np.ndarray], np.ndarray]
    window: int | None  # timesteps the model declares, None when variable
    format: ModelFormat
    entry: str = ""     # what a SavedModel is called through: its signature or its __call__
    engine: str = "keras"
    note: str = ""      # for the debug log: the numpy engine's layers, or why it did not take the model
    digest: dict | None = None  # the model file's io.manifest.digest, where the numpy engine hashed it to load it


@dataclass(frozen=True)
class Estimator:
    """A scaler joblib read, as scalers.Scaler calls its model: quiet about feature names, its state as the lean
    reader gives its own."""

    scaler: Any

    def transform(self, x: Any) -> Any:
        with _feature_names_quiet():
            return self.scaler.transform(x)

    def inverse_transform(self, x: Any) -> Any:
        with _feature_names_quiet():
            return self.scaler.inverse_transform(x)

    @property
    def states(self) -> list[dict[str, Any]]:
        """The attributes of the scaler, or of each step of a Pipeline: the state scikit-learn pickles of each."""
        return _states(self.scaler)


def _states(scaler: Any) -> list[dict[str, Any]]:
    from sklearn.pipeline import Pipeline

    if isinstance(scaler, Pipeline):
        return [state for _, step in scaler.steps for state in _states(step)]
    return [getattr(scaler, "__dict__", {})]


def is_keras2(version: str) -> bool:
    """Keras 2 wrote '2.x', '2.x.y-tf' or, before 2.1, nothing."""
    return not version or version.startswith("2.")


def describe(path: str) -> ModelFormat:
    """The artefact's format, Keras version and runtime, read without loading it."""
    if os.path.isdir(path):
        return ModelFormat("savedmodel", _saved_model_keras_version(path), "tf.saved_model")
    if zipfile.is_zipfile(path):
        version = _zip_keras_version(path)
        # A `.keras` zip without a version is Keras 3's; tf_keras 2.13+ wrote '2.x' in its own.
        return ModelFormat("keras", version, "tf_keras" if version.startswith("2.") else "keras")
    import h5py

    name = os.path.basename(path)
    try:
        with h5py.File(path, "r") as h5:
            version = h5.attrs.get("keras_version", "")
            has_config = "model_config" in h5.attrs
    except OSError as exc:
        raise JobError(Status.LOAD_ERROR, f"{name}: neither HDF5 nor a .keras zip ({first_line(exc)})") from None
    version = version.decode() if isinstance(version, bytes) else str(version)
    if not has_config:
        raise JobError(Status.LOAD_ERROR, f"{name}: weights-only HDF5 (no model config, keras_version "
                                          f"{version or 'none'}); save the whole model with model.save()")
    return ModelFormat("h5", version, "tf_keras" if is_keras2(version) else "keras")


def _zip_keras_version(path: str) -> str:
    try:
        with zipfile.ZipFile(path) as zf:
            return str(json.loads(zf.read("metadata.json")).get("keras_version", ""))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return ""


def _saved_model_keras_version(path: str) -> str:
    """Keras 2 `model.save(dir)` records its version: in keras_metadata.pb since TF 2.5, before in the graph."""
    for name in ("keras_metadata.pb", "saved_model.pb"):
        try:
            with open(os.path.join(path, name), "rb") as fh:
                found = _KERAS_VERSION.search(fh.read())
        except OSError:
            continue
        if found:
            return found.group(1).decode(errors="replace")
    return ""


def load_model(path: str, engine: str = "auto", lean: bool = False, trust: bool = False) -> LoadedModel:
    """The artefact as a predict function; JobError(load_error) saying what was tried otherwise.

    `auto` takes the numpy engine where it supports the model, else TensorFlow's runtimes; in a
    `lean` process, which has none, a model the numpy engine cannot run raises Unsupported. Keras
    loads in its safe mode (no Lambda layer) unless the store is trusted.
    """
    if engine == "keras":
        return _load_tf(path, describe(path), trust)
    try:
        return _load_numpy(path)
    except Unsupported as exc:
        if lean and engine == "auto":
            raise  # the TensorFlow pool words it and opens the file again
        fmt = describe(path)
        if engine == "numpy":
            raise JobError(Status.LOAD_ERROR, f"{os.path.basename(path)}: {fmt}: numpy engine: {exc} "
                                              "(--engine auto runs it with TensorFlow)") from None
        try:
            loaded = _load_tf(path, fmt, trust)
        except JobError as err:
            raise JobError(err.status, f"{err}; numpy engine: {exc}") from None
        loaded.note = f"; numpy engine: {exc}"
        return loaded


def _load_numpy(path: str) -> LoadedModel:
    """The numpy engine's model. The file is opened once: describe() runs only to word a failure."""
    from . import engine

    if os.path.isdir(path):
        raise Unsupported("a SavedModel directory holds a TensorFlow graph, not a Keras config")
    name = os.path.basename(path)
    try:
        model = engine.load(path)
    except JobError as exc:
        what = f"{name}: {describe(path)}"  # raises the load error any runtime would give first
        raise JobError(exc.status, f"{what}: {str(exc).removeprefix(name + ': ')}") from None
    except Unsupported:
        raise
    except Exception as exc:  # noqa: BLE001 - a file the engine misreads is TensorFlow's to try
        raise Unsupported(f"could not read it: {first_line(exc)}") from None
    fmt = ModelFormat(model.kind, model.keras_version, "numpy")
    what = f"{name}: {fmt}"
    window = _window_of(what, tuple(model.input_shape))
    _one_value(what, [tuple(model.output_shape)])
    return LoadedModel(_checked(what, model.predict), window, fmt, engine="numpy",
                       note=f"; {model.describe()}; weights from the {model.source}", digest=model.digest)


def _load_tf(path: str, fmt: ModelFormat, trust: bool = False) -> LoadedModel:
    what = f"{os.path.basename(path)}: {fmt}"
    if fmt.keras_version.startswith("1."):
        raise JobError(Status.LOAD_ERROR, f"{what}: Keras 1.x file: no TensorFlow runtime reads it "
                                          "(the numpy engine does where it supports its layers)")
    try:
        if fmt.runtime == "tf.saved_model":
            predict, shape, outputs, entry = _load_saved_model(path)
        else:
            (predict, shape, outputs), entry = _load_keras(path, fmt.runtime, trust), ""
    except JobError as exc:
        raise JobError(exc.status, f"{what}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any loader failure is this IP's load_error
        raise JobError(Status.LOAD_ERROR, f"{what}: {first_line(exc)}") from None
    window = _window_of(what, shape)
    _one_value(what, outputs)
    return LoadedModel(_checked(what, predict), window, fmt, entry)


def _window_of(what: str, shape: tuple) -> int | None:
    if len(shape) != 3 or shape[2] != 1:
        raise JobError(Status.LOAD_ERROR, f"{what}: input shape {shape} is not (batch, timesteps, 1); "
                                          "batchpredict feeds one feature per step")
    if shape[1] is not None and int(shape[1]) < 1:  # it would replace --window, and no window has no values
        raise JobError(Status.LOAD_ERROR, f"{what}: input shape {shape} declares {shape[1]} timesteps; "
                                          "a window needs at least one")
    return int(shape[1]) if shape[1] is not None else None


def _one_value(what: str, outputs: list[tuple] | None) -> None:
    """The prediction is one value per window: one output of one element a window, (batch,), (batch, 1) or
    (batch, 1, 1) as a Reshape or a TimeDistributed head leaves it. Anything else read as one would be a
    number the model never meant. None: a SavedModel that leaves its output's rank open, checked when called."""
    if outputs is None:
        return
    if len(outputs) != 1 or len(outputs[0]) < 1 or any(size != 1 for size in outputs[0][1:]):
        shown = outputs[0] if len(outputs) == 1 else outputs
        raise JobError(Status.LOAD_ERROR, f"{what}: the model outputs {shown} per window, not one value")


def _checked(what: str, predict: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """predict, refusing what the load refuses should the model give another output than it declares."""
    def checked(x: np.ndarray) -> np.ndarray:
        out = np.asarray(predict(x))
        if out.shape[:1] != x.shape[:1]:
            raise JobError(Status.LOAD_ERROR, f"{what}: the model outputs {out.shape} for {len(x)} windows")
        _one_value(what, [(None, *out.shape[1:])])
        return out

    return checked


def _one_input(shapes: list) -> tuple:
    if len(shapes) != 1:
        raise JobError(Status.LOAD_ERROR, f"the model takes {len(shapes)} inputs {shapes}; "
                                          "batchpredict feeds one (batch, timesteps, 1) window")
    return tuple(shapes[0])


# A worker that runs several jobs (--jobs-per-worker K > 1) mostly meets one architecture again
# and again. It keeps each model it built and reads only the next IP's weights into it (~8 ms
# instead of ~130 ms to build the layers), and from the first reuse on calls it through a
# tf.function traced once (~3 ms instead of ~65 ms for an eager LSTM call; the trace costs ~190 ms,
# too much for a worker that runs one job).
@dataclass
class _Built:
    model: Any
    call: Callable | None = None


_built: dict[tuple[str, str], _Built] = {}
_SHARED_OBJECT_ID = re.compile(r'"shared_object_id":\s*\d+')


def _architecture(path: str) -> str:
    """The model's config as saved, "" when it cannot be read cheaply."""
    with contextlib.suppress(Exception):
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                # Keras 3 writes the saving process's id() of shared objects: noise, not architecture.
                return _SHARED_OBJECT_ID.sub("", zf.read("config.json").decode())
        import h5py

        with h5py.File(path, "r") as h5:
            config = h5.attrs.get("model_config", "")
            return config.decode() if isinstance(config, bytes) else str(config)
    return ""


def _load_keras(path: str, runtime: str, trust: bool = False) -> tuple[Callable, tuple, list[tuple]]:
    if runtime == "tf_keras":
        import tf_keras as kx
    else:
        import keras as kx
    key = (runtime, _architecture(path))
    built = _built.get(key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if built is not None:
            try:
                built.model.load_weights(path)
            except Exception:  # noqa: BLE001 - not the same model after all: build this one
                built = None
            else:
                if built.call is None:
                    import tensorflow as tf

                    model = built.model
                    built.call = tf.function(lambda x: model(x, training=False), reduce_retracing=True)
        if built is None:
            try:
                built = _Built(kx.models.load_model(path, compile=False, safe_mode=not trust))
            except ValueError as exc:
                if "safe_mode" not in str(exc):
                    raise
                raise JobError(Status.LOAD_ERROR, "a Lambda layer would run code from the store file; load it "
                                                  "only with --trust-store") from None
            if key[1]:
                _built[key] = built
    model = built.model
    inputs = getattr(model, "inputs", None)
    if not inputs:
        raise JobError(Status.LOAD_ERROR, "the model declares no input (a subclassed model saved unbuilt?)")
    # A first call goes eager: cheaper than predict(), which builds a tf.function for loops.
    call = built.call or (lambda x: model(x, training=False))
    return ((lambda x: np.asarray(call(x))), _one_input([tuple(t.shape) for t in inputs]),
            [tuple(t.shape) for t in model.outputs])


def _load_saved_model(path: str) -> tuple[Callable, tuple, list[tuple] | None, str]:
    """(predict, the input shape, the shape of the output predict returns where its rank is declared, entry)."""
    import tensorflow as tf

    loaded = tf.saved_model.load(path)
    entry, function, specs, by_name = _entry_point(loaded)
    shape = _one_input([getattr(spec, "shape", spec) for spec in specs.values()])
    (key, spec), = specs.items()
    traced = function if by_name else function.concrete_functions[0]  # __call__ is traced once (_entry_point)
    output = tf.nest.flatten(traced.structured_outputs)[0].shape

    def predict(x: np.ndarray, _keep: Any = loaded) -> np.ndarray:  # a signature does not own the variables it reads
        tensor = tf.constant(x, dtype=spec.dtype)
        outputs = function(**{key: tensor}) if by_name else function(tensor)
        return tf.nest.flatten(outputs)[0].numpy()

    return predict, shape, None if output.rank is None else [tuple(output)], entry


def _entry_point(loaded: Any) -> tuple[str, Any, dict, bool]:
    """(what is called, the function, its input specs, whether they are passed by name).

    Keras 2 `model.save(dir)`, Keras 3 `export()` and `tf.saved_model.save(keras_model)` write a
    `serving_default` signature; a plain tf.Module may name its one signature anything, or have
    none but a traced `__call__`.
    """
    signatures = dict(loaded.signatures)
    if len(signatures) > 1 and "serving_default" not in signatures:
        raise JobError(Status.LOAD_ERROR, "no serving_default signature, and several others: "
                                          + ", ".join(sorted(signatures)))
    if signatures:
        name = "serving_default" if "serving_default" in signatures else next(iter(signatures))
        return f"signature {name}", signatures[name], signatures[name].structured_input_signature[1], True
    call = getattr(loaded, "__call__", None)  # noqa: B004 - the traced function, not callable()
    if call is not None and len(getattr(call, "concrete_functions", ())) == 1:
        return "__call__", call, dict(enumerate(call.concrete_functions[0].structured_input_signature[0])), False
    raise JobError(Status.LOAD_ERROR, "no signature, and no __call__ traced exactly once, to call")


def load_scaler(path: str) -> Scaler:
    import joblib
    import sklearn
    from sklearn.exceptions import InconsistentVersionWarning

    name = os.path.basename(path)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # recorded, never shown: the debug log says which version
            scaler = joblib.load(path)
    except Exception as exc:  # noqa: BLE001 - a pickle can raise anything
        raise JobError(Status.LOAD_ERROR, f"scaler {name}: {first_line(exc)}") from None
    if not (hasattr(scaler, "transform") and hasattr(scaler, "inverse_transform")):
        raise JobError(Status.LOAD_ERROR, f"scaler {name} is a {type(scaler).__name__}, "
                                          "without transform/inverse_transform")
    if isinstance(scaler, sklearn.base.BaseEstimator):
        pickled = sorted({w.message.original_sklearn_version for w in caught
                          if isinstance(w.message, InconsistentVersionWarning)})
        kind = type(scaler).__name__
        described = (f"{kind} pickled with scikit-learn {', '.join(pickled)} (running {sklearn.__version__})"
                     if pickled else f"{kind} pickled with scikit-learn {sklearn.__version__}")
    else:
        described = f"{type(scaler).__module__}.{type(scaler).__name__} (not a scikit-learn estimator)"
    return Scaler(Estimator(scaler), name, described)


@contextlib.contextmanager
def _feature_names_quiet() -> Iterator[None]:
    """A scaler fitted on a DataFrame warns about the bare arrays the window is; they are right."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="X does not have valid feature names")
        warnings.filterwarnings("ignore", message="X has feature names")
        yield
