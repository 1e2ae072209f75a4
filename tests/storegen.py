"""Builds small real model stores for the tests, in a subprocess (TensorFlow stays out of pytest).

    python tests/storegen.py SPEC.json

SPEC: {"store": DIR, "models": [{"ip": .., "kind": "linear"|"lstm"|"nan", "format": "h5"|"keras",
        "weights": [...20 floats], "bias": float}, ...]}

`linear` is Flatten -> Dense(1) with the given weights, so the tests can compute its prediction
in numpy, independently of TensorFlow. `lstm` is the production architecture, seeded.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np


def build(spec: dict) -> None:
    import keras

    os.makedirs(os.path.join(spec["store"], "model"), exist_ok=True)
    for item in spec["models"]:
        window = item.get("window", 20)
        if item["kind"] == "lstm":
            keras.utils.set_random_seed(item.get("seed", 0))
            model = keras.Sequential([keras.Input((window, 1)), keras.layers.LSTM(16, return_sequences=True),
                                      keras.layers.LSTM(8), keras.layers.Dense(1)])
        else:
            model = keras.Sequential([keras.Input((window, 1)), keras.layers.Flatten(), keras.layers.Dense(1)])
            weights = np.asarray(item.get("weights", np.full(window, 1.0 / window)), dtype="float32")
            bias = np.float32("nan") if item["kind"] == "nan" else np.float32(item.get("bias", 0.0))
            model.set_weights([weights.reshape(window, 1), np.array([bias], dtype="float32")])
        model.save(os.path.join(spec["store"], "model", f"{item['ip']}.{item.get('format', 'h5')}"))


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        build(json.load(fh))
