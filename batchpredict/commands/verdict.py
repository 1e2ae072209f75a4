"""A command's last word: the final line, its fields for JSON logs, and the exit code (docs/design.md §5)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class Verdict:
    line: str
    fields: dict = field(default_factory=dict)
    code: int = 0
