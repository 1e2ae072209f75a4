"""The CSV a night writes, on the bundled store: its bytes are the csv module's text of predict_table's cells, and
its values are what an independent computation (pandas, statistics, Keras) gives.

Rows are rendered a column at a time from the job's arrays (io/output.text); nothing here shares that code.
"""
from __future__ import annotations

import csv
import io
import json
import pickle
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

from batchpredict import Params, predict_table
from batchpredict.io import output
from batchpredict.result import SEVERITIES, Points, Result
from batchpredict.scoring.anomaly import assess, verdicts
from batchpredict.rules import RULES

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
TIMING = ["duration_ms", "worker_pid", "worker_peak_rss_mib"]
BUCKETS = 400  # 376 scorable points (window 20, rolling 5): --points 288 leaves history for rolling:96
# (name, CLI options, Params): the three, and --points 1 on the bundled table itself.
RUNS = {
    "points_1": ([], Params()),
    "points_288": (["--points", "288"], Params(points=288)),
    "rolling_96": (["--points", "288", "--std", "rolling:96"], Params(points=288, std="rolling:96")),
}


@pytest.fixture(scope="module")
def long_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled IPs over BUCKETS buckets: each one's history.csv continued by its stats.csv row."""
    history = pd.read_csv(ROOT / "examples" / "history.csv", dtype={"ip": str}).set_index("ip")
    stats = pd.read_csv(ROOT / "examples" / "stats.csv", dtype={"ip": str}).set_index("ip")
    values = pd.concat([history.loc[stats.index], stats], axis=1).iloc[:, -BUCKETS:]
    path = tmp_path_factory.mktemp("long") / "stats.csv"
    values.to_csv(path)
    return path


def table_for(name: str, long_table: Path) -> Path:
    return ROOT / "examples" / "stats.csv" if name == "points_1" else long_table


@pytest.fixture(scope="module")
def outputs(long_table: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each run's CSV, written by the command line in its own process."""
    tmp = tmp_path_factory.mktemp("out")
    found = {}
    for name, (options, _) in RUNS.items():
        out = tmp / f"{name}.csv"
        done = run_cli("predict", "--data", table_for(name, long_table), "--models", MODELS, "--out", out, *options)
        assert done.returncode == 0, done.stderr
        found[name] = out
    return found


def cells_text(frame: pd.DataFrame) -> str:
    """The csv module's text of a frame's cells: None and NaN as empty cells, floats at full precision."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(frame.columns)
    for cells in frame.astype(object).where(frame.notna(), None).itertuples(index=False):
        writer.writerow([float(c) if isinstance(c, np.floating) else int(c) if isinstance(c, np.integer) else c
                         for c in cells])
    return buffer.getvalue()


def without_timing(text: str) -> str:
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    return frame.drop(columns=TIMING).to_csv(index=False)


@pytest.mark.parametrize("name", list(RUNS))
def test_the_csv_is_the_csv_modules_text_of_predict_tables_cells(name, outputs, long_table):
    written = outputs[name].read_text()
    frame = predict_table(str(table_for(name, long_table)), str(MODELS), params=RUNS[name][1])
    assert (frame["status"] == "ok").all()
    points = 1 if name == "points_1" else 288
    assert len(frame) == frame["ip"].nunique() * points
    # Byte for byte outside the timing columns, which differ between any two runs.
    assert without_timing(written) == without_timing(cells_text(frame))
    expected = cells_text(frame.drop(columns=TIMING)).splitlines()
    rows = list(csv.reader(io.StringIO(written)))
    keep = [i for i, column in enumerate(rows[0]) if column not in TIMING]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([row[i] for i in keep] for row in rows)
    assert buffer.getvalue().splitlines() == expected
    assert written.encode() == _rendered(rows)  # the file is exactly the csv module's text of its own cells


def _rendered(rows: list[list[str]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue().encode()


@pytest.mark.parametrize("name", list(RUNS))
def test_each_rows_values_are_what_an_independent_computation_gives(name, outputs, long_table):
    frame = pd.read_csv(outputs[name], dtype={"ip": str, "timestamp": str})
    table = pd.read_csv(table_for(name, long_table), dtype={"ip": str}).set_index("ip")
    stds = json.loads((MODELS / "std" / "std.json").read_text())
    for ip, rows in frame.groupby("ip", sort=False):
        series = table.loc[ip]
        # Observed: the rolling mean of 5 at the point's label (no NaN in the bundled series).
        smoothed = series.rolling(5).mean()
        assert rows["observed"].to_numpy() == pytest.approx(smoothed.loc[rows["timestamp"]].to_numpy(), rel=1e-12)
        std = rows["std"].to_numpy()
        if name == "rolling_96":
            residuals = (smoothed - _predicted_everywhere(ip, outputs, long_table)).dropna()
            at = residuals.index.get_indexer(rows["timestamp"])  # 88 scored points before the first written
            by_hand = [statistics.stdev(residuals.iloc[i - 96:i].tolist()) if i >= 96 else stds[ip] for i in at]
            assert std == pytest.approx(by_hand, rel=1e-9)
            assert rows["std_source"].tolist() == ["rolling:96" if i >= 96 else "store" for i in at]
        else:
            assert (std == stds[ip]).all()
        predicted, observed = rows["predicted"].to_numpy(), rows["observed"].to_numpy()
        for k in (2, 4):  # the same float operations, so exactly
            assert (rows[f"lower_{k}std"].to_numpy() == predicted - k * std).all()
            assert (rows[f"upper_{k}std"].to_numpy() == predicted + k * std).all()
        outside = {k: (observed < rows[f"lower_{k}std"]) | (observed > rows[f"upper_{k}std"]) for k in (2, 4)}
        assert (rows["anomaly"] == outside[2]).all()
        severity = np.where(outside[4], "critical", np.where(outside[2], "warning", "normal"))
        assert (rows["severity"] == severity).all()
        if name != "points_1":
            assert set(rows["alert_source"]) <= {"ensemble", *RULES[1:]}
            assert rows["alert"].dtype == bool


def _predicted_everywhere(ip: str, outputs: dict[str, Path], long_table: Path) -> pd.Series:
    """Every scored point's prediction, from a run that writes them all (--points 376, store std)."""
    out = outputs["rolling_96"].with_name("every_point.csv")
    if not out.exists():
        done = run_cli("predict", "--data", long_table, "--models", MODELS, "--out", out, "--points", "376",
                       "--alert", "none")
        assert done.returncode == 0, done.stderr
    frame = pd.read_csv(out, dtype={"ip": str, "timestamp": str})
    return frame[frame["ip"] == ip].set_index("timestamp")["predicted"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["points_1", "points_288"])
def test_the_numpy_engines_predictions_are_keras_to_float32_rounding(name, outputs, long_table, tmp_path):
    out = tmp_path / "keras.csv"
    done = run_cli("predict", "--data", table_for(name, long_table), "--models", MODELS, "--out", out,
                   "--engine", "keras", *RUNS[name][0], timeout=600)
    assert done.returncode == 0, done.stderr
    ours, theirs = (pd.read_csv(path, dtype={"ip": str, "timestamp": str}) for path in (outputs[name], out))
    assert (ours[["ip", "timestamp", "observed"]] == theirs[["ip", "timestamp", "observed"]]).all().all()
    assert ours["predicted"].to_numpy() == pytest.approx(theirs["predicted"].to_numpy(), rel=1e-5)
    # A verdict may differ only where the point lies within that rounding of a band.
    margin = np.minimum.reduce([np.abs(ours["observed"] - ours[c]) for c in
                                ("lower_2std", "upper_2std", "lower_4std", "upper_4std")])
    clear = margin > 1e-5 * ours["predicted"].abs()
    assert (ours["severity"][clear] == theirs["severity"][clear]).all()


def _result(labels: list[str], alerting: bool) -> Result:
    rng = np.random.default_rng(3)
    n = len(labels)
    observed, predicted, std = rng.normal(100, 10, n), rng.normal(100, 10, n), np.abs(rng.normal(3, 1, n))
    lowers, uppers, anomaly, severity = verdicts(observed, predicted, std, (2.0, 4.0))
    alert = score = judged = None
    if alerting:
        alert, judged = rng.random(n) < 0.2, rng.random(n) < 0.7
        score = np.where(judged, rng.random(n), np.nan)  # as alerting.alerts gives it
    points = Points(labels, observed, predicted, std, lower=lowers, upper=uppers, anomaly=anomaly, severity=severity,
                    rolled=rng.random(n) < 0.5, std_mode="rolling:96", alert=alert, score=score, judged=judged,
                    method="likelihood" if alerting else "")
    return Result(ip="10.0.0.1", model='model/a "b", c.h5', error="", points=points, attempts=1, duration_ms=12.34,
                  worker_pid=77, worker_peak_rss_mib=45.67)


@pytest.mark.parametrize("labels", [["t1", "t2", "t3"], ["a,b", 'say "x"', "two\nlines"], ["t"]])
@pytest.mark.parametrize("alerting", [False, True])
def test_a_block_of_rows_is_the_csv_modules_text_of_their_cells(labels, alerting):
    result = _result(labels, alerting)
    for std_source, alert in ((False, False), (True, alerting)):
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(output.rows(result, std_source, alert))
        assert output.text(result, std_source, alert) == buffer.getvalue()
    cells = output.rows(result, True, alerting)
    assert [c[1] for c in cells] == labels and all(len(c) == len(output.columns((2, 4), True, alerting)) for c in cells)


def test_floats_are_written_as_their_repr_at_every_magnitude():
    """output.reprs against repr: every decade a float64 has, the edges where repr turns to an exponent, and
    what a table's values look like (a few decimals, integers, float32 values widened)."""
    rng = np.random.default_rng(4)
    edges = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-4, np.nextafter(1e-4, 0), np.nextafter(1e-4, 1), 1e16,
             np.nextafter(1e16, 0), 5e-324, 2.0 ** 53 + 2, 0.1, 1 / 3, np.finfo(float).max, np.finfo(float).tiny]
    decades = rng.choice([-1, 1], 20000) * 10.0 ** rng.uniform(-320, 308, 20000)
    values = np.concatenate([edges, np.negative(edges), decades,
                             *[np.round(rng.normal(100, 50, 1000), d) for d in range(7)], np.arange(-500, 500.0),
                             rng.normal(0, 100, 5000).astype(np.float32)])
    assert output.reprs(values) == [repr(float(v)) for v in values]
    for short in (values[:1], values[:31], values[:32], edges):  # repr alone below output._SHORT
        assert output.reprs(np.asarray(short)) == [repr(float(v)) for v in short]
    assert output.reprs(np.array([])) == []


@pytest.mark.parametrize("alerting", [False, True])
def test_points_travel_whole_through_pickle_and_the_journal_and_as_point_objects(alerting):
    points = _result(["t1", "t2", "t3", "t4"], alerting).points
    assert pickle.loads(pickle.dumps(points, protocol=pickle.HIGHEST_PROTOCOL)) == points
    assert Points.from_dict(json.loads(json.dumps(points.to_dict()))) == points
    objects = list(points)
    assert [p.timestamp for p in objects] == ["t1", "t2", "t3", "t4"]
    assert Points.of(objects) == points
    assert Points.from_dict([p.to_dict() for p in objects]) == objects  # a journal written before the columns
    as_lists = {name: value.tolist() if isinstance(value, np.ndarray) else value  # ... before the bytes
                for name, value in ((name, getattr(points, name)) for name in Points.__slots__)}
    assert Points.from_dict(json.loads(json.dumps(as_lists))) == points
    hostile = {**points.to_dict(), "observed": {"dtype": "|O", "shape": [4], "b64": ""}}
    with pytest.raises(ValueError, match="dtype"):
        Points.from_dict(hostile)


def test_verdicts_of_every_point_are_the_seeds_comparison_of_each():
    observed = np.array([100.0, 104.5, 95.0, 108.0, 92.0, 100.0, 101.0, np.nan, 100.0])
    std = np.array([2.0, 2.0, 2.0, 2.0, 2.0, 0.0, 0.0, 2.0, np.nan])
    lowers, uppers, anomaly, severity = verdicts(observed, np.full(9, 100.0), std, (2, 4))
    for i, (seen, s) in enumerate(zip(observed.tolist(), std.tolist(), strict=True)):
        bands = [(100.0 - k * s, 100.0 + k * s) for k in (2, 4)]  # one point at a time, in Python floats
        outside = [seen < lo or seen > hi for lo, hi in bands]
        np.testing.assert_array_equal(np.c_[lowers[:, i], uppers[:, i]], bands)
        assert bool(anomaly[i]) == outside[0]
        assert SEVERITIES[severity[i]].value == ("critical" if outside[1] else "warning" if outside[0] else "normal")
    assert assess(108.0, 100.0, 2.0, (2, 4)) == ((96.0, 92.0), (104.0, 108.0), True, SEVERITIES[1])


def test_an_ensembles_points_travel_whole_as_point_objects():
    """Its alerts name their rules, an extreme one on a point the likelihood could not judge yet included."""
    points = _result(["t1", "t2", "t3", "t4"], True).points
    points.method = "ensemble"
    points.alert = np.array([True, False, True, False])
    points.judged = np.array([False, True, True, True])
    points.score = np.where(points.judged, 0.5, np.nan)
    points.rule = np.array([RULES.index("extreme"), 0, RULES.index("likelihood"), 0], dtype=np.uint8)
    objects = list(points)
    assert [p.alert_source for p in objects] == ["extreme", "ensemble", "likelihood", "ensemble"]
    assert Points.of(objects) == points


def test_an_aligned_cell_with_a_line_break_stays_on_its_row(tmp_path):
    """store check printed an id from a file name holding a line break (model/'bad<newline>name.h5') as it was: its
    row of the table went on at the start of the next line."""
    import shutil

    from conftest import run_cli

    repo = Path(__file__).resolve().parents[2]
    store = tmp_path / "store"
    for part in ("model", "sc", "std"):
        (store / part).mkdir(parents=True)
    shutil.copy(repo / "models" / "model" / "10.0.0.10.h5", store / "model" / "bad\nname.h5")
    (store / "std" / "std.json").write_text(json.dumps({"bad\nname": 1.0}))
    done = run_cli("store", "check", "--models", store)
    assert done.returncode == 1, done.stderr
    header, row = done.stdout.splitlines()
    assert header.startswith("ip ") and row.startswith("bad\\nname ") and "invalid_input" in row
