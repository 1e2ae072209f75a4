"""The alerting stage on synthetic residuals: onsets only, a floor under the scale, causality, the fallback."""
from __future__ import annotations

import math

import numpy as np
import pytest

from batchpredict.scoring import alerting
from batchpredict.scoring.alerting import Method, alerts, onsets, parse

DEFAULT = parse("likelihood")
HISTORY = DEFAULT.history()


def noise(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 1.0, n)


def run(residuals: np.ndarray, method: Method = DEFAULT, std: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return alerts(residuals, np.abs(residuals) > 4 * std, std, method)


def test_the_default_and_its_parameters():
    assert DEFAULT.spec() == "likelihood:window=576,average=3,centre=288,rest=96,threshold=0.35,floor=0.5"
    assert parse(DEFAULT.spec()) == DEFAULT
    assert parse("none") is None
    assert parse("likelihood:rest=12,threshold=0.7") == Method("likelihood", rest=12, threshold=0.7)
    assert parse("severity:rest=3").history() == 3
    assert HISTORY == 288 + 576 + 96


@pytest.mark.parametrize("text", ["", "zscore", "none:1", "likelihood:window=0", "likelihood:window=2.5",
                                  "likelihood:threshold=1.5", "likelihood:threshold=nan", "likelihood:bogus=1",
                                  "severity:window=3", "likelihood:rest"])
def test_bad_methods_say_what_is_accepted(text):
    with pytest.raises(ValueError, match="--alert"):
        parse(text)


def test_onsets_are_the_first_trigger_of_each_burst():
    trigger = np.array([0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 0, 0], dtype=bool)
    assert onsets(trigger, 3).nonzero()[0].tolist() == [1, 8]     # 4 is 2 after 2: the same burst
    assert onsets(trigger, 1).nonzero()[0].tolist() == [1, 4, 8]
    # Two series end to end: the second's first trigger is an onset whatever the first did.
    first = np.repeat([0, 6], 6)
    assert onsets(trigger, 3, first).nonzero()[0].tolist() == [1, 8]
    assert onsets(np.r_[trigger[:6], [1, 0, 0, 0, 0, 0]].astype(bool), 3, first).nonzero()[0].tolist() == [1, 6]


def test_a_level_shift_alerts_once_at_its_onset():
    residuals = noise(4000)
    residuals[3000:] += 12.0  # the model never learns the new level: every later residual is off
    alert, score, judged = run(residuals)
    assert judged[600:].all()
    (onset,) = alert.nonzero()[0].tolist()  # within the short-term mean of its first point
    assert 3000 <= onset < 3000 + DEFAULT.average
    assert score[onset] >= 0.5 and np.nanmax(score[3600:]) < 0.5  # the re-centring absorbed the new level


def test_a_spike_alerts_once_and_the_noise_around_it_never():
    """One point alone must lift the short-term mean of 3 past 3.4 stds of |noise| (0.8 +- 0.6): ~9."""
    residuals = noise(4000, seed=1)
    residuals[3500] += 12.0
    alert, score, _ = run(residuals)
    assert alert.nonzero()[0].tolist() == [3500]
    assert 0.0 <= np.nanmin(score) and np.nanmax(score) <= 1.0


def test_the_floor_keeps_a_flat_stretch_from_alerting_on_a_blip():
    """A series that goes flat (residuals all 0 for 2,500 points) then moves by 0.3 of its usual std: with
    no floor under the scale any blip is infinitely many stds; the floor (half the store's std) keeps it
    quiet, while a real move (8 stds for 3 points) after the same flat stretch still alerts."""
    residuals = noise(5000, seed=2)
    residuals[2000:] = 0.0
    residuals[4600:4606] = 0.3
    assert not run(residuals)[0].any()
    assert run(residuals, Method("likelihood", floor=1e-9))[0].nonzero()[0].tolist() == [4600]
    residuals[4800:4803] = 8.0
    assert run(residuals)[0].nonzero()[0].tolist() == [4800]


def test_a_point_depends_only_on_the_history_before_it():
    """The same residuals computed from any start at least `history()` points earlier give the same alert
    and score: what makes --points and --since agree."""
    residuals = noise(6000, seed=3)
    residuals[[3300, 4100, 5900]] += [25.0, 40.0, 60.0]
    residuals[4500:4800] += 6.0
    whole = run(residuals)
    for start in (0, 17, 1111):
        part = run(residuals[start:])
        keep = slice(HISTORY, None)
        assert np.array_equal(part[0][keep], whole[0][start:][keep])
        np.testing.assert_allclose(part[1][keep], whole[1][start:][keep], rtol=1e-9, atol=1e-12)
    assert whole[0].sum() >= 3


def test_too_little_history_falls_back_to_onsets_of_critical_points():
    residuals = noise(300, seed=4)
    residuals[[100, 101, 250]] = [9.0, 9.5, -8.0]
    alert, score, judged = run(residuals)
    short = DEFAULT.window // 4
    assert not judged[:short].any() and judged[short:].all()
    assert alert[:short].nonzero()[0].tolist() == [100, 101][:1]  # 101 is the same burst
    assert np.isnan(score[:short]).all() and not np.isnan(score[short:]).any()


def test_severity_alerts_on_the_onset_of_each_critical_burst():
    residuals = np.zeros(40)
    residuals[[5, 6, 7, 20, 30]] = 10.0
    alert, score, judged = run(residuals, parse("severity:rest=5"))
    assert alert.nonzero()[0].tolist() == [5, 20, 30] and not judged.any() and np.isnan(score).all()


def test_the_score_is_numentas_log_likelihood():
    z = np.array([-3.0, 0.0, 4.264890794, 6.361340902, 50.0])  # tails of 1e-5 and 1e-10 in the middle
    expected = [-math.log10(0.5 * math.erfc(v / math.sqrt(2)) + 1e-10) / 10 for v in z[:2]]
    got = alerting._score(z)
    np.testing.assert_allclose(got[:2], expected, rtol=1e-12)
    assert got[2] == pytest.approx(0.5, abs=1e-6) and got[3] == pytest.approx(-math.log10(2e-10) / 10, abs=1e-6)
    assert got[4] == 1.0
