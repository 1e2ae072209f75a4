"""engine/products.py: a batch of whole blocks is multiplied a block at a time, each block as alone."""
from __future__ import annotations

import numpy as np
import pytest

from batchpredict.scoring.engine import products
from batchpredict.scoring.engine.products import BLOCK

RNG = np.random.default_rng(7)
A = RNG.normal(size=(256, 66)).astype(np.float32)  # an LSTM(64)'s gates over [h; x; 1]


@pytest.mark.parametrize("blocks", [2, 3, 10, 52])
def test_columns_are_each_blocks_own_product(blocks):
    x = RNG.normal(size=(66, blocks * BLOCK)).astype(np.float32)
    alone = np.concatenate([A @ np.ascontiguousarray(x[:, i:i + BLOCK]) for i in range(0, x.shape[1], BLOCK)], axis=1)
    out = np.empty((256, x.shape[1]), np.float32)
    assert products.columns(A, x, out=out) is out and out.tobytes() == alone.tobytes()
    assert products.columns(A, x).tobytes() == alone.tobytes()
    np.testing.assert_allclose(out, A @ x, rtol=1e-4, atol=1e-4)


def test_rows_are_each_blocks_own_product():
    kernel = RNG.normal(size=(32, 1)).astype(np.float32)  # a Dense(1) after an LSTM(32)
    x = RNG.normal(size=(5 * BLOCK, 32)).astype(np.float32)
    alone = np.concatenate([x[i:i + BLOCK] @ kernel for i in range(0, len(x), BLOCK)])
    assert products.rows(x, kernel).tobytes() == alone.tobytes()


@pytest.mark.parametrize("batch", [1, 7, BLOCK, BLOCK + 1])
def test_a_batch_not_in_whole_blocks_is_one_product(batch):
    x = RNG.normal(size=(66, batch)).astype(np.float32)
    assert products.columns(A, x).tobytes() == (A @ x).tobytes()
    rows = RNG.normal(size=(batch, 66)).astype(np.float32)
    assert products.rows(rows, A.T).tobytes() == (rows @ A.T).tobytes()
