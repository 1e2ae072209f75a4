"""The HTML report of a run with every status: counts, failures, one valid plot per anomaly, in Chromium."""
import csv
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from conftest import read_out, run_cli
from PIL import Image

from batchpredict.commands.report import build_report
from batchpredict.result import Status

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Page(HTMLParser):
    """Image sources and alts, and the text of every table cell, in order."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.images: dict[str, str] = {}
        self.cells: list[str] = []
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images[attrs["alt"]] = attrs["src"]
        if tag == "td":
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.cells.append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def report(every_status_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report"
    done = build_report(str(every_status_run.out), str(every_status_run.table), str(out))
    return done, out, Page((out / "index.html").read_text())


def test_every_status_is_counted_and_every_anomaly_plotted(every_status_run, report):
    done, out, page = report
    frame = read_out(every_status_run.out)
    counts = frame["status"].value_counts()
    for status in Status:  # status cell, then its count
        at = page.cells.index(status.value)
        assert page.cells[at + 1] == str(counts[status.value])
    anomalous = set(frame.loc[frame["anomaly"] == "true", "ip"])
    assert anomalous == {every_status_run.warning, every_status_run.critical}
    assert set(page.images) == anomalous and done.plots == done.anomalies == done.anomalous_ips == 2
    for src in page.images.values():
        with Image.open(out / src) as image:
            image.verify()
            assert image.format == "PNG" and image.size == (800, 320)
    failed = frame[frame["status"].map(lambda s: Status(s).failed)]
    for row in failed.itertuples():  # each failure listed with its error
        at = page.cells.index(row.ip)
        assert page.cells[at + 1] == row.status and page.cells[at + 2] == row.error


def test_the_critical_one_comes_first_and_ids_are_escaped(every_status_run, report):
    _, out, page = report
    text = (out / "index.html").read_text()
    assert text.index(every_status_run.critical) < text.index(every_status_run.warning)
    assert "../etc/passwd" in page.cells and not re.search(r"src=\"[^\"]*[:/]{2}", text)  # IPv6 file name is safe


def test_top_limits_the_plots_and_old_plots_go(every_status_run, tmp_path):
    out = tmp_path / "r"
    build_report(str(every_status_run.out), str(every_status_run.table), str(out))
    done = build_report(str(every_status_run.out), str(every_status_run.table), str(out), top=1)
    assert done.plots == 1 and len(list((out / "plots").glob("*.png"))) == 1
    assert "1 more anomalous IPs without a plot" in (out / "index.html").read_text()


def test_report_never_imports_tensorflow(every_status_run, tmp_path):
    done = run_cli("report", "--results", every_status_run.out, "--data", every_status_run.table, "--out",
                   tmp_path / "r", "-q")
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("batchpredict report: 14 IPs, 2 anomalous points in 2 IPs, 2 plots")
    code = ("import sys, batchpredict.commands.report as r; r.build_report(*sys.argv[1:]); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras')))")
    probe = subprocess.run([sys.executable, "-c", code, str(every_status_run.out), str(every_status_run.table),
                            str(tmp_path / "r2")], capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0 and probe.stdout.strip() == "[]", probe.stderr


@pytest.mark.parametrize("results, message", [("missing.csv", "results not found"), ("t.csv", "not a batchpredict")])
def test_unusable_results_exit_2(every_status_run, tmp_path, results, message):
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    done = run_cli("report", "--results", tmp_path / results, "--data", every_status_run.table, "--out", tmp_path / "r")
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("edit", [lambda line: line + ",", lambda line: ",".join(line.split(",")[:-3])])
def test_results_with_a_line_of_other_fields_exit_2_naming_it(every_status_run, tmp_path, edit):
    """A stray comma on the first row made pandas read every column one to the left: '1 IPs, 0 anomalous'."""
    lines = every_status_run.out.read_text().splitlines()
    lines[1] = edit(lines[1])
    results = tmp_path / "r.csv"
    results.write_text("\n".join(lines) + "\n")
    done = run_cli("report", "--results", results, "--data", every_status_run.table, "--out", tmp_path / "r")
    fields, width = (len(next(csv.reader([line]))) for line in lines[1::-1])
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"batchpredict: results {results}: line 2: {fields} fields, the header has {width}\n"


def test_a_page_that_is_a_fifo_exits_2_and_stays(every_status_run, tmp_path):
    """The rename replaced the FIFO (or, as root, a device) at --out/index.html with the page."""
    (tmp_path / "r").mkdir()
    os.mkfifo(tmp_path / "r" / "index.html")
    done = run_cli("report", "--results", every_status_run.out, "--data", every_status_run.table, "--out", tmp_path / "r")
    assert done.returncode == 2 and "index.html is a FIFO or a device, not a file to write over" in done.stderr
    assert "Traceback" not in done.stderr and stat.S_ISFIFO((tmp_path / "r" / "index.html").lstat().st_mode)


def test_results_of_only_the_header_exit_2(every_status_run, tmp_path):
    results = tmp_path / "r.csv"
    results.write_text(every_status_run.out.read_text().splitlines()[0] + "\n")
    done = run_cli("report", "--results", results, "--data", every_status_run.table, "--out", tmp_path / "r")
    assert done.returncode == 2 and done.stderr == f"batchpredict: {results} has no rows to report\n", done.stderr


def test_a_flagged_ip_without_a_predicted_number_is_a_warning_and_no_plot_not_a_traceback(every_status_run, tmp_path):
    """An edited results file: one flagged row's predicted is no number; that IP has no plot, the others do."""
    frame = pd.read_csv(every_status_run.out, dtype=str, keep_default_na=False)
    flagged = frame.index[frame["anomaly"] == "true"]
    victim = frame.at[flagged[0], "ip"]
    frame.loc[frame["ip"] == victim, "predicted"] = "oops"
    results = tmp_path / "r.csv"
    frame.to_csv(results, index=False)
    done = run_cli("report", "--results", results, "--data", every_status_run.table, "--out", tmp_path / "r")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert f"report: {victim} has no predicted value in {results}; no plot" in done.stderr
    images = Page((tmp_path / "r" / "index.html").read_text()).images
    assert victim not in images and len(images) == frame.loc[flagged, "ip"].nunique() - 1


def report_into(every_status_run, out: Path, preexec=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "batchpredict.cli", "report", "--results", str(every_status_run.out),
                           "--data", str(every_status_run.table), "--out", str(out)], capture_output=True, text=True,
                          timeout=240, preexec_fn=preexec)


@pytest.mark.parametrize("under", ["", "sub"])
def test_an_out_that_is_a_file_exits_2(every_status_run, tmp_path, under):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = report_into(every_status_run, blocker / under if under else blocker)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "cannot make the report folder" in done.stderr
    assert done.stderr.endswith(": Not a directory\n") or done.stderr.endswith(": File exists\n"), done.stderr


def limited_to(size: int):  # noqa: ANN201
    """A preexec_fn: RLIMIT_FSIZE (EFBIG, SIGXFSZ ignored) stands for a disk that takes `size` bytes a file."""
    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
    return limited


def test_a_disk_that_takes_no_more_is_exit_74_naming_the_file(every_status_run, tmp_path):
    """The first plot cannot be written, and what was written of it is gone."""
    done = report_into(every_status_run, tmp_path / "r", limited_to(4096))
    assert done.returncode == 74, done.stderr
    assert re.fullmatch(r"batchpredict: file too large \(no space left under its limit\) writing "
                        rf"{re.escape(str(tmp_path / 'r' / 'plots'))}/\S+\.png\n", done.stderr), done.stderr
    assert not list((tmp_path / "r" / "plots").iterdir())  # nor a temporary file


def test_a_disk_full_at_a_plots_last_bytes_leaves_no_part_of_it(every_status_run, report, tmp_path):
    """Pillow removes a PNG it fails to write, but not when its last bytes fail as the file is closed: that PNG
    stayed, cut short, under its own name."""
    _, out, page = report
    first = next(iter(page.images.values()))  # plotted first, as in any run of the same results
    done = report_into(every_status_run, tmp_path / "r", limited_to((out / first).stat().st_size - 1))
    assert done.returncode == 74, done.stderr
    assert done.stderr == ("batchpredict: file too large (no space left under its limit) writing "
                           f"{tmp_path / 'r' / first}\n")
    assert not list((tmp_path / "r" / "plots").iterdir())


def test_a_read_only_file_system_is_exit_74(every_status_run, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        done = report_into(every_status_run, folder / "r")
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
    assert done.returncode == 74, done.stderr
    assert done.stderr == f"batchpredict: read-only file system writing {folder / 'r' / 'plots'}\n"


def rendered_body(page: Path, tmp_path: Path) -> dict[str, str]:
    """The <body> attributes after Chromium loaded the page and its self-check ran."""
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                           "--no-first-run", "--disable-background-networking", "--disable-component-update",
                           "--disable-sync", f"--user-data-dir={tmp_path / 'chromium'}",
                           "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=90)
    body = re.search(r"<body([^>]*)>", done.stdout)
    assert body, done.stderr[-2000:]
    return dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium)")
@pytest.mark.timeout(200)
def test_chromium_loads_every_image_without_js_errors(report, tmp_path):
    _, out, page = report
    copy = Path(shutil.copytree(out, tmp_path / "copy"))
    body = rendered_body(copy / "index.html", tmp_path)
    assert body.get("data-images-ok") == "true" and body["data-js-errors"] == "0", body
    assert body["data-images"] == str(len(page.images))
    # The check can fail: a missing plot and a script error are both seen.
    missing = next(iter(page.images.values()))
    (copy / missing).unlink()
    html = (copy / "index.html").read_text()
    (copy / "index.html").write_text(html.replace("</body>", "<script>undefinedCall();</script></body>"))
    body = rendered_body(copy / "index.html", tmp_path)
    assert body["data-images-ok"] == "false" and body["data-broken-images"] == missing
    assert body["data-js-errors"] == "1"


def test_a_points_run_gets_one_plot_per_anomalous_ip_and_every_flagged_point_listed(base_store, tmp_path):
    from conftest import BASE_IPS, series_for, wide_table

    from batchpredict import Params, predict_table

    data = {ip: series_for(ip) for ip in BASE_IPS[:3]}
    data[BASE_IPS[0]][[33, 38]] += 1500  # two runs of flagged points (each lifts 5 smoothed values)
    data[BASE_IPS[1]][39] += 1500
    table, out = wide_table(tmp_path / "t.csv", data), tmp_path / "a.csv"
    predict_table(str(table), str(base_store), str(out), params=Params(points=8))
    frame = read_out(out)
    flagged = frame[frame["anomaly"] == "true"]
    anomalous = set(flagged["ip"])
    assert len(frame) == 24 and {BASE_IPS[0], BASE_IPS[1]} <= anomalous and (flagged["ip"] == BASE_IPS[0]).sum() > 3
    done = build_report(str(out), str(table), str(tmp_path / "r"))
    page = Page((tmp_path / "r" / "index.html").read_text())
    assert (done.ips, done.anomalies, done.anomalous_ips, done.plots) == (3, len(flagged), len(anomalous),
                                                                         len(anomalous))
    assert set(page.images) == anomalous
    assert page.cells[page.cells.index("ok") + 1] == "3"  # IPs, not rows
    listed = {(page.cells[i], page.cells[i + 2]) for i, cell in enumerate(page.cells[:-2])
              if cell in anomalous and page.cells[i + 1] in ("warning", "critical")}
    assert listed == set(zip(flagged["ip"], flagged["timestamp"]))
    for src in page.images.values():
        with Image.open(tmp_path / "r" / src) as image:
            image.verify()
    peaks, previous = [], None  # events by hand: a flagged row after a flagged row of the same IP goes on
    for row in frame.itertuples():
        if row.anomaly == "true":
            if previous is not None and previous.anomaly == "true" and previous.ip == row.ip:
                peaks[-1] = max(peaks[-1], row.severity, key=["warning", "critical"].index)
            else:
                peaks.append(row.severity)
        previous = row
    for severity in ("warning", "critical"):  # its points, then its events
        at = page.cells.index(severity)
        assert page.cells[at + 1:at + 3] == [str((flagged["severity"] == severity).sum()), str(peaks.count(severity))]
    assert len(peaks) < len(flagged)


def test_a_parquet_table_plots_as_its_csv_does(every_status_run, tmp_path):
    table = tmp_path / "stats.parquet"
    pd.read_csv(every_status_run.table, dtype=str, keep_default_na=False).to_parquet(table, index=False)
    from_csv = build_report(str(every_status_run.out), str(every_status_run.table), str(tmp_path / "csv"))
    from_parquet = build_report(str(every_status_run.out), str(table), str(tmp_path / "parquet"))
    assert from_parquet.plots == from_csv.plots == 2
    assert sorted(p.name for p in (tmp_path / "parquet" / "plots").iterdir()) == \
        sorted(p.name for p in (tmp_path / "csv" / "plots").iterdir())


@pytest.mark.parametrize("edit, message", [
    (lambda header: header.replace(",anomaly,", ",flag,"), "(missing anomaly)"),
    (lambda header: header.replace("upper_4std", "upper"), "(missing upper_4std)"),
    (lambda header: header.replace(",attempts,", ",tries,"), "(missing attempts)"),
    (lambda header: header.replace("_2std", "_abcstd"), "lower_abcstd and lower_4std name no warning"),
    (lambda header: header.replace("_2std", "_nanstd"), "lower_nanstd and lower_4std name no warning"),
    (lambda header: header.replace("_2std", "_-2std"), "lower_-2std and lower_4std name no warning"),
], ids=["no-anomaly", "no-upper", "no-attempts", "abc", "nan", "negative"])
@pytest.mark.parametrize("command", ["report", "evaluate"])
def test_results_whose_columns_were_edited_exit_2(tmp_path, edit, message, command):
    """report read anomaly, upper_* and attempts without checking them (a KeyError or AttributeError traceback),
    and a band column whose sigma was no number a ValueError traceback; evaluate judged lower_nanstd's points at NaN sigmas, flagging none."""
    from batchpredict.io.output import columns

    row = {"ip": "10.0.0.1", "timestamp": "t30", "observed": "5", "predicted": "5", "std": "1", "anomaly": "false",
           "severity": "normal", "status": "ok"}
    header = columns((2.0, 4.0))
    results, labels = tmp_path / "r.csv", tmp_path / "labels.csv"
    results.write_text(edit(",".join(header)) + "\n" + ",".join(row.get(c, "") for c in header) + "\n")
    labels.write_text("ip,start,end\n10.0.0.1,2026-10-30T05:00,2026-10-30T08:00\n")
    table = Path(__file__).resolve().parents[2] / "examples" / "stats.csv"
    rest = ["--data", table, "--out", tmp_path / "r"] if command == "report" else ["--labels", labels]
    done = run_cli(command, "--results", results, *rest)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"batchpredict: {results} is not a batchpredict results CSV"), done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
