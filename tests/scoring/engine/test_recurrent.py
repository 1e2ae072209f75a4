"""Recurrent layers stepped over time: a stack of them run together (model.predict, recurrent.stepped) gives
what each gives on the whole sequence, one after another."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import engine_models, engine_runs

from batchpredict.scoring.engine import load


@pytest.mark.parametrize("path", engine_models(), ids=lambda p: p.name)
def test_layers_stepped_together_give_what_they_give_one_after_another(path):
    """model.predict runs a stack of recurrent layers in step over time; each layer's own call on the whole
    sequence, one after another, is the reference."""
    if not engine_runs(path):
        pytest.skip("a model the numpy engine does not run")
    model = load(str(path))
    x = np.random.default_rng(1).normal(size=(9, *[d or 20 for d in model.input_shape[1:]])).astype(np.float32)
    y = x
    for step in model._steps:
        y = step.call(y)
    np.testing.assert_allclose(model.predict(x), y, rtol=1e-6, atol=1e-7)
