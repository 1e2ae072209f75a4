import statistics

import numpy as np
import pytest

from batchpredict.errors import JobError
from batchpredict.scoring import anomaly
from batchpredict.scoring.anomaly import assess, point_stds, std_mode, verdicts
from batchpredict.status import Status


@pytest.mark.parametrize("observed, anomaly, severity", [
    (100.0, False, "normal"), (103.9, False, "normal"), (104.1, True, "warning"), (95.9, True, "warning"),
    (108.1, True, "critical"), (91.9, True, "critical"),
])
def test_observed_is_compared_with_the_bands(observed, anomaly, severity):
    lowers, uppers, flagged, level = assess(observed, 100.0, 2.0, (2, 4))
    assert lowers == (96.0, 92.0) and uppers == (104.0, 108.0)
    assert flagged is anomaly and level.value == severity


@pytest.mark.parametrize("std, predicted, message", [
    (1e308, 5.0, "std 1e+308: its ±2σ band around the prediction 5 is not finite"),  # 2σ overflows
    (3e307, -1e308, "std 3e+307: its ±4σ band around the prediction -1e+308 is not finite"),  # 4σ below
])
def test_a_band_past_the_largest_float_fails_the_job(std, predicted, message):
    with pytest.raises(JobError) as caught:
        verdicts(np.array([1.0, 2.0]), np.array([1.0, predicted]), np.array([1.0, std]), (2, 4))
    assert caught.value.status is Status.ERROR and str(caught.value) == message


@pytest.mark.parametrize("text, mode", [("store", ("store", 0)), ("rolling:288", ("rolling", 288)),
                                        ("mad:2", ("mad", 2))])
def test_std_modes(text, mode):
    assert std_mode(text) == mode


@pytest.mark.parametrize("text", ["", "rolling", "rolling:1", "mad:x", "store:3", "ewm:5", "rolling:-4"])
def test_bad_std_modes_say_what_is_accepted(text):
    with pytest.raises(ValueError, match="store, rolling:N or mad:N"):
        std_mode(text)


@pytest.mark.parametrize("kind", ["rolling", "mad"])
def test_each_point_takes_the_scale_of_the_n_residuals_before_it(kind, monkeypatch):
    monkeypatch.setattr(anomaly, "_BLOCK", 3)  # several blocks, so their seams are checked too
    residuals = np.random.default_rng(7).normal(0, 3, 30)
    residuals[[12, 13]] = [40.0, -35.0]  # outliers, which the MAD shrugs off and the std does not
    stds, rolled = point_stds(residuals, 9.5, kind, 5)
    assert stds[:5].tolist() == [9.5] * 5 and not rolled[:5].any()  # fewer than 5 before them
    for i in range(5, 30):
        before = residuals[i - 5:i].tolist()
        by_hand = (statistics.stdev(before) if kind == "rolling"
                   else 1.4826 * statistics.median(abs(r) for r in before))
        assert stds[i] == pytest.approx(by_hand, rel=1e-12) and rolled[i]


@pytest.mark.parametrize("kind", ["rolling", "mad"])
def test_the_scales_are_the_same_bits_whatever_the_block(kind, monkeypatch):
    """A night's 1,644 residuals of rolling:96, as one block and as blocks of 1, 128 and 129 windows."""
    residuals = np.random.default_rng(5).normal(0, 3, 1644) * np.repeat([1.0, 1e4, 1e-3, 7.0], 411)
    found = []
    for block in (10**6, 1, 128, 129):
        monkeypatch.setattr(anomaly, "_BLOCK", block)
        found.append(point_stds(residuals, 2.0, kind, 96)[0].tobytes())
    assert len(set(found)) == 1


def test_residuals_that_do_not_vary_leave_the_store_std():
    stds, rolled = point_stds(np.r_[np.full(6, 2.0), 5.0, 1.0], 1.5, "rolling", 3)
    assert stds.tolist() == [1.5] * 7 + [pytest.approx(np.std([2.0, 2.0, 5.0], ddof=1))]
    assert rolled.tolist() == [False] * 7 + [True]
    assert not point_stds(np.zeros(5), 1.5, "store", 0)[1].any()
