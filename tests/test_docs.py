"""Every relative link in README.md and docs/*.md resolves: the file exists and, for `#anchor`, so does
the heading, by GitHub's rules for heading ids."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def slug(heading: str) -> str:
    """GitHub's id for a heading: its text lower-cased, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"[`*_]|<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading id of a Markdown file; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of a Markdown file that lead nowhere, or out of `root`, each with the reason."""
    text = INLINE_CODE.sub("", FENCE.sub("", path.read_text()))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif not linked.is_relative_to(root):
            broken.append(f"{target}: leads out of the repository")
        elif anchor and linked.suffix == ".md" and unquote(anchor) not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(root)}")
    return broken


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document):
    assert broken_links(document) == []


def test_the_docs_the_readme_promises_exist():
    assert {p.name for p in DOCUMENTS} >= {"README.md", "design.md", "operators.md", "models.md", "performance.md",
                                           "reliability.md"}


def test_the_checker_finds_a_missing_file_a_missing_heading_and_a_way_out(tmp_path):
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("# Exit codes, and `signals`\n## Exit codes, and signals\n")
    (tmp_path / "elsewhere.md").write_text("")
    page = root / "README.md"
    page.write_text("[ok](docs/a.md#exit-codes-and-signals) [again](docs/a.md#exit-codes-and-signals-1)\n"
                    "[gone](docs/b.md) [no heading](docs/a.md#exit-code) [out](../elsewhere.md)\n"
                    "[web](https://example.org/x) `[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n")
    assert broken_links(page, root) == [f"docs/b.md: no file {root / 'docs' / 'b.md'}",
                                        "docs/a.md#exit-code: no heading #exit-code in docs/a.md",
                                        "../elsewhere.md: leads out of the repository"]


@pytest.mark.parametrize("heading, expected", [
    ("3. The algorithm, per IP", "3-the-algorithm-per-ip"),
    ("`store check`", "store-check"),
    ("Cost per job, by format", "cost-per-job-by-format"),
    ("Exit codes: 0, 1 & 2", "exit-codes-0-1--2"),
])
def test_slugs_are_githubs(heading, expected):
    assert slug(heading) == expected
