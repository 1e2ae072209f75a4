"""docs/design.md §3 steps 7-8: the bands around the prediction and the verdict."""
from __future__ import annotations

from .job import Severity


def assess(observed: float, predicted: float, std: float, sigmas: tuple[float, float]
           ) -> tuple[tuple[float, ...], tuple[float, ...], bool, Severity]:
    """(lowers, uppers, anomaly, severity). The observed value is compared, not the prediction:
    the original script's `predicted < lower` could never be true."""
    lowers = tuple(predicted - k * std for k in sigmas)
    uppers = tuple(predicted + k * std for k in sigmas)
    outside = [observed < lo or observed > hi for lo, hi in zip(lowers, uppers)]
    severity = Severity.CRITICAL if outside[1] else Severity.WARNING if outside[0] else Severity.NORMAL
    return lowers, uppers, outside[0], severity
