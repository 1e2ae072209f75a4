"""A corrupted stats table and a full disk: one IP per corruption, every row the status and message it must give.

Like tests/test_corruption.py for the store: the bundled example table (examples/stats.csv, 32 IPs of 48
buckets) is broken one line per case, as ETL jobs break tables; one run scores them all beside untouched
lines, whose rows must equal a run on the intact table. A line of other fields than the header costs only its
own IP (`invalid_input`, naming its physical line); a cell that is no number counts as missing and is named in
the log and summary.json (with --strict-input its IP is `invalid_input`). A full disk while writing is exit 74
with the earlier output untouched, and --resume then gives the rows of an uninterrupted run.
"""
from __future__ import annotations

import contextlib
import errno
import gzip
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import read_out, run_cli

from batchpredict import Params, RunOptions, predict_table
from batchpredict.errors import Interrupted, OutputError
from batchpredict.io import output

REPO = Path(__file__).resolve().parents[1]
TIMING = ["duration_ms", "worker_pid", "worker_peak_rss_mib", "attempts"]
WIDTH = 49  # the example's header: ip and 48 buckets
Edit = Callable[[list[str]], list[str]]  # a line's fields -> its physical lines (several: a quoted cell over two)


def fields(edit: Callable[[list[str]], list[str]]) -> Edit:
    return lambda cells: [",".join(edit(list(cells)))]


def cell(index: int, text: str) -> Callable[[list[str]], list[str]]:
    def apply(cells: list[str]) -> list[str]:
        cells[index] = text
        return cells
    return apply


def cells(**texts: str) -> Callable[[list[str]], list[str]]:
    def apply(found: list[str]) -> list[str]:
        for index, text in texts.items():
            found[int(index[1:])] = text
        return found
    return apply


def over_two_lines(cells: list[str]) -> list[str]:
    cells[30] = '"12\n3"'
    text = ",".join(cells)
    return text.split("\n")


# id -> (how the line is broken, status, error (None: empty; {line} is the victim's physical line),
#        unreadable cells (count, first text) or None)
CASES: dict[str, tuple[Edit, str, str | None, tuple[int, str] | None]] = {
    "a stray trailing comma on the first data line": (fields(lambda c: [*c, ""]), "invalid_input",
                                                      "line {line}: 50 fields, the header has 49", None),
    "a quoted cell over two lines": (over_two_lines, "ok", None, (1, "12\n3")),
    "three fields more": (fields(lambda c: [*c, "1", "2", "3"]), "invalid_input",
                          "line {line}: 52 fields, the header has 49", None),
    "an unquoted thousands separator": (fields(cell(10, "1,234")), "invalid_input",
                                        "line {line}: 50 fields, the header has 49", None),
    "five fields fewer": (fields(lambda c: c[:-5]), "invalid_input", "line {line}: 44 fields, the header has 49",
                          None),
    "only the id": (fields(lambda c: c[:1]), "invalid_input", "line {line}: 1 fields, the header has 49", None),
    "a stray trailing comma": (fields(lambda c: [*c, ""]), "invalid_input",
                               "line {line}: 50 fields, the header has 49", None),
    "a semicolon for a comma": (fields(lambda c: [*c[:3], ";".join(c[3:5]), *c[5:]]), "invalid_input",
                                "line {line}: 48 fields, the header has 49", None),
    "a quoted thousands separator": (fields(cell(10, '"1,234"')), "ok", None, (1, "1,234")),
    "a word": (fields(cell(20, "oops")), "ok", None, (1, "oops")),
    "a byte that is not UTF-8": (fields(cell(12, "12\udcff")), "ok", None, (1, "12\ufffd")),
    "two words": (fields(cells(c5="n/a?", c7="12..5")), "ok", None, (2, "n/a?")),
    "a unit": (fields(cell(44, "512 MB")), "ok", None, (1, "512 MB")),
    "an infinity, as written and by overflow": (fields(cells(c9="inf", c11="1e999")), "ok", None, (2, "inf")),
    # The contract's missing marks are the six below: these were read as missing and never named.
    "None and a question mark": (fields(cells(c6="None", c9="?")), "ok", None, (2, "None")),
    "every usual missing mark": (fields(cells(c3="", c4="NA", c5="N/A", c6="NaN", c7="null", c8="-")), "ok", None,
                                 None),
    "a CRLF line end": (lambda c: [",".join(c) + "\r"], "ok", None, None),
    "a blank line before it": (lambda c: ["", ",".join(c)], "ok", None, None),
}
SAME_AS_CLEAN = ("a CRLF line end", "a blank line before it")  # nothing wrong: the row is the intact table's
NO_ID = ",1,2,3"  # a line without an IP (4 fields): no row, named in the log and summary


def build(path: Path, lines: list[str], victims: dict[str, str], *, no_id_after: str) -> dict[str, int]:
    """Write the table broken as CASES say; returns each victim's physical line, and 'no id''s."""
    header, rows = lines[0], {line.split(",", 1)[0]: line for line in lines[1:]}
    by_ip = {ip: case for case, ip in victims.items()}
    physical, at = [header], {}
    for ip, line in rows.items():
        case = by_ip.get(ip)
        broken = CASES[case][0](line.split(",")) if case else [line]
        # The line its record starts on (the header's is 1); a quoted cell over two lines counts both.
        at[ip] = len(physical) + 1 + (case == "a blank line before it")
        physical += broken
        if ip == no_id_after:
            physical.append(NO_ID)
            at["no id"] = len(physical)
    path.write_text("\n".join(physical) + "\n", errors="surrogateescape")  # \udcff: the byte 0xff
    return at


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    tmp = tmp_path_factory.mktemp("ragged")
    lines = (REPO / "examples" / "stats.csv").read_text().splitlines()
    ips = [line.split(",", 1)[0] for line in lines[1:]]
    victims = dict(zip(CASES, ips, strict=False))  # the first case takes the first data line
    table = tmp / "stats.csv"
    at = build(table, lines, victims, no_id_after=ips[20])
    gz = tmp / "stats.csv.gz"
    gz.write_bytes(gzip.compress(table.read_bytes()))
    runs = {}
    for name, data, extra in (("broken", table, ()), ("clean", REPO / "examples" / "stats.csv", ()),
                              ("gzip", gz, ()), ("strict", table, ("--strict-input",))):
        out = tmp / name / "a.csv"
        done = run_cli("predict", "--data", data, "--models", REPO / "models", "--out", out, "--workers", "2",
                       *extra, timeout=300)
        summary = json.loads(Path(f"{out}.summary.json").read_text()) if out.exists() else None
        runs[name] = SimpleNamespace(done=done, frame=read_out(out).set_index("ip") if out.exists() else None,
                                     summary=summary)
    return SimpleNamespace(victims=victims, at=at, untouched=[ip for ip in ips if ip not in victims.values()], **runs)


@pytest.mark.parametrize("case", list(CASES))
def test_each_broken_line_is_its_own_ips_row_with_its_status_and_message(broken_run, case):
    _, status, error, unreadable = CASES[case]
    ip, run = broken_run.victims[case], broken_run.broken
    row = run.frame.loc[ip]
    assert row["status"] == status, row["error"]
    assert row["error"] == (error.format(line=broken_run.at[ip]) if error else "")
    named = run.summary["input"]["unreadable"]
    if unreadable:
        count, text = unreadable
        assert named[ip] == count
        said = [line for line in run.done.stderr.splitlines() if f" {ip}: " in line]
        assert len(said) == 1 and f"{count} unreadable cell" in said[0] and repr(text) in said[0], said
        assert f"on line {broken_run.at[ip]} (" in said[0], said
        strict = broken_run.strict.frame.loc[ip]
        assert strict["status"] == "invalid_input" and strict["error"].endswith("(--strict-input)"), strict["error"]
        assert f"line {broken_run.at[ip]} (" in strict["error"] and repr(text) in strict["error"]
    else:
        assert ip not in named
    if case in SAME_AS_CLEAN:
        pd.testing.assert_series_equal(row.drop(TIMING), broken_run.clean.frame.loc[ip].drop(TIMING))


def test_every_other_row_is_exact_and_the_run_says_what_it_found(broken_run):
    broken, clean = broken_run.broken, broken_run.clean
    assert broken.done.returncode == 0, broken.done.stderr  # invalid_input answers about the data
    assert "Traceback" not in broken.done.stderr
    assert list(broken.frame.index) == list(clean.frame.index)  # no id shifted, none lost, none made up
    untouched = broken_run.untouched
    pd.testing.assert_frame_equal(broken.frame.loc[untouched].drop(columns=TIMING),
                                  clean.frame.loc[untouched].drop(columns=TIMING))
    found = broken.summary["input"]
    bad = sum(status == "invalid_input" for _, status, _, _ in CASES.values())
    assert found["bad_lines"] == bad + 1 and found["lines_without_ip"] == [broken_run.at["no id"]]
    assert found["unreadable_ips"] == len(found["unreadable"]) == sum(1 for *_, u in CASES.values() if u)
    assert found["unreadable_cells"] == sum(u[0] for *_, u in CASES.values() if u)
    assert f"line {broken_run.at['no id']}: 4 fields, the header has 49, and no IP" in broken.done.stderr
    assert clean.summary["input"]["bad_lines"] == clean.summary["input"]["unreadable_cells"] == 0


def test_gzip_reads_as_the_plain_file_and_strict_input_changes_only_the_unreadable(broken_run):
    broken = broken_run.broken.frame.drop(columns=TIMING)
    pd.testing.assert_frame_equal(broken_run.gzip.frame.drop(columns=TIMING), broken)
    assert broken_run.strict.done.returncode == 0, broken_run.strict.done.stderr
    strict = broken_run.strict.frame.drop(columns=TIMING)
    named = list(broken_run.broken.summary["input"]["unreadable"])
    assert (strict.loc[named, "status"] == "invalid_input").all()
    pd.testing.assert_frame_equal(strict.drop(index=named), broken.drop(index=named))


def long_lines(ips: list[str]) -> list[str]:
    frame = pd.read_csv(REPO / "examples" / "stats.csv", dtype=str, keep_default_na=False).set_index("ip")
    return [f"{ip},{stamp},{value}" for ip in ips for stamp, value in frame.loc[ip].items()]


def test_a_long_tables_bad_lines_and_timestamps(tmp_path):
    """A row of other fields makes the IP in its first field invalid_input; a timestamp that is not a time
    is left out of its IP's series and named; a row with no IP is named; every other IP is exact."""
    ips = [f"10.0.0.{i}" for i in range(10, 16)]
    rows = long_lines(ips)
    clean = tmp_path / "clean.csv"
    clean.write_text("ip,timestamp,value\n" + "\n".join(rows) + "\n")
    extra = {5: "10.0.0.11,2026-10-29T02:30,1,234", 60: "10.0.0.12,2026-10-29T05:00",
             100: "10.0.0.13,not a time,999.0", 150: ",2026-10-29T01:00,1,2", 200: "10.0.0.14,2026-10-29T07:30,oops"}
    broken = list(rows)
    for at in sorted(extra, reverse=True):
        broken.insert(at, extra[at])
    line = {text: broken.index(text) + 2 for text in extra.values()}
    table = tmp_path / "long.csv"
    table.write_text("ip,timestamp,value\n" + "\n".join(broken) + "\n")
    runs = {}
    for name, data in (("clean", clean), ("broken", table)):
        out = tmp_path / name / "a.csv"
        done = run_cli("predict", "--data", data, "--models", REPO / "models", "--out", out, "--workers", "2")
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        runs[name] = SimpleNamespace(done=done, frame=read_out(out).set_index("ip"),
                                     summary=json.loads(Path(f"{out}.summary.json").read_text()))
    frame = runs["broken"].frame
    assert list(frame.index) == ips
    assert frame.loc["10.0.0.11", "error"] == f"line {line[extra[5]]}: 4 fields, the header has 3"
    assert frame.loc["10.0.0.12", "error"] == f"line {line[extra[60]]}: 2 fields, the header has 3"
    assert (frame.loc[["10.0.0.11", "10.0.0.12"], "status"] == "invalid_input").all()
    found = runs["broken"].summary["input"]
    assert found["unreadable"] == {"10.0.0.13": 1, "10.0.0.14": 1}
    assert found["lines_without_ip"] == [line[extra[150]]] and found["bad_lines"] == 3
    assert f"on line {line[extra[100]]} (timestamp): 'not a time'" in runs["broken"].done.stderr
    assert f"on line {line[extra[200]]} (value): 'oops'" in runs["broken"].done.stderr
    same = ["10.0.0.10", "10.0.0.13", "10.0.0.15"]  # 10.0.0.13's point without a time is left out
    pd.testing.assert_frame_equal(frame.loc[same].drop(columns=TIMING),
                                  runs["clean"].frame.loc[same].drop(columns=TIMING))


@pytest.mark.parametrize(("header", "extra", "layout"), [("ip,timestamp,value,source", ",exporter-3", []),
                                                        ("ip,timestamp,value", "", ["--layout", "wide"])])
def test_a_long_table_read_as_wide_exits_2_with_one_line(tmp_path, header, extra, layout):
    """A column past ip,timestamp,value (or --layout wide) made every IP a duplicate: invalid_input for all, exit 0."""
    table = tmp_path / "long.csv"
    table.write_text(header + "\n" + "".join(f"{line}{extra}\n" for line in long_lines(["10.0.0.10", "10.0.0.11"])))
    out = tmp_path / "out" / "a.csv"
    done = run_cli("predict", "--data", table, "--models", REPO / "models", "--out", out, *layout)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "looks like a long table (ip,timestamp,value[,...]) read as wide" in done.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["a.csv.lock"]


def test_a_folder_that_takes_no_file_exits_2_before_any_job(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = run_cli("predict", "--data", REPO / "examples" / "stats.csv", "--models", REPO / "models",
                   "--out", blocker / "out" / "a.csv")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "cannot create the lock" in done.stderr and "Traceback" not in done.stderr


def test_a_failed_write_of_the_summary_leaves_the_earlier_output_whole(tmp_path, monkeypatch):
    """The CSV, events and summary replace the old ones all or none; the journal is kept for --resume."""
    out, data, models = tmp_path / "a.csv", str(REPO / "examples" / "stats.csv"), str(REPO / "models")
    options = RunOptions(workers=2)
    predict_table(data, models, out=str(out), params=Params(points=3), options=options)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != "a.csv.lock"}

    def full(path: str, summary: dict) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(output, "write_summary", full)
    with pytest.raises(OutputError, match=r"^no space left on device writing .*a\.csv\.summary\.json; ") as caught:
        predict_table(data, models, out=str(out), params=Params(points=5), options=options)
    assert caught.value.exit_code == 74
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name not in ("a.csv.lock", "a.csv.journal")}
    assert after == before and sorted(before) == ["a.csv", "a.csv.events.csv", "a.csv.summary.json"]
    assert (tmp_path / "a.csv.journal").exists()


def test_a_stop_while_the_output_is_written_waits_for_the_whole_set(tmp_path, monkeypatch):
    """SIGTERM as the CSV is written: the CSV, events and summary are all tonight's, then the run stops (143),
    the journal kept; never a new summary beside the old CSV."""
    night, reference = tmp_path / "night", tmp_path / "reference"
    data, models, options = str(REPO / "examples" / "stats.csv"), str(REPO / "models"), RunOptions(workers=2)
    predict_table(data, models, out=str(night / "a.csv"), params=Params(points=3), options=options)
    (night / ".a.csv.summary.json.4194304-0.tmp").write_text("{")  # a killed run's (no pid is that high)
    write_csv = output.Rows.write_csv

    def stopped(rows: output.Rows, path: str) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # a real signal, to this process, half-way through the set
        write_csv(rows, path)

    monkeypatch.setattr(output.Rows, "write_csv", stopped)
    with pytest.raises(Interrupted) as caught:
        predict_table(data, models, out=str(night / "a.csv"), params=Params(points=5), options=options)
    assert caught.value.exit_code == 143
    monkeypatch.undo()
    predict_table(data, models, out=str(reference / "a.csv"), params=Params(points=5), options=options)
    pd.testing.assert_frame_equal(read_out(night / "a.csv").drop(columns=TIMING),
                                  read_out(reference / "a.csv").drop(columns=TIMING))
    assert json.loads((night / "a.csv.summary.json").read_text())["rows"] == 5 * 32
    assert (night / "a.csv.events.csv").read_text() == (reference / "a.csv.events.csv").read_text()
    assert (night / "a.csv.journal").exists()
    assert sorted(outputs(night)) == ["a.csv", "a.csv.events.csv", "a.csv.summary.json"]  # nor a temporary, its own or not


# --- a real full disk: a small tmpfs where this process may mount one, else a file size limit -------------

@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[None]:
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def resize(folder: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)], check=True)


def predict(out: Path, *extra: str, preexec: Callable[[], None] | None = None) -> subprocess.CompletedProcess:
    args = ["predict", "--data", REPO / "examples" / "stats.csv", "--models", REPO / "models", "--out", out,
            "--workers", "2", *extra]
    if preexec is None:
        return run_cli(*args)
    return subprocess.run([sys.executable, "-m", "batchpredict.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=240, preexec_fn=preexec)


def outputs(folder: Path) -> dict[str, bytes]:
    """Every file of the folder but the lock and the journal: the output, and any temporary file left."""
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.name not in ("a.csv.lock", "a.csv.journal")}


def check_resumed(folder: Path, out: Path, tmp_path: Path) -> None:
    """--resume, space free again, gives the rows of an uninterrupted run."""
    done = predict(out, "--points", "20", "--resume")
    assert done.returncode == 0, done.stderr
    reference = tmp_path / "reference" / "a.csv"
    assert predict(reference, "--points", "20").returncode == 0
    pd.testing.assert_frame_equal(read_out(out).drop(columns=TIMING), read_out(reference).drop(columns=TIMING))
    assert not (folder / "a.csv.journal").exists()


@pytest.mark.slow
def test_a_full_tmpfs_is_exit_74_and_resume_finishes_the_night(tmp_path):
    folder = tmp_path / "disk"
    with tmpfs(folder, "16m"):
        out = folder / "a.csv"
        assert predict(out, "--points", "10").returncode == 0  # the earlier night
        earlier = outputs(folder)
        disk = os.statvfs(folder)
        resize(folder, f"{(disk.f_blocks - disk.f_bfree) * disk.f_frsize + 48 * 1024}")  # part of a journal
        done = predict(out, "--points", "20")
        assert done.returncode == 74, done.stderr
        lines = done.stderr.strip().splitlines()
        assert lines[-1].startswith(f"batchpredict: no space left on device writing {out}.journal; "), lines
        assert "Traceback" not in done.stderr
        assert outputs(folder) == earlier  # the earlier output untouched, no temporary file left
        journal = (folder / "a.csv.journal").read_text()
        assert journal.count("\n") >= 2  # the header and at least one whole job
        resize(folder, "16m")
        check_resumed(folder, out, tmp_path)


@pytest.mark.slow
def test_a_file_size_limit_is_exit_74_and_resume_finishes_the_night(tmp_path):
    """RLIMIT_FSIZE (EFBIG, SIGXFSZ ignored) stands for a full disk where no tmpfs can be mounted."""
    folder = tmp_path / "disk"
    folder.mkdir()
    out = folder / "a.csv"
    assert predict(out, "--points", "10").returncode == 0
    earlier = outputs(folder)

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))

    done = predict(out, "--points", "20", preexec=limited)
    assert done.returncode == 74, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("batchpredict: file too large"), done.stderr
    assert "Traceback" not in done.stderr
    assert outputs(folder) == earlier
    check_resumed(folder, out, tmp_path)
