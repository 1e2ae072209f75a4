"""The command line end to end on a temporary store: every status, exit codes, columns."""
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from conftest import BASE_IPS, check_against_numpy, read_out, run_cli, series_for, wide_table

from batchpredict.cli import build_parser
from batchpredict.io.output import columns
from batchpredict.job import RunOptions
from batchpredict.runtime.backend import BACKENDS

ONE_CPU = {min(os.sched_getaffinity(0))}

DESIGN_COLUMNS = ("ip,timestamp,observed,predicted,std,lower_2std,upper_2std,lower_4std,upper_4std,anomaly,severity,"
                  "status,error,model,attempts,duration_ms,worker_pid,worker_peak_rss_mib").split(",")


def test_columns_are_the_contract():
    assert columns((2.0, 4.0)) == DESIGN_COLUMNS


def test_points_1_is_todays_output(clean_run, base_store, tmp_path):
    out = tmp_path / "a.csv"
    done = run_cli("predict", "--data", clean_run.table, "--models", base_store, "--out", out, "--points", "1")
    assert done.returncode == 0, done.stderr
    frame = read_out(out)
    assert list(frame.columns) == DESIGN_COLUMNS and not (tmp_path / "a.csv.events.csv").exists()
    check_against_numpy(frame, base_store, clean_run.data)
    timing = ["attempts", "duration_ms", "worker_pid", "worker_peak_rss_mib"]
    pd.testing.assert_frame_equal(frame.drop(columns=timing), read_out(clean_run.out).drop(columns=timing),
                                  check_exact=True)


def test_every_kind_of_bad_input_gets_its_row(store, tmp_path):
    (store / "sc" / f"{BASE_IPS[1]}.save").unlink()
    std = json.loads((store / "std" / "std.json").read_text())
    del std[BASE_IPS[2]]
    (store / "std" / "std.json").write_text(json.dumps(std))
    junk = series_for(BASE_IPS[4]).astype(object)
    junk[[3, 30]] = "n/a"
    data = {
        BASE_IPS[0]: series_for(BASE_IPS[0]),
        "192.0.2.99": series_for("192.0.2.99"),       # no model file
        BASE_IPS[1]: series_for(BASE_IPS[1]),          # no scaler
        BASE_IPS[2]: series_for(BASE_IPS[2]),          # no std entry
        BASE_IPS[4]: junk,                             # non-numeric cells -> NaN, still scored
        "2001:db8::7": series_for("2001:db8::7"),     # IPv6
        "../etc/passwd": series_for("x"),
        "a/b": series_for("x"),
        "": series_for("x"),
        BASE_IPS[5]: ["nope"] * 40,                    # nothing numeric
    }
    path = wide_table(tmp_path / "t.csv", data)
    with open(path, "a") as fh:  # a duplicate IP
        fh.write(BASE_IPS[0] + "," + ",".join(map(str, np.arange(40))) + "\n")
    out = tmp_path / "out" / "a.csv"
    done = run_cli("predict", "--data", path, "--models", store, "--out", out)
    assert done.returncode == 0, done.stderr
    frame = read_out(out)
    assert list(frame.columns) == DESIGN_COLUMNS
    status = dict(zip(frame["ip"], frame["status"]))
    assert list(frame["ip"]) == list(data)
    assert status == {
        BASE_IPS[0]: "invalid_input", "192.0.2.99": "no_model", BASE_IPS[1]: "no_model",
        BASE_IPS[2]: "no_model", BASE_IPS[4]: "ok", "2001:db8::7": "ok",
        "../etc/passwd": "invalid_input", "a/b": "invalid_input", "": "invalid_input",
        BASE_IPS[5]: "insufficient_data"}
    errors = dict(zip(frame["ip"], frame["error"]))
    assert all(errors[ip] and "\n" not in errors[ip] for ip, s in status.items() if s != "ok")
    assert "Traceback" not in done.stderr
    summary = json.loads((tmp_path / "out" / "a.csv.summary.json").read_text())
    assert summary["status"]["ok"] == 2 and summary["ips"] == len(data)
    ok = frame[frame["status"] == "ok"]
    assert ok["anomaly"].isin(["true", "false"]).all() and ok["severity"].isin(["normal", "warning", "critical"]).all()


@pytest.mark.parametrize("args, message", [
    (["--data", "{tmp}/missing.csv"], "table not found"),
    (["--models", "{tmp}/nostore"], "model store not found"),
    (["--models", "{tmp}/o"], "is no model store: its model/ folder is missing"),
    (["--data", "{tmp}/empty.csv"], "cannot read table"),
    (["--data", "{tmp}/bad.parquet"], "cannot read table"),
    (["--sigmas", "4,2"], "sigmas"),
    (["--workers", "0"], "whole number"),
    (["--workers", "100000000"], "leaves each worker"),  # every job would be killed for memory
    (["--layout", "tall"], "invalid choice"),
    (["--max-worker-memory", "lots"], "not a size"),
    (["--points", "0"], "whole number"),
    (["--points", "3", "--since", "t010"], "not allowed with argument"),
    (["--since", "t999"], "--since 't999' is not a column header in the table"),
    (["--std", "rolling:1"], "--std takes store, rolling:N or mad:N with N >= 2"),
    (["--out", ""], "takes a file's path, not an empty one"),
    (["--out", "{tmp}/o"], "takes a file's path, not a folder"),
    (["--out", "{tmp}/o/"], "takes a file's path, not a folder"),
    # The output replaced the FIFO (or, as root, a device such as /dev/null) with its file.
    (["--out", "{tmp}/fifo"], "takes a regular file's path, not a FIFO's or a device's"),
    (["--data", "{tmp}/t.csv", "--out", "{tmp}/t.csv"], "would write over the table it reads"),
    # The history folder was made where the CSV goes: IsADirectoryError once every job had run, exit 1.
    (["--history", "{tmp}/o/a.csv"], "is a file the run writes beside --out"),
    (["--history", "{tmp}/o/a.csv.journal"], "is a file the run writes beside --out"),
])
def test_unusable_invocation_exits_2_and_writes_nothing(store, table, tmp_path, args, message):
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1" + bytes(100) + b"PAR1")
    (tmp_path / "o").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "t.csv").write_text(table.read_text())
    defaults = {"--data": str(table), "--models": str(store), "--out": str(tmp_path / "o" / "a.csv")}
    given = [a.format(tmp=tmp_path) for a in args]
    for flag, value in defaults.items():
        if flag not in given:
            given += [flag, value]
    done = run_cli("predict", *given)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "o" / "a.csv").exists()


def test_a_table_unreadable_past_its_first_chunk_exits_2_and_keeps_nothing(store, tmp_path):
    """Jobs have run by the time the quote never closed is read: the run still ends as an unreadable table
    does."""
    path = wide_table(tmp_path / "t.csv", {ip: series_for(ip) for ip in BASE_IPS})
    with open(path, "ab") as fh:
        fh.writelines(f"10.8.{i // 256}.{i % 256},".encode() + b",".join([b"1"] * 40) + b"\n" for i in range(10_000))
        fh.write(b'10.9.9.9,"1,' + b",".join([b"1"] * 39) + b"\n")
    out = tmp_path / "o" / "a.csv"
    done = run_cli("predict", "--data", path, "--models", store, "--out", out)
    assert done.returncode == 2, done.stderr
    assert f"cannot read table {path}: Error tokenizing data. C error: EOF inside string" in done.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["a.csv.lock"]  # no CSV, summary or journal


def test_a_long_line_past_the_first_chunk_costs_only_its_ip(store, tmp_path):
    """The line is found after jobs have run; its IP's row is invalid_input, every other row as it was."""
    path = wide_table(tmp_path / "t.csv", {ip: series_for(ip) for ip in BASE_IPS})
    with open(path, "a") as fh:
        fh.writelines(f"10.8.{i // 256}.{i % 256}," + ",".join(["1"] * 40) + "\n" for i in range(10_000))
        fh.write("10.9.9.9," + ",".join(["1"] * 41) + "\n")
        fh.write("10.9.9.10," + ",".join(["1"] * 40) + "\n")
    out = tmp_path / "o" / "a.csv"
    done = run_cli("predict", "--data", path, "--models", store, "--out", out)
    assert done.returncode == 0, done.stderr
    frame = read_out(out).set_index("ip")
    assert len(frame) == len(BASE_IPS) + 10_002 and frame.index[-1] == "10.9.9.10"
    assert frame.loc["10.9.9.9", "status"] == "invalid_input"
    assert frame.loc["10.9.9.9", "error"] == "line 10014: 42 fields, the header has 41"
    assert (frame.loc[BASE_IPS, "status"] == "ok").all() and frame.loc["10.9.9.10", "status"] == "no_model"


def test_a_parquet_table_scores_as_its_csv(store, table, tmp_path):
    """Values as floats and as text: the rows are the CSV's, timing columns aside."""
    frame = pd.read_csv(table, dtype=str)
    frame[frame.columns[1:21]] = frame[frame.columns[1:21]].astype(float)
    frame.to_parquet(tmp_path / "stats.parquet", index=False)
    outputs = {}
    for name, data in (("csv", table), ("parquet", tmp_path / "stats.parquet")):
        done = run_cli("predict", "--data", data, "--models", store, "--out", tmp_path / f"{name}.csv")
        assert done.returncode == 0, done.stderr
        outputs[name] = read_out(tmp_path / f"{name}.csv").drop(columns=["duration_ms", "worker_pid",
                                                                         "worker_peak_rss_mib"])
    assert outputs["parquet"].equals(outputs["csv"]) and (outputs["csv"]["status"] == "ok").all()


@pytest.mark.parametrize("command", [["predict"], ["train"], ["store", "check"]])
def test_workers_default_to_the_cpus_the_process_may_use(command):
    for cpus in (ONE_CPU, None):
        done = run_cli(*command, "--help", cpus=cpus)
        assert done.returncode == 0, done.stderr
        count = len(cpus or os.sched_getaffinity(0))
        assert f"worker processes at once (default {count}: one per CPU" in " ".join(done.stdout.split())


def test_a_run_pinned_to_one_cpu_runs_one_worker_as_the_api_would(store, table, tmp_path):
    out = tmp_path / "a.csv"
    done = run_cli("predict", "--data", table, "--models", store, "--out", out, "--jobs-per-worker", "12",
                   cpus=ONE_CPU)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "a.csv.summary.json").read_text())["workers"] == 1
    assert len(set(read_out(out)["worker_pid"])) == 1  # one worker took every job
    assert RunOptions().workers == len(os.sched_getaffinity(0))


# Each bad value alone: argparse converts an option as it meets it, before it misses the required ones.
@pytest.mark.parametrize("args", [
    ["predict", "--retries", "-1"], ["predict", "--workers", "0"], ["predict", "--workers", "-2"],
    ["predict", "--jobs-per-worker", "0"], ["predict", "--timeout", "0"], ["predict", "--timeout", "-5"],
    ["predict", "--timeout", "nan"], ["predict", "--max-worker-memory", "0"],
    ["predict", "--max-worker-memory", "0GiB"], ["predict", "--shard-size", "0"], ["predict", "--points", "0"],
    ["predict", "--window", "0"],
    ["predict", "--rolling", "-3"], ["predict", "--progress-interval", "0"], ["train", "--retries", "-1"],
    ["train", "--epochs", "0"], ["train", "--timeout", "0"], ["report", "--top", "0"], ["evaluate", "--window", "0"],
    ["store", "check", "--workers", "0"], ["store", "check", "--tolerance", "-1"], ["predict", "--retries", "one"],
])
def test_an_out_of_range_number_exits_2_with_one_line_naming_its_flag(args):
    done = run_cli(*args)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    flag, value = args[-2:]
    assert f"argument {flag}: expected " in line and f"not {value!r}" in line and "--help" in line


@pytest.fixture(scope="module")
def bundled_run(tmp_path_factory):
    """The bundled example scored at its last 30 points: results with dates, for evaluate."""
    root = Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("bundled") / "anomalies.csv"
    done = run_cli("predict", "--data", root / "examples" / "stats.csv", "--models", root / "models", "--out", out,
                   "--points", "30", "-q")
    assert done.returncode == 0, done.stderr
    return SimpleNamespace(table=root / "examples" / "stats.csv", models=root / "models", out=out)


@pytest.mark.parametrize("command, flag", [
    ("predict", "--history"), ("predict", "--metrics-file"), ("predict", "--ray-address"), ("report", "--out"),
    ("evaluate", "--after"),
])
def test_an_empty_value_exits_2_naming_its_flag(bundled_run, tmp_path, command, flag):
    """--history "$DIR" with DIR unset ran without history, --metrics-file '' without metrics, --ray-address '' on a
    Ray of its own, evaluate --after '' judged every point, and report --out '' wrote into the current folder: each
    read the empty value as an option not given, without a word."""
    labels = tmp_path / "labels.csv"
    labels.write_text("ip,start,end\n10.0.0.10,2026-10-30T05:00,2026-10-30T08:00\n")
    rest = {"predict": ["--data", bundled_run.table, "--models", bundled_run.models, "--out", tmp_path / "o.csv",
                        "--points", "3", *(["--backend", "ray"] if flag == "--ray-address" else [])],
            "report": ["--results", bundled_run.out, "--data", bundled_run.table],
            "evaluate": ["--results", bundled_run.out, "--labels", labels]}[command]
    done = subprocess.run([sys.executable, "-m", "batchpredict.cli", command, *map(str, rest), flag, ""],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.csv"]  # nothing written, here or beside --out
    [line] = done.stderr.splitlines()
    assert f"argument {flag}: takes a value, not an empty one: ''" in line and "--help" in line


@pytest.mark.parametrize("sweep", ["0:inf:1", "0:1e308:1e-308", "inf:inf:1", "nan:1:0.1", "1:0:1"])
def test_a_sweep_of_no_finite_thresholds_exits_2_with_one_line(sweep):
    """--sweep 0:inf:1 was an OverflowError traceback (floor of an infinite count), not argparse's exit 2."""
    done = run_cli("evaluate", "--sweep", sweep)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.splitlines()
    assert f"argument --sweep: --sweep {sweep}: need finite numbers, 0 <= START <= STOP and STEP > 0" in line


def test_a_holdout_outside_0_1_exits_2_naming_it(tmp_path):
    """train_table checks it for the Python API too; the command line leaves it to that one check."""
    done = run_cli("train", "--data", tmp_path / "h.csv", "--models", tmp_path / "store", "--holdout", "1.5")
    assert done.returncode == 2 and done.stderr.splitlines() == ["batchpredict: --holdout must be between 0 and 1, "
                                                                 "not 1.5"]
    assert not (tmp_path / "store").exists()


def test_no_retries_is_a_valid_number():
    args = build_parser().parse_args(["predict", "--data", "t", "--models", "m", "--out", "o", "--retries", "0"])
    assert args.retries == 0


def test_an_unknown_backend_exits_2_listing_the_choices():
    done = run_cli("predict", "--backend", "dask")
    [line] = done.stderr.splitlines()
    assert done.returncode == 2 and "argument --backend: invalid choice: 'dask' (choose from " in line
    assert all(repr(name) in line for name in BACKENDS)


def test_help_imports_no_engine_nor_executor():
    """--backend's choices come from the backends' module, which imports its executors only when it runs."""
    done = run_cli("predict", "--help", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert done.returncode == 0 and "--backend {" + ",".join(BACKENDS) + "}" in done.stdout
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "batchpredict.runtime.backend" in imported
    assert not imported & {"tensorflow", "numpy", "pandas", "multiprocess", "psutil", "batchpredict.runtime.executor"}


MINIMAL = {"predict": ["--data", "d", "--models", "m", "--out", "o"], "train": ["--data", "d", "--models", "m"],
           "report": ["--results", "r", "--data", "d", "--out", "o"], "evaluate": ["--results", "r", "--labels", "l"],
           "store check": ["--models", "m"], "store seal": ["--models", "m"]}


def help_sections(command: str, capsys: pytest.CaptureFixture) -> dict[str, str]:
    """A command's --help as {group title: its lines}."""
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command.split(), "--help"])
    blocks = capsys.readouterr().out.split("\n\n")
    return {block.split(":\n")[0]: block for block in blocks if ":\n" in block}


def test_an_option_of_several_commands_reads_alike_in_each(capsys):
    sections = {command: help_sections(command, capsys) for command in MINIMAL}
    assert sections["predict"]["series"] == sections["report"]["series"] == sections["evaluate"]["series"]
    assert sections["predict"]["workers"] == sections["store check"]["workers"]
    assert sections["predict"]["model loading"] == sections["store check"]["model loading"]
    assert all(sections[command]["logging"] == sections["predict"]["logging"] for command in MINIMAL)
    assert "series" in sections["train"] and "layout" not in sections["train"]["series"]


def test_each_command_keeps_its_own_defaults_of_shared_options():
    parser = build_parser()
    parsed = {command: parser.parse_args([*command.split(), *args]) for command, args in MINIMAL.items()}
    timeouts = {command: args.timeout for command, args in parsed.items() if "timeout" in args}
    assert timeouts == {"predict": 300.0, "train": 1800.0, "store check": 300.0}
    assert {args.window for command, args in parsed.items() if "window" in args} == {20}
    assert [command for command, args in parsed.items() if "layout" in args] == ["predict", "report", "evaluate"]


def test_python_m_batchpredict_is_the_command(store, table, tmp_path):
    outputs = {}
    for module in ("batchpredict", "batchpredict.cli"):
        out = tmp_path / module / "a.csv"
        done = run_cli("predict", "--data", table, "--models", store, "--out", out, "--points", "3", module=module)
        assert done.returncode == 0, done.stderr
        outputs[module] = read_out(out).drop(columns=["duration_ms", "worker_pid", "worker_peak_rss_mib"])
    pd.testing.assert_frame_equal(outputs["batchpredict"], outputs["batchpredict.cli"], check_exact=True)
    script = [str(Path(sys.executable).with_name("batchpredict"))]
    for args in (["--help"], ["predict", "--help"], ["predict", "--retries", "-1"], []):
        runs = [run_cli(*args, module=module) for module in ("batchpredict", "batchpredict.cli")]
        runs.append(subprocess.run(script + args, capture_output=True, text=True, timeout=60))
        assert len({(done.returncode, done.stdout, done.stderr) for done in runs}) == 1, args


def test_ctrl_c_before_a_command_installs_its_handlers_is_130_and_one_line(monkeypatch, capsys):
    from batchpredict import cli

    def interrupted(args):  # as a SIGINT lands in a command's first imports
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_report", interrupted)
    assert cli.main(["report", "--results", "r.csv", "--data", "d.csv", "--out", "o"]) == 130
    assert capsys.readouterr().err.strip().splitlines() == ["batchpredict: stopped by SIGINT"]
