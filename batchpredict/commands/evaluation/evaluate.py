"""`batchpredict evaluate`: the model's flags, and the baseline's, against the labels at each threshold."""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ...errors import UsageError
from ...io.files import write_atomic
from ...io.output import ALERT_COLUMNS, aligned, write_rows
from ...io.table import Series, read_table
from ...job import Params, check_sigmas
from ...result import Status
from ...rules import REFERENCE, RULES, VALUE_RULES, parse_duration
from ...scoring.alerting import onsets, triggers
from ...scoring.method import ENSEMBLE, median_gap, parse
from ..report import read_results
from ..verdict import Verdict
from . import BASELINES
from .baseline import zscore_points
from .labels import NAT, Labels, parse_times, read_labels
from .measurement import METRICS, TOTAL, WINDOW_COLUMNS, Scored, flags, order_points, place, score
from .nab import STANDARD

log = logging.getLogger("batchpredict")

MODEL = "model"
KEYS = ["detector", "threshold", "level"]
ALERT = "alert"  # the level of the rows judging the alert column (--flags alert)


@dataclass
class Evaluation:
    metrics: pd.DataFrame                 # KEYS + METRICS: each IP, then the TOTAL row, per detector and threshold
    windows: pd.DataFrame                 # KEYS + WINDOW_COLUMNS: every counted window
    warnings: list[str] = field(default_factory=list)
    sources: dict[str, str | None] = field(default_factory=dict)
    unmatched: dict[str, list[str]] = field(default_factory=dict)  # ids on one side only, in full
    raised: pd.DataFrame | None = None    # RAISED_COLUMNS: --flags alert without a sweep, what raised its alerts


def thresholds_of(sigmas: tuple[float, float], sweep: list[float] | None) -> list[tuple[float, str]]:
    """(threshold, level) pairs: the sweep's values, or warning and critical."""
    if sweep:
        return [(value, "") for value in sweep]
    return [(sigmas[0], "warning"), (sigmas[1], "critical")]


def _check_options(baseline: str | None, data: str | None, sigmas: tuple[float, float] | None) -> None:
    """UsageError for options that cannot be evaluated, before anything is read."""
    if baseline and baseline not in BASELINES:
        raise UsageError(f"no baseline {baseline!r}; choose from {', '.join(BASELINES)}")
    if baseline and not data:
        raise UsageError("--baseline needs --data, the table the results were predicted from")
    if sigmas is not None:  # NaN would flag no point, a negative one every point, without a word
        check_sigmas(sigmas, equal=True)


def evaluate(results: str, labels: str, sigmas: tuple[float, float] | None = None, sweep: list[float] | None = None,
             *, baseline: str | None = None, data: str | None = None, layout: str | None = None,
             params: Params = Params(), after: str | None = None, judged: str = "anomaly") -> Evaluation:
    """Read the results and labels, score each detector at each threshold. UsageError for unusable input.

    `sigmas` default to the ones the results were made with (their band columns). With `after` (a table,
    e.g. the one `train` read), only the points after each IP's last timestamp in it count. `judged="alert"`
    judges the results' alert column (level `alert`), a sweep its score (`params.alert` gives the rest
    period), and the baseline at `sigmas`.
    """
    _check_options(baseline, data, sigmas)
    try:
        step = parse_duration(params.step) if params.step else None
    except ValueError as exc:
        raise UsageError(f"--step: {exc}") from None
    frame, made_with = read_results(results)
    if judged == ALERT:
        _has_alerts(frame, results)
    chosen = thresholds_of(sigmas or made_with, None if judged == ALERT else sweep)
    warnings: list[str] = []
    points = _scored_rows(frame, results, warnings, judged == ALERT)
    if judged == ALERT:  # before --after: a swept alert, as predict's, sees the points before the judged ones
        points, times = order_points(points, "results")
        points[ALERT] = points[ALERT] == "true"
        steps = _steps(points, times, step)
        for value in sweep or []:
            points[_swept(value)] = _alerts(points, value, params.alert, steps)
    if after:
        points = _after(points, read_table(after, layout), after, warnings)
    marks = read_labels(labels)
    warnings += marks.warnings
    points, unmatched = _match(points, marks, warnings)

    detectors = {MODEL: place(points, marks)}
    if baseline and data:
        table = read_table(data, layout)
        model = detectors[MODEL]
        detectors[baseline] = place(zscore_points(model.frame, table, Params(params.rolling, params.window,
                                                                          sigmas or made_with)), marks)
    runs = [(name, value, level, scored) for value, level in chosen for name, scored in detectors.items()
            if not (judged == ALERT and name == MODEL)]
    if judged == ALERT:
        model = detectors[MODEL]
        runs = [(MODEL, value, ALERT, model) for value in (sweep or [math.nan])] + runs
    metrics, windows = [], []
    for name, value, level, scored in runs:
        flagged = (scored.frame[ALERT if math.isnan(value) else _swept(value)].to_numpy(dtype=bool)
                   if level == ALERT else flags(scored, value))
        per_ip, per_window = score(scored, flagged)
        keys = {"detector": name, "threshold": value, "level": level}
        metrics.append(per_ip.assign(**keys)[KEYS + METRICS])
        windows.append(per_window.assign(**keys)[KEYS + WINDOW_COLUMNS])
    for line in warnings:
        log.warning("evaluate: %s", line)
    return Evaluation(pd.concat(metrics, ignore_index=True), pd.concat(windows, ignore_index=True), warnings,
                      {"results": results, "labels": labels, **({"data": data} if baseline else {}),
                       **({"after": after} if after else {})}, unmatched,
                      raised_by(detectors[MODEL]) if judged == ALERT and not sweep else None)


RAISED_COLUMNS = ["alert_source", "in_window", "outside"]


def raised_by(scored: Scored) -> pd.DataFrame:
    """RAISED_COLUMNS: per rule (`alert_source`, every one of them), the alert column's alerts in one of their
    IP's windows and outside every one (false pages): which rule to look at when the pages are too many."""
    alert = scored.frame[ALERT].to_numpy(dtype=bool)
    source = scored.frame["alert_source"].to_numpy(dtype=object)[alert]
    inside = scored.window[alert] >= 0
    return pd.DataFrame([[rule, int(((source == rule) & inside).sum()), int(((source == rule) & ~inside).sum())]
                         for rule in RULES if rule], columns=RAISED_COLUMNS)


def _swept(threshold: float) -> str:
    return f"{ALERT}@{threshold!r}"


def _alerts(points: pd.DataFrame, threshold: float, method: str, steps: np.ndarray) -> np.ndarray:
    """The alerts the score gives at `threshold`, over points grouped by IP in time order: onsets of the
    points at or above it (critical ones where the score fell back), with the method's rest period counted
    at each point's IP's step (`steps`, seconds); for the ensemble,
    without the likelihood's daily repeats and with the alerts its value rules raised (`alert_source`) as they
    are. A sweep sees only the results' points, so in an IP's first rows it may alert where predict, seeing the
    history before them, did not."""
    found = parse(method)
    if found is None or found.name == "severity":
        raise UsageError(f"a sweep of the alert score needs --alert likelihood or ensemble[:...], not {method!r}")
    first = _firsts(points)
    value = pd.to_numeric(points["score"], errors="coerce").to_numpy(dtype=float)
    critical = (points["severity"] == "critical").to_numpy()
    ruled = points[ALERT].to_numpy(dtype=bool) & points["alert_source"].isin(VALUE_RULES).to_numpy()
    alerts = np.zeros(len(first), dtype=bool)
    for step in np.unique(steps):  # the IPs of one step together: their spans are the same counts
        at = np.flatnonzero(steps == step)
        spans = replace(found.at(float(step)), threshold=threshold)
        local = np.searchsorted(at, first[at])  # each IP's first row, among the rows of its step
        trigger = triggers(value[at], ~np.isnan(value[at]), critical[at], spans, first=local)
        onset = onsets(trigger, spans.rest, local)
        alerts[at] = onsets(onset | ruled[at], spans.rest, local) if spans.name == ENSEMBLE else onset
    return alerts


def _firsts(points: pd.DataFrame) -> np.ndarray:
    """Per point of points grouped by IP, the index of its IP's first point."""
    code = pd.factorize(points["ip"])[0]
    starts = np.flatnonzero(np.diff(code, prepend=-1))
    return np.repeat(starts, np.diff(np.append(starts, len(code))))


def _steps(points: pd.DataFrame, times: np.ndarray, step: float | None) -> np.ndarray:
    """Per point, its IP's step in seconds: `step` (--step) where given, else the median spacing of its
    IP's points (`times`, ns; REFERENCE for a single point)."""
    if step is not None:
        return np.full(len(times), step)
    steps = np.full(len(times), REFERENCE)
    first = _firsts(points)
    for start in np.unique(first):
        end = int(np.searchsorted(first, start, side="right"))
        steps[start:end] = median_gap(times[start:end]) / 1e9 or REFERENCE
    return steps


def _has_alerts(frame: pd.DataFrame, path: str) -> None:
    if ALERT not in frame:
        raise UsageError(f"{path} has no alert column: predict with --points N or --since, and --alert on")
    if lost := [c for c in ALERT_COLUMNS if c not in frame]:
        raise UsageError(f"{path} has an alert column but not {', '.join(lost)}: predict it again")


def _scored_rows(frame: pd.DataFrame, path: str, warnings: list[str], alert: bool = False) -> pd.DataFrame:
    scored = (frame["status"] == Status.OK.value) & frame["predicted"].notna()
    if not scored.any():
        raise UsageError(f"{path} has no scored rows (status ok with a prediction) to evaluate")
    if not scored.all():
        warnings.append(f"{int((~scored).sum())} rows of {path} were not scored (status other than ok); "
                        f"left out")
    columns = ["ip", "timestamp", "observed", "predicted", "std", "severity"] + ALERT_COLUMNS * alert
    return frame.loc[scored, columns].reset_index(drop=True)


def _after(points: pd.DataFrame, table: list[Series], path: str, warnings: list[str]) -> pd.DataFrame:
    """The points later than their IP's last timestamp in `table`: those its model never saw in training."""
    ends = dict(zip([s.ip for s in table], parse_times([s.labels[-1] if s.labels else "" for s in table]), strict=True))
    if NAT in ends.values():
        ip = next(ip for ip, end in ends.items() if end == NAT)
        raise UsageError(f"--after {path}: the last timestamp of {ip} is not a date")
    end = points["ip"].map(ends).to_numpy(dtype=float)  # NaN: an IP the table does not have keeps every point
    keep = ~(parse_times(points["timestamp"]) <= end)
    if not keep.any():
        raise UsageError(f"--after {path}: no scored point is later than its IP's last timestamp there")
    if not keep.all():
        warnings.append(f"--after {path}: {int((~keep).sum())} points at or before their IP's last timestamp "
                        f"there left out")
    return points[keep].reset_index(drop=True)


def _match(points: pd.DataFrame, marks: Labels, warnings: list[str]) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """Drop the IPs whose labels were unusable; name the ids on one side only (a line each way)."""
    ips = points["ip"].unique().tolist()
    if marks.excluded:
        points = points[~points["ip"].isin(list(marks.excluded))].reset_index(drop=True)
        if points.empty:
            raise UsageError("every IP of the results has unusable labels: "
                             + "; ".join(f"{ip}: {why}" for ip, why in marks.excluded.items()))
    scored = set(ips)
    if marks.windows and scored.isdisjoint(marks.windows):  # the wrong labels for these results: nothing to judge
        raise UsageError(f"no label id names an IP of the results: labels for {_some(list(marks.windows), 3)}; "
                         f"results for {_some(ips, 3)}")
    unmatched = {"label_ids_not_in_results": [ident for ident in marks.windows if ident not in scored],
                 "ips_without_labels": [ip for ip in ips if ip not in marks.windows and ip not in marks.excluded]}
    if unmatched["label_ids_not_in_results"]:
        warnings.append(f"{len(unmatched['label_ids_not_in_results'])} label ids have no scored point in the "
                        f"results, their windows are not counted: {_some(unmatched['label_ids_not_in_results'])}")
    if unmatched["ips_without_labels"]:
        warnings.append(f"{len(unmatched['ips_without_labels'])} IPs have no labels and are scored with no window "
                        f"(false alarms only): {_some(unmatched['ips_without_labels'])}")
    return points, unmatched


def _some(names: list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


TABLE_COLUMNS = ["threshold", "detector", "ip", "recall", "false alarm points/day", "false alarm events/day",
                 "precision", "F1", "mean delay", "NAB"]


def format_table(metrics: pd.DataFrame, totals_only: bool = False) -> str:
    """The metrics as aligned text: one line per detector, threshold and IP (or only the totals)."""
    rows = metrics[metrics["ip"] == TOTAL] if totals_only else metrics
    lines = [[_threshold(r.threshold, r.level), r.detector, "total" if r.ip == TOTAL else r.ip,
              f"{r.detected}/{r.windows}" + ("" if r.windows == 0 else f" ({r.recall:.0%})"),
              _num(r.false_alarm_points_per_day, 1), _num(r.false_alarm_events_per_day, 2), _num(r.precision, 2),
              _num(r.f1, 2), "" if math.isnan(r.mean_delay_minutes) else f"{r.mean_delay_minutes:.0f} min",
              _num(r.nab_score, 1)] for r in rows.itertuples()]
    return aligned(TABLE_COLUMNS, lines)


def format_raised(raised: pd.DataFrame) -> str:
    """What raised the alerts, as aligned text: a line per rule, and the total."""
    lines = [[r.alert_source, str(r.in_window), str(r.outside)] for r in raised.itertuples()]
    total = ["total", str(int(raised["in_window"].sum())), str(int(raised["outside"].sum()))]
    return aligned(["raised by", "alerts in a window", "outside any (false pages)"], [*lines, total])


def _threshold(value: float, level: str) -> str:
    if level == ALERT:
        return ALERT if math.isnan(value) else f"score {value:g}"
    return f"{value:g}σ" + (f" ({level})" if level else "")


def _num(value: float, digits: int) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def verdict(results: str, labels: str, written: list[str]) -> Verdict:
    return Verdict(line=f"batchpredict evaluate: {results} against {labels}"
                        + (f" -> {', '.join(written)}" if written else ""), fields={"event": "evaluate"})


def write(evaluation: Evaluation, prefix: str) -> list[str]:
    """PREFIX.csv (the metrics) and PREFIX.json (metrics, windows, warnings, sources); the paths written."""
    metrics = evaluation.metrics.astype(object).where(evaluation.metrics.notna(), None)
    write_rows(prefix + ".csv", list(metrics.columns), metrics.values.tolist())
    document = {
        **evaluation.sources,
        "nab_profile": vars(STANDARD),
        "warnings": evaluation.warnings,
        **evaluation.unmatched,
        "metrics": _records(evaluation.metrics),
        "windows": _records(evaluation.windows),
        **({"raised": _records(evaluation.raised)} if evaluation.raised is not None else {}),
    }
    write_atomic(prefix + ".json", json.dumps(document, indent=1, allow_nan=False) + "\n")
    return [prefix + ".csv", prefix + ".json"]


def _records(frame: pd.DataFrame) -> list[dict]:
    clean = frame.astype(object).where(frame.notna(), None)
    return [{k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()}
            for row in clean.to_dict("records")]

