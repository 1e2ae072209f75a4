"""Reads a Keras artefact without any runtime: its keras_version, input shape and chain of layers with weights.

    .h5     attrs model_config (JSON), keras_version; model_weights/<layer name>/ holds the
            layer's arrays, in the order of its `weight_names` attribute (Keras 1, 2 and 3)
    .keras  zip of config.json, metadata.json (keras_version) and model.weights.h5, where a layer's
            arrays are layers/<class in snake_case, numbered per class>/[cell/]vars/<i> (Keras 3, tf_keras)

Nested Sequential/Functional models are flattened into the chain; a Functional model must be a
single chain (one input, one output, every layer called once on the previous one's output).

h5py is imported by the first file read here: a lean worker whose models come from the weights cache
(cache.py) never loads it, and the lean forkserver, without it, forks and exits ~0.3 ms faster a job.
"""
from __future__ import annotations

import io
import json
import os
import re
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import JobError, Unsupported, first_line
from ...result import Status
from . import keras1
from .spec import LayerSpec

if TYPE_CHECKING:
    import h5py

MODELS = ("Sequential", "Functional", "Model")
_CONFIG_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError)


@dataclass(frozen=True)
class Artefact:
    kind: str                            # "h5" or "keras"
    keras_version: str                   # as the file states it, "" when it does not
    major: int                           # the Keras major that wrote it: 1, 2 or 3
    input_shape: tuple[int | None, ...]  # with the batch axis
    layers: tuple[LayerSpec, ...]


def read(path: str) -> Artefact:
    name = os.path.basename(os.path.normpath(path))
    if os.path.isdir(path):
        raise Unsupported(f"{name}: a SavedModel directory is not supported by the numpy engine")
    if zipfile.is_zipfile(path):
        return _read_zip(path, name)
    import h5py

    try:
        h5 = h5py.File(path, "r")
    except OSError as exc:
        raise JobError(Status.LOAD_ERROR, f"{name}: neither HDF5 nor a .keras zip ({first_line(exc)})") from None
    with h5:
        version = _text(h5.attrs.get("keras_version", ""))
        if "model_config" not in h5.attrs:
            raise JobError(Status.LOAD_ERROR, f"{name}: weights-only HDF5 (no model config, keras_version "
                                              f"{version or 'none'}); save the whole model with model.save()")
        return _artefact(name, "h5", version, h5.attrs["model_config"],
                         weights=lambda: _H5Weights(h5["model_weights"]))


def _read_zip(path: str, name: str) -> Artefact:
    try:
        with zipfile.ZipFile(path) as zf:
            files = set(zf.namelist())
            if not {"config.json", "model.weights.h5"} <= files:
                raise Unsupported(f"{name}: a zip without config.json and model.weights.h5 "
                                  f"(it holds {sorted(files)[:5]})")
            metadata = zf.read("metadata.json") if "metadata.json" in files else b"{}"
            config, weights = zf.read("config.json"), zf.read("model.weights.h5")
    except (OSError, zipfile.BadZipFile) as exc:
        raise JobError(Status.LOAD_ERROR, f"{name}: unreadable .keras zip ({first_line(exc)})") from None
    import h5py

    try:
        version = str(json.loads(metadata).get("keras_version", ""))
        h5 = h5py.File(io.BytesIO(weights), "r")
    except (ValueError, AttributeError, OSError) as exc:
        raise Unsupported(f"{name}: unreadable metadata.json or model.weights.h5 ({first_line(exc)})") from None
    with h5:
        return _artefact(name, "keras", version, config, weights=lambda: _ZipWeights(h5.get("layers")))


def _artefact(name: str, kind: str, version: str, config: Any, *, weights: Any) -> Artefact:
    major = _major(kind, version)
    with keras1.reasons(major):
        try:
            shape, layers = _chain(json.loads(_text(config)), weights(), major)
        except _CONFIG_ERRORS as exc:
            raise Unsupported(f"{name}: unreadable model config ({first_line(exc)})") from None
        except OSError as exc:  # h5py failing to read a dataset: no runtime could either
            raise JobError(Status.LOAD_ERROR, f"{name}: unreadable weights ({first_line(exc)})") from None
        if shape is None:
            raise Unsupported(f"{name}: the model config declares no input shape")
        return Artefact(kind, version, major, tuple(None if d is None else int(d) for d in shape), tuple(layers))


def _major(kind: str, version: str) -> int:
    """Keras 2 wrote '2.x' or '2.x.y-tf' (before 2.1, maybe nothing in HDF5); a .keras zip without one is Keras 3's."""
    if not version:
        return 3 if kind == "keras" else 2
    major = re.match(r"\d+", version)
    if major is None or int(major.group()) not in (1, 2, 3):
        raise Unsupported(f"keras_version {version!r} is not supported by the numpy engine")
    return int(major.group())


def _chain(model: dict, weights: Any, major: int) -> tuple[list | None, list[LayerSpec]]:
    """The model's layers in call order with their weights, nested models flattened; the input shape it declares."""
    kind, config = model["class_name"], model["config"]
    if kind == "Sequential":
        layers = config if isinstance(config, list) else config["layers"]  # a list up to Keras 2.1
    elif kind in MODELS:
        layers = _single_chain(config)
    else:
        raise Unsupported(f"model class {kind} is not supported by the numpy engine")
    shape, specs = None, list[LayerSpec]()
    for layer in layers:
        if layer["class_name"] in MODELS:
            declared, inner = _chain(layer, weights.inner(layer), major)
        else:
            names, arrays = weights.arrays(layer)
            spec = _held(LayerSpec(layer["class_name"], layer["config"], arrays, names))
            inner = [keras1.translate(spec) if major == 1 else spec]
            declared = inner[0].config.get("batch_shape") or inner[0].config.get("batch_input_shape")
        if not specs:
            shape = declared
        specs += inner
    if shape is None and isinstance(config, dict):
        shape = config.get("build_input_shape")
    return shape, specs


_SIZES = ("units", "output_dim", "filters")  # how a config declares a layer's size (output_dim: Keras 1's units)


def _held(spec: LayerSpec) -> LayerSpec:
    """`spec`, unless its config declares a size larger than the weight values the file holds for it: a layer of
    U units has at least U (its kernel alone is inputs x U), so no runtime could load it, and Keras would build
    the size declared (10**9 units runs until --timeout) before it found out. A layer without weights is left to
    the layer functions."""
    held = sum(w.size for w in spec.weights)
    for key in _SIZES:
        size = spec.config.get(key)
        if held and isinstance(size, int | float) and size > held:
            raise JobError(Status.LOAD_ERROR, f"{spec}: its config declares {key} {size:,}, but the file holds "
                                              f"{held:,} weight values for it")
    return spec


def _single_chain(config: dict) -> list[dict]:
    """A Functional model's layers from its input to its output, if each one feeds only the next."""
    inputs, outputs = _endpoints(config["input_layers"]), _endpoints(config["output_layers"])
    if len(inputs) != 1 or len(outputs) != 1:
        raise Unsupported(f"a model of {len(inputs)} inputs and {len(outputs)} outputs is not supported by the "
                          "numpy engine (one of each)")
    by_name = {layer["name"]: layer for layer in config["layers"]}
    chain = [by_name[outputs[0]]]
    while chain[-1]["name"] != inputs[0] and len(chain) <= len(by_name):
        chain.append(by_name[_inbound(chain[-1])])
    if len(chain) != len(by_name):
        raise Unsupported(f"a model whose layers {sorted(by_name)} do not form one chain from input to output "
                          "is not supported by the numpy engine")
    return chain[::-1]


def _endpoints(value: list | dict) -> list[str]:
    """Layer names of input_layers/output_layers: [[name, 0, 0], ...], or Keras 3's [name, 0, 0] for one."""
    value = list(value.values()) if isinstance(value, dict) else value
    return [value[0]] if value and isinstance(value[0], str) else [entry[0] for entry in value]


def _inbound(layer: dict) -> str:
    """The one layer whose output this one is called on, from Keras 1/2 or Keras 3 inbound_nodes."""
    where = f"{layer['class_name']} '{layer['name']}'"
    nodes = layer["inbound_nodes"]
    if len(nodes) != 1:
        raise Unsupported(f"{where} is called {len(nodes)} times; the numpy engine runs a single chain")
    node = nodes[0]
    if isinstance(node, dict):  # Keras 3: {"args": [tensor], "kwargs": {...}}
        args, kwargs = node["args"], node.get("kwargs", {})
        if len(args) != 1 or not isinstance(args[0], dict) or args[0].get("class_name") != "__keras_tensor__":
            raise Unsupported(f"{where} takes several inputs; the numpy engine runs a single chain")
        source, node_index, tensor_index = args[0]["config"]["keras_history"]
    else:  # Keras 1/2: [[name, node_index, tensor_index(, kwargs)]]
        if len(node) != 1:
            raise Unsupported(f"{where} takes {len(node)} inputs; the numpy engine runs a single chain")
        source, node_index, tensor_index, *rest = node[0]
        kwargs = rest[0] if rest else {}
    if node_index or tensor_index:
        raise Unsupported(f"{where} takes output {tensor_index} of call {node_index} of '{source}'; "
                          "the numpy engine runs a single chain")
    called = sorted(key for key, value in kwargs.items() if key != "training" and value is not None)
    if called:
        raise Unsupported(f"{where}: calling it with {', '.join(called)} is not supported by the numpy engine")
    return source


class _H5Weights:
    """A legacy HDF5 file's arrays: model_weights/<layer>/ lists them in its weight_names attribute.

    A nested model's group lists all its layers' arrays, each name with its layer's name as a path
    segment ('lstm/lstm_cell/kernel:0', 'inner/lstm/lstm_cell/kernel'): `pool` holds those names.
    """

    def __init__(self, group: h5py.Group, pool: list[str] | None = None) -> None:
        self.group, self.pool = group, pool

    def arrays(self, layer: dict) -> tuple[tuple[str, ...], tuple[np.ndarray, ...]]:
        name = layer["config"]["name"]
        if self.pool is None:
            group = self.group.get(name)
            names = _weight_names(group) if group is not None else []
        else:
            group, names = self.group, [n for n in self.pool if name in n.split("/")[:-1]]
        return tuple(names), tuple(_array(group, n) for n in names)

    def inner(self, layer: dict) -> _H5Weights:
        if self.pool is not None:  # deeper models' arrays are in the same pool
            return self
        group = self.group[layer["config"]["name"]]
        return _H5Weights(group, _weight_names(group))


class _ZipWeights:
    """A .keras weights file's arrays for one container of layers, addressed as the saving Keras named them."""

    def __init__(self, group: h5py.Group | None) -> None:
        self.group = group
        self.used: dict[str, int] = {}

    def _next(self, layer: dict) -> h5py.Group | None:
        """The group of the container's next layer: its class in snake_case, numbered from _1 on repeats."""
        name = _snake_case(layer["class_name"])
        count = self.used[name] = self.used.get(name, -1) + 1
        return None if self.group is None else self.group.get(f"{name}_{count}" if count else name)

    def arrays(self, layer: dict) -> tuple[tuple[str, ...], tuple[np.ndarray, ...]]:
        group = self._next(layer)
        found = [(f"{path}/{key}", sub, key) for path in ("vars", "cell/vars")
                 if group is not None and (sub := group.get(path)) is not None for key in sorted(sub, key=int)]
        return tuple(name for name, _, _ in found), tuple(_array(sub, key) for _, sub, key in found)

    def inner(self, layer: dict) -> _ZipWeights:
        group = self._next(layer)
        return _ZipWeights(None if group is None else group.get("layers"))


def _snake_case(name: str) -> str:
    """keras.src.utils.naming.to_snake_case; tf_keras's gives the same for layer class names."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _array(group: h5py.Group, name: str) -> np.ndarray:
    """A dataset read through h5py's low-level API: a third of the high-level one's ~200 us an array."""
    import h5py

    dataset = h5py.h5d.open(group.id, name.encode())
    array = np.empty(dataset.shape, dataset.dtype)
    dataset.read(h5py.h5s.ALL, h5py.h5s.ALL, array)
    return array


def _weight_names(group: h5py.Group) -> list[str]:
    return [_text(n) for n in group.attrs.get("weight_names", [])]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, np.bytes_)) else str(value)
