"""`batchpredict`: parses arguments and calls the library; exit codes are docs/design.md §5's."""
from __future__ import annotations

import argparse
import logging
import math
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeVar

from . import logs
from .commands.evaluation import BASELINES, FLAGS
from .errors import BatchPredictError
from .job import ENGINES, Params, RunOptions, default_workers
from .runtime.backend import BACKENDS
from .status import Status

log = logging.getLogger("batchpredict")
N = TypeVar("N", int, float)

DESCRIPTION = ("Nightly per-IP LSTM anomaly scoring, one isolated worker process per job. Exit codes: 0 every IP "
               "answered, 1 the output is complete but some jobs failed, 2 bad invocation or unreadable input "
               "(nothing written), 74 a disk error writing the output (no space, quota, read-only: the earlier "
               "output is untouched, rerun with --resume), 75 another run holds the output's lock, 128+N stopped "
               "by signal N (rerun with --resume).")

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


DEFAULT_SWEEP = "2:10:0.5"
DEFAULT_ALERT_SWEEP = "0.2:0.8:0.05"


def parse_sweep(text: str) -> list[float]:
    """'2:10:0.5' -> [2.0, 2.5, ..., 10.0]: START to STOP inclusive, by STEP."""
    try:
        start, stop, step = (float(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sweep takes START:STOP:STEP like {DEFAULT_SWEEP}, not {text!r}") from None
    count = math.floor((stop - start) / step + 1e-9) + 1 if step > 0 and stop >= start >= 0 else 0
    if not 0 < count <= 1000:
        raise argparse.ArgumentTypeError(f"--sweep {text}: need 0 <= START <= STOP and STEP > 0, "
                                         f"at most 1000 thresholds")
    return [round(start + i * step, 9) for i in range(count)]


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
    group.add_argument("--max-worker-memory", type=parse_size_mib, default=None, metavar="SIZE",
                       help="kill a worker whose RSS exceeds SIZE, e.g. 1.5GiB (default: available memory / workers)")
    group.add_argument("--retries", type=whole_number, default=1,
                       help="retries for a crashed worker (default %(default)s)")
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


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="batchpredict", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)

    predict = commands.add_parser("predict", help="score every IP of a stats table",
                                  parents=[store_option(), loading_options(), layout_option(), series_options(),
                                           run_options(), log_options()])
    predict.add_argument("--data", required=True, help="stats table (CSV or Parquet, wide or long)")
    predict.add_argument("--out", required=True, help="anomalies CSV to write")
    predict.add_argument("--jobs-per-worker", type=positive_int, default=1,
                         help="jobs a worker runs before it exits (default 1: strict isolation)")
    predict.add_argument("--sigmas", type=parse_sigmas, default=(2.0, 4.0), help="warning,critical (default 2,4)")
    which = predict.add_mutually_exclusive_group()
    which.add_argument("--points", type=positive_int, default=1, metavar="N",
                       help="score the last N points of each series, one row each (default 1)")
    which.add_argument("--since", default=None, metavar="LABEL",
                       help="score every point after LABEL: a column header (wide table) or a timestamp as "
                            "written in the table (long); IPs with nothing after it get no rows")
    predict.add_argument("--std", default="store", metavar="store|rolling:N|mad:N",
                         help="the std of the bands: std.json's (default), or from the model's residuals over the "
                              "N scored points before each point: their std, or 1.4826 x their median absolute value")
    predict.add_argument("--alert", default=Params.alert, metavar="METHOD[:key=value,...]",
                         help="the alerting stage with --points/--since: an `alert` column true at most once per "
                              f"event, at its onset, and a `score` in [0, 1] (default {Params.alert}: Numenta's "
                              "anomaly likelihood on the residuals; a new extreme, a quiet day or a value new to "
                              "its hour; likelihood: the first alone; severity: onsets of critical runs; none: off)")
    predict.add_argument("--resume", action="store_true", help="continue an interrupted run of the same inputs")
    predict.add_argument("--allow-unsealed", action="store_true",
                         help="a store with a manifest.json may hold IPs it does not list (they run unchecked)")
    predict.add_argument("--strict-input", action="store_true",
                         help="an IP with a cell that is neither a number nor a missing mark is invalid_input "
                              "(default: that cell counts as missing, and the log and summary name it)")
    predict.add_argument("--backend", choices=tuple(BACKENDS), default=RunOptions.backend,
                         help="where the workers run (default %(default)s: on this machine)")
    predict.add_argument("--ray-address", default=None, metavar="ADDRESS",
                         help="ray backend: cluster to join, e.g. auto or ray://head:10001 "
                              "(default: start a local Ray)")
    predict.add_argument("--shard-size", type=positive_int, default=None, metavar="N",
                         help="ray backend: IPs per Ray task (default: several shards per Ray slot)")
    predict.add_argument("--metrics-file", default=None, metavar="PATH.prom",
                         help="write Prometheus metrics of the run here (node_exporter textfile collector)")
    predict.add_argument("--progress-interval", type=positive_float, default=30.0, metavar="SECONDS",
                         help="without a terminal, log progress every SECONDS (default 30)")
    predict.set_defaults(func=cmd_predict)

    train = commands.add_parser("train", help="train one model per IP into the store (created if missing)",
                                parents=[store_option(), series_options(), run_options(timeout=1800.0),
                                         log_options()])
    train.add_argument("--data", required=True, help="history table (CSV or Parquet, wide or long)")
    train.add_argument("--format", choices=["h5", "keras", "savedmodel"], default="h5")
    train.add_argument("--epochs", type=positive_int, default=30)
    train.add_argument("--holdout", type=float, default=0.2, help="tail fraction for early stopping and std")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--ips", type=lambda s: [ip.strip() for ip in s.split(",") if ip.strip()], default=None,
                       help="only these IPs, comma-separated")
    train.set_defaults(func=cmd_train)

    report = commands.add_parser("report", help="render an HTML report of a predict run",
                                 parents=[results_option(), layout_option(), series_options(), log_options()])
    report.add_argument("--data", required=True, help="the stats table that run scored")
    report.add_argument("--out", required=True, help="report folder (index.html and plots/)")
    report.add_argument("--top", type=positive_int, default=100, help="plot the N most anomalous IPs (default 100)")
    report.set_defaults(func=cmd_report)

    evaluate = commands.add_parser("evaluate", help="measure the flags of a results CSV against labelled anomaly "
                                                    "windows, beside a rolling z-score baseline",
                                   description="--layout is that of --data and --after; --window and --rolling "
                                               "are the baseline's (values before each point, and its rolling "
                                               "mean, as predict's).",
                                   parents=[results_option(), layout_option(), series_options(), log_options()])
    evaluate.add_argument("--labels", required=True,
                          help="anomaly windows: NAB's combined_windows.json ({series: [[start, end], ...]}, keyed "
                               "by id or by a file name whose stem is the id) or a CSV ip,start,end")
    evaluate.add_argument("--out", default=None, metavar="PREFIX", help="also write PREFIX.csv and PREFIX.json")
    evaluate.add_argument("--sigmas", type=parse_sigmas, default=None,
                          help="warning,critical thresholds in stds (default: the ones the results were made with)")
    evaluate.add_argument("--flags", choices=FLAGS, default=FLAGS[0],
                          help="what to judge: anomaly (default: the seed's flags, at --sigmas) or alert (the alert "
                               "column of predict's alerting stage, beside the baseline at --sigmas)")
    evaluate.add_argument("--sweep", type=parse_sweep, nargs="?", const=[], default=None,
                          metavar="START:STOP:STEP",
                          help=f"evaluate at every threshold of this range instead (default {DEFAULT_SWEEP}; with "
                               f"--flags alert, thresholds of the alert score, default {DEFAULT_ALERT_SWEEP})")
    evaluate.add_argument("--alert", default=Params.alert, metavar="METHOD[:key=value,...]",
                          help="--flags alert --sweep: the method the results were made with, for its rest period "
                               f"(default {Params.alert})")
    evaluate.add_argument("--after", default=None, metavar="TABLE",
                          help="count only the points after each IP's last timestamp in TABLE (e.g. the table "
                               "train read: the points its models never saw)")
    evaluate.add_argument("--baseline", choices=BASELINES, default=None,
                          help="also score a rolling z-score detector over the same points (needs --data)")
    evaluate.add_argument("--data", default=None, help="--baseline: the stats table the results were predicted from")
    evaluate.set_defaults(func=cmd_evaluate)

    store = commands.add_parser("store", help="inspect a model store")
    store_commands = store.add_subparsers(dest="store_command", required=True)
    check = store_commands.add_parser("check", help="list every IP's artefacts, format, Keras version and "
                                                    "timesteps, loading each model in a worker; no prediction",
                                      parents=[store_option(), loading_options(), series_options(), run_options(),
                                               log_options()])
    check.add_argument("--verify", action="store_true",
                       help="also run both engines on a few random windows per IP and report the largest difference")
    check.add_argument("--tolerance", type=positive_float, default=1e-5,
                       help="--verify: exit 1 when max |numpy - keras| / max |keras| exceeds it (default 1e-5)")
    check.set_defaults(func=cmd_store_check)
    seal = store_commands.add_parser("seal", help="write <store>/manifest.json: the sha256 and size of every IP's "
                                                  "files and std, checked by every later run before it reads them",
                                     parents=[store_option(), log_options()])
    seal.set_defaults(func=cmd_store_seal)
    return parser


def cmd_predict(args: argparse.Namespace) -> int:
    from .commands.predict import predict
    from .metrics import write_metrics
    from .progress import Progress

    started = time.time()
    try:
        with Progress(enabled=not args.quiet, interval=args.progress_interval) as progress:
            info = predict(args.data, args.models, args.out,
                                  Params(rolling=args.rolling, window=args.window, sigmas=args.sigmas,
                                         points=args.points, since=args.since, std=args.std, alert=args.alert),
                                  RunOptions(workers=args.workers, jobs_per_worker=args.jobs_per_worker,
                                             timeout=args.timeout, max_worker_memory_mib=args.max_worker_memory,
                                             retries=args.retries, backend=args.backend, resume=args.resume,
                                             layout=args.layout, ray_address=args.ray_address,
                                             shard_size=args.shard_size, engine=args.engine,
                                             trust_store=args.trust_store, allow_unsealed=args.allow_unsealed,
                                             strict_input=args.strict_input),
                                  on_result=progress.update, on_start=progress.start)
    except BatchPredictError as exc:
        if args.metrics_file:  # a run that wrote nothing is the one monitoring most needs to see
            write_metrics(args.metrics_file, None, exc.exit_code, started)
        raise
    rows = f", {info['rows']} rows, {sum(info['events'].values())} events" if info["rows"] != info["ips"] else ""
    rows += f", {info['alerts']} alerts" if "alerts" in info else ""
    skipped = f" ({info['skipped']} skipped: nothing after {args.since})" if info["skipped"] else ""
    logs.final.info(f"batchpredict: {info['ips']} IPs{rows}{skipped} in {info['wall_s']:.1f} s "
                    f"({info['jobs_per_s'] or 0:.1f} jobs/s) -> {args.out}: " + (_counts(info["status"]) or "no rows")
                    + "; severity: "
                    + (_counts(info["severity"]) or "none"), extra={"fields": {"event": "summary", **info}})
    code = 1 if any(Status(s).failed for s in info["status"]) else 0
    if args.metrics_file:
        write_metrics(args.metrics_file, info, code, started)
    return code


def cmd_report(args: argparse.Namespace) -> int:
    from .commands.report import build_report

    done = build_report(args.results, args.data, args.out, args.top, Params(rolling=args.rolling, window=args.window),
                        args.layout)
    logs.final.info(f"batchpredict report: {done.ips} IPs, {done.anomalies} anomalous points in {done.anomalous_ips} "
                    f"IPs, {done.plots} plots -> {done.path}", extra={"fields": {"event": "report", **vars(done)}})
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .commands.evaluation.evaluate import evaluate, format_table, write

    sweep = args.sweep
    if sweep == []:
        sweep = parse_sweep(DEFAULT_ALERT_SWEEP if args.flags == "alert" else DEFAULT_SWEEP)
    done = evaluate(args.results, args.labels, args.sigmas, sweep, args.baseline, args.data, args.layout,
                    Params(rolling=args.rolling, window=args.window, alert=args.alert), args.after, args.flags)
    if not sweep:
        print(format_table(done.metrics) + "\n")
    print(format_table(done.metrics, totals_only=True))
    written = write(done, args.out) if args.out else []
    logs.final.info(f"batchpredict evaluate: {args.results} against {args.labels}"
                    + (f" -> {', '.join(written)}" if written else ""), extra={"fields": {"event": "evaluate"}})
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from .commands.train import train_table

    results = train_table(args.data, args.models, args.format, Params(rolling=args.rolling, window=args.window),
                          args.epochs, args.holdout, args.seed, args.ips,
                          RunOptions(workers=args.workers, timeout=args.timeout,
                                     max_worker_memory_mib=args.max_worker_memory, retries=args.retries))
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
        if r.status is not Status.OK:
            log.warning("%s: %s: %s", r.ip, r.status.value, r.error)
    logs.final.info(f"batchpredict train: {len(results)} IPs -> {args.models}: {_counts(counts)}",
                    extra={"fields": {"event": "summary", "ips": len(results), "status": counts}})
    return 0 if counts.get("ok", 0) == len(results) else 1


def cmd_store_check(args: argparse.Namespace) -> int:
    from .commands.inspection import COLUMNS, check_store, report_rows
    from .io.output import aligned

    rows = check_store(args.models, RunOptions(workers=args.workers, timeout=args.timeout,
                                               max_worker_memory_mib=args.max_worker_memory, retries=args.retries,
                                               engine=args.engine, trust_store=args.trust_store),
                             verify=args.verify, window=args.window)
    print(aligned(COLUMNS, report_rows(rows, args.window)))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status.value] = counts.get(row.status.value, 0) + 1
    verdict, over = "", []
    if args.verify:
        diffs = [row.max_diff for row in rows if row.max_diff is not None]
        over = [row.ip for row in rows if row.max_diff is not None and row.max_diff > args.tolerance]
        verdict = (f"; verified {len(diffs)}, largest difference {max(diffs, default=0.0):.1e}, "
                   f"{len(over)} over {args.tolerance:g}" + (f": {', '.join(over[:10])}" if over else ""))
    trusted = [row.ip for row in rows if "only with --trust-store" in row.error]
    verdict += f"; {len(trusted)} need --trust-store: {', '.join(trusted[:10])}" if trusted else ""
    print(f"batchpredict store check: {len(rows)} IPs in {args.models}: {_counts(counts) or 'none found'}{verdict}",
          file=sys.stderr)
    return 0 if rows and counts.get("ok", 0) == len(rows) and not (args.verify and over) else 1


def cmd_store_seal(args: argparse.Namespace) -> int:
    from .io import manifest
    from .io.store import Store

    store = Store(args.models)
    entries, skipped = store.seal()
    path = manifest.write(store.root, entries)
    for ip, why in skipped.items():
        log.warning("%s: not sealed: %s", ip, why)
    logs.final.info(f"batchpredict store seal: {len(entries)} IPs -> {path}"
                    + (f"; {len(skipped)} without all their artefacts not sealed" if skipped else ""),
                    extra={"fields": {"event": "seal", "ips": len(entries), "skipped": len(skipped)}})
    return 0


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.configure(logging.WARNING if args.quiet else logging.DEBUG if args.verbose else logging.INFO,
                   args.log_format)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except BatchPredictError as exc:
        logs.final.error(f"batchpredict: {exc}", extra={"fields": {"event": "exit", "exit_code": exc.exit_code}})
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
