"""The documents hold true of the repository.

- Every relative link in README.md and docs/*.md resolves (the file exists and, for `#anchor`, so does the
  heading, by GitHub's rules for heading ids), and nothing points out of the repository.
- Every file path and module the documents name exists; design.md §6's module table lists every module.
- The commands in their code blocks parse with the real command line; the README's options table names
  real options, with the parser's defaults and choices.
- One nightly script, in docs/operators.md, and it does what the README recommends.
- **Figures in one place.** A figure quoted from a benchmark carries a marker naming its JSON key, right
  after it: `133.2<!--bench results.json runs.strict_k1.jobs_per_s .1f--> jobs/s`. The test renders the
  value from `benchmarks/<file>` with the stated format and fails when the text before the marker differs,
  or when the key does not exist. A figure with a unit (jobs/s, MiB, ms, s, a ratio like 73x ...) that
  carries no marker fails too, unless its paragraph or table says where it comes from instead, with
  `<!--figures: SOURCE-->` (a measurement outside the benchmark JSONs, with its date; or settings of the
  code). After `make bench` or `make bench-scale`, `python tests/test_docs.py --update` rewrites every
  marked number from the JSON; read the diff, and the prose around it, before committing.

Marker: `<!--bench FILE EXPRESSION FORMAT-->`. FILE is a file in benchmarks/. EXPRESSION is a dotted key
(`runs.csv.load_average.0`: list items by index) or arithmetic over keys and numbers (`total_s / 60`,
`runs.a.x - runs.b.x`, `ratios.strict_vs_seed >= 100`). FORMAT is a Python format spec (`.1f`, `,.0f`,
`+.1f`, `,d`), `eN` for N decimals in short scientific notation (`2.7e-4`), `s` for text, or `?YES/NO` for
a truth value (`?met/missed`).

This file imports the command line's parser, never TensorFlow.
"""
from __future__ import annotations

import argparse
import ast
import json
import operator
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BENCHMARKS = ROOT / "benchmarks"
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
FENCE_BLOCK = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def doc_id(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def without_fences(text: str) -> str:
    """The text with each fenced block blanked to spaces: positions and line numbers stay the text's."""
    return FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


# ---------------------------------------------------------------------------------------------- links

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


@pytest.mark.parametrize("document", DOCUMENTS, ids=doc_id)
def test_every_relative_link_resolves(document):
    assert broken_links(document) == []


def test_the_docs_the_readme_promises_exist():
    assert {p.name for p in DOCUMENTS} >= {"README.md", "design.md", "operators.md", "models.md", "performance.md",
                                           "reliability.md", "evaluation.md"}


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


@pytest.mark.parametrize("document", DOCUMENTS, ids=doc_id)
def test_nothing_points_out_of_the_repository(document):
    """A `../` path in the text (a link is checked above) must stay in the repository and exist."""
    text = LINK.sub("", document.read_text())
    outside = [found for found in re.findall(r"(?<![\w.])\.\./[\w./-]*", text)
               if not (document.parent / found).resolve().is_relative_to(ROOT)
               or not (document.parent / found).resolve().exists()]
    assert outside == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=doc_id)
def test_no_code_span_crosses_a_line(document):
    """Every check here reads `code spans` line by line; one broken over two lines would pair the wrong
    backticks (and GitHub shows it with a space)."""
    text = without_fences(document.read_text())
    odd = [number for number, line in enumerate(text.splitlines(), 1) if line.count("`") % 2]
    assert odd == []


# ------------------------------------------------------------------------------ files and modules named

# Modules by name, for `store.Store` in the docs; not those whose names are ordinary words there (`model.save()`).
MODULES = {path.stem: path for path in (ROOT / "batchpredict").rglob("*.py")
           if path.stem not in ("__init__", "model", "layers", "spec", "full", "lean")}
PACKAGES = {path.parent.name for path in (ROOT / "batchpredict").rglob("__init__.py")}
REPO_FILES = {path.name for folder in ("batchpredict", "tests", "scripts", "benchmarks", "examples", ".ci")
              for path in (ROOT / folder).rglob("*") if path.is_file()} | {"Makefile", "pyproject.toml"}
PATH_ROOTS = ("batchpredict/", "tests/", "scripts/", "benchmarks/", "docs/", "examples/", ".ci/")
# Files of NAB's own repository that docs/evaluation.md names.
NAB_FILES = {"tests/integration/scorer_test.py", "true_positive_test.py", "false_positive_test.py"}


def named_in_code_spans(document: Path) -> list[tuple[int, str]]:
    """Each `code span` of a document outside fenced blocks, with its line."""
    text = without_fences(document.read_text())
    return [(line_of(text, m.start()), m.group()[1:-1]) for m in INLINE_CODE.finditer(text)]


@pytest.mark.parametrize("document", DOCUMENTS, ids=doc_id)
def test_every_file_and_module_the_docs_name_exists(document):
    """`batchpredict/io/store.py`, `tests/io/test_store.py`, `store.py`, `store.Store`, `engine/` all exist."""
    missing = []
    for line, span in named_in_code_spans(document):
        for word in re.findall(r"[\w./-]+", span):
            word = word.rstrip(".")
            if word in NAB_FILES:
                continue
            if word.startswith(PATH_ROOTS):
                if not (ROOT / word.split("#")[0]).exists():
                    missing.append(f"line {line}: no {word}")
            elif word.endswith(".py") and "/" not in word:
                if word not in REPO_FILES:
                    missing.append(f"line {line}: no file {word}")
            elif re.fullmatch(r"\w+/", word) and word[:-1] in PACKAGES | {"warmup"}:
                pass
            elif (re.fullmatch(r"[a-z_]+\.[A-Za-z_]\w*", word) and word.split(".")[0] in MODULES
                  and word.split(".")[0] not in PACKAGES):  # scoring.engine is a package's module
                module, name = word.split(".")
                if name not in top_level_names(MODULES[module]):
                    missing.append(f"line {line}: {MODULES[module].relative_to(ROOT)} has no {name}")
        for old in ("coordinator.py", "worker.py", "export.py", "batchpredict/engine", "batchpredict/evaluation",
                    "tests/test_layers.py"):  # import-linter's contracts; tests/scoring/engine/ has its own
            if old in span:
                missing.append(f"line {line}: {old} is gone (the layout of design.md §6)")
    assert missing == []


def top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
    return names


def test_design_lists_every_module_and_the_contracts():
    """§6's module table names every module of batchpredict/ (a package counts as `name/`), and §6 names
    every import-linter contract of pyproject.toml."""
    design = (ROOT / "docs" / "design.md").read_text()
    section = design[design.index("## 6. Architecture"):design.index("## 7.")]
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    listed = set(re.findall(r"`([\w/]+?)(?:\.py|/)?`", table))
    modules = {str(path.relative_to(ROOT / "batchpredict").with_suffix("")).removesuffix("/__init__")
               for path in (ROOT / "batchpredict").rglob("*.py")}
    missing = {f"batchpredict/{m}" for m in modules if m not in listed and m.split("/")[-1] not in listed} - {
        "batchpredict/__init__"}
    assert missing == set(), "not in design.md §6's module table"


def test_design_states_each_contract_as_pyproject_holds_it():
    """§6's contract table says each import-linter contract of pyproject.toml entry by entry: a layers
    contract's layers in order, a forbidden one's source and forbidden modules."""
    design = (ROOT / "docs" / "design.md").read_text()
    section = design[design.index("## 6. Architecture"):design.index("## 7.")]
    rows = dict(re.findall(r"^\| ([^|`][^|]*?) \| (.+) \|$", section, re.MULTILINE))
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert contracts
    for contract in contracts:
        said = rows.get(contract["name"])
        assert said is not None, f"contract {contract['name']!r} not in design.md §6"
        if contract["type"] == "layers":
            layers = [re.sub(r"\s*\|\s*", " \\| ", layer) for layer in contract["layers"]]
            assert said == "; ".join(f"`{layer}`" for layer in layers), contract["name"]
        else:
            quoted = set(re.findall(r"`([\w.]+)`", said))
            named = {m.removeprefix("batchpredict.") for m in contract["source_modules"]}
            assert named | set(contract["forbidden_modules"]) == quoted, contract["name"]


# -------------------------------------------------------------------------------------- the command line

def cli_parser() -> argparse.ArgumentParser:
    from batchpredict.cli import build_parser

    return build_parser()


def subparser(parser: argparse.ArgumentParser, *names: str) -> argparse.ArgumentParser:
    for name in names:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


PREDICT_ARGS = ["--data", "t.csv", "--models", "m", "--out", "o.csv"]
SUBCOMMANDS = {"predict", "train", "report", "evaluate", "store"}


COMMAND = re.compile(r"^(?:\$ )?(?:\.venv/bin/)?(batchpredict|python3? -m batchpredict|make)\s+(.*)$")


def fenced_commands(document: Path) -> list[tuple[str, list[str]]]:
    """Each `batchpredict ...`, `python -m batchpredict ...` or `make ...` command of a document's code
    blocks, continuation lines joined, as (the line as written, its arguments after the program, with
    `make` first for make); `...` stands for predict's required options. Lines with `$` are shell."""
    commands = []
    for block in FENCE_BLOCK.finditer(document.read_text()):
        for line in block.group(2).replace("\\\n", " ").splitlines():
            found = COMMAND.match(line)
            if not found or "$" in found.group(2):
                continue
            words = shlex.split(found.group(2).replace("...", " ".join(PREDICT_ARGS)), comments=True)
            if found.group(1) == "make":
                commands.append((line, ["make", *words]))
            elif words and words[0] in SUBCOMMANDS and (words[0] != "store" or words[1:2] in (["check"], ["seal"])):
                commands.append((line, ["batchpredict", *words]))
    return commands


@pytest.mark.parametrize("document", DOCUMENTS, ids=doc_id)
def test_every_command_in_the_docs_parses(document, capsys):
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.MULTILINE))
    variables = set(re.findall(r"^(\w+)\s*\?=", makefile, re.MULTILINE)) | {"TESTS"}
    wrong = []
    for text, words in fenced_commands(document):
        if words[0] == "make":
            for word in words[1:]:
                name = word.split("=")[0]
                if not (name in variables if "=" in word else name in targets):
                    wrong.append(f"{text}: no {'variable' if '=' in word else 'target'} {name} in the Makefile")
            continue
        try:
            cli_parser().parse_args(words[1:])
        except SystemExit:
            wrong.append(f"{text}: {capsys.readouterr().err.strip().splitlines()[-1]}")
    assert wrong == []


def options_table(document: Path) -> list[tuple[str, str]]:
    """The rows (option cell, default cell) of the document's table headed `| option | default | ...`."""
    rows, inside = [], False
    for line in document.read_text().splitlines():
        # A cell's `\|` is a pipe inside it, not a border.
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))] if line.startswith("|") else []
        if cells[:2] == ["option", "default"]:
            inside = True
        elif inside and not cells:
            break
        elif inside and not set(cells[0]) <= set("-: "):
            rows.append((cells[0], cells[1]))
    return rows


def test_the_readmes_options_are_predicts():
    """Each option of the README's table exists; a default written as a value is the parser's; choices
    written `a\\|b` are the parser's where it has choices."""
    predict = subparser(cli_parser(), "predict")
    actions = predict._option_string_actions
    rows = options_table(ROOT / "README.md")
    assert len(rows) >= 10
    wrong = []
    for option_cell, default in rows:
        options = re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", option_cell)
        for option in options:
            if option not in actions:
                wrong.append(f"{option}: not an option of predict")
        if len(options) != 1 or options[0] not in actions:
            continue
        action = actions[options[0]]
        written = default.strip("`")
        if isinstance(action, (argparse._StoreTrueAction, argparse._CountAction)):
            if written:
                wrong.append(f"{options[0]} is a flag; its default cell should be empty, not {default!r}")
        elif re.fullmatch(r"[\w.,:-]+", written):
            parsed = predict.parse_args([*PREDICT_ARGS, options[0], written])
            if getattr(parsed, action.dest) != action.default:
                wrong.append(f"{options[0]}: the README says {written}, the parser's default is {action.default!r}")
        choices = re.search(r"`?--[\w-]+ ([\w]+(?:\\\|\w+)+)`?", option_cell)
        if choices and action.choices is not None and set(choices.group(1).split("\\|")) != set(action.choices):
            wrong.append(f"{options[0]}: the README lists {choices.group(1)}, the parser {list(action.choices)}")
    assert wrong == []


def test_the_readmes_statuses_are_the_codes():
    from batchpredict.result import Status

    readme = (ROOT / "README.md").read_text()
    listed = re.findall(r"^\| `(\w+)` \|", readme, re.MULTILINE)
    assert [s for s in listed if s in {x.value for x in Status}] == [s.value for s in Status]


def test_the_output_columns_in_design_are_the_codes():
    from batchpredict.io.output import columns

    design = (ROOT / "docs" / "design.md").read_text()
    section = design[design.index("## 4. Output"):design.index("## 5.")]
    block = FENCE_BLOCK.search(section).group(2)
    assert block.replace(",\n", ",").strip().split(",") == columns((2.0, 4.0))


# --------------------------------------------------------------------------------------- the nightly run

def nightly_scripts() -> list[tuple[Path, str]]:
    return [(document, block.group(2)) for document in DOCUMENTS
            for block in FENCE_BLOCK.finditer(document.read_text())
            if re.search(r"^#!/bin/(ba)?sh|\bcron\b.*\* \* \*", block.group(2), re.MULTILINE)]


def test_one_nightly_script_in_operators_doing_what_the_readme_recommends():
    scripts = nightly_scripts()
    assert [doc_id(document) for document, _ in scripts] == ["docs/operators.md"]
    script = scripts[0][1].replace("\\\n", " ")
    command = next(line for line in script.splitlines() if re.search(r"batchpredict predict ", line))
    words = shlex.split(command.replace('"${which[@]}"', "--since LABEL").replace('"$out"', "o.csv"))
    args = cli_parser().parse_args(words[1:])
    readme = (ROOT / "README.md").read_text()
    night = readme[readme.index("## Every night"):]
    night = night[:night.index("\n## ", 1)]
    # The README recommends scoring every bucket since the last run and paging on the default alerting stage.
    assert "--since" in night and args.since == "LABEL" and args.alert == subparser(
        cli_parser(), "predict")._option_string_actions["--alert"].default
    # The script keeps the table's last bucket from the summary for the next night's --since.
    assert '["last_label"]' in script and "docs/operators.md#from-cron" in night
    # Every option with a value the README tells a nightly run to pass, the script passes as written.
    for option in re.findall(r"`(--[\w-]+ [\w:.,]+)`", night):
        assert option.split()[0] in ("--since", "--points") or option in command, option


@pytest.mark.slow
def test_the_operators_script_as_written_over_three_nights(tmp_path):
    """The nightly script of docs/operators.md, its paths pointed at a temporary folder, run by bash on three
    nights of the bundled example: the first with no state (--points 288 on a table with every bucket), then
    two of a day each with the buckets before the saved one that --window and --rolling need. Each night's
    rows equal a run without --history over a table holding every bucket since the first; the state file
    carries the summary's last_label from night to night; the report is written."""
    import pandas as pd

    [(_, script)] = nightly_scripts()
    example = pd.read_csv(ROOT / "examples" / "history.csv", dtype=str, keep_default_na=False).head(6)
    labels = list(example.columns[1:])
    places = {"cd /opt/batchpredict": f"cd {ROOT}", "/data/stats.csv": str(tmp_path / "stats.csv"),
              "/srv/models": str(ROOT / "models"), "/data/": f"{tmp_path}/out/", "/var/lib/": f"{tmp_path}/var/",
              "/var/www/batchpredict": str(tmp_path / "report")}
    for old, new in places.items():
        script = script.replace(old, new)
    (tmp_path / "var" / "batchpredict").mkdir(parents=True)
    (tmp_path / "var" / "node_exporter" / "textfile_collector").mkdir(parents=True)
    state, out = tmp_path / "var" / "batchpredict" / "last-bucket", tmp_path / "out" / "anomalies.csv"
    timing = ["attempts", "duration_ms", "worker_pid", "worker_peak_rss_mib"]
    for first, end in ((0, 400), (399 - 25, 500), (499 - 25, 620)):
        since = state.read_text().strip() if state.exists() else None
        example[["ip", *labels[first:end]]].to_csv(tmp_path / "stats.csv", index=False)
        night = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300)
        assert night.returncode == 0, night.stderr
        assert state.read_text().strip() == labels[end - 1] and (tmp_path / "report" / "index.html").exists()
        example[["ip", *labels[:end]]].to_csv(tmp_path / "whole.csv", index=False)
        command = next(line for line in script.replace("\\\n", " ").splitlines() if "batchpredict predict " in line)
        args = cli_parser().parse_args(shlex.split(command.replace('"${which[@]}"', "").replace('"$out"', "o.csv")
                                                   .replace('"$history"', "h"))[1:])
        assert args.history == "h"
        which = ["--since", since] if since else ["--points", "288"]
        whole = subprocess.run([sys.executable, "-m", "batchpredict.cli", "predict", "--data", str(tmp_path / "whole.csv"),
                                "--models", str(ROOT / "models"), "--out", str(tmp_path / "whole.out.csv"), *which,
                                "--std", args.std, "--sigmas", ",".join(map(str, args.sigmas)), "--alert", args.alert,
                                "-q"], capture_output=True, text=True, timeout=300)
        assert whole.returncode == 0, whole.stderr
        got, expected = (pd.read_csv(path, dtype=str, keep_default_na=False).drop(columns=timing)
                         for path in (out, tmp_path / "whole.out.csv"))
        pd.testing.assert_frame_equal(got, expected)


# ----------------------------------------------------------------------------------------------- figures

MARKER = re.compile(r"<!--\s*bench\b(.*?)-->", re.DOTALL)
EXEMPT = re.compile(r"<!--\s*figures:\s*(.*?)-->", re.DOTALL)
UNITS = r"jobs/s|MiB|GiB|KiB|MB|GB|kB|ms|us|µs|s|min|minutes?|seconds?"
UNMARKED = re.compile(r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)(?:\s?(?:" + UNITS + r")(?![\w/])|x\b)")
NUMBER_BEFORE = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?$")


@dataclass
class Marker:
    document: Path
    line: int
    start: int        # of the marker in the document's text
    file: str
    expression: str
    format: str
    before: str       # the document's text before the marker


def markers(document: Path) -> list[Marker | str]:
    """The document's markers, or for a malformed one a message saying what is wrong."""
    raw = document.read_text()
    text = without_fences(raw)
    code = [span.span() for span in INLINE_CODE.finditer(MARKER.sub(lambda c: "\0" * len(c.group()), text))]
    found: list[Marker | str] = []
    for m in MARKER.finditer(text):
        words = m.group(1).split()
        if any(start < m.start() < end for start, end in code):
            found.append(f"{doc_id(document)}:{line_of(text, m.start())}: marker inside a `code span`, where it "
                         f"would show as text")
            continue
        if len(words) < 3:
            found.append(f"{doc_id(document)}:{line_of(text, m.start())}: marker {m.group()!r} needs FILE "
                         f"EXPRESSION FORMAT")
            continue
        found.append(Marker(document, line_of(text, m.start()), m.start(), words[0], " ".join(words[1:-1]),
                            words[-1], raw[:m.start()]))
    return found


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Gt: operator.gt, ast.GtE: operator.ge,
              ast.Lt: operator.lt, ast.LtE: operator.le}
KEY = re.compile(r"(?<![\w.])[A-Za-z_][\w]*(?:[.-]\w+)*")


def lookup(data: object, key: str) -> object:
    node = data
    for part in key.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise KeyError(key)
    return node


def evaluate(data: object, expression: str) -> object:
    """The value of a marker's expression: a key, or arithmetic and comparisons over keys and numbers."""
    values: dict[str, object] = {}

    def name(m: re.Match) -> str:
        if m.group() in ("and", "or", "not"):
            return m.group()
        values[f"_{len(values)}"] = lookup(data, m.group())
        return f"_{len(values) - 1}"

    tree = ast.parse(KEY.sub(name, expression).strip(), mode="eval").body

    def value(node: ast.AST) -> object:
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](number(value(node.left)), number(value(node.right)))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](number(value(node.operand)))
        if isinstance(node, ast.BoolOp):
            truths = [truth(value(v)) for v in node.values]
            return all(truths) if isinstance(node.op, ast.And) else any(truths)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not truth(value(node.operand))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _OPERATORS:
            return _OPERATORS[type(node.ops[0])](number(value(node.left)), number(value(node.comparators[0])))
        raise ValueError(f"not an expression of keys and numbers: {expression!r}")

    return value(tree)


def truth(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{value!r} is not true or false")
    return value


def number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{value!r} is not a number")
    return value


def render(value: object, spec: str) -> str:
    """A value as a document quotes it: `.1f` 133.2, `e1` 2.7e-4, `?met/missed` met, `s` text."""
    if spec.startswith("?"):
        yes, _, no = spec[1:].partition("/")
        if not isinstance(value, bool):
            raise ValueError(f"{value!r} is not true or false, for {spec}")
        return yes if value else no
    if spec == "s":
        return str(value)
    if re.fullmatch(r"e\d", spec):
        mantissa, _, exponent = format(number(value), f".{spec[1:]}e").partition("e")
        return f"{mantissa}e{int(exponent)}"
    return format(number(value), spec)


def benchmark(file: str) -> object:
    path = BENCHMARKS / file
    if path.parent != BENCHMARKS or path.suffix != ".json" or not path.is_file():
        raise KeyError(f"no benchmarks/{file}")
    return json.loads(path.read_text())


def rendered(marker: Marker) -> str:
    return render(evaluate(benchmark(marker.file), marker.expression), marker.format)


def marker_problem(marker: Marker | str) -> str | None:
    """Why a marker does not hold, or None."""
    if isinstance(marker, str):
        return marker
    where = f"{doc_id(marker.document)}:{marker.line}: {marker.file} {marker.expression}"
    try:
        expected = rendered(marker)
    except KeyError as exc:
        return f"{where}: no key {exc.args[0]} in benchmarks/{marker.file}"
    except (ValueError, SyntaxError) as exc:
        return f"{where}: {exc}"
    if not expected:
        return f"{where}: renders as nothing, which any text ends with; give it a word"
    if not marker.before.endswith(expected):
        return f"{where}: the JSON gives {expected}, the text before the marker is {marker.before[-30:]!r}"
    if expected[:1].isdigit() and marker.before[:-len(expected)][-1:] in set("0123456789.,"):
        return f"{where}: the JSON gives {expected}, the text has {NUMBER_BEFORE.search(marker.before)[0]}"
    return None


def unmarked_figures(document: Path) -> list[str]:
    """Figures with a unit, outside code, without a marker, in a paragraph or table without `figures:`."""
    text = INLINE_CODE.sub(lambda m: " " * len(m.group()), without_fences(document.read_text()))
    found = []
    for block in re.finditer(r"(?:[^\n]+\n?)+", text):
        if EXEMPT.search(block.group()):
            continue
        for m in UNMARKED.finditer(MARKER.sub(lambda c: "\0" * len(c.group()), block.group())):
            found.append(f"{doc_id(document)}:{line_of(text, block.start() + m.start())}: {m.group()!r}")
    return found


@pytest.mark.parametrize("document", DOCUMENTS, ids=doc_id)
def test_every_marked_figure_is_its_benchmarks(document):
    problems = [marker_problem(m) for m in markers(document)]
    assert [p for p in problems if p] == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=doc_id)
def test_every_figure_with_a_unit_is_marked_or_its_source_said(document):
    """A figure of `make bench` that is quoted without a marker is not checked against the JSON, so it is
    refused; a paragraph or table of other figures says where they come from (`<!--figures: ...-->`)."""
    assert unmarked_figures(document) == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=doc_id)
def test_every_source_said_is_a_source(document):
    """`<!--figures: -->` names where its figures come from: a date (YYYY-MM-DD), a commit, a file or a
    command; or says they are settings, not measurements."""
    text = document.read_text()
    vague = [m.group(1) for m in EXEMPT.finditer(text)
             if not re.search(r"\d{4}-\d{2}-\d{2}|\b[0-9a-f]{7,40}\b|\w+\.\w+|make \w+|settings|the code",
                              m.group(1))]
    assert vague == []


def test_every_benchmark_file_is_quoted_with_its_machine():
    quoted = [m for document in DOCUMENTS for m in markers(document) if isinstance(m, Marker)]
    for path in sorted(BENCHMARKS.glob("*.json")):
        keys = {m.expression for m in quoted if m.file == path.name}
        assert keys, f"no document quotes benchmarks/{path.name}"
        if "machine" in json.loads(path.read_text()):
            assert {"machine.cores", "machine.memory_gib"} <= keys, f"the machine of {path.name} is not said"


@pytest.mark.parametrize("text, expected", [
    ("at 133.2<!--bench results.json runs.strict_k1.jobs_per_s .1f--> jobs/s", []),
    ("at 133.3<!--bench results.json runs.strict_k1.jobs_per_s .1f--> jobs/s", ["gives 133.2"]),
    ("at 1133.2<!--bench results.json runs.strict_k1.jobs_per_s .1f--> jobs/s", ["gives 133.2"]),
    ("at 133.2<!--bench results.json runs.strict.jobs_per_s .1f--> jobs/s", ["no key runs.strict.jobs_per_s"]),
    ("at 133.2<!--bench nothing.json runs.strict_k1.jobs_per_s .1f-->", ["no key no benchmarks/nothing.json"]),
    ("73<!--bench results.json ratios.strict_vs_seed .0f-->x, 4.8<!--bench scale-results.json total_s / 60 .1f--> "
     "minutes, 2.7e-4<!--bench results.json runs.k25.max_abs_diff_vs_seed e1-->, "
     "+2.1<!--bench results.json runs.strict_k1.coordinator_rss_growth_mib +.1f--> MiB, "
     "0.95<!--bench scale-results.json runs.csv.load_average.0 .2f-->, "
     "misses<!--bench scale-results.json met.csv.coordinator_cpu_ms_per_job ?meets/misses-->, "
     "missed<!--bench results.json ratios.strict_vs_seed >= 100 ?met/missed-->", []),
    ("all<!--bench results.json ratios.strict_vs_seed >= 50 ?/not-->", ["renders as nothing"]),
    ("at 133.2 jobs/s and 7.7 ms", ["unmarked '133.2 jobs/s'", "unmarked '7.7 ms'"]),
    ("at 133.2 jobs/s and 7.7 ms <!--figures: 2026-11-30, a busy machine-->", []),
    ("73x faster, in 0.46 s", ["unmarked '73x'", "unmarked '0.46 s'"]),
    ("`--timeout 300 s` and 5-minute buckets, 2 cores, x86_64, 1e-5", []),
])
def test_the_figure_check_catches_what_it_should(tmp_path, monkeypatch, text, expected):
    # The cases quote frozen benchmark files, so a rerun of make bench does not change what they expect.
    frozen = tmp_path / "benchmarks"
    frozen.mkdir()
    (frozen / "results.json").write_text(json.dumps({
        "ratios": {"strict_vs_seed": 73.14}, "runs": {"strict_k1": {"jobs_per_s": 133.1996, "coordinator_rss_growth_mib": 2.14},
                                                      "k25": {"max_abs_diff_vs_seed": 2.7369e-4}}}))
    (frozen / "scale-results.json").write_text(json.dumps({
        "total_s": 288.6, "runs": {"csv": {"load_average": [0.95, 2.44]}},
        "met": {"csv": {"coordinator_cpu_ms_per_job": False}}}))
    monkeypatch.setattr(sys.modules[__name__], "BENCHMARKS", frozen)
    page = tmp_path / "page.md"
    page.write_text(text + "\n")
    problems = [p for p in map(marker_problem, markers(page)) if p]
    problems += [f"unmarked {u.split(': ', 1)[1]}" for u in unmarked_figures(page)]
    assert len(problems) == len(expected) and all(e in p for e, p in zip(expected, problems, strict=True)), problems


def update(documents: list[Path]) -> list[str]:
    """Rewrite the number before each numeric marker from its JSON; what could not be rewritten."""
    left = []
    for document in documents:
        text = document.read_text()
        for marker in reversed([m for m in markers(document) if isinstance(m, Marker)]):
            try:
                new = rendered(marker)
            except (KeyError, ValueError, SyntaxError) as exc:
                left.append(f"{doc_id(document)}:{marker.line}: {exc}")
                continue
            old = NUMBER_BEFORE.search(text[:marker.start])
            if marker.format.startswith("?") or marker.format == "s" or old is None:
                if not text[:marker.start].endswith(new):
                    left.append(f"{doc_id(document)}:{marker.line}: write {new!r} by hand")
                continue
            text = text[:old.start()] + new + text[marker.start:]
        document.write_text(text)
    return left


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("python tests/test_docs.py --update: rewrite every marked figure of README.md and docs/*.md "
                 "from benchmarks/*.json")
    remaining = update(DOCUMENTS)
    print("\n".join(remaining) or "every marked figure is its benchmark's; read `git diff` and the prose around it")
    sys.exit(1 if remaining else 0)
