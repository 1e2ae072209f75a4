"""`batchpredict`: parses arguments and calls the library; exit codes are docs/design.md §5's."""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from collections.abc import Sequence

from . import arguments as opt
from . import logs
from .commands.evaluation import BASELINES, FLAGS
from .commands.verdict import Verdict
from .errors import BatchPredictError, one_line
from .job import Params

DESCRIPTION = ("Nightly per-IP LSTM anomaly scoring, one isolated worker process per job. Exit codes: 0 every IP "
               "answered, 1 the output is complete but some jobs failed, 2 bad invocation or unreadable input "
               "(nothing written), 74 a disk error writing the output (no space, quota, read-only: the earlier "
               "output is untouched, rerun with --resume), 75 another run holds the output's lock, 128+N stopped "
               "by signal N (rerun with --resume).")
Commands = argparse._SubParsersAction


def _predict(commands: Commands) -> None:
    predict = commands.add_parser("predict", help="score every IP of a stats table",
                                  parents=[opt.store_option(), opt.loading_options(), opt.layout_option(),
                                           opt.series_options(), opt.points_options(), opt.run_options(),
                                           opt.backend_options(), opt.monitoring_options(), opt.log_options()])
    predict.add_argument("--data", required=True, help="stats table (CSV or Parquet, wide or long)")
    predict.add_argument("--out", required=True, type=opt.output_path, help="anomalies CSV to write")
    predict.add_argument("--jobs-per-worker", type=opt.positive_int, default=1,
                         help="jobs a worker runs before it exits (default 1: strict isolation)")
    predict.add_argument("--resume", action="store_true", help="continue an interrupted run of the same inputs")
    predict.add_argument("--allow-unsealed", action="store_true",
                         help="a store with a manifest.json may hold IPs it does not list (they run unchecked)")
    predict.add_argument("--strict-input", action="store_true",
                         help="an IP with a cell that is neither a number nor a missing mark is invalid_input "
                              "(default: that cell counts as missing, and the log and summary name it)")
    predict.set_defaults(func=cmd_predict)


def _train(commands: Commands) -> None:
    train = commands.add_parser("train", help="train one model per IP into the store (created if missing)",
                                parents=[opt.store_option(), opt.series_options(), opt.run_options(timeout=1800.0),
                                         opt.log_options()])
    train.add_argument("--data", required=True, help="history table (CSV or Parquet, wide or long)")
    train.add_argument("--format", choices=["h5", "keras", "savedmodel"], default="h5")
    train.add_argument("--epochs", type=opt.positive_int, default=30)
    train.add_argument("--holdout", type=float, default=0.2, help="tail fraction for early stopping and std")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--ips", type=opt.parse_ips, default=None, help="only these IPs, comma-separated")
    train.set_defaults(func=cmd_train)


def _report(commands: Commands) -> None:
    report = commands.add_parser("report", help="render an HTML report of a predict run",
                                 parents=[opt.results_option(), opt.layout_option(), opt.series_options(),
                                          opt.log_options()])
    report.add_argument("--data", required=True, help="the stats table that run scored")
    report.add_argument("--out", required=True, type=opt.given, help="report folder (index.html and plots/)")
    report.add_argument("--top", type=opt.positive_int, default=100, help="plot the N most anomalous IPs (default 100)")
    report.set_defaults(func=cmd_report)


def _evaluate(commands: Commands) -> None:
    evaluate = commands.add_parser(
        "evaluate", help="measure the flags of a results CSV against labelled anomaly windows, beside a rolling "
                         "z-score baseline",
        description="--layout is that of --data and --after; --window and --rolling are the baseline's (values "
                    "before each point, and its rolling mean, as predict's).",
        parents=[opt.results_option(), opt.layout_option(), opt.series_options(), opt.log_options()])
    evaluate.add_argument("--labels", required=True,
                          help="anomaly windows: NAB's combined_windows.json ({series: [[start, end], ...]}, keyed "
                               "by id or by a file name whose stem is the id) or a CSV ip,start,end")
    evaluate.add_argument("--out", default=None, type=opt.prefix_path(".csv", ".json"), metavar="PREFIX",
                          help="also write PREFIX.csv and PREFIX.json")
    evaluate.add_argument("--sigmas", dest="thresholds", type=opt.parse_sigmas, default=None,
                          help="warning,critical thresholds in stds (default: the ones the results were made with)")
    evaluate.add_argument("--flags", choices=FLAGS, default=FLAGS[0],
                          help="what to judge: anomaly (default: the ±sigma flags, at --sigmas) or alert (the alert "
                               "column of predict's alerting stage, beside the baseline at --sigmas)")
    evaluate.add_argument("--sweep", type=opt.parse_sweep, nargs="?", const=[], default=None, metavar="START:STOP:STEP",
                          help=f"evaluate at every threshold of this range instead (default {opt.DEFAULT_SWEEP}; with "
                               f"--flags alert, thresholds of the alert score, default {opt.DEFAULT_ALERT_SWEEP})")
    evaluate.add_argument("--alert", default=Params.alert, metavar="METHOD[:key=value,...]",
                          help="--flags alert --sweep: the method the results were made with, for its rest period "
                               f"(default {Params.alert})")
    opt.step_argument(evaluate)
    evaluate.add_argument("--after", type=opt.given, default=None, metavar="TABLE",
                          help="count only the points after each IP's last timestamp in TABLE (e.g. the table "
                               "train read: the points its models never saw)")
    evaluate.add_argument("--baseline", choices=BASELINES, default=None,
                          help="also score a rolling z-score detector over the same points (needs --data)")
    evaluate.add_argument("--data", type=opt.given, default=None,
                          help="--baseline: the stats table the results were predicted from")
    evaluate.set_defaults(func=cmd_evaluate)


def _store(commands: Commands) -> None:
    store = commands.add_parser("store", help="inspect a model store").add_subparsers(dest="store_command",
                                                                                      required=True)
    check = store.add_parser("check", help="list every IP's artefacts, format, Keras version and timesteps, loading "
                                           "each model in a worker; no prediction",
                             parents=[opt.store_option(), opt.loading_options(), opt.series_options(),
                                      opt.run_options(), opt.log_options()])
    check.add_argument("--verify", action="store_true",
                       help="also run both engines on a few random windows per IP and report the largest difference")
    check.add_argument("--tolerance", type=opt.positive_float, default=1e-5,
                       help="--verify: exit 1 when max |numpy - keras| / max |keras| exceeds it (default 1e-5)")
    check.set_defaults(func=cmd_store_check)
    store.add_parser("seal", help="write <store>/manifest.json: the sha256 and size of every IP's files and std, "
                                  "checked by every later run before it reads them",
                     parents=[opt.store_option(), opt.log_options()]).set_defaults(func=cmd_store_seal)


def build_parser() -> argparse.ArgumentParser:
    parser = opt.Parser(prog="batchpredict", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)
    for add in (_predict, _train, _report, _evaluate, _store):
        add(commands)
    return parser


def cmd_predict(args: argparse.Namespace) -> int:
    from .commands.predict import predict, verdict
    from .metrics import record
    from .progress import Progress

    started = time.time()
    try:
        with Progress(enabled=not args.quiet, interval=args.progress_interval) as progress:
            info = predict(args.data, args.models, args.out, opt.params_of(args), options=opt.run_options_of(args),
                           on_result=progress.update, on_start=progress.start)
    except BatchPredictError as exc:
        if args.metrics_file:  # a run that wrote nothing is the one monitoring most needs to see
            record(args.metrics_file, None, exc.exit_code, started)
        raise
    done = verdict(info, args.out, args.since)
    if args.metrics_file:
        record(args.metrics_file, info, done.code, started)
    return _said(done)


def cmd_report(args: argparse.Namespace) -> int:
    from .commands.report import build_report, verdict

    return _said(verdict(build_report(args.results, args.data, args.out, args.top, params=opt.params_of(args),
                                      layout=args.layout)))


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .commands.evaluation.evaluate import evaluate, format_raised, format_table, verdict, write

    sweep = opt.sweep_of(args.sweep, args.flags)
    done = evaluate(args.results, args.labels, args.thresholds, sweep, baseline=args.baseline, data=args.data,
                    layout=args.layout, params=opt.params_of(args), after=args.after, judged=args.flags)
    if not sweep:
        print(format_table(done.metrics) + "\n")
    print(format_table(done.metrics, totals_only=True))
    if done.raised is not None:
        print("\n" + format_raised(done.raised))
    return _said(verdict(args.results, args.labels, write(done, args.out) if args.out else []))


def cmd_train(args: argparse.Namespace) -> int:
    from .commands.train import train_table, verdict

    results = train_table(args.data, args.models, args.format, opt.params_of(args), epochs=args.epochs,
                          holdout=args.holdout, seed=args.seed, ips=args.ips, options=opt.run_options_of(args))
    return _said(verdict(results, args.models))


def cmd_store_check(args: argparse.Namespace) -> int:
    from .commands.inspection import COLUMNS, check_store, report_rows, verdict
    from .io.output import aligned

    rows = check_store(args.models, opt.run_options_of(args), verify=args.verify, window=args.window)
    print(aligned(COLUMNS, report_rows(rows, args.window)))
    done = verdict(rows, args.models, verify=args.verify, tolerance=args.tolerance)
    print(one_line(done.line), file=sys.stderr)  # after the table on stdout, unlogged: the table is the output
    return done.code


def cmd_store_seal(args: argparse.Namespace) -> int:
    from .commands.inspection import seal

    return _said(seal(args.models))


def _said(done: Verdict) -> int:
    logs.final.info(done.line, extra={"fields": done.fields})
    return done.code


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure(logging.WARNING if args.quiet else logging.DEBUG if args.verbose else logging.INFO,
                   args.log_format)
    try:
        return int(args.func(args))
    except BatchPredictError as exc:
        logs.final.error(f"batchpredict: {exc}", extra={"fields": {"event": "exit", "exit_code": exc.exit_code}})
        return exc.exit_code
    except KeyboardInterrupt:  # before a command installs its handlers (its imports take a second): nothing written
        code = 128 + signal.SIGINT
        logs.final.error("batchpredict: stopped by SIGINT", extra={"fields": {"event": "exit", "exit_code": code}})
        return code


if __name__ == "__main__":
    sys.exit(main())
