"""status.py: which statuses fail a run (docs/design.md §5's exit codes 0 and 1), and a severity's order."""
from __future__ import annotations

import re
from pathlib import Path

from batchpredict.result import SEVERITIES
from batchpredict.status import Severity, Status

DESIGN = Path(__file__).parents[1] / "docs" / "design.md"


def statuses_of_exit_code(code: str) -> set[str]:
    section = DESIGN.read_text().split("## 5.")[1].split("\n## ")[0]
    (row,) = re.findall(rf"^\| {code} \| (.*) \|$", section, re.MULTILINE)
    return set(re.findall(r"`(\w+)`", row))


def test_a_failed_status_makes_the_run_exit_1_the_others_are_answers():
    failed, answers = statuses_of_exit_code("1"), statuses_of_exit_code("0")
    assert failed | answers == {s.value for s in Status} and not failed & answers
    assert {s.value for s in Status if s.failed} == failed


def test_statuses_and_severities_are_their_text():
    assert Status("memory_exceeded") is Status.MEMORY_EXCEEDED and Status.TIMEOUT == "timeout"
    assert [s.value for s in SEVERITIES] == ["normal", "warning", "critical"] == [s.value for s in Severity]
