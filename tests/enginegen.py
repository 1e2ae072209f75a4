"""Saves the numpy engine's test models with the real runtimes, and what those predict, in a subprocess.

    python tests/enginegen.py SPEC.json

SPEC: {"dir": DIR, "cases": [name, ...], "real": [path, ...], "out": JSON}

Each case of CASES is built with each runtime (tf_keras: Keras 2, keras: Keras 3), its weights
drawn at random (so biases are not all zero), and saved as DIR/<case>-<runtime>.h5 and .keras
(FILES: fewer). Unless the case is one the engine refuses, each file is then loaded back by its runtime
(`load_model(compile=False)`) and run on a fixed batch of 3 random windows. Each file of "real"
is loaded by the runtime its keras_version names. OUT gets {file name: {"input": .., "output": ..}}.

The test process imports only this module's constants and write_h5: TensorFlow stays in the subprocess.
"""
from __future__ import annotations

import json
import os
import sys
import zlib

import numpy as np

RUNTIMES = ("tf_keras", "keras")
FORMATS = ("h5", "keras")
# Every activation the engine computes, four to a model.
# Keras 3 saves "swish" as "silu"; tf_keras knows only "swish".
ACTIVATIONS = ["tanh", "sigmoid", "hard_sigmoid", "relu", "linear", "elu", "selu", "softsign", "softplus",
               "swish", "exponential", "tanh"]
GROUPS = [tuple(ACTIVATIONS[i:i + 4]) for i in range(0, len(ACTIVATIONS), 4)]


def _act_case(a: str, b: str, c: str, d: str):  # noqa: ANN202
    """Each of a, b, c, d as an LSTM's activation, as its recurrent_activation and as a Dense activation
    (on sequences); the tanh layers keep the unbounded ones' values finite."""
    def layers(L):  # noqa: ANN001, ANN202, N803
        stack = []
        for act, rec, dense in ((a, b, c), (b, a, d), (c, d, a)):
            stack += [L.LSTM(4, activation=act, recurrent_activation=rec, return_sequences=True),
                      L.Dense(3, activation=dense), L.Activation("tanh")]
        return stack + [L.LSTM(3, activation=d, recurrent_activation=c), L.Dense(1, activation=b)]
    return layers


# name -> (layers given keras.layers or tf_keras.layers, input shape); layers may be a whole model.
CASES = {
    "lstm": (lambda L: [L.LSTM(6), L.Dense(1)], (5, 1)),
    "gru": (lambda L: [L.GRU(5, return_sequences=True), L.GRU(4, reset_after=False), L.Dense(1)], (5, 1)),
    "hard_sigmoid": (lambda L: [L.LSTM(5, recurrent_activation="hard_sigmoid"),
                                L.Dense(1, activation="hard_sigmoid")], (5, 1)),
    **{"act-" + "-".join(group): (_act_case(*group), (5, 1)) for group in GROUPS},
    "simple_rnn": (lambda L: [L.SimpleRNN(4, return_sequences=True, go_backwards=True),
                              L.SimpleRNN(3, use_bias=False), L.Dense(1, use_bias=False)], (5, 2)),
    "options": (lambda L: [L.LSTM(4, use_bias=False, go_backwards=True, return_sequences=True, dropout=0.2,
                                  recurrent_dropout=0.2),
                           L.GRU(3, go_backwards=True, return_sequences=True, reset_after=False, dropout=0.1),
                           L.GRU(3, go_backwards=True, use_bias=False), L.Dense(1)], (6, 1)),
    "identity": (lambda L: [L.Dense(3, activation="tanh"), L.Dropout(0.3), L.SpatialDropout1D(0.2),
                            L.GaussianNoise(0.1), L.GaussianDropout(0.1), L.AlphaDropout(0.1),
                            L.ActivityRegularization(l1=0.01), L.Activation("elu"), L.Reshape((18,)),
                            L.Reshape((-1, 3)), L.LSTM(4, return_sequences=True),
                            L.Flatten(data_format="channels_first"), L.Dense(1)], (6, 2)),
    "functional": ("functional", (5, 1)),
    "nested": ("nested", (5, 1)),
    "variable": (lambda L: [L.LSTM(4, return_sequences=True), L.GRU(3), L.Dense(1)], (None, 1)),
    # Saved by tf_keras only, as .h5: the tests rewrite them as a Keras 2.1 and a Keras 1 file.
    "old_gru": (lambda L: [L.GRU(4, recurrent_activation="hard_sigmoid", reset_after=False), L.Dense(1)], (5, 1)),
    "keras1_lstm": (lambda L: [L.LSTM(5, recurrent_activation="hard_sigmoid"), L.Dense(1)], (5, 1)),
    # What the engine refuses: no predictions needed.
    "conv1d": (lambda L: [L.Conv1D(2, 3), L.Flatten(), L.Dense(1)], (5, 1)),
    "masking": (lambda L: [L.Masking(0.0), L.LSTM(4), L.Dense(1)], (5, 1)),
    "stateful": (lambda L: [L.LSTM(4, stateful=True), L.Dense(1)], (5, 1)),
    "weights_only": (lambda L: [L.LSTM(4), L.Dense(1)], (5, 1)),
}
FILES = {"old_gru": ["tf_keras.h5"], "keras1_lstm": ["tf_keras.h5"], "weights_only": ["tf_keras.h5", "keras.h5"]}
REFUSED = {"conv1d", "masking", "stateful", "weights_only"}
VARIABLE_STEPS = 20  # fed to a model whose timesteps are None


def files(case: str) -> list[str]:
    """The file names a case is saved as."""
    return [f"{case}-{end}" for end in FILES.get(case, [f"{runtime}.{fmt}" for runtime in RUNTIMES
                                                           for fmt in FORMATS])]


def _model(kx, case: str):  # noqa: ANN001, ANN202 - kx: keras or tf_keras
    make, shape = CASES[case]
    L = kx.layers
    if case == "stateful":
        return kx.Sequential([kx.Input(batch_shape=(3, *shape))] + make(L))
    if make == "functional":
        x = kx.Input(shape)
        y = L.Dense(1)(L.Dense(3, activation="relu")(L.LSTM(3)(L.Dropout(0.2)(L.LSTM(4, return_sequences=True)(x)))))
        return kx.Model(x, y)
    if make == "nested":
        inner = kx.Sequential([kx.Input((shape[0], 2)), L.LSTM(4, return_sequences=True), L.Dense(2)], name="inner")
        return kx.Sequential([kx.Input(shape), L.Dense(2), inner, L.LSTM(3, return_sequences=True), L.Flatten(),
                              L.Dense(1)])
    return kx.Sequential([kx.Input(shape)] + make(L))


def write_h5(path, config: dict | str, weights: dict[str, dict[str, np.ndarray]], version: str):  # noqa: ANN001, ANN201
    """A hand-made HDF5 model file, as Keras' save_model lays it out: attrs model_config and keras_version,
    model_weights/<layer>/<weight> listed in weight_names. For the tests; needs only h5py."""
    import h5py

    with h5py.File(path, "w") as h5:
        h5.attrs["keras_version"], h5.attrs["backend"] = version, "tensorflow"
        h5.attrs["model_config"] = config if isinstance(config, str) else json.dumps(config)
        group = h5.create_group("model_weights")
        group.attrs["layer_names"] = list(weights)
        for layer, arrays in weights.items():
            group.create_group(layer).attrs["weight_names"] = list(arrays)
            for key, array in arrays.items():
                group[layer][key] = array
    return path


def _seed(text: str) -> int:
    return zlib.crc32(text.encode())


def _randomize(model, seed: int, scale: float) -> None:  # noqa: ANN001
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, scale, w.shape).astype("float32") for w in model.get_weights()])


def window_batch(shape: tuple, key: str) -> np.ndarray:
    steps = shape[1] if shape[1] is not None else VARIABLE_STEPS
    return np.random.default_rng(_seed(key)).normal(0, 1.5, (3, steps, *shape[2:])).astype("float32")


def _reference(kx, path: str, key: str) -> dict:  # noqa: ANN001
    model = kx.models.load_model(path, compile=False, **({"safe_mode": False} if kx.__name__ == "keras" else {}))
    x = window_batch(tuple(model.inputs[0].shape), key)
    y = np.asarray(model(x, training=False))
    assert np.isfinite(y).all(), f"{key}: the runtime predicts non-finite values"
    return {"input": x.tolist(), "output": y.tolist()}


def build(spec: dict) -> None:
    import keras
    import tensorflow as tf
    import tf_keras

    # Tracing the tf.functions of each small model costs more than running their ops eagerly.
    tf.config.run_functions_eagerly(True)

    runtimes = {"keras": keras, "tf_keras": tf_keras}
    out = {}
    for case in spec["cases"]:
        for runtime, kx in runtimes.items():
            names = [name for name in files(case) if name.startswith(f"{case}-{runtime}.")]
            if not names:
                continue
            model = _model(kx, case)  # once for both formats: building is what takes time
            # Unbounded activations as LSTM gates grow fast over time: smaller weights keep them finite.
            _randomize(model, _seed(f"{case}-{runtime}"), 0.2 if case.startswith("act-") else 0.5)
            for name in names:
                path = os.path.join(spec["dir"], name)
                if case == "weights_only":  # Keras 3 insists on the .weights.h5 suffix
                    model.save_weights(path.replace(".h5", ".weights.h5") if runtime == "keras" else path)
                    if runtime == "keras":
                        os.replace(path.replace(".h5", ".weights.h5"), path)
                else:
                    model.save(path)
                if case not in REFUSED:
                    out[name] = _reference(kx, path, name)
    for path in spec.get("real", []):
        import h5py

        with h5py.File(path, "r") as h5:
            version = h5.attrs["keras_version"]
        kx = keras if (version.decode() if isinstance(version, bytes) else version).startswith("3.") else tf_keras
        out["real/" + os.path.basename(path)] = _reference(kx, path, os.path.basename(path))
    with open(spec["out"], "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with open(sys.argv[1]) as fh:
        build(json.load(fh))
