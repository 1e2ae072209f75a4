"""Builds small real model stores for the tests, in a subprocess (TensorFlow stays out of pytest).

    python tests/storegen.py SPEC.json

SPEC: {"store": DIR, "refs": JSON (optional), "models": [{"ip": .., "kind": .., "format": ..,
        "window": 20 (null: variable timesteps), "weights": [...], "bias": float, "seed": int,
        "input": [...] (optional)}, ...]}

kind: `linear` is Flatten -> Dense(1) with the given weights, so the tests can compute its
prediction in numpy, independently of TensorFlow; `lstm` is the production architecture, seeded;
`lambda-lstm` puts a Lambda layer (a Python lambda, refused by Keras' safe_mode) before it;
`nan` predicts NaN; `flat` takes (window,) instead of (window, 1); `dense3` (an LSTM, then Dense(3)) and
`sequence` (LSTM(return_sequences=True), then Dense(1): (window, 1)) output more than one value a window.

format, each written by the runtime people used for it:
  h5, keras          Keras 3 `model.save`
  keras2-h5          tf_keras (Keras 2) `model.save('<ip>.h5')`, the first layer carrying its input shape
  keras2-keras       tf_keras `model.save('<ip>.keras')`
  keras2-savedmodel  tf_keras `model.save('<ip>')`, a SavedModel directory
  keras2-weights     tf_keras `model.save_weights('<ip>.h5')`: weights only, no model config
  keras3-export      Keras 3 `model.export('<ip>')`
  tf-module          `tf.saved_model.save` of a plain tf.Module whose one signature is named `predict`
  tf-module-call     `tf.saved_model.save` of a plain tf.Module with no signature, its __call__ traced once

With "input" on an item and "refs" in the spec, the saving runtime's own in-process prediction on
that window (shape (1, len, 1), float32) is written to refs as {ip: float}. SPEC may also hold
"references": [{"key": .., "path": FILE, "runtime": "keras"|"tf_keras", "input": [...]}]: existing
files loaded in-process with the named runtime, their predictions written to refs as {key: float}.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np


def keras_model(kx, item: dict):  # noqa: ANN001, ANN201 - kx is keras or tf_keras, imported lazily
    window = item.get("window", 20)
    shape = (window,) if item["kind"] == "flat" else (window, 1)
    # Keras 2 code mostly gave the first layer its input shape (batch_input_shape in its config).
    first = {"input_shape": shape} if kx.__name__ == "tf_keras" else {}
    kx.utils.set_random_seed(item.get("seed", 0))
    if item["kind"] == "lstm":
        layers = [kx.layers.LSTM(16, return_sequences=True, **first), kx.layers.LSTM(8), kx.layers.Dense(1)]
    elif item["kind"] == "lambda-lstm":
        layers = [kx.layers.Lambda(lambda x: 2.0 * x - 1.0, **first), kx.layers.LSTM(8), kx.layers.Dense(1)]
    elif item["kind"] == "dense3":
        layers = [kx.layers.LSTM(4, **first), kx.layers.Dense(3)]
    elif item["kind"] == "sequence":
        layers = [kx.layers.LSTM(4, return_sequences=True, **first), kx.layers.Dense(1)]
    elif item["kind"] == "flat":
        layers = [kx.layers.Dense(1, **first)]
    else:
        layers = [kx.layers.Flatten(**first), kx.layers.Dense(1)]
    model = kx.Sequential(([] if first else [kx.Input(shape)]) + layers)
    if item["kind"] in ("linear", "nan"):
        weights = np.asarray(item.get("weights", np.full(window, 1.0 / window)), dtype="float32")
        bias = np.float32("nan") if item["kind"] == "nan" else np.float32(item.get("bias", 0.0))
        model.set_weights([weights.reshape(window, 1), np.array([bias], dtype="float32")])
    return model


def tf_module(item: dict, signature: bool):  # noqa: ANN201
    """A two-layer tanh network as a plain tf.Module: no Keras anywhere in the SavedModel."""
    import tensorflow as tf

    window = item.get("window", 20)
    rng = np.random.default_rng(item.get("seed", 0))
    module = tf.Module()
    module.w1 = tf.Variable(rng.normal(0, 0.5, (window, 8)).astype("float32"))
    module.w2 = tf.Variable(rng.normal(0, 0.5, (8, 1)).astype("float32"))

    def forward(x):  # noqa: ANN001, ANN202
        return tf.tanh(tf.reshape(x, (-1, window)) @ module.w1) @ module.w2

    if signature:
        module.predict = tf.function(forward, input_signature=[tf.TensorSpec([None, window, 1], tf.float32)])
    else:
        module.__call__ = tf.function(forward)
        module.__call__(tf.zeros((1, window, 1)))
    return module, forward


def save(item: dict, folder: str):  # noqa: ANN201
    """Writes the item's artefact into `folder`; returns a callable giving its in-process prediction."""
    fmt, ip = item.get("format", "h5"), item["ip"]
    if fmt.startswith("tf-module"):
        import tensorflow as tf

        module, forward = tf_module(item, fmt == "tf-module")
        signatures = {"predict": module.predict} if fmt == "tf-module" else None
        tf.saved_model.save(module, os.path.join(folder, ip), signatures=signatures)
        return forward
    if fmt.startswith("keras2"):
        import tf_keras as kx
    else:
        import keras as kx
    model = keras_model(kx, item)
    if fmt == "keras2-weights":
        model.save_weights(os.path.join(folder, f"{ip}.h5"))
    elif fmt == "keras3-export":
        model.export(os.path.join(folder, ip), verbose=False)
    else:
        suffix = {"h5": ".h5", "keras": ".keras", "keras2-h5": ".h5", "keras2-keras": ".keras",
                  "keras2-savedmodel": ""}[fmt]
        model.save(os.path.join(folder, ip + suffix))
    return model


def predict(model, window: list[float]) -> float:  # noqa: ANN001
    return float(np.asarray(model(np.asarray(window, dtype="float32").reshape(1, -1, 1))).ravel()[0])


def build(spec: dict) -> None:
    folder = os.path.join(spec["store"], "model")
    os.makedirs(folder, exist_ok=True)
    refs = {}
    for item in spec["models"]:
        model = save(item, folder)
        if "input" in item:
            refs[item["ip"]] = predict(model, item["input"])
    for item in spec.get("references", []):
        kx = __import__(item["runtime"])
        refs[item["key"]] = predict(kx.models.load_model(item["path"], compile=False), item["input"])
    if spec.get("refs"):
        with open(spec["refs"], "w") as fh:
            json.dump(refs, fh)


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        build(json.load(fh))
