"""A self-contained HTML report of a run: counts, failures, slowest jobs, one plot per anomaly.

Reads only files (the results CSV and the stats table); never imports TensorFlow.
"""
from __future__ import annotations

import hashlib
import html
import json
import logging
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

import numpy as np
import pandas as pd

from ..errors import JobError, UsageError, writing
from ..io.files import replaced, write_atomic
from ..io.output import columns, events
from ..io.readers import read_text_records
from ..io.table import read_table
from ..job import Params, check_sigmas
from ..result import Severity, Status
from ..scoring.features import rolling_series
from .verdict import Verdict

log = logging.getLogger("batchpredict")

PLOTS = "plots"
SEVERITY_COLOURS = {"normal": "#2da44e", "warning": "#d29922", "critical": "#cf222e"}
LISTED = 200  # rows per table of failures / unscored IPs; the counts above stay complete
LISTED_ANOMALIES = 1000  # flagged points listed, worst first
TEXT_COLUMNS = ["ip", "timestamp", "std_source", "anomaly", "severity", "status", "error", "model", "alert",
                "alert_source"]
FAILED = {s.value for s in Status if s.failed}


@dataclass(kw_only=True)
class Report:
    path: str       # index.html
    ips: int
    anomalies: int  # flagged points
    anomalous_ips: int
    plots: int      # one per anomalous IP, up to --top


def verdict(done: Report) -> Verdict:
    return Verdict(line=f"batchpredict report: {done.ips} IPs, {done.anomalies} anomalous points in "
                        f"{done.anomalous_ips} IPs, {done.plots} plots -> {done.path}",
                   fields={"event": "report", **vars(done)})


def read_results(path: str) -> tuple[pd.DataFrame, tuple[float, float]]:
    """The results CSV with numeric columns as numbers, and the sigmas its band columns name."""
    frame, bad = read_text_records(path, "results")
    if bad:  # a file batchpredict wrote has none: it was edited or cut, and its columns cannot be trusted
        raise UsageError(f"results {path}: {bad[0].problem(len(frame.columns))}"
                         + (f" (and {len(bad) - 1} more such lines)" if len(bad) > 1 else ""))
    names = [m.group(1) for c in frame.columns if (m := re.fullmatch(r"lower_(.+)std", c))]
    if len(names) != 2:
        raise UsageError(f"{path} is not a batchpredict results CSV (missing bands)")
    try:  # predict names the bands after its checked --sigmas: anything else (`lower_nanstd`) was edited in
        sigmas = (float(names[0]), float(names[1]))
        check_sigmas(sigmas)
    except (ValueError, UsageError):  # a ValueError traceback, or NaN sigmas that judged no point without a word
        raise UsageError(f"{path} is not a batchpredict results CSV: its band columns lower_{names[0]}std and "
                         f"lower_{names[1]}std name no warning and critical sigmas") from None
    # Every column predict writes: the report reads most of them (a KeyError or AttributeError traceback without).
    missing = [c for c in columns(sigmas) if c not in frame]
    if missing:
        raise UsageError(f"{path} is not a batchpredict results CSV (missing {', '.join(missing)})")
    numeric = [c for c in frame.columns if c not in TEXT_COLUMNS]
    frame[numeric] = frame[numeric].apply(lambda col: pd.to_numeric(col, errors="coerce"))
    return frame, sigmas


def build_report(results: str, data: str, out_dir: str, top: int = 100, *, params: Params = Params(),
                 layout: str | None = None) -> Report:
    """Write `out_dir/index.html` and `out_dir/plots/*.png` for the `top` most anomalous IPs, each
    plot showing every point of the IP that was scored, flagged ones marked."""
    frame, sigmas = read_results(results)
    if frame.empty:  # a --since run that found nothing after its label writes only the header
        raise UsageError(f"{results} has no rows to report")
    anomalous = _ranked_anomalies(frame)
    plotted = list(dict.fromkeys(anomalous["ip"]))[:top]  # each IP ranked by its worst point
    series = {s.ip: s for s in read_table(data, layout, ips=set(plotted))}
    _plots_folder(out_dir)
    scored = frame[frame["ip"].isin(plotted) & frame["predicted"].notna()]
    points = dict(tuple(scored.groupby("ip", sort=False)))
    images: dict[str, str] = {}
    for ip in plotted:
        found = series.get(ip)
        if found is None:
            log.warning("report: %s is not in %s; no plot", ip, data)
            continue
        if ip not in points:  # flagged, but no row of it holds a predicted number: an edited or damaged file
            log.warning("report: %s has no predicted value in %s; no plot", ip, results)
            continue
        name = plot_name(ip)
        path = os.path.join(out_dir, name)
        try:
            with writing(path):
                plot(path, points[ip], found.labels, found.values, params=params, sigmas=sigmas)
        except JobError as exc:  # the table given is not the one that was scored
            log.warning("report: %s: no plot: %s", ip, exc)
            continue
        images[ip] = name
    page = os.path.join(out_dir, "index.html")
    with writing(page):
        write_atomic(page, render(frame, anomalous, images, results, summary=_read_summary(results)))
    return Report(path=page, ips=frame["ip"].nunique(), anomalies=len(anomalous),
                  anomalous_ips=anomalous["ip"].nunique(), plots=len(images))


def _plots_folder(out_dir: str) -> None:
    """Make `out_dir/plots`, without a previous report's plots (they would linger unlinked). A disk that takes
    nothing is exit 74, as for predict's output; an --out that is no folder exit 2."""
    plots = os.path.join(out_dir, PLOTS)
    try:
        with writing(plots):
            os.makedirs(plots, exist_ok=True)
            for old in os.listdir(plots):
                if old.endswith(".png"):
                    os.unlink(os.path.join(plots, old))
    except OSError as exc:  # what writing() leaves: a file where a folder should be, a name too long, ...
        raise UsageError(f"cannot make the report folder {plots} (--out {out_dir}): {exc.strerror or exc}") from None


def _ranked_anomalies(frame: pd.DataFrame) -> pd.DataFrame:
    """Anomalous rows, critical first, then by distance from the prediction in σ."""
    rows = frame[frame["anomaly"] == "true"].copy()
    rows["z"] = (rows["observed"] - rows["predicted"]) / rows["std"].where(rows["std"] > 0)
    rows["_rank"] = rows["severity"].map({"critical": 0, "warning": 1}).fillna(2)
    rows["_abs"] = rows["z"].abs().fillna(np.inf)
    return rows.sort_values(["_rank", "_abs"], ascending=[True, False], kind="stable")


def plot_name(ip: str) -> str:
    """A file name safe on any file system and in a URL, unique per IP."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", ip)[:80]
    return f"{PLOTS}/{safe}-{hashlib.sha1(ip.encode()).hexdigest()[:8]}.png"


def plot(path: str, scored: pd.DataFrame, labels: list[str], values: np.ndarray, *, params: Params,
         sigmas: tuple[float, float]) -> None:
    """Raw series, rolling mean, the prediction with its bands at each scored point (one point: over
    the window before it), and each flagged point's observed value by severity."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    where = {label: i for i, label in enumerate(labels)}
    unknown = [t for t in scored["timestamp"] if t not in where]
    if unknown:
        raise JobError(Status.INVALID_INPUT, f"results are for {unknown[0]}, which the table does not have")
    at = np.array([where[t] for t in scored["timestamp"]])
    span, take = (at, np.arange(len(at))) if len(at) > 1 else \
        (np.array([max(params.rolling - 1, at[0] - params.window), at[0] + 0.5]), np.zeros(2, dtype=int))
    low, high = (f"{k:g}" for k in sigmas)
    x = np.arange(len(values))
    smooth = rolling_series(values, params.rolling)
    fig = Figure(figsize=(8, 3.2), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for k, alpha, order in ((low, 0.25, 1), (high, 0.12, 0)):
        ax.fill_between(span, scored[f"lower_{k}std"].to_numpy()[take], scored[f"upper_{k}std"].to_numpy()[take],
                        color="#54aeff", alpha=alpha, lw=0, label=f"{k}σ band", zorder=order)
    ax.plot(x, values, color="#8c959f", lw=1, label="raw", zorder=2)
    ax.plot(x[params.rolling - 1:], smooth, color="#0969da", lw=1.8, label=f"rolling mean ({params.rolling})",
            zorder=3)
    ax.plot(span, scored["predicted"].to_numpy()[take], color="#24292f", lw=1, ls="--", zorder=4)
    flagged = (scored["anomaly"] == "true").to_numpy()
    ax.plot(at[flagged], scored["predicted"][flagged], marker="D", color="#24292f", ls="", label="predicted",
            zorder=5)
    for severity in ("warning", "critical"):
        mask = (scored["severity"] == severity).to_numpy()
        if mask.any():
            ax.plot(at[mask], scored["observed"][mask], marker="o", ms=9 if len(at) == 1 else 6,
                    color=SEVERITY_COLOURS[severity], ls="", label=f"observed ({severity})", zorder=6)
    ax.xaxis.set_major_locator(MaxNLocator(6, integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: labels[int(v)] if 0 <= int(v) < len(labels) else ""))
    ax.tick_params(axis="x", labelsize=7)
    worst = _ranked_anomalies(scored).iloc[0] if flagged.any() else scored.iloc[-1]
    more = f"  ({flagged.sum()} of {len(at)} scored points flagged)" if len(at) > 1 else ""
    ax.set_title(f"{worst['ip']}  {worst['timestamp']}  {worst['severity']}{more}", fontsize=10, loc="left")
    ax.legend(fontsize=7, loc="best", ncols=3, framealpha=0.8)
    ax.grid(alpha=0.3)
    with replaced(path, keep_suffix=True, durable=False) as tmp:  # a full disk leaves no half PNG
        fig.savefig(tmp)


def _read_summary(results: str) -> dict:
    try:
        with open(results + ".summary.json") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def _fmt(value: object, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return ""
    if isinstance(value, (float, np.floating)):
        return f"{value:,.{digits}f}"
    return str(value)


def _anchor(src: str) -> str:
    return os.path.splitext(os.path.basename(src))[0]  # plot_name() made it safe


def _table(headers: list[str], rows: Sequence[Sequence[object]], css: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _e(value: object, digits: int = 2) -> str:
    return html.escape(_fmt(value, digits))


def _rows_table(frame: pd.DataFrame, title: str, anchor: str, note: str) -> str:
    if frame.empty:
        return f'<section id="{anchor}"><h2>{title}</h2><p class="none">None.</p></section>'
    shown = frame.head(LISTED)
    rows = [[f'<code>{_e(r.ip)}</code>', f'<span class="status {_e(r.status)}">{_e(r.status)}</span>',
             _e(r.error), _e(r.attempts, 0), _e(r.duration_ms, 0)] for r in shown.itertuples()]
    more = f"<p>… and {len(frame) - LISTED} more in the CSV.</p>" if len(frame) > LISTED else ""
    return (f'<section id="{anchor}"><h2>{title} ({len(frame)})</h2><p>{note}</p>'
            + _table(["IP", "status", "error", "attempts", "ms"], rows) + more + "</section>")


def render(frame: pd.DataFrame, anomalous: pd.DataFrame, images: dict[str, str], results: str, *,
           summary: dict) -> str:
    """The page: inline CSS, relative image paths, and a self-check that marks broken images."""
    ips = frame.drop_duplicates("ip")  # an IP's rows share its status, error and timing
    status_counts = ips["status"].value_counts()
    severity_counts = frame["severity"].value_counts()
    event_counts = events(frame)["peak_severity"].value_counts()
    status_rows = [[f'<span class="status {s.value}">{s.value}</span>', int(status_counts.get(s.value, 0)),
                    "failed" if s.failed else ""] for s in Status]
    severity_rows = [[f'<span class="sev {s.value}">{s.value}</span>', int(severity_counts.get(s.value, 0)),
                      int(event_counts.get(s.value, 0)) if s is not Severity.NORMAL else ""] for s in Severity]
    failed = ips[ips["status"].isin(FAILED)]
    unscored = ips[~ips.index.isin(failed.index) & (ips["status"] != Status.OK.value)]
    slowest = ips.dropna(subset=["duration_ms"]).nlargest(10, "duration_ms")
    anomaly_rows = [[f'<code>{_e(r.ip)}</code>', f'<span class="sev {_e(r.severity)}">{_e(r.severity)}</span>',
                     _e(r.timestamp), _e(r.observed), _e(r.predicted), _e(r.std),
                     f"{r.z:+.1f}σ" if np.isfinite(r.z) else "",
                     f'<a href="#{_anchor(images[r.ip])}">plot</a>' if r.ip in images else ""]
                    for r in anomalous.head(LISTED_ANOMALIES).itertuples()]
    figures = "".join(
        f'<figure id="{_anchor(src)}"><img src="{_e(quote(src))}" alt="{_e(ip)}" width="800" height="320">'
        "</figure>" for ip, src in images.items())
    meta = [f"results <code>{_e(os.path.basename(results))}</code>", f"{len(ips)} IPs"]
    if len(frame) > len(ips):
        meta.append(f"{len(frame)} rows")
    if "alert" in frame:
        meta.append(f"{int((frame['alert'] == 'true').sum())} alerts")
    if summary:
        meta += [f"wall {_e(summary.get('wall_s'))} s", f"{_e(summary.get('jobs_per_s'))} jobs/s",
                 f"peak worker RSS {_e(summary.get('worker_peak_rss_mib'), 0)} MiB"]
    meta.append("generated " + _e(time.strftime("%Y-%m-%d %H:%M:%S %Z")))
    not_plotted = anomalous["ip"].nunique() - len(images)
    unlisted = len(anomalous) - LISTED_ANOMALIES
    return PAGE.format(
        title=_e(f"batchpredict report: {os.path.basename(results)}"),
        meta=" · ".join(meta),
        status=_table(["status", "IPs", ""], status_rows, "counts"),
        severity=_table(["severity", "points", "events"], severity_rows, "counts"),
        anomalies=(_table(["IP", "severity", "timestamp", "observed", "predicted", "std", "distance", ""],
                          anomaly_rows) if anomaly_rows else '<p class="none">None.</p>')
        + (f"<p>… and {unlisted} more in the CSV.</p>" if unlisted > 0 else ""),
        not_plotted=f"<p>{not_plotted} more anomalous IPs without a plot (<code>--top</code>).</p>"
        if not_plotted > 0 else "",
        count=len(anomalous), figures=figures,
        failures=_rows_table(failed, "Failures", "failures", "Jobs that failed; the run exits 1 when there are any."),
        unscored=_rows_table(unscored, "Not scored", "unscored", "Answers rather than failures: missing artefacts, "
                                                                 "too little data, invalid ids."),
        slowest=_table(["IP", "status", "ms", "worker peak RSS MiB", "attempts"],
                       [[f"<code>{_e(r.ip)}</code>", _e(r.status), _e(r.duration_ms, 0),
                         _e(r.worker_peak_rss_mib, 0), _e(r.attempts, 0)] for r in slowest.itertuples()]))


PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<script>
window.reportErrors = [];
window.onerror = function (message) {{ window.reportErrors.push(String(message)); }};
window.addEventListener("load", function () {{
  var broken = [], images = document.images;
  for (var i = 0; i < images.length; i++) {{
    if (!(images[i].complete && images[i].naturalWidth > 0)) broken.push(images[i].getAttribute("src"));
  }}
  var body = document.body;
  body.setAttribute("data-images", String(images.length));
  body.setAttribute("data-broken-images", broken.join(" "));
  body.setAttribute("data-images-ok", broken.length ? "false" : "true");
  body.setAttribute("data-js-errors", String(window.reportErrors.length));
  if (broken.length) {{
    var warn = document.createElement("p");
    warn.className = "broken";
    warn.textContent = broken.length + " plot(s) missing next to this page: " + broken.join(", ");
    body.insertBefore(warn, body.firstChild);
  }}
}});
</script>
<style>
body {{ font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1100px;
       padding: 0 16px; color: #1f2328; }}
h1 {{ font-size: 22px; margin-bottom: 4px; }} h2 {{ font-size: 17px; margin-top: 28px; }}
.meta {{ color: #59636e; }} .none {{ color: #59636e; font-style: italic; }}
table {{ border-collapse: collapse; margin: 8px 0; }}
th, td {{ border-bottom: 1px solid #d1d9e0; padding: 4px 10px; text-align: left; vertical-align: top; }}
th {{ background: #f6f8fa; }} td {{ font-variant-numeric: tabular-nums; }}
.overview {{ display: flex; gap: 40px; flex-wrap: wrap; }}
.status, .sev {{ padding: 1px 6px; border-radius: 4px; background: #eaeef2; }}
.status.ok, .sev.normal {{ background: #dafbe1; }} .sev.warning {{ background: #fff8c5; }}
.sev.critical, .status.load_error, .status.timeout, .status.crashed, .status.memory_exceeded, .status.error
  {{ background: #ffebe9; }}
figure {{ margin: 16px 0; }} figure img {{ max-width: 100%; height: auto; border: 1px solid #d1d9e0; }}
.broken {{ background: #ffebe9; padding: 8px; border: 1px solid #cf222e; }}
</style>
</head>
<body>
<h1>batchpredict report</h1>
<p class="meta">{meta}</p>
<section id="summary" class="overview">
<div><h2>IPs per status</h2>{status}</div>
<div><h2>Points and events per severity</h2>{severity}
<p class="meta">An event is a run of consecutive flagged points of one IP, counted at its worst.</p></div>
</section>
<section id="anomalies"><h2>Anomalies ({count})</h2>{anomalies}{not_plotted}{figures}</section>
{failures}
{unscored}
<section id="slowest"><h2>Slowest jobs</h2>{slowest}</section>
</body>
</html>
"""
