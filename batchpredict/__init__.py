"""batchpredict: nightly per-IP LSTM anomaly scoring, one isolated worker process per job.

The public API is imported on first use: a worker process imports `batchpredict.scoring.prediction`, and
with it this file, and must not pay for pandas, matplotlib or prometheus_client it never uses.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_PUBLIC = {
    "predict_table": "commands.predict", "build_report": "commands.report", "write_metrics": "metrics",
    "RunOptions": "job", "Params": "job", "Job": "job", "Outcome": "result", "Result": "result", "Point": "result",
    "Status": "result", "Severity": "result", "BatchPredictError": "errors", "UsageError": "errors",
    "LockHeld": "errors", "Interrupted": "errors", "JobError": "errors", "Unsupported": "errors",
}
__all__ = list(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'batchpredict' has no attribute {name!r}")
    value = getattr(import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
