"""Logging for operators: stderr, text or one JSON object a line, and a final line `-q` keeps."""
from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO

from .errors import one_line

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(message)s"

# The run's last word (summary or fatal error): shown even with --quiet, as bare text or JSON.
final = logging.getLogger("batchpredict.final")


class JsonFormatter(logging.Formatter):
    """One JSON object a line; structured values passed as `extra={"fields": {...}}` become keys."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
                 "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        entry.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """The text format, one line a record (errors.one_line): a fatal error is one line on stderr (docs/design.md
    §5), and every log line one record."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging.Formatter's name
        return one_line(super().formatMessage(record))


def configure(level: int, fmt: str = "text", stream: IO[str] | None = None) -> None:
    """Send every log record to `stream` (stderr); `final` bypasses the level so -q keeps it."""
    stream = stream or sys.stderr
    json_format = fmt == "json"
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if json_format else TextFormatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    final_handler = logging.StreamHandler(stream)
    final_handler.setFormatter(JsonFormatter() if json_format else TextFormatter("%(message)s"))
    final.handlers[:] = [final_handler]
    final.setLevel(logging.INFO)
    final.propagate = False
