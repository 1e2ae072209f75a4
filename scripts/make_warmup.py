"""Writes the lean forkserver's warm-up artefacts into batchpredict/runtime/preload/warmup/.

    .venv/bin/python scripts/make_warmup.py

A tiny Keras 3 LSTM saved as .h5 and as .keras, and a MinMaxScaler: the lean forkserver runs one
job on each model before it forks any worker (see batchpredict/runtime/preload/lean.py).
"""
from __future__ import annotations

import os

import joblib
import numpy as np
from sklearn.preprocessing import MinMaxScaler

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "batchpredict", "runtime", "preload", "warmup")


def main() -> None:
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4, 1)), keras.layers.LSTM(2), keras.layers.Dense(1)])
    for suffix in (".h5", ".keras"):
        model.save(os.path.join(HERE, "warmup" + suffix))
    joblib.dump(MinMaxScaler().fit(np.arange(8.0).reshape(-1, 1)), os.path.join(HERE, "warmup.save"))


if __name__ == "__main__":
    main()
