import numpy as np
import pandas as pd
import pytest

from batchpredict.errors import JobError
from batchpredict.scoring.features import rolling_series, scored_windows, windowed


def last_point(values, rolling, window):
    """(inputs, observed) of the series' last point: what a run scoring only that point (--points 1) is given."""
    positions, inputs, observed = scored_windows(values, rolling, window, len(values) - 1)
    assert positions.tolist() == [len(values) - 1]
    return inputs[0], float(observed[0])


def test_original_script_indexing_with_exactly_window_plus_rolling_values():
    values = np.arange(25, dtype=float)
    inputs, observed = last_point(values, rolling=5, window=20)
    smoothed = [values[i - 4:i + 1].mean() for i in range(4, 25)]  # s.rolling(5).mean()[4:]
    assert np.allclose(inputs, smoothed[0:20])
    assert observed == smoothed[20]


def test_longer_series_uses_the_last_window():
    values = np.arange(40, dtype=float)
    inputs, observed = last_point(values, rolling=5, window=20)
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
        scored_windows(values, rolling=5, window=20, start=len(values) - 1)
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


def one_point_runs(values, rolling, window, start):
    """What the last point of the series cut off at each point from `start` on is given: the reference."""
    found = []
    for end in range(start, len(values)):
        try:
            found.append((end, *last_point(values[:end + 1], rolling, window)))
        except JobError:
            continue
    return found


@pytest.mark.parametrize("rolling, window, start", [(5, 20, 28), (3, 4, 0), (1, 6, 10), (5, 20, 39)])
def test_every_point_sees_what_a_run_cut_off_there_sees(rolling, window, start):
    rng = np.random.default_rng(window)
    values = rng.normal(100, 10, 40)
    values[[1, 2, 17, 36]] = np.nan  # the fill is the mean up to each cut, not the whole series' mean
    positions, inputs, observed = scored_windows(values, rolling, window, start)
    expected = one_point_runs(values, rolling, window, start)
    assert positions.tolist() == [end for end, _, _ in expected] and len(expected) > 0
    for row, (_, window_values, seen) in enumerate(expected):
        np.testing.assert_allclose(inputs[row], window_values, rtol=1e-13)
        assert observed[row] == pytest.approx(seen, rel=1e-13)


def test_points_without_a_full_window_or_any_number_before_them_are_not_scored():
    values = np.r_[np.full(8, np.nan), np.arange(10.0)]
    positions, _, observed = scored_windows(values, rolling=2, window=3, start=0)
    # Smoothed point j needs j >= 3 (index j + 1); indices 4..7 have no number up to them yet.
    assert positions.tolist() == list(range(8, 18))
    assert observed[0] == 0.0  # the window (nan, 0): filled with the mean up to here, 0
    assert scored_windows(np.arange(30.0), rolling=5, window=20, start=0)[0].tolist() == list(range(24, 30))
    with pytest.raises(JobError, match="need 21"):
        scored_windows(np.arange(24.0), rolling=5, window=20, start=0)


def test_the_windows_of_the_later_points_alone_are_those_of_every_window_bit_for_bit():
    """windowed().inputs(at): only the windows the model is asked about (those the history holds no
    prediction of), the same bits as every window's from the `at`-th on."""
    rng = np.random.default_rng(3)
    values = rng.normal(100, 10, 300)
    values[[1, 2, 17, 36, 250]] = np.nan
    found = windowed(values, 5, 20, 10, before=(1234.5, 12))
    every = found.inputs()
    assert every.shape == (len(found.positions), 20)
    for at in (0, 1, 200, len(found.positions) - 1, len(found.positions)):
        assert found.inputs(at).tobytes() == every[at:].tobytes()
    positions, inputs, observed = scored_windows(values, 5, 20, 10, before=(1234.5, 12))
    assert positions.tolist() == found.positions.tolist() and inputs.tobytes() == every.tobytes()
    assert observed.tobytes() == found.observed.tobytes()


def test_the_value_rules_mean_over_the_rolling_count_is_observed_itself():
    rng = np.random.default_rng(3)
    values = rng.normal(10, 2, 300)
    values[[40, 41, 200]] = np.nan
    found = windowed(values, 5, 20, 0)
    assert found.smoothed(5) is found.observed
    assert np.array_equal(found.smoothed(5), found.observed)


@pytest.mark.parametrize("count", [1, 2, 25, 60])
def test_the_value_rules_mean_over_another_count_is_pandas_rolling_mean_filled_as_observed(count):
    """Where the `count` values hold a NaN or begin before the series, the point's fill: the mean of the numbers
    up to it, as for the rolling mean."""
    rng = np.random.default_rng(count)
    values = rng.normal(10, 2, 300)
    values[[100, 101, 250]] = np.nan
    found = windowed(values, 5, 20, 0)
    series = pd.Series(values)
    expected = series.rolling(count).mean().to_numpy()[found.positions]
    fills = series.expanding().mean().to_numpy()[found.positions]  # pandas' mean skips NaN
    expected = np.where(np.isnan(expected), fills, expected)
    assert found.smoothed(count) == pytest.approx(expected, rel=1e-12)
