"""evaluation/baseline.py: the rolling z-score over the points a results CSV scored."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest
from conftest import wide_table

from batchpredict.commands.evaluation.baseline import zscore_points
from batchpredict.errors import UsageError
from batchpredict.io.events import sigma
from batchpredict.io.table import read_table
from batchpredict.job import Params


def test_each_point_is_compared_with_the_smoothed_values_before_it(tmp_path, caplog):
    raw = [4.0, 2.0, 6.0, np.nan, 8.0, 1.0, 30.0]
    table = read_table(str(wide_table(tmp_path / "t.csv", {"h": raw, "flat": [5] * 7})))
    # rolling 2: t001..t006 get 3, 4, then twice the raw mean 51/6 = 8.5 for the means over the NaN, 4.5, 15.5
    points = pd.DataFrame({"ip": ["h", "h", "h", "flat", "flat"], "timestamp": ["t006", "t005", "t002", "t005", "t006"]})
    with caplog.at_level(logging.WARNING, "batchpredict"):
        frame = zscore_points(points, table, Params(rolling=2, window=3, sigmas=(2, 4)))
    assert frame["observed"].tolist()[:3] == [15.5, 4.5, 4.0]
    before = [8.5, 8.5, 4.5]  # t003..t005, the 3 before t006
    assert frame["predicted"].iloc[0] == pytest.approx(np.mean(before))
    assert frame["std"].iloc[0] == pytest.approx(np.std(before))
    assert sigma(frame)[0] == pytest.approx((15.5 - np.mean(before)) / np.std(before))
    assert frame["severity"].iloc[0] == "critical"
    assert np.isnan(frame["predicted"].iloc[2]) and pd.isna(frame["severity"].iloc[2])  # t002 has 1 before it
    assert "1 points have fewer than 3 smoothed values before them" in caplog.text
    # a flat series has std 0: on its mean a z of 0, never flagged
    assert sigma(frame)[3:].tolist() == [0.0, 0.0] and frame["severity"].iloc[3] == "normal"


def test_a_table_that_is_not_the_one_predicted_is_a_usage_error(tmp_path):
    table = read_table(str(wide_table(tmp_path / "t.csv", {"h": [1, 2, 3, 4]})))
    with pytest.raises(UsageError, match="no IP x"):
        zscore_points(pd.DataFrame({"ip": ["x"], "timestamp": ["t003"]}), table, Params(rolling=1, window=2))
    with pytest.raises(UsageError, match="no timestamp 't000' for IP h.*same --rolling"):
        zscore_points(pd.DataFrame({"ip": ["h"], "timestamp": ["t000"]}), table, Params(rolling=2, window=2))
