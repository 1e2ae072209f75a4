"""batchpredict: nightly per-IP LSTM anomaly scoring, one isolated worker process per job."""
from .coordinator import RunOptions, predict_table
from .errors import BatchPredictError, Interrupted, JobError, LockHeld, UsageError
from .job import Job, Outcome, Params, Result, Severity, Status
from .metrics import write_metrics
from .report import build_report

__all__ = ["predict_table", "RunOptions", "Params", "Job", "Outcome", "Result", "Status", "Severity",
           "BatchPredictError", "UsageError", "LockHeld", "Interrupted", "JobError", "build_report", "write_metrics"]
