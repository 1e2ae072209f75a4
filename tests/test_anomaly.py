import pytest

from batchpredict.anomaly import assess


@pytest.mark.parametrize("observed, anomaly, severity", [
    (100.0, False, "normal"), (103.9, False, "normal"), (104.1, True, "warning"), (95.9, True, "warning"),
    (108.1, True, "critical"), (91.9, True, "critical"),
])
def test_observed_is_compared_with_the_bands(observed, anomaly, severity):
    lowers, uppers, flagged, level = assess(observed, 100.0, 2.0, (2, 4))
    assert lowers == (96.0, 92.0) and uppers == (104.0, 108.0)
    assert flagged is anomaly and level.value == severity
