"""The last run as Prometheus text, for node_exporter's textfile collector (how cron jobs are watched)."""
from __future__ import annotations

import logging
import os
import time

from prometheus_client import CollectorRegistry, Gauge, generate_latest, write_to_textfile
from prometheus_client.parser import text_string_to_metric_families

from .errors import BatchPredictError, writing
from .io.files import special
from .result import Severity, Status

log = logging.getLogger("batchpredict")

PREFIX = "batchpredict"
LAST_SUCCESS = f"{PREFIX}_last_success_timestamp_seconds"


def render(summary: dict | None, exit_code: int, started: float, finished: float, *,
           last_success: float | None = None) -> str:
    """The text of collect's metrics."""
    return generate_latest(collect(summary, exit_code, started, finished, last_success=last_success)).decode()


def collect(summary: dict | None, exit_code: int, started: float, finished: float, *,
            last_success: float | None = None) -> CollectorRegistry:
    """Metrics of one run; `summary` is None when the run stopped before its output (exit 2, 74, 75, signal)."""
    registry = CollectorRegistry()

    def gauge(name: str, doc: str, value: float | None) -> None:
        if value is not None:  # an unset Gauge would still say 0
            Gauge(f"{PREFIX}_{name}", doc, registry=registry).set(value)

    success = exit_code == 0
    if success:
        last_success = finished
    gauge("last_run_timestamp_seconds", "When the last run ended (Unix time).", finished)
    gauge("last_run_duration_seconds", "Wall time of the last run.", finished - started)
    gauge("last_run_exit_code",
          "Exit code of the last run (0 ok, 1 some jobs failed, 2 usage, 74 disk error, 75 locked, 128+N signal).",
          exit_code)
    gauge("last_run_success", "1 when the last run exited 0, else 0.", int(success))
    gauge("last_success_timestamp_seconds", "When a run last exited 0 (Unix time).", last_success)
    if summary is None:
        return registry
    ips = Gauge(f"{PREFIX}_ips", "IPs of the last run per row status.", ["status"], registry=registry)
    for status in Status:
        ips.labels(status=status.value).set(summary["status"].get(status.value, 0))
    anomalies = Gauge(f"{PREFIX}_anomalies", "Anomalous points (rows) of the last run per severity.", ["severity"],
                      registry=registry)
    events = Gauge(f"{PREFIX}_events", "Alert events (runs of flagged points of one IP) of the last run per peak "
                                       "severity.", ["severity"], registry=registry)
    for severity in (Severity.WARNING, Severity.CRITICAL):
        anomalies.labels(severity=severity.value).set(summary["severity"].get(severity.value, 0))
        events.labels(severity=severity.value).set(summary.get("events", {}).get(severity.value, 0))
    gauge("alerts", "Alerts of the last run: points where the alerting stage would page a person (--alert).",
          summary.get("alerts"))
    gauge("rows", "Rows of the last run's CSV: one per scored point, or one per IP without any.", summary.get("rows"))
    gauge("skipped_ips", "IPs of the table with no point after --since (each one insufficient_data row).",
          summary.get("skipped"))
    gauge("jobs_per_second", "Worker jobs per second of wall time in the last run.", summary["jobs_per_s"] or 0)
    gauge("jobs_run", "Worker jobs the last run executed (resumed ones excluded).", summary["jobs_run"])
    gauge("worker_peak_rss_bytes", "Peak resident memory of any worker in the last run.",
          _bytes(summary.get("worker_peak_rss_mib")))
    gauge("coordinator_peak_rss_bytes", "Peak resident memory of the coordinator process.",
          _bytes(summary.get("coordinator_peak_rss_mib")))
    return registry


def _bytes(mib: float | None) -> float | None:
    return None if mib is None else mib * 2**20


def previous_success(path: str) -> float | None:
    """The last success time recorded in an earlier metrics file, so a failed run does not erase it."""
    try:
        with open(path) as fh:
            text = fh.read()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == LAST_SUCCESS:
                    return sample.value
    except (OSError, ValueError):
        pass
    return None


def record(path: str, summary: dict | None, exit_code: int, started: float) -> None:
    """write_metrics, or one error line where the file cannot be written: the run's exit code and message
    stand, as they speak of its output (monitoring sees the file's timestamps go stale)."""
    try:
        write_metrics(path, summary, exit_code, started)
    except BatchPredictError as exc:
        log.error("%s; the exit code is the run's own", exc)


def write_metrics(path: str, summary: dict | None, exit_code: int, started: float) -> None:
    """Replace `path` atomically (a temporary file beside it, renamed): the textfile collector never reads half
    a file, and never the temporary one, whose name does not end in .prom."""
    # A FIFO would block the run after its output (reading the last success), /dev/zero never end, and either,
    # a device above all, must not be replaced by the file as root.
    if special(path):
        raise BatchPredictError(f"cannot write metrics file {path}: not a regular file (a FIFO or a device?)")
    registry = collect(summary, exit_code, started, time.time(), last_success=previous_success(path))
    try:
        with writing(path):  # a full disk is exit 74, as for the output
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            write_to_textfile(path, registry)
    except OSError as exc:
        raise BatchPredictError(f"cannot write metrics file {path}: {exc.strerror or exc}") from None
