import numpy as np
import pytest

from batchpredict.errors import JobError
from batchpredict.features import rolling_series, split_window


def test_original_script_indexing_with_exactly_window_plus_rolling_values():
    values = np.arange(25, dtype=float)
    inputs, observed = split_window(values, rolling=5, window=20)
    smoothed = [values[i - 4:i + 1].mean() for i in range(4, 25)]  # s.rolling(5).mean()[4:]
    assert np.allclose(inputs, smoothed[0:20])
    assert observed == smoothed[20]


def test_longer_series_uses_the_last_window():
    values = np.arange(40, dtype=float)
    inputs, observed = split_window(values, rolling=5, window=20)
    assert observed == np.mean(values[-5:])
    assert inputs[-1] == np.mean(values[-6:-1]) and len(inputs) == 20


def test_nan_in_rolling_mean_is_filled_with_raw_mean():
    values = np.array([1.0, 2.0, np.nan, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    smoothed = rolling_series(values, 3)
    mean = np.nanmean(values)
    assert smoothed[0] == mean and smoothed[1] == mean and smoothed[2] == mean  # windows touching the NaN
    assert smoothed[3] == pytest.approx(5.0)


@pytest.mark.parametrize("values", [np.arange(24.0), np.full(30, np.nan)])
def test_insufficient(values):
    with pytest.raises(JobError) as err:
        split_window(values, rolling=5, window=20)
    assert err.value.status == "insufficient_data"


@pytest.mark.parametrize("rolling", [1, 3, 5, 12])
def test_rolling_mean_is_pandas_rolling_mean(rolling):
    import pandas as pd

    rng = np.random.default_rng(rolling)
    values = rng.normal(1e4, 50, 300)
    values[rng.choice(300, 15, replace=False)] = np.nan
    raw = pd.Series(values)
    expected = raw.rolling(rolling).mean().iloc[rolling - 1:].fillna(raw.mean()).to_numpy()
    np.testing.assert_allclose(rolling_series(values, rolling), expected, rtol=1e-12)
