"""The common scikit-learn scalers, read and applied without scikit-learn or joblib.

A lean worker must not pay for importing scikit-learn (nor joblib), and must never run code from a
store file. `sc/<ip>.save` is read here with a restricted unpickler: only the four common scalers,
Pipelines of them, numpy arrays and joblib's array wrapper resolve; any other global is refused
before anything is called. Whatever cannot be read this way raises `Unsupported`: a load_error
that says so, unless the operator trusts the store (`--trust-store`), when the job goes to the full
path and joblib reads it, running whatever it holds.

transform and inverse_transform repeat scikit-learn's own operations, in its order, on the same
dtypes, and raise its errors for the inputs a worker can pass, so their results are equal.
"""
from __future__ import annotations

import bz2
import io
import lzma
import math
import os
import pickle
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from ..errors import JobError, Unsupported, first_line
from ..result import Status

_LIMIT = 64 << 20  # a fitted scaler is a few kB; anything this large is left to the full path
_FLOATS = (np.float64, np.float32, np.float16)  # what check_array keeps; any other dtype becomes the first


def _checked(x: Any, by: str | None) -> np.ndarray:
    """check_array as the scalers call it: a float copy, no infinity (NaN passes), at least 1 x 1.

    `by` names the scaler in transform, where validate_data also calls the input "X"; None in
    inverse_transform, which calls check_array bare.
    """
    x = np.asarray(x)
    x = x.astype(x.dtype if x.dtype in _FLOATS else _FLOATS[0])
    if x.ndim != 2:
        raise ValueError(f"Expected 2D array, got {x.ndim}D array instead")
    if np.isinf(x).any():
        raise ValueError(f"Input {'X ' if by else ''}contains infinity or a value too large for {x.dtype!r}.")
    for count, what in ((x.shape[0], "sample"), (x.shape[1], "feature")):
        if count < 1:
            raise ValueError(f"Found array with 0 {what}(s) (shape={x.shape}) while a minimum of 1 is "
                             f"required{f' by {by}' if by else ''}.")
    return x


# The fitted statistics transform and inverse_transform apply, by scikit-learn's names.
_STATISTICS = ("min_", "mean_", "center_", "scale_")


def check_statistics(name: str, states: Iterable[Mapping[str, Any]], *, one_column: bool = False) -> None:
    """JobError(load_error) naming the first statistic of the fitted scalers (each one's state) that is empty or
    not finite numbers, or a scale_ of 0, which scikit-learn never fits: such a scaler turns every window into inf,
    NaN or one value, and the prediction into one blamed on the model, or silently into a constant.

    `one_column` where the caller scales one column, as a job does: a scaler fitted on more features, or a
    statistic of more than one value, is refused too, where numpy's words in the middle of the job would be an
    `error` naming neither the scaler nor the cause."""
    for state in states:
        features = state.get("n_features_in_")  # recorded since scikit-learn 0.24
        if one_column and features is not None and features != 1:
            raise JobError(Status.LOAD_ERROR, f"scaler {name}: fitted on {features} features, not the one column "
                                              "a job scales")
        for key in _STATISTICS:
            value = state.get(key)
            if value is None:  # a scaler fitted without that step (StandardScaler(with_std=False))
                continue
            array = np.asarray(value)
            if array.dtype.kind not in "biuf":
                raise JobError(Status.LOAD_ERROR, f"scaler {name}: {key} is not numbers (dtype {array.dtype})")
            if not array.size:
                raise JobError(Status.LOAD_ERROR, f"scaler {name}: {key} is empty")
            if one_column and (array.size > 1 or array.ndim > 2):  # what broadcasts over rows of one value
                raise JobError(Status.LOAD_ERROR, f"scaler {name}: {key} has shape {array.shape}, not one value "
                                                  "for the one column a job scales")
            wrong = ~np.isfinite(array) | (array == 0 if key == "scale_" else False)
            if wrong.any():
                raise JobError(Status.LOAD_ERROR, f"scaler {name}: {key} is {array[wrong].flat[0]}")


class _Model:
    """A fitted estimator, from the state its pickle's BUILD gives; `version` stays None without one."""

    needs: ClassVar[tuple[str, ...]]  # the state it cannot do without
    version: str | None = None
    n_features: int | None = None  # n_features_in_, recorded since scikit-learn 0.24; unchecked without it
    state: dict[str, Any]  # `needs` as the pickle gave them

    def __setstate__(self, state: Any) -> None:
        name = type(self).__name__
        if self.version is not None:  # so every step is complete before its Pipeline, and none is its own step
            raise Unsupported(f"pickle builds a {name} twice")
        if not isinstance(state, dict):
            raise Unsupported(f"{name} state is a {type(state).__name__}, not a dict")
        missing = [key for key in self.needs if key not in state]
        if missing:
            raise Unsupported(f"{name} without {', '.join(missing)}: unfitted, or from a scikit-learn "
                              "without that attribute")
        self.state = {key: state[key].array if isinstance(state[key], _ArrayWrapper) else state[key]
                      for key in self.needs}
        self._read(self.state)
        self.n_features = state.get("n_features_in_")
        self.version = str(state.get("_sklearn_version", "pre-0.18"))  # what scikit-learn says when absent

    def _read(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    @property
    def label(self) -> str:
        return type(self).__name__

    @property
    def versions(self) -> set[str]:
        return {str(self.version)}

    @property
    def states(self) -> list[dict[str, Any]]:
        """The state of each scaler it applies: its own, with the feature count it recorded."""
        return [{**self.state, "n_features_in_": self.n_features}]


def _fitted(obj: Any) -> bool:
    return isinstance(obj, _Model) and obj.version is not None


# (forward ufunc, its inverse, operand): transform applies them in order, inverse_transform undoes
# them in reverse, as each scaler's own methods do (sklearn/preprocessing/_data.py).
_Step = tuple[Callable[..., Any], Callable[..., Any], Any]


class _Scaler(_Model):
    """One fitted scaler as its elementwise steps; clipped to `bounds` after transform when set."""

    cast = False  # StandardScaler casts its statistics to the input's dtype; the others use them as they are
    bounds: tuple[Any, Any] | None = None
    steps: list[_Step]

    def _operand(self, operand: Any, x: np.ndarray) -> Any:
        return operand.astype(x.dtype) if self.cast else operand

    def transform(self, x: Any) -> np.ndarray:
        name = type(self).__name__
        x = _checked(x, name)
        if self.n_features is not None and x.shape[1] != self.n_features:
            raise ValueError(f"X has {x.shape[1]} features, but {name} is expecting {self.n_features} "
                             "features as input.")
        for forward, _, operand in self.steps:
            forward(x, self._operand(operand, x), out=x)
        if self.bounds is not None:
            # scikit-learn's array-API clip: masked assignments, which keep NaN and the sign of zero
            low, high = (np.asarray(bound, dtype=x.dtype) for bound in self.bounds)
            x[x < low] = low
            x[x > high] = high
        return x

    def inverse_transform(self, x: Any) -> np.ndarray:
        x = _checked(x, None)
        for _, inverse, operand in reversed(self.steps):
            inverse(x, self._operand(operand, x), out=x)
        return x


class MinMaxScaler(_Scaler):
    needs = ("scale_", "min_", "feature_range", "clip")

    def _read(self, state: dict[str, Any]) -> None:
        self.steps = [(np.multiply, np.divide, state["scale_"]), (np.add, np.subtract, state["min_"])]
        self.bounds = tuple(state["feature_range"]) if state["clip"] else None


class StandardScaler(_Scaler):
    needs = ("with_mean", "with_std", "mean_", "scale_")
    cast = True

    def _read(self, state: dict[str, Any]) -> None:
        self.steps = ([(np.subtract, np.add, state["mean_"])] if state["with_mean"] else []) + \
                     ([(np.divide, np.multiply, state["scale_"])] if state["with_std"] else [])


class MaxAbsScaler(_Scaler):
    needs = ("scale_", "clip")

    def _read(self, state: dict[str, Any]) -> None:
        self.steps = [(np.divide, np.multiply, state["scale_"])]
        self.bounds = (-1.0, 1.0) if state["clip"] else None


class RobustScaler(_Scaler):
    needs = ("with_centering", "with_scaling", "center_", "scale_")

    def _read(self, state: dict[str, Any]) -> None:
        self.steps = ([(np.subtract, np.add, state["center_"])] if state["with_centering"] else []) + \
                     ([(np.divide, np.multiply, state["scale_"])] if state["with_scaling"] else [])


class Pipeline(_Model):
    """Its scaler steps in order; 'passthrough' and None steps do nothing, as in scikit-learn."""

    needs = ("steps",)
    scalers: list[_Scaler | Pipeline]

    def _read(self, state: dict[str, Any]) -> None:
        self.scalers = []
        for name, step in state["steps"]:
            if step is None or (isinstance(step, str) and step == "passthrough"):
                continue
            if not _fitted(step):
                raise Unsupported(f"Pipeline step {name!r} is a {type(step).__name__}, not a fitted scaler")
            self.scalers.append(step)
        if not self.scalers:
            raise Unsupported("Pipeline without a scaler step")

    @property
    def label(self) -> str:
        return f"Pipeline({', '.join(step.label for step in self.scalers)})"

    @property
    def versions(self) -> set[str]:
        return super().versions.union(*(step.versions for step in self.scalers))

    @property
    def states(self) -> list[dict[str, Any]]:
        return [state for step in self.scalers for state in step.states]

    def transform(self, x: Any) -> np.ndarray:
        for step in self.scalers:
            x = step.transform(x)
        return x

    def inverse_transform(self, x: Any) -> np.ndarray:
        for step in reversed(self.scalers):
            x = step.inverse_transform(x)
        return x


class _ArrayWrapper:
    """joblib's NumpyArrayWrapper: its state is an array's dtype, shape and order, and joblib writes
    the array's bytes right after it in the stream, so its BUILD reads them (numpy_pickle.py)."""

    stream: ClassVar[io.BytesIO]  # set on the subclass _Unpickler.find_class makes for its stream
    array: Any

    def __setstate__(self, state: dict[str, Any]) -> None:
        dtype, shape = state["dtype"], tuple(state["shape"])
        if state["subclass"] is not np.ndarray or not isinstance(dtype, np.dtype):
            raise Unsupported(f"joblib array of {state['subclass']!r}, dtype {dtype!r}")
        if dtype.hasobject:  # written as a nested pickle (feature_names_in_): under the same restrictions
            self.array = _Unpickler(self.stream).load()
            return
        if state.get("numpy_array_alignment_bytes") is not None:  # None or absent before joblib 1.2
            self.stream.seek(self.stream.read(1)[0], io.SEEK_CUR)  # the byte says how much padding follows
        size = math.prod(shape) * dtype.itemsize
        data = self.stream.read(size)
        if size < 0 or len(data) != size:
            raise Unsupported(f"joblib array {shape} {dtype} truncated")
        flat = np.frombuffer(data, dtype)
        self.array = flat.reshape(shape[::-1]).T if state["order"] == "F" else flat.reshape(shape)


def _reconstructor(cls: Any, base: Any, state: Any) -> object:
    """copyreg._reconstructor, which protocols 0 and 1 rebuild objects with: for this module's classes only."""
    if not (isinstance(cls, type) and issubclass(cls, (_Model, _ArrayWrapper)) and base is object and state is None):
        raise Unsupported(f"pickle reconstructs {cls!r} from {base!r}")
    return object.__new__(cls)


def _latin1(text: str, encoding: str) -> bytes:
    """codecs.encode, which protocols 0 to 2 write bytes with, always naming latin1."""
    if encoding != "latin1":
        raise Unsupported(f"pickle encodes bytes as {encoding!r}")
    return text.encode("latin1")


_ARRAY = np.zeros(1)
_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    # What numpy pickles arrays and scalars with, under numpy 1's module name and numpy 2's.
    **{(f"{core}.multiarray", "_reconstruct"): _ARRAY.__reduce__()[0] for core in ("numpy.core", "numpy._core")},
    **{(f"{core}.multiarray", "scalar"): np.float64(0).__reduce__()[0] for core in ("numpy.core", "numpy._core")},
    **{(f"{core}.numeric", "_frombuffer"): _ARRAY.__reduce_ex__(5)[0] for core in ("numpy.core", "numpy._core")},
    # Protocols before 3 write Python 2's module names.
    **{(module, "_reconstructor"): _reconstructor for module in ("copyreg", "copy_reg")},
    **{(module, "object"): object for module in ("builtins", "__builtin__")},
    ("_codecs", "encode"): _latin1,
    # scikit-learn before 0.23 pickled through its bundled copy of joblib.
    **{(f"{joblib}.numpy_pickle", "NumpyArrayWrapper"): _ArrayWrapper
       for joblib in ("joblib", "sklearn.externals.joblib")},
    # sklearn.preprocessing.data before scikit-learn 0.22
    **{(module, cls.__name__): cls for module in ("sklearn.preprocessing._data", "sklearn.preprocessing.data")
       for cls in (MinMaxScaler, StandardScaler, MaxAbsScaler, RobustScaler)},
    ("sklearn.pipeline", "Pipeline"): Pipeline,
}


class _Unpickler(pickle.Unpickler):
    """Resolves only _GLOBALS: whatever else a pickle names is refused before anything is called."""

    def __init__(self, stream: io.BytesIO) -> None:
        super().__init__(stream)
        self.stream = stream

    def find_class(self, module: str, name: str) -> Any:
        found = _GLOBALS.get((module, name))
        if found is None:
            raise Unsupported(f"pickle names {module}.{name}, not a known scaler")
        if found is _ArrayWrapper:  # one that reads the bytes joblib wrote after it, from this stream
            return type("NumpyArrayWrapper", (_ArrayWrapper,), {"stream": self.stream})
        return found


def _contents(path: str) -> bytes:
    """The pickle in the file, decompressed as joblib.load does: by the magic prefix joblib wrote."""
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size > _LIMIT:
            raise Unsupported(f"larger than {_LIMIT >> 20} MiB")
        data = fh.read()
    if not data:
        raise Unsupported("empty file")
    if data.startswith(b"ZF"):
        raise Unsupported("compressed by joblib before 0.10")
    if data.startswith(b"\x04\x22\x4d\x18"):
        raise Unsupported("lz4-compressed; reading it takes the lz4 package")
    if data.startswith(b"\x78"):  # zlib, joblib's compress=N
        decompressor: Any = zlib.decompressobj(15)
    elif data.startswith(b"\x1f\x8b"):
        decompressor = zlib.decompressobj(31)  # gzip: what joblib's BinaryGzipFile writes
    elif data.startswith(b"BZ"):
        decompressor = bz2.BZ2Decompressor()
    elif data.startswith((b"\x5d\x00", b"\xfd7zXZ")):  # joblib's 'lzma' (the .lzma format) and 'xz'
        decompressor = lzma.LZMADecompressor()
    else:
        decompressor = None
    if decompressor is not None:
        data = decompressor.decompress(data, _LIMIT + 1)
        if len(data) <= _LIMIT and not decompressor.eof:
            raise Unsupported("compressed stream truncated")
    if len(data) > _LIMIT:
        raise Unsupported(f"larger than {_LIMIT >> 20} MiB")
    return data


class Fitted(Protocol):
    """What a job calls on the model in its scaler: a Pipeline or scaler read here, or scikit-learn's own in the
    TensorFlow pool (loading.Estimator)."""

    def transform(self, x: Any) -> Any: ...

    def inverse_transform(self, x: Any) -> Any: ...

    @property
    def states(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class Scaler:
    """A job's scaler, however it was read: the same calls, float64 results (equal ones, read here or by joblib)."""

    model: Fitted
    name: str  # the file's name
    kind: str  # its class and the scikit-learn version that pickled it, for the debug log and store check

    @property
    def note(self) -> str:
        return f"scaler {self.name}: {self.kind}"

    def transform(self, column: np.ndarray) -> np.ndarray:
        return np.asarray(self.model.transform(column.reshape(-1, 1)), dtype=float)

    def inverse_transform(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(self.model.inverse_transform(rows), dtype=float)


def read_untrusted(path: str, *, one_column: bool = False) -> Scaler:
    """read_scaler for a store nobody vouched for (no --trust-store): what it cannot read is a load_error."""
    try:
        return read_scaler(path, one_column=one_column)
    except Unsupported as exc:
        raise JobError(Status.LOAD_ERROR, f"{exc}; read it only with --trust-store") from None


def read_scaler(path: str, *, one_column: bool = False) -> Scaler:
    """The scaler in `path` (a joblib or pickle file); Unsupported, saying why, when it is not one read here.
    `one_column`: for a job, which scales one (check_statistics)."""
    name = os.path.basename(path)
    try:
        model = _Unpickler(io.BytesIO(_contents(path))).load()
        if not _fitted(model):
            raise Unsupported(f"the pickle holds a {type(model).__name__}, not a fitted scaler")
    except Unsupported as exc:
        raise Unsupported(f"scaler {name}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a damaged file raises anything; the full path names it properly
        raise Unsupported(f"scaler {name}: not read without scikit-learn ({first_line(exc)})") from None
    check_statistics(name, model.states, one_column=one_column)
    return Scaler(model, name, f"{model.label} pickled with scikit-learn {', '.join(sorted(model.versions))}, "
                               "read without scikit-learn")
