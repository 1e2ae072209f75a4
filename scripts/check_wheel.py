"""The wheel, checked as a user installs it: built, installed with no extras into a fresh venv, and run
from outside the repository on a copy of examples/ and models/.

    .venv/bin/python scripts/check_wheel.py             # what .ci/run does (make wheel-check)
    .venv/bin/python scripts/check_wheel.py --record benchmarks/install-results.json --full

Checks: `import tensorflow` fails in that venv; its CSV equals the one this (full) install gives, but
for the timing columns; `python -m batchpredict` runs; a SavedModel in the store is one load_error row
naming the extra, and so is a model
of a layer the numpy engine does not run; the other IPs' rows are unchanged. With --full it also installs `.[keras]` into a second
fresh venv, to measure it; --record writes both installs' sizes and times as JSON.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMING = ("duration_ms", "worker_pid", "worker_peak_rss_mib")
HINT = "it needs TensorFlow, pip install 'batchpredict[keras]'"


def run(*args: str | Path, cwd: Path | None = None, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=1800)
    if done.returncode not in ok:
        sys.exit(f"check_wheel: {' '.join(map(str, args))} exited {done.returncode}\n{done.stdout}{done.stderr}")
    return done


def venv_with(root: Path, name: str, requirement: str) -> tuple[Path, float, int]:
    """A fresh venv with `requirement` installed: its python, the install's seconds, its size in bytes."""
    folder = root / name
    run(getattr(sys, "_base_executable", sys.executable), "-m", "venv", folder)  # not a venv's python
    python = folder / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    started = time.monotonic()
    run(python, "-m", "pip", "install", "--quiet", requirement)
    seconds = time.monotonic() - started
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    return python, seconds, size


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(fh)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also measure a fresh install of .[keras]")
    parser.add_argument("--record", type=Path, help="write both installs' sizes and times here (JSON)")
    args = parser.parse_args()
    here = Path(sys.executable).parent  # this full install's batchpredict
    with tempfile.TemporaryDirectory(prefix="batchpredict-wheel-") as tmp:
        root = Path(tmp)
        run(here / "python", "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", root / "dist", REPO)
        [wheel] = (root / "dist").glob("batchpredict-*.whl")
        lean, lean_s, lean_bytes = venv_with(root, "lean", str(wheel))
        print(f"check_wheel: {wheel.name} with no extras: {lean_bytes / 2**20:.0f} MiB in {lean_s:.0f} s")
        if run(lean, "-c", "import tensorflow", ok=(1,)).returncode != 1:
            sys.exit("check_wheel: tensorflow is importable in the base install")

        work = root / "run"  # outside the repository: nothing of it is on the path
        for folder in ("examples", "models"):
            shutil.copytree(REPO / folder, work / folder)
        predict = ("predict", "--data", "examples/stats.csv", "--models", "models")
        run(lean.parent / "batchpredict", *predict, "--out", "lean.csv", cwd=work)
        run(lean, "-m", "batchpredict", *predict, "--out", "module.csv", cwd=work)
        run(here / "batchpredict", *predict, "--out", "full.csv", cwd=work)
        expected = rows(work / "full.csv")
        for name in ("lean.csv", "module.csv"):
            if rows(work / name) != expected:
                sys.exit(f"check_wheel: {name} differs from the full install's CSV")
        print(f"check_wheel: the base install's CSV equals the full install's ({len(expected)} rows)")

        # Two IPs the numpy engine cannot run, made by the full install: a SavedModel and a Conv1D model.
        saved, conv = expected[0]["ip"], expected[1]["ip"]
        run(here / "batchpredict", "train", "--data", "examples/history.csv", "--models", "models", "--ips", saved,
            "--format", "savedmodel", "--epochs", "2", "-q", cwd=work)
        for old in (work / "models" / "model").glob(f"{conv}.*"):
            old.unlink()
        run(here / "python", "-c", "import sys, keras; keras.Sequential([keras.Input((20, 1)), keras.layers.Conv1D("
            "2, 3), keras.layers.Flatten(), keras.layers.Dense(1)]).save(sys.argv[1])",
            work / "models" / "model" / f"{conv}.keras")
        run(here / "batchpredict", "store", "seal", "--models", "models", cwd=work)
        run(lean.parent / "batchpredict", *predict, "--out", "other.csv", cwd=work, ok=(1,))
        found = {row["ip"]: row for row in rows(work / "other.csv")}
        for ip in (saved, conv):
            if found[ip]["status"] != "load_error" or HINT not in found[ip]["error"]:
                sys.exit(f"check_wheel: {ip}'s row is {found[ip]['status']}: {found[ip]['error']!r}")
            print(f"check_wheel: without TensorFlow, {ip} is one row: {found[ip]['error']}")
        if [r for r in found.values() if r["ip"] not in (saved, conv)] != expected[2:]:
            sys.exit("check_wheel: models the base install cannot run changed other IPs' rows")
        checked = run(lean.parent / "batchpredict", "store", "check", "--models", "models", cwd=work, ok=(1,))
        said = {line.split()[0]: line for line in checked.stdout.splitlines()[1:]}
        for ip in (saved, conv):
            if "load_error" not in said.get(ip, "") or "tensorflow (not installed)" not in said[ip]:
                sys.exit(f"check_wheel: store check without TensorFlow says of {ip}: {said.get(ip)!r}")
        if f"ok {len(expected) - 2}, load_error 2" not in checked.stderr:
            sys.exit(f"check_wheel: store check without TensorFlow ended {checked.stderr.strip()[-300:]!r}")
        print(f"check_wheel: store check without TensorFlow: {checked.stderr.strip().splitlines()[-1]}")

        record = {"lean": {"requirement": "batchpredict (no extras)", "mib": round(lean_bytes / 2**20),
                           "install_s": round(lean_s)}}
        if args.full:
            _, full_s, full_bytes = venv_with(root, "full", f"{wheel}[keras]")
            record["full"] = {"requirement": "batchpredict[keras]", "mib": round(full_bytes / 2**20),
                              "install_s": round(full_s)}
            print(f"check_wheel: with [keras]: {full_bytes / 2**20:.0f} MiB in {full_s:.0f} s")
    if args.record:
        record["machine"] = {"platform": platform.platform(), "processor": platform.machine(),
                             "cores": os.cpu_count(),
                             "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
                             "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"),
                             "note": "pip's cache warm: the packages' downloads are not in these times"}
        args.record.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
