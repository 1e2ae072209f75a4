"""logs.py: text or one JSON object a line on the stream given, and the final line that -q keeps."""
from __future__ import annotations

import io
import json
import logging
import re
from datetime import datetime

import pytest

from batchpredict import logs


@pytest.fixture
def stream():
    """The stream logs.configure sends to; the logging set-up as it was, afterwards."""
    root, final = logging.getLogger(), logs.final
    saved = (root.handlers[:], root.level, final.handlers[:], final.level, final.propagate)
    yield io.StringIO()
    root.handlers[:], final.handlers[:] = saved[0], saved[2]
    root.setLevel(saved[1])
    final.setLevel(saved[3])
    final.propagate = saved[4]


def test_text_lines_have_the_time_the_level_and_the_message(stream):
    logs.configure(logging.INFO, "text", stream)
    logging.getLogger("batchpredict.x").info("scored %d IPs", 3)
    logging.getLogger("batchpredict.x").debug("not at INFO")
    (line,) = stream.getvalue().splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO scored 3 IPs", line)


def test_json_lines_are_one_object_each_with_the_fields_given_as_keys(stream):
    logs.configure(logging.DEBUG, "json", stream)
    log = logging.getLogger("batchpredict.y")
    log.warning("slow job", extra={"fields": {"ip": "10.0.0.1", "ms": 812.5, "when": datetime(2026, 1, 1)}})
    try:
        1 / 0
    except ZeroDivisionError:
        log.exception("failed")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert {k: first[k] for k in ("level", "logger", "message", "ip", "ms", "when")} == {
        "level": "WARNING", "logger": "batchpredict.y", "message": "slow job", "ip": "10.0.0.1", "ms": 812.5,
        "when": "2026-01-01 00:00:00"}  # a value JSON has no type for, as its text
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", first["time"])  # UTC, milliseconds
    assert second["message"] == "failed" and "ZeroDivisionError: division by zero" in second["exception"]


@pytest.mark.parametrize("fmt", logs.FORMATS)
def test_the_final_line_shows_at_any_level_once_and_bare_in_text(stream, fmt):
    logs.configure(logging.ERROR, fmt, stream)  # -q
    logging.getLogger("batchpredict.z").warning("hidden")
    logs.final.info("12 IPs: 12 ok")
    (line,) = stream.getvalue().splitlines()  # not twice: the final logger does not propagate to the root's
    assert (line if fmt == "text" else json.loads(line)["message"]) == "12 IPs: 12 ok"


def test_configuring_again_replaces_the_handlers(stream):
    logs.configure(logging.INFO, "text", stream)
    logs.configure(logging.INFO, "json", stream)
    logging.getLogger("batchpredict").info("once")
    (line,) = stream.getvalue().splitlines()
    assert json.loads(line)["message"] == "once"


@pytest.mark.parametrize("command", [["store", "seal", "--models"], ["store", "check", "--models"],
                                     ["predict", "--data", "missing.csv", "--out", "{folder}/o.csv", "--models"]])
def test_a_path_with_a_line_break_is_one_line_on_stderr(tmp_path, command):
    """`--models 'a<newline>b'`: the fatal error was two lines, 'batchpredict: model store not found: .../a' and
    'b'; a log line is one record and an exit 2 one line (docs/design.md §5)."""
    from conftest import run_cli

    store = tmp_path / "new\nline\r"
    done = run_cli(*[part.format(folder=tmp_path) for part in command], store)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"batchpredict: model store not found: {tmp_path}/new\\nline\\r\n"
