"""The alerting stage's rules: what raised an alert (`alert_source`), as the codes its columns carry; and the
time their spans are given in (durations, the reference step), read without numpy for the command line."""
from __future__ import annotations

import math
import re

VALUE_RULES = ("extreme", "quiet", "seasonal")  # the ensemble's rules on the observed values
RULES = ("", "likelihood", *VALUE_RULES, "severity")

# The step the rules' defaults were chosen at: 5-minute buckets (docs/evaluation.md). A bare number of an
# --alert span counts these, and a series whose labels are not times is taken to have it.
REFERENCE = 300.0
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhdw]?)")


def parse_duration(text: str, bare: float | None = None) -> float:
    """Seconds, from `90s`, `15m`, `8h`, `2d` or `1w`; a number without a unit counts `bare` seconds (or is
    refused where None). ValueError where it is no positive finite duration."""
    found = _DURATION.fullmatch(text.strip().lower())
    if not found or (not found[2] and bare is None):
        raise ValueError(f"not a duration (such as 90s, 15m, 8h, 2d or 1w): {text!r}")
    seconds = float(found[1]) * (UNITS[found[2]] if found[2] else bare or 0.0)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"a duration must be more than 0, not {text!r}")
    return seconds


def duration(seconds: float) -> str:
    """A duration as parse_duration reads it, in the largest unit (below a week) that holds it whole."""
    for unit in ("d", "h", "m", "s"):
        count = seconds / UNITS[unit]
        if count >= 1 and count == int(count):
            return f"{int(count)}{unit}"
    return f"{seconds:g}s"
