"""What a job comes back as (result.py): a job's points as columns, the same points as Point objects, and both
through the journal's JSON exactly, in today's form and in the forms older journals hold."""
from __future__ import annotations

import json

import numpy as np
import pytest

from batchpredict.result import SEVERITIES, Point, Points, Result
from batchpredict.rules import RULES
from batchpredict.status import Severity, Status


def point(timestamp: str, observed: float, **fields: object) -> Point:
    values = {"predicted": observed - 1.0, "std": 0.5, "lower": (observed - 2.0, observed - 3.0),
              "upper": (observed + 2.0, observed + 3.0), "anomaly": False, "severity": Severity.NORMAL}
    return Point(timestamp=timestamp, observed=observed, **{**values, **fields})


# A night with the alerting stage: a point judged by the method, one alerted by a value rule, one with too
# little history (no score, the seed's verdict), and a std of the --std mode on two of them.
ALERTING = [
    point("00:00", 1.0, std_source="mad:12", alert=False, score=0.25, alert_source="ensemble"),
    point("00:05", 9.5, anomaly=True, severity=Severity.CRITICAL, std_source="mad:12", alert=True, score=0.97,
          alert_source="extreme"),
    point("00:10", -0.0, anomaly=True, severity=Severity.WARNING, alert=False, score=None, alert_source="severity"),
]
PLAIN = [point("t1", 1.0), point("t2", 1e300, anomaly=True, severity=Severity.WARNING), point("t3", 1 / 3)]
# NaN: equal in a column, never as a Point (a float NaN equals no other).
MISSING = Points.of([point("t1", np.nan, predicted=np.nan, lower=(np.nan, np.nan), upper=(np.inf, -np.inf))])


def journal(obj: object) -> object:
    """A value through a journal line: JSON text and back."""
    return json.loads(json.dumps(obj))


def bits(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array).tobytes()


@pytest.mark.parametrize("points", [ALERTING, PLAIN], ids=["alerting", "plain"])
def test_points_as_columns_iterate_as_the_points_they_were_made_of(points):
    columns = Points.of(points)
    assert len(columns) == 3 and list(columns) == points == columns
    assert columns.severity.tolist() == [SEVERITIES.index(p.severity) for p in points]
    assert columns.lower.shape == columns.upper.shape == (2, 3)  # one row per sigma


def test_the_alerting_columns_name_the_method_the_rules_and_the_std_mode():
    columns = Points.of(ALERTING)
    assert (columns.method, columns.std_mode) == ("ensemble", "mad:12")
    assert columns.std_sources().tolist() == ["mad:12", "mad:12", "store"]
    assert columns.rule.tolist() == [0, RULES.index("extreme"), 0]
    assert columns.alert_sources().tolist() == ["ensemble", "extreme", "severity"]
    assert columns.judged.tolist() == [True, True, False] and [p.score for p in columns] == [0.25, 0.97, None]
    plain = Points.of(PLAIN)
    assert plain.alert is plain.score is plain.judged is plain.rule is None and plain.alert_sources() is None
    assert {p.alert for p in plain} == {None} and plain.std_sources().tolist() == ["store"] * 3


def test_a_rule_names_an_alert_only_where_it_raised_one():
    """A rule code on a point without an alert leaves it the method's; without rule codes every judged point is."""
    columns = Points(["a", "b", "c"], [1, 2, 3], [1, 2, 3], [1, 1, 1], lower=[0, 0, 0], upper=[9, 9, 9],
                     anomaly=[False] * 3, severity=[0] * 3, alert=[True, False, True], score=[0.9, 0.1, 0.8],
                     judged=[True, True, False], method="zscore",
                     rule=[RULES.index("quiet"), RULES.index("seasonal"), 0])
    assert columns.alert_sources().tolist() == ["quiet", "zscore", "severity"]
    columns.rule = None
    assert columns.alert_sources().tolist() == ["zscore", "zscore", "severity"]


def test_a_point_not_judged_has_no_score_whatever_its_column_holds():
    columns = Points(["a"], [1.0], [1.0], [1.0], lower=[0.0], upper=[2.0], anomaly=[False], severity=[0],
                     alert=[False], score=[0.7], judged=[False], method="ensemble")
    (only,) = columns
    assert only.score is None and only.alert is False and only.alert_source == "severity"


@pytest.mark.parametrize("points", [ALERTING, PLAIN, []], ids=["alerting", "plain", "none"])
def test_the_columns_come_back_from_a_journal_bit_for_bit(points):
    columns = Points.of(points)
    line = journal(columns.to_dict())
    again = Points.from_dict(line)
    assert again == columns and list(again) == points
    for name in ("observed", "predicted", "std", "lower", "upper"):
        assert bits(getattr(again, name)) == bits(getattr(columns, name)), name  # -0.0, 1e300 and 1/3 exact
    assert all(isinstance(line[name], dict) for name in ("observed", "lower", "anomaly", "severity"))
    again = Points.from_dict(journal(MISSING.to_dict()))
    assert again == MISSING and bits(again.upper) == bits(MISSING.upper) and np.isnan(again.observed).all()


def test_older_journals_columns_as_lists_and_points_as_dicts():
    columns = Points.of(ALERTING)
    as_lists = journal({name: value.tolist() if isinstance(value, np.ndarray) else value
                        for name, value in ((n, getattr(columns, n)) for n in Points.__slots__)})
    assert Points.from_dict(as_lists) == columns
    as_points = journal([p.to_dict() for p in ALERTING])  # severity as its text, the bands as lists
    assert as_points[1]["severity"] == "critical" and isinstance(as_points[1]["lower"], list)
    assert Points.from_dict(as_points) == columns
    assert [Point.from_dict(d) for d in as_points] == ALERTING


@pytest.mark.parametrize("described", [{"dtype": "|O", "shape": [1], "b64": "AA=="}, {"shape": [1], "b64": "AA=="}])
def test_a_journal_column_of_another_dtype_is_refused(described):
    line = journal(Points.of(PLAIN).to_dict())
    line["observed"] = described
    with pytest.raises(ValueError, match=r"^a column of dtype "):
        Points.from_dict(line)


def test_equality_is_by_value_nan_included_and_points_are_not_hashable():
    columns = Points.of(PLAIN)
    assert columns == Points.of(PLAIN) and MISSING == Points.from_dict(MISSING.to_dict())
    other = Points.of([*PLAIN[:2], point("t3", 0.3333)])
    shorter = Points.of(PLAIN[:2])
    assert columns != other and columns != shorter and columns != Points.of(ALERTING) and columns != "t1"
    with pytest.raises(TypeError):
        hash(columns)


def test_no_points():
    empty = Points.empty()
    assert len(empty) == 0 and list(empty) == [] and empty == [] and empty == Points.of([])
    assert empty.lower.shape == empty.upper.shape == (0, 0)


def test_no_points_are_one_shared_instance_that_nothing_changes():
    """Every result without points shares them (a million a night at scale), so none may change them for all."""
    import pickle

    import dill

    a, b = Result(ip="a"), Result(ip="b", status=Status.NO_MODEL)
    assert a.points is b.points is Points.empty()
    with pytest.raises(AttributeError, match="shared"):
        a.points.alert = np.ones(0, dtype=bool)
    with pytest.raises(ValueError, match="read-only"):
        a.points.observed[...] = 1.0
    for dumps, loads in ((pickle.dumps, pickle.loads), (dill.dumps, dill.loads)):  # a worker's result, either pickler
        assert loads(dumps(a)).points is Points.empty()
    back = Result.from_dict(json.loads(json.dumps(a.to_dict())))  # a journal line
    assert back.points == a.points and len(back.points) == 0


def test_a_result_counts_its_anomalies_and_alerts_and_takes_point_objects():
    result = Result(ip="10.0.0.1", points=ALERTING, model="model/10.0.0.1.h5", engine="numpy")
    assert isinstance(result.points, Points) and result.points == ALERTING
    assert (result.anomalies, result.alerts) == (2, 1)
    assert (Result(ip="x", points=PLAIN).alerts, Result(ip="x", points=PLAIN).anomalies) == (0, 1)
    assert (Result(ip="x").anomalies, Result(ip="x").alerts, len(Result(ip="x").points)) == (0, 0, 0)


def test_a_result_comes_back_from_a_journal():
    result = Result(ip="10.0.0.1", status=Status.CRASHED, error="worker killed by SIGKILL", attempts=2,
                    duration_ms=12.5, worker_pid=4242, worker_peak_rss_mib=88.0, timestamp="00:10", points=ALERTING,
                    model="model/10.0.0.1.h5", engine="numpy", log=["a note"], debug=["a debug line"])
    again = Result.from_dict(journal(result.to_dict()))
    assert again == result and again.status is Status.CRASHED and again.points.method == "ensemble"
    older = journal({**result.to_dict(), "points": [p.to_dict() for p in ALERTING]})
    assert Result.from_dict(older) == result
    bare = journal(Result(ip="x", status=Status.NO_MODEL).to_dict())
    del bare["points"]
    assert Result.from_dict(bare) == Result(ip="x", status=Status.NO_MODEL)
