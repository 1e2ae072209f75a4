"""io.files: a file is replaced whole or not at all, readable as a plain open() would make it."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from batchpredict.errors import UsageError
from batchpredict.io.files import replaced, write_atomic


def test_write_atomic_replaces_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "out.csv"
    write_atomic(str(path), "old\n")
    write_atomic(str(path), iter(["a,b\n", "1,2\n"]))
    assert path.read_text() == "a,b\n1,2\n"
    assert [p.name for p in path.parent.iterdir()] == ["out.csv"]  # no temporary file left


def test_a_failed_write_keeps_the_old_contents_and_leaves_nothing_behind(tmp_path: Path) -> None:
    path = tmp_path / "out.csv"
    write_atomic(str(path), "old\n")

    def pieces():
        yield "new, half"
        raise RuntimeError("the writer died")

    with pytest.raises(RuntimeError):
        write_atomic(str(path), pieces())
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_a_fifo_is_not_written_over(tmp_path: Path) -> None:
    """A FIFO where a report's page or evaluate's PREFIX.json goes: once replaced by the file, silently."""
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="out.json is a FIFO or a device, not a file to write over"):
        write_atomic(str(fifo), "{}\n")
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_the_file_gets_the_mode_open_would_give_it(tmp_path: Path) -> None:
    write_atomic(str(tmp_path / "out.csv"), "x\n")
    with open(tmp_path / "plain.csv", "w") as fh:
        fh.write("x\n")
    # mkstemp makes 0600, which would hide the output from the operators who read it.
    assert stat.S_IMODE((tmp_path / "out.csv").stat().st_mode) == stat.S_IMODE((tmp_path / "plain.csv").stat().st_mode)


def test_replaced_keeps_the_suffix_for_writers_that_choose_a_format_by_it(tmp_path: Path) -> None:
    final = tmp_path / "10.0.0.1.keras"
    with replaced(str(final), keep_suffix=True) as tmp:
        assert tmp.endswith(".keras") and os.path.dirname(tmp) == str(tmp_path)
        Path(tmp).write_bytes(b"zip")
    assert final.read_bytes() == b"zip"


def test_a_temporary_name_left_by_a_dead_process_is_passed_over(tmp_path: Path, monkeypatch) -> None:
    from batchpredict.io import files

    monkeypatch.setattr(files, "_NAMES", iter(range(3)))
    (tmp_path / f".out.csv.{os.getpid()}-0.tmp").write_text("left by a killed run\n")
    write_atomic(str(tmp_path / "out.csv"), "x\n")
    assert (tmp_path / "out.csv").read_text() == "x\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".out.csv.{os.getpid()}-0.tmp", "out.csv"]


def test_files_replaced_together_are_renamed_in_order_after_all_are_written(tmp_path: Path, monkeypatch) -> None:
    from batchpredict.io import files

    paths = [str(tmp_path / name) for name in ("a.csv", "a.csv.events.csv", "a.csv.summary.json")]
    renamed: list[str] = []
    real = os.replace

    def replace(source: str, target: str) -> None:
        assert all(Path(tmp).read_text() for tmp in temporaries[len(renamed):])  # each renamed once all are written
        renamed.append(target)
        real(source, target)

    monkeypatch.setattr(files.os, "replace", replace)
    with files.replaced_together(paths) as temporaries:
        for tmp, path in zip(temporaries, paths, strict=True):
            Path(tmp).write_text(os.path.basename(path))
    assert renamed == paths  # the summary last: a new summary means a new CSV
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(os.path.basename(p) for p in paths)


def test_a_set_that_fails_half_way_replaces_none_of_its_files(tmp_path: Path) -> None:
    from batchpredict.io.files import replaced_together

    paths = [tmp_path / "a.csv", tmp_path / "a.csv.summary.json"]
    for path in paths:
        path.write_text("old\n")
    with pytest.raises(RuntimeError), replaced_together([str(p) for p in paths]) as temporaries:
        Path(temporaries[0]).write_text("new\n")
        raise RuntimeError("the disk filled")
    assert [p.read_text() for p in paths] == ["old\n", "old\n"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "a.csv.summary.json"]


def test_the_temporaries_a_killed_process_left_are_removed_and_no_others(tmp_path: Path) -> None:
    import subprocess
    import sys

    from batchpredict.io.files import remove_leftovers

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    left = [f".a.csv.{dead}-0.tmp", f".a.csv.summary.json.{dead}-1.tmp", f".10.0.0.1.h5.{dead}-2.h5"]
    kept = [f".a.csv.{os.getpid()}-3.tmp", "a.csv", ".10.0.0.1.saving", f".b.csv.{dead}-4.tmp"]
    for name in left + kept:
        (tmp_path / name).write_text("")
    assert remove_leftovers(str(tmp_path), ["a.csv", "a.csv.events.csv", "a.csv.summary.json"]) == 2
    assert remove_leftovers(str(tmp_path / "model")) == 0  # no such folder: nothing to do
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept + [left[2]])
    assert remove_leftovers(str(tmp_path)) == 2  # any file's: the .h5's and b.csv's
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept[:3])


def test_a_full_disk_under_an_atomic_write_is_exit_74_naming_the_file(tmp_path):
    """`evaluate --out` and `store seal` wrote through write_atomic unguarded: a full disk was an OSError traceback
    (exit 1), where every other writer of a run says 'no space left on device writing ...' and exits 74."""
    import json
    import shutil

    from conftest import run_cli
    from test_input_corruption import tmpfs

    repo = Path(__file__).resolve().parents[2]
    folder, ip = tmp_path / "disk", "10.0.0.10"
    with tmpfs(folder, "1m"):
        store = folder / "store"
        for part in ("model", "sc", "std"):
            (store / part).mkdir(parents=True)
        shutil.copy(repo / "models" / "model" / f"{ip}.h5", store / "model")
        shutil.copy(repo / "models" / "sc" / f"{ip}.save", store / "sc")
        std = json.loads((repo / "models" / "std" / "std.json").read_text())[ip]
        (store / "std" / "std.json").write_text(json.dumps({ip: std}))
        with open(folder / "fill", "wb", buffering=0) as fh, pytest.raises(OSError):  # full to its last block
            while True:
                fh.write(b"x" * 4096)
        results = tmp_path / "r.csv"
        labels = tmp_path / "labels.csv"
        labels.write_text(f"ip,start,end\n{ip},2026-10-30T05:00,2026-10-30T08:00\n")
        assert run_cli("predict", "--data", repo / "examples" / "stats.csv", "--models", store, "--out", results,
                       "--points", "5", "-q").returncode == 0
        for args, path in ((["store", "seal", "--models", store], store / "manifest.json"),
                           (["evaluate", "--results", results, "--labels", labels, "--out", folder / "ev"],
                            folder / "ev.csv")):
            done = run_cli(*args)
            assert done.returncode == 74, done.stderr
            assert done.stderr.splitlines()[-1] == f"batchpredict: no space left on device writing {path}"
            assert not path.exists() and sorted(p.name for p in folder.iterdir()) == ["fill", "store"]
