"""engine/layers.py: each layer kind built from a LayerSpec as an artefact gives it, computing what Keras computes,
and refused at build time, naming the layer, where it cannot."""
from __future__ import annotations

import numpy as np
import pytest

from batchpredict.errors import Unsupported
from batchpredict.scoring.engine.layers import build
from batchpredict.scoring.engine.spec import LayerSpec

RNG = np.random.default_rng(0)


def spec(class_name: str, *weights: np.ndarray, **config: object) -> LayerSpec:
    return LayerSpec(class_name, {"name": class_name.lower(), **config}, tuple(np.asarray(w, np.float32)
                                                                              for w in weights))


def test_dense_is_per_timestep_on_a_sequence_with_its_activation():
    kernel, bias = RNG.normal(size=(3, 2)), RNG.normal(size=2)
    step = build(spec("Dense", kernel, bias, units=2, activation="relu"), (5, 3), 2)
    x = RNG.normal(size=(4, 5, 3)).astype(np.float32)
    np.testing.assert_allclose(step.call(x), np.maximum(x @ kernel.astype(np.float32) + bias.astype(np.float32), 0),
                               rtol=1e-6)
    assert (step.shape, step.label, step.over_time) == ((5, 2), "Dense(2)", None)
    no_bias = build(spec("Dense", kernel, units=2, use_bias=False), (3,), 3)  # linear by default
    np.testing.assert_allclose(no_bias.call(x[:, 0]), x[:, 0] @ kernel.astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("name", ["Dropout", "SpatialDropout1D", "GaussianNoise", "GaussianDropout", "AlphaDropout",
                                  "ActivityRegularization", "InputLayer"])
def test_training_only_layers_pass_their_input_on(name):
    step = build(spec(name, rate=0.5), (5, 1), 2)
    x = RNG.normal(size=(2, 5, 1)).astype(np.float32)
    assert step.call(x) is x and step.shape == (5, 1) and step.over_time is not None  # they step with an RNN
    assert step.label == ("" if name == "InputLayer" else name)


def test_an_activation_layer_and_its_label():
    step = build(spec("Activation", activation="tanh"), (4,), 2)
    x = np.linspace(-3, 3, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(step.call(x), np.tanh(x))
    assert step.label == "Activation(tanh)"


@pytest.mark.parametrize(("shape", "target", "out"), [((20,), (4, -1), (4, 5)), ((4, 5), (20,), (20,)),
                                                      ((2, 3, 4), (-1, 2), (12, 2))])
def test_reshape_to_its_target_with_one_dimension_inferred(shape, target, out):
    step = build(spec("Reshape", target_shape=list(target)), shape, 2)
    x = RNG.normal(size=(3, *shape)).astype(np.float32)
    np.testing.assert_array_equal(step.call(x), x.reshape(3, *out))
    assert step.shape == out and step.label == f"Reshape({', '.join(map(str, out))})"


@pytest.mark.parametrize(("shape", "target", "message"), [
    ((20,), (3, 3), r"^Reshape 'reshape': cannot reshape \(None, 20\) to \(None, 3, 3\)$"),
    ((20,), (-1, -1), r"^Reshape 'reshape': cannot reshape \(None, 20\) to \(None, -1, -1\)$"),
    ((20,), (3, -1), r"^Reshape 'reshape': cannot reshape"),
    ((None, 1), (-1,), r"^Reshape 'reshape': reshaping an input of variable shape \(None, None, 1\) is not supported"),
])
def test_a_reshape_that_cannot_be_is_refused(shape, target, message):
    with pytest.raises(Unsupported, match=message):
        build(spec("Reshape", target_shape=list(target)), shape, 2)


def test_flatten_and_channels_first():
    x = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    last = build(spec("Flatten"), (3, 4), 2)
    first = build(spec("Flatten", data_format="channels_first"), (3, 4), 2)
    np.testing.assert_array_equal(last.call(x), x.reshape(2, 12))
    np.testing.assert_array_equal(first.call(x), x.transpose(0, 2, 1).reshape(2, 12))  # channels moved last
    assert last.shape == first.shape == (12,) and build(spec("Flatten"), (None, 4), 2).shape == (None,)


@pytest.mark.parametrize(("layer", "shape", "message"), [
    (spec("Conv1D", filters=2), (5, 1), r"^layer Conv1D 'conv1d' is not supported by the numpy engine$"),
    (spec("Dense", np.zeros((1, 2)), np.zeros(2), units=2, dtype="float16"), (1,),
     r"^Dense 'dense': dtype 'float16' is not supported by the numpy engine$"),
    (spec("Dense", np.zeros((1, 2)), units=2,
          dtype={"class_name": "DTypePolicy", "config": {"name": "mixed_bfloat16"}}),
     (1,), r"^Dense 'dense': dtype 'mixed_bfloat16' is not supported"),
    (spec("Dense", np.zeros((1, 2)), np.zeros(2)), (1,), r"^Dense 'dense': unreadable config \(KeyError: 'units'\)$"),
    (spec("Dense", np.zeros((1, 2)), np.zeros(2), units=2, lora_rank=4), (1,),
     r"^Dense 'dense': lora_rank=4 is not supported by the numpy engine$"),
    (spec("Dense", np.zeros((1, 3)), np.zeros(2), units=2), (1,),
     r"^Dense 'dense': weights of shapes \[\(1, 3\), \(2,\)\] where the config implies \[\(1, 2\), \(2,\)\]$"),
    (spec("Dense", np.zeros((1, 2)), np.zeros(2), units=2), (None,),
     r"^Dense 'dense': its input \(None, None\) has no fixed last dimension$"),
    (spec("Dropout", np.zeros(1), rate=0.5), (5, 1), r"^Dropout 'dropout': weights of shapes \[\(1,\)\] where"),
    (LayerSpec("Dense", {"name": "d", "units": 1}, (np.zeros((1, 1)), np.zeros(1))), (1,),
     r"^Dense 'd': weight dtype float64 is not supported by the numpy engine$"),
])
def test_what_a_layer_cannot_take_is_refused_at_build_naming_it(layer, shape, message):
    with pytest.raises(Unsupported, match=message):
        build(layer, shape, 2)

