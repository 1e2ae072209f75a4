"""The command line's vocabulary: argument types, the option groups several commands share, and the one place
parsed options become Params and RunOptions."""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
from collections.abc import Callable
from typing import NoReturn, TypeVar

from . import logs
from .io.files import special
from .job import ENGINES, Params, RunOptions, default_workers
from .rules import parse_duration
from .runtime.backend import BACKENDS

N = TypeVar("N", int, float)

DEFAULT_SWEEP = "2:10:0.5"
DEFAULT_ALERT_SWEEP = "0.2:0.8:0.05"
_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6, "mib": 2**20,
          "g": 2**30, "gb": 10**9, "gib": 2**30}


def parse_size_mib(text: str) -> float:
    """'1.5GiB', '800M', '512MiB' -> MiB."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1.5GiB, 800MiB)")
    mib = float(match.group(1)) * _UNITS[match.group(2).lower()] / 2**20
    if not mib > 0:  # the executor would take 0 for "no cap given"
        raise argparse.ArgumentTypeError(f"expected a size > 0, not {text!r}")
    return mib


def parse_sigmas(text: str) -> tuple[float, float]:
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sigmas takes two numbers like 2,4, not {text!r}") from None
    return low, high


def parse_sweep(text: str) -> list[float]:
    """'2:10:0.5' -> [2.0, 2.5, ..., 10.0]: START to STOP inclusive, by STEP."""
    try:
        start, stop, step = (float(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sweep takes START:STOP:STEP like {DEFAULT_SWEEP}, not {text!r}") from None
    # Finite first: an infinite STOP (0:inf:1, or 0:1e308:1e-308 past a float) was an OverflowError traceback.
    usable = step > 0 and stop >= start >= 0 and math.isfinite((stop - start) / step)
    count = math.floor((stop - start) / step + 1e-9) + 1 if usable else 0
    if not 0 < count <= 1000:
        raise argparse.ArgumentTypeError(f"--sweep {text}: need finite numbers, 0 <= START <= STOP and STEP > 0, "
                                         f"at most 1000 thresholds")
    return [round(start + i * step, 9) for i in range(count)]


def sweep_of(sweep: list[float] | None, flags: str) -> list[float] | None:
    """`--sweep` given alone (an empty list) is the default range of what `--flags` judges."""
    if sweep == []:
        return parse_sweep(DEFAULT_ALERT_SWEEP if flags == "alert" else DEFAULT_SWEEP)
    return sweep


def given(text: str) -> str:
    """An option's value that is not empty: an empty one (`--history "$DIR"` with DIR unset) read as not given, so
    the run went on without history or metrics, evaluated every point for `--after ''`, and `report --out ''`
    wrote into the current folder, each without a word."""
    if not text:
        raise argparse.ArgumentTypeError("takes a value, not an empty one: ''")
    return text


def output_path(text: str) -> str:
    """--out: a file's path (or a prefix of files), not empty and not a folder's, nor a FIFO's or a device's: the
    output replaces the file at its path, so `--out /dev/null` run as root would replace the device."""
    if not text or text.endswith(os.sep) or os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"takes a file's path, not {'a folder' if text else 'an empty one'}: "
                                         f"{text!r}")
    if special(text):
        raise argparse.ArgumentTypeError(f"takes a regular file's path, not a FIFO's or a device's: {text!r}")
    return text


def prefix_path(*suffixes: str) -> Callable[[str], str]:
    """--out PREFIX: output_path() of PREFIX and of each file it names, checked before anything is written."""
    def parse(text: str) -> str:
        for suffix in ("", *suffixes):
            output_path(text + suffix)
        return text
    return parse


def parse_ips(text: str) -> list[str]:
    ips = [ip.strip() for ip in text.split(",") if ip.strip()]
    if not ips:  # else it would mean every IP
        raise argparse.ArgumentTypeError(f"names no IP: {text!r}")
    return ips


def _number(convert: Callable[[str], N], wanted: str, ok: Callable[[N], bool]) -> Callable[[str], N]:
    """An argparse type: the text converted, if `ok`; argparse's error names the flag before `wanted`."""
    def parse(text: str) -> N:
        try:
            value = convert(text)
            if ok(value):
                return value
        except ValueError:
            pass
        raise argparse.ArgumentTypeError(f"expected {wanted}, not {text!r}")
    return parse


positive_int = _number(int, "a whole number >= 1", lambda value: value >= 1)
whole_number = _number(int, "a whole number >= 0", lambda value: value >= 0)
positive_float = _number(float, "a number > 0", lambda value: value > 0)  # NaN is not


class Parser(argparse.ArgumentParser):
    """Bad arguments exit 2 with one line on stderr, as every other exit 2 does (docs/design.md §5)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def params_of(args: argparse.Namespace) -> Params:
    """The algorithm's knobs a command was given; the others keep Params' defaults."""
    return Params(**_given(Params, args))


def run_options_of(args: argparse.Namespace) -> RunOptions:
    """How a command was told to run its jobs; the rest keeps RunOptions' defaults."""
    return RunOptions(**_given(RunOptions, args))


def _given(kind: type, args: argparse.Namespace) -> dict:
    # Each option's dest is its field's name, so a command's parser decides which fields it sets.
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(kind) if hasattr(args, f.name)}


# Each option that several commands take is declared once, in a parent parser (argparse's parents=). Each
# command gets parents of its own: argparse shares a parent's actions, so one command's default would
# otherwise become every command's.
def _parent(title: str) -> tuple[Parser, argparse._ArgumentGroup]:
    """A parent whose options --help lists under `title`, after the command's own."""
    parent = Parser(add_help=False)
    return parent, parent.add_argument_group(title)


def store_option() -> Parser:
    parent = Parser(add_help=False)
    parent.add_argument("--models", required=True, help="model store folder")
    return parent


def results_option() -> Parser:
    parent = Parser(add_help=False)
    parent.add_argument("--results", required=True, help="the anomalies CSV of a predict run")
    return parent


def run_options(timeout: float = 300.0) -> Parser:
    """The commands that run jobs in workers."""
    parent, group = _parent("workers")
    group.add_argument("--workers", type=positive_int, default=default_workers(),
                       help="worker processes at once (default %(default)s: one per CPU this process may use)")
    group.add_argument("--timeout", type=positive_float, default=timeout,
                       help="seconds per job before its worker is killed (default %(default)g)")
    group.add_argument("--max-worker-memory", dest="max_worker_memory_mib", type=parse_size_mib, default=None,
                       metavar="SIZE",
                       help="kill a worker whose RSS exceeds SIZE, e.g. 1.5GiB (default: available memory / workers)")
    group.add_argument("--retries", type=whole_number, default=1,
                       help="retries for a crashed worker (default %(default)s)")
    return parent


def backend_options() -> Parser:
    parent, group = _parent("backend")
    group.add_argument("--backend", choices=tuple(BACKENDS), default=RunOptions.backend,
                       help="where the workers run (default %(default)s: on this machine)")
    group.add_argument("--ray-address", type=given, default=None, metavar="ADDRESS",
                       help="ray backend: cluster to join, e.g. auto or ray://head:10001 (default: start a local Ray)")
    group.add_argument("--shard-size", type=positive_int, default=None, metavar="N",
                       help="ray backend: IPs per Ray task (default: several shards per Ray slot)")
    return parent


def series_options() -> Parser:
    parent, group = _parent("series")
    group.add_argument("--window", type=positive_int, default=Params.window, metavar="N",
                       help="smoothed points the model reads before each point it predicts (default %(default)s)")
    group.add_argument("--rolling", type=positive_int, default=Params.rolling, metavar="N",
                       help="points of the rolling mean that smooths each series first (default %(default)s)")
    return parent


def layout_option() -> Parser:
    parent, group = _parent("series")
    group.add_argument("--layout", choices=["wide", "long"], default=None,
                       help="of the table: wide (a row per IP) or long (a row per point); default: read from its "
                            "header")
    return parent


def loading_options() -> Parser:
    parent, group = _parent("model loading")
    group.add_argument("--engine", choices=ENGINES, default="auto",
                       help="who computes the forward pass: auto (default: numpy wherever it supports the model, "
                            "else TensorFlow), numpy (an unsupported model is a load_error) or keras (TensorFlow)")
    group.add_argument("--trust-store", action="store_true",
                       help="let the store's files run code: scaler pickles of any class (joblib), Keras Lambda "
                            "layers. Without it they are a load_error naming what they would run")
    return parent


def log_options() -> Parser:
    """Logs go to stderr; -q keeps warnings and the final line."""
    parent, group = _parent("logging")
    group.add_argument("-q", "--quiet", action="store_true", help="only warnings, errors and the final summary")
    group.add_argument("-v", "--verbose", action="store_true")
    group.add_argument("--log-format", choices=logs.FORMATS, default="text",
                       help="text (default) or json: one JSON object a line, for log shippers")
    return parent


def points_options() -> Parser:
    """Which points predict scores, and how it judges them."""
    parent, group = _parent("scoring")
    group.add_argument("--sigmas", type=parse_sigmas, default=Params.sigmas, help="warning,critical (default 2,4)")
    which = group.add_mutually_exclusive_group()
    which.add_argument("--points", type=positive_int, default=Params.points, metavar="N",
                       help="score the last N points of each series, one row each (default 1)")
    which.add_argument("--since", default=None, metavar="LABEL",
                       help="score every point after LABEL: a column header (wide table) or a timestamp as "
                            "written in the table (long); IPs with nothing after it get no rows")
    group.add_argument("--std", default=Params.std, metavar="store|rolling:N|mad:N",
                       help="the std of the bands: std.json's (default), or from the model's residuals over the "
                            "N scored points before each point: their std, or 1.4826 x their median absolute value")
    group.add_argument("--alert", default=Params.alert, metavar="METHOD[:key=value,...]",
                       help="the alerting stage with --points/--since: an `alert` column true at most once per "
                            f"event, at its onset, and a `score` in [0, 1] (default {Params.alert}: Numenta's "
                            "anomaly likelihood on the residuals; a new extreme, a quiet day or a value new to "
                            "its hour; likelihood: the first alone; severity: onsets of critical runs; none: off)")
    step_argument(group)
    group.add_argument("--history", type=given, default=None, metavar="DIR",
                       help="keep each IP's recent values and the model's predictions in DIR between nights, so "
                            "the table needs only the buckets to score and --window + --rolling before them")
    return parent


def step_argument(group: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """--step, for predict's alerting stage and for evaluate's sweep of its score."""
    group.add_argument("--step", type=_duration_text, default=None, metavar="DURATION",
                       help="the series' step that the alert spans (2 days, 8 hours, ...) are counted in, such as "
                            "5m or 1h (default: each series' median label spacing; labels that are not times: 5m)")


def _duration_text(text: str) -> str:
    try:
        parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def monitoring_options() -> Parser:
    parent, group = _parent("monitoring")
    group.add_argument("--metrics-file", type=given, default=None, metavar="PATH.prom",
                       help="write Prometheus metrics of the run here (node_exporter textfile collector)")
    group.add_argument("--progress-interval", type=positive_float, default=30.0, metavar="SECONDS",
                       help="without a terminal, log progress every SECONDS (default 30)")
    return parent
