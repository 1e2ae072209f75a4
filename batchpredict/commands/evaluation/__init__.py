"""Flags measured against labelled anomaly windows (`batchpredict evaluate`, docs/evaluation.md).

The modules import pandas; this file does not, so the command line can name the baselines cheaply.
"""
from __future__ import annotations

BASELINES = ("zscore",)  # detectors `evaluate --baseline` scores beside the model
FLAGS = ("anomaly", "alert")  # what `evaluate --flags` judges: the seed's flags, or the alerting stage's
