"""The alerting stage's rules: what raised an alert (`alert_source`), as the codes its columns carry."""
from __future__ import annotations

VALUE_RULES = ("extreme", "quiet", "seasonal")  # the ensemble's rules on the observed values
RULES = ("", "likelihood", *VALUE_RULES, "severity")
