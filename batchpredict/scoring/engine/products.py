"""The engine's matrix products, each window of a batch rounded the same wherever it falls in the batch.

BLAS rounds a product's columns by where they fall in the call and by its shape: on an AVX-512 OpenBLAS, in a
call 32 columns wide, every other 8 columns round otherwise, and a call of another width otherwise again. A
batch of whole `BLOCK`s is therefore multiplied a block at a time (one numpy call: a stacked product, one BLAS
call of the same shape per block), so a window's result depends only on its own values and its place in its
block. prediction.py places each window by its position in the series, so a night continued from its
history gives the bits of one run whole. A batch that is not whole blocks (a single window) is one call.
"""
from __future__ import annotations

import numpy as np

BLOCK = 32


def _blocks(batch: int) -> int:
    """How many blocks a batch is multiplied in; 0 for one call (a single block, or not whole blocks)."""
    return 0 if batch % BLOCK or batch == BLOCK else batch // BLOCK


def columns(a: np.ndarray, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a @ x for x of (features, batch), the recurrent layers' layout; into `out` (contiguous) if given."""
    rows, (depth, batch) = a.shape[0], x.shape
    blocks = _blocks(batch)
    if not blocks:
        return np.matmul(a, x, out=out)
    if out is None:
        out = np.empty((rows, batch), np.result_type(a, x))
    stacked = np.ascontiguousarray(x).reshape(depth, blocks, BLOCK).transpose(1, 0, 2)
    np.matmul(a, stacked, out=out.reshape(rows, blocks, BLOCK).transpose(1, 0, 2))
    return out


def rows(x: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """x @ kernel for x of (batch, ..., features), Dense's layout: per window where x has timesteps (numpy
    multiplies each of a stack alike), else a block of rows at a time."""
    blocks = _blocks(x.shape[0])
    if x.ndim != 2 or not blocks:
        return x @ kernel
    return (x.reshape(blocks, BLOCK, x.shape[1]) @ kernel).reshape(x.shape[0], kernel.shape[1])
