"""batchpredict.scoring.scalers: real scikit-learn scalers, written by real joblib and pickle, read without either."""
from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import joblib
import numpy as np
import pandas as pd
import pytest
from conftest import BASE_IPS, SHARED, Poison
from joblib.numpy_pickle_compat import NDArrayWrapper
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import (
    MaxAbsScaler,
    MinMaxScaler,
    PowerTransformer,
    QuantileTransformer,
    RobustScaler,
    StandardScaler,
)

from batchpredict import RunOptions, predict_table
from batchpredict.errors import JobError, Unsupported
from batchpredict.result import Status
from batchpredict.scoring.loading import Estimator
from batchpredict.scoring.prediction import trusted_scaler
from batchpredict.scoring.scalers import Scaler, read_scaler

REAL = SHARED / "fixtures" / "real-models" / "Abhishek-995312__stock-price-prediction-lstm__scaler.pkl"

SCALERS: dict[str, Callable[[], Any]] = {
    "minmax": MinMaxScaler,
    "minmax-range": lambda: MinMaxScaler(feature_range=(-1, 3)),
    "minmax-clip": lambda: MinMaxScaler(feature_range=(0.2, 0.8), clip=True),
    "standard": StandardScaler,
    "standard-no-mean": lambda: StandardScaler(with_mean=False),
    "standard-no-std": lambda: StandardScaler(with_std=False),
    "standard-neither": lambda: StandardScaler(with_mean=False, with_std=False),
    "maxabs": MaxAbsScaler,
    "maxabs-clip": lambda: MaxAbsScaler(clip=True),
    "robust": RobustScaler,
    "robust-no-centering": lambda: RobustScaler(with_centering=False),
    "robust-no-scaling": lambda: RobustScaler(with_scaling=False),
    "robust-unit-variance": lambda: RobustScaler(quantile_range=(10, 90), unit_variance=True),
    "pipeline": lambda: make_pipeline(StandardScaler(), MinMaxScaler()),
    "pipeline-skips": lambda: Pipeline([("robust", RobustScaler()), ("skip", "passthrough"), ("none", None),
                                        ("maxabs", MaxAbsScaler(clip=True))]),
    "pipeline-ends-passthrough": lambda: Pipeline([("minmax", MinMaxScaler()), ("end", "passthrough")]),
}


def _pickle(protocol: int) -> Callable[[Any, Path], None]:
    def write(obj: Any, path: Path) -> None:
        with open(path, "wb") as fh:
            pickle.dump(obj, fh, protocol=protocol)
    return write


def _joblib(**options: Any) -> Callable[[Any, Path], None]:
    return lambda obj, path: joblib.dump(obj, path, **options)


WRITERS: dict[str, Callable[[Any, Path], None]] = {
    "joblib": _joblib(),
    "joblib-zlib": _joblib(compress=3),
    "joblib-gzip": _joblib(compress=("gzip", 3)),
    "joblib-bz2": _joblib(compress=("bz2", 3)),
    "joblib-lzma": _joblib(compress=("lzma", 3)),
    "joblib-xz": _joblib(compress=("xz", 3)),
    "joblib-protocol-0": _joblib(protocol=0),  # its array wrappers come through copyreg._reconstructor
    "joblib-protocol-2-zlib": _joblib(protocol=2, compress=3),
    **{f"pickle-{protocol}": _pickle(protocol) for protocol in (0, 2, 4, 5)},
}

RNG = np.random.default_rng(7)
# Out of the fitted range on both sides (for clip), a NaN, both zeros, and a value at the fitted mean.
COLUMN = np.concatenate([RNG.normal(5, 9, 30), [np.nan, 0.0, -0.0, 5.0, -40.0, 60.0]])


def fitted(make: Callable[[], Any], features: int) -> Any:
    return make().fit(RNG.normal(5, 3, (60, features)) * np.arange(1, features + 1))


def written(obj: Any, writer: str, path: Path) -> Path:
    WRITERS[writer](obj, path)
    return path


def same(lean: np.ndarray, full: np.ndarray) -> None:
    """Bit for bit: dtype, shape, the sign of zeros and every NaN."""
    assert (lean.dtype, lean.shape) == (full.dtype, full.shape)
    assert lean.tobytes() == full.tobytes(), (lean, full)


def same_error(lean: Callable[[], Any], full: Callable[[], Any]) -> str:
    with pytest.raises(Exception) as expected:
        full()
    with pytest.raises(type(expected.value)) as got:
        lean()
    assert str(got.value) == str(expected.value)
    return str(got.value)


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("kind", SCALERS)
def test_equal_to_scikit_learn(kind: str, writer: str, tmp_path: Path) -> None:
    for features in (1, 3):
        scaler = fitted(SCALERS[kind], features)
        lean = read_scaler(str(written(scaler, writer, tmp_path / f"{features}.save")))
        full = Scaler(Estimator(scaler), "", "")
        rows = RNG.normal(0.5, 2, (4, features))
        same(lean.inverse_transform(rows), full.inverse_transform(rows))
        if features == 1:
            for column in (COLUMN, COLUMN.astype(np.float32), np.arange(-3, 9)):
                same(lean.transform(column), full.transform(column))
        else:
            same_error(lambda: lean.transform(COLUMN), lambda: full.transform(COLUMN))


@pytest.mark.parametrize("writer", ["joblib", "joblib-zlib", "pickle-0", "pickle-5"])
@pytest.mark.parametrize("make", [MinMaxScaler, lambda: make_pipeline(StandardScaler(), MinMaxScaler())],
                         ids=["minmax", "pipeline"])
def test_fitted_on_a_dataframe(make: Callable[[], Any], writer: str, tmp_path: Path) -> None:
    """feature_names_in_ is an object array: joblib writes it as a nested pickle, read under the same rules."""
    scaler = make().fit(pd.DataFrame({"Close": RNG.normal(100, 20, 50)}))
    lean = read_scaler(str(written(scaler, writer, tmp_path / "10.0.0.1.save")))
    full = Scaler(Estimator(scaler), "", "")
    same(lean.transform(COLUMN), full.transform(COLUMN))
    same(lean.inverse_transform(COLUMN.reshape(-1, 1)), full.inverse_transform(COLUMN.reshape(-1, 1)))
    label = "MinMaxScaler" if make is MinMaxScaler else "Pipeline(StandardScaler, MinMaxScaler)"
    assert re.fullmatch(rf"scaler 10\.0\.0\.1\.save: {re.escape(label)} pickled with scikit-learn "
                        r"\d+\.\d+\S*, read without scikit-learn", lean.note)


@pytest.mark.parametrize("writer", ["joblib", "joblib-xz", "joblib-protocol-0", "pickle-2", "pickle-5"])
def test_array_layouts_joblib_writes(writer: str, tmp_path: Path) -> None:
    """Fortran-ordered and big-endian arrays: joblib writes their bytes as they are, with the order and dtype."""
    scaler = fitted(MinMaxScaler, 3)
    scaler.scale_ = np.asfortranarray(np.stack([scaler.scale_, 2 * scaler.scale_]))
    scaler.min_ = np.stack([scaler.min_, -scaler.min_]).astype(">f8")
    lean = read_scaler(str(written(scaler, writer, tmp_path / "s.save")))
    rows = RNG.normal(0.5, 2, (2, 3))
    same(lean.inverse_transform(rows), Scaler(Estimator(scaler), "", "").inverse_transform(rows))


def test_real_scaler_pickled_by_scikit_learn_1_6_1() -> None:
    if not REAL.exists():
        pytest.skip(f"needs {REAL.name} in ../shared/fixtures/real-models (the team's shared folder beside the "
                    "repository, or set BATCHPREDICT_SHARED)")
    lean = read_scaler(str(REAL))
    with pytest.warns(UserWarning, match="from version 1.6.1"):  # scikit-learn's InconsistentVersionWarning
        full = Scaler(Estimator(joblib.load(REAL)), "", "")
    column = np.linspace(0, 400, 41)
    same(lean.transform(column), full.transform(column))
    same(lean.inverse_transform(column.reshape(-1, 1)), full.inverse_transform(column.reshape(-1, 1)))
    assert lean.note == f"scaler {REAL.name}: MinMaxScaler pickled with scikit-learn 1.6.1, read without scikit-learn"


def test_old_module_paths(tmp_path: Path) -> None:
    """sklearn.preprocessing.data (before scikit-learn 0.22) and the joblib it bundled (before 0.23)."""
    scaler = fitted(StandardScaler, 1)
    path = written(scaler, "joblib-protocol-0", tmp_path / "s.save")
    old = path.read_bytes().replace(b"sklearn.preprocessing._data\n", b"sklearn.preprocessing.data\n")
    path.write_bytes(old.replace(b"cjoblib.numpy_pickle\n", b"csklearn.externals.joblib.numpy_pickle\n"))
    assert b"sklearn.externals.joblib" in path.read_bytes()
    same(read_scaler(str(path)).transform(COLUMN), Scaler(Estimator(scaler), "", "").transform(COLUMN))


def test_feature_count_mismatch_is_scikit_learns_error(tmp_path: Path) -> None:
    scaler = MinMaxScaler().fit(np.zeros((3, 2)))
    lean, full = read_scaler(str(written(scaler, "joblib", tmp_path / "s.save"))), Scaler(Estimator(scaler), "", "")
    message = same_error(lambda: lean.transform(COLUMN), lambda: full.transform(COLUMN))
    assert message == "X has 1 features, but MinMaxScaler is expecting 2 features as input."


@pytest.mark.parametrize("call, values", [("transform", [1.0, np.inf]), ("transform", []),
                                          ("inverse_transform", [[-np.inf]]), ("inverse_transform", np.zeros((0, 1))),
                                          ("inverse_transform", np.zeros((2, 0)))])
def test_invalid_input_is_scikit_learns_error(call: str, values: Any, tmp_path: Path) -> None:
    scaler = fitted(lambda: make_pipeline(RobustScaler(), StandardScaler()), 1)
    lean, full = read_scaler(str(written(scaler, "joblib", tmp_path / "s.save"))), Scaler(Estimator(scaler), "", "")
    values = np.asarray(values, dtype=float)
    same_error(lambda: getattr(lean, call)(values), lambda: getattr(full, call)(values))


# (kind of SCALERS, the statistic broken in it (a Pipeline's in its last step), its value, what the error says)
BROKEN_STATISTICS = [
    *[(kind, "scale_", value, said) for kind in ("minmax", "standard", "maxabs", "robust", "pipeline")
      for value, said in ((np.inf, "inf"), (np.nan, "nan"), (0.0, "0.0"))],
    ("minmax-range", "min_", -np.inf, "-inf"),
    ("standard-no-std", "mean_", np.nan, "nan"),
    ("robust-no-scaling", "center_", np.inf, "inf"),
    ("minmax", "scale_", "abc", "not numbers (dtype <U3)"),
]


@pytest.mark.parametrize("kind, statistic, value, said", BROKEN_STATISTICS)
def test_a_statistic_not_finite_or_a_scale_of_zero_is_a_load_error(kind: str, statistic: str, value: Any, said: str,
                                                                     tmp_path: Path) -> None:
    """Read as it is, it made the prediction inf or NaN (an `error` blaming the model) or a silent 0 (`ok`)."""
    scaler = fitted(SCALERS[kind], 1)
    step = scaler[-1] if isinstance(scaler, Pipeline) else scaler
    setattr(step, statistic, np.array([value]))
    path = str(written(scaler, "joblib", tmp_path / "10.0.0.1.save"))
    for read in (read_scaler, trusted_scaler):  # without scikit-learn, and with joblib (--trust-store)
        with pytest.raises(JobError) as refused:
            read(path)
        assert (refused.value.status, str(refused.value)) == (Status.LOAD_ERROR,
                                                              f"scaler 10.0.0.1.save: {statistic} is {said}")


def test_a_scaler_of_bad_statistics_is_its_ips_load_error(store: Path, table: Path) -> None:
    broken = dict(zip(BASE_IPS[:3], (np.inf, 0.0, np.nan), strict=True))
    for ip, value in broken.items():
        scaler = joblib.load(store / "sc" / f"{ip}.save")
        scaler.scale_ = np.array([value])
        joblib.dump(scaler, store / "sc" / f"{ip}.save")
    frame = predict_table(str(table), str(store)).set_index("ip")
    assert (frame.drop(list(broken))["status"] == "ok").all()
    for ip, value in broken.items():
        assert (frame.loc[ip, "status"], frame.loc[ip, "error"]) == ("load_error", f"scaler {ip}.save: scale_ is {value}")


def _three_features(scaler: Any) -> Any:
    return type(scaler)().fit(RNG.normal(5, 3, (60, 3)))


# (what is done to an IP's scaler, what its load_error says after "scaler <ip>.save: ")
NOT_ONE_COLUMN: dict[str, tuple[Callable[[Any], Any], str]] = {
    "empty": (lambda s: _with_extra(s, scale_=np.array([])), "scale_ is empty"),
    "two-values": (lambda s: _with_extra(s, scale_=np.array([[0.5], [0.25]])),
                   "scale_ has shape (2, 1), not one value for the one column a job scales"),
    "three-features": (_three_features, "fitted on 3 features, not the one column a job scales"),
    "three-values-unrecorded": (lambda s: _delattr(_three_features(s), "n_features_in_"),
                                "min_ has shape (3,), not one value for the one column a job scales"),
}


@pytest.mark.parametrize("case", NOT_ONE_COLUMN)
def test_statistics_that_do_not_apply_to_one_column_are_a_load_error(case: str, tmp_path: Path) -> None:
    """A job scales one column; read for one, such a scaler is refused by either reader."""
    change, said = NOT_ONE_COLUMN[case]
    path = str(written(change(fitted(MinMaxScaler, 1)), "joblib", tmp_path / "10.0.0.1.save"))
    for read in (lambda p: read_scaler(p, one_column=True), trusted_scaler):
        with pytest.raises(JobError) as refused:
            read(path)
        assert (refused.value.status, str(refused.value)) == (Status.LOAD_ERROR, f"scaler 10.0.0.1.save: {said}")


@pytest.mark.parametrize("trust", [False, True])
def test_a_scaler_not_for_one_column_is_its_ips_load_error(store: Path, table: Path, trust: bool) -> None:
    """Once an `error` in numpy's words (operands could not be broadcast...), or scikit-learn's."""
    broken = dict(zip(BASE_IPS[:len(NOT_ONE_COLUMN)], NOT_ONE_COLUMN.values(), strict=True))
    for ip, (change, _) in broken.items():
        joblib.dump(change(joblib.load(store / "sc" / f"{ip}.save")), store / "sc" / f"{ip}.save")
    frame = predict_table(str(table), str(store), options=RunOptions(trust_store=trust)).set_index("ip")
    assert (frame.drop(list(broken))["status"] == "ok").all()
    for ip, (_, said) in broken.items():
        assert (frame.loc[ip, "status"], frame.loc[ip, "error"]) == ("load_error", f"scaler {ip}.save: {said}")


class Custom:
    """Has what the worker calls, but is not one of the scalers read without scikit-learn."""

    def transform(self, x: Any) -> Any:
        return x

    inverse_transform = transform


class Runs:
    def __init__(self, call: Callable[..., Any], *args: Any) -> None:
        self.call, self.args = call, args

    def __reduce__(self):  # noqa: ANN204
        return self.call, self.args


def _with_extra(obj: Any, **extra: Any) -> Any:
    vars(obj).update(extra)
    return obj


def _delattr(obj: Any, name: str) -> Any:
    delattr(obj, name)
    return obj


REFUSED: dict[str, tuple[Callable[[Path], Any], str]] = {  # name -> (the object, given the marker file; message)
    "quantile": (lambda _: QuantileTransformer(n_quantiles=10).fit(np.arange(20.0).reshape(-1, 1)),
                 "pickle names sklearn.preprocessing._data.QuantileTransformer, "),
    "power": (lambda _: PowerTransformer().fit(np.arange(1.0, 21.0).reshape(-1, 1)),
              "pickle names sklearn.preprocessing._data.PowerTransformer, "),
    "custom": (lambda _: Custom(), "pickle names test_scalers.Custom, "),
    "pipeline-of-quantile": (lambda _: make_pipeline(MinMaxScaler(), QuantileTransformer(n_quantiles=10)).fit(
        np.arange(20.0).reshape(-1, 1)), "pickle names sklearn.preprocessing._data.QuantileTransformer, "),
    "os.system": (lambda marker: Runs(os.system, f"touch {marker}"), "pickle names posix.system, "),
    "eval": (lambda marker: Runs(eval, f"open({str(marker)!r}, 'w')"), "pickle names builtins.eval, "),
    "hidden-in-state": (lambda marker: _with_extra(fitted(MinMaxScaler, 1), extra=Runs(os.system, f"touch {marker}")),
                        "pickle names posix.system, "),
    "unfitted": (lambda _: MinMaxScaler(), "MinMaxScaler without scale_, min_: unfitted"),
    # scikit-learn 1.9 fails on it too ('MaxAbsScaler' object has no attribute 'clip')
    "maxabs-before-clip": (lambda _: _delattr(fitted(MaxAbsScaler, 1), "clip"), "MaxAbsScaler without clip: "),
    "not-a-scaler": (lambda _: {"scale_": np.ones(1)}, "the pickle holds a dict, not a fitted scaler"),
    "side-npy-files": (lambda _: {"scale_": NDArrayWrapper("s.save_01.npy", np.ndarray)},
                       "pickle names joblib.numpy_pickle_compat.NDArrayWrapper, "),
}


@pytest.mark.parametrize("writer", ["joblib", "joblib-zlib", "pickle-0", "pickle-5"])
@pytest.mark.parametrize("what", REFUSED)
def test_refused_before_anything_runs(what: str, writer: str, tmp_path: Path) -> None:
    make, message = REFUSED[what]
    if writer == "pickle-0":  # protocols before 3 write Python 2's module names
        message = message.replace("builtins.", "__builtin__.")
    marker = tmp_path / "ran"
    path = written(make(marker), writer, tmp_path / "10.0.0.1.save")
    with pytest.raises(Unsupported, match=f"^{re.escape(f'scaler 10.0.0.1.save: {message}')}"):
        read_scaler(str(path))
    assert not marker.exists()


def test_refusal_message(tmp_path: Path) -> None:
    path = written(Poison("1/0"), "joblib", tmp_path / "10.0.0.1.save")
    with pytest.raises(Unsupported) as refused:
        read_scaler(str(path))
    assert str(refused.value) == "scaler 10.0.0.1.save: pickle names builtins.eval, not a known scaler"


@pytest.mark.parametrize("stream, message", [
    # copyreg._reconstructor, allowed for this module's classes only
    (b"ccopy_reg\n_reconstructor\n(cnumpy\ndtype\nc__builtin__\nobject\nNtR.",
     "pickle reconstructs <class 'numpy.dtype'>"),
    # codecs.encode, allowed for the latin1 that protocols 0-2 write bytes in only
    (b"c_codecs\nencode\n(Vabc\nVrot13\ntR.", "pickle encodes bytes as 'rot13'"),
])
def test_allowed_callables_refuse_other_arguments(stream: bytes, message: str, tmp_path: Path) -> None:
    path = tmp_path / "s.save"
    path.write_bytes(stream)
    with pytest.raises(Unsupported, match=re.escape(f"scaler s.save: {message}")):
        read_scaler(str(path))


def _cut(writer: str, keep: float) -> Callable[[Path], bytes]:
    def make(tmp_path: Path) -> bytes:
        data = written(fitted(StandardScaler, 1), writer, tmp_path / "whole.save").read_bytes()
        return data[:int(len(data) * keep)]
    return make


@pytest.mark.parametrize("make, message", [
    (lambda _: b"", "empty file"),
    (lambda _: np.random.default_rng(1).bytes(300), "not read without scikit-learn (UnpicklingError: "),
    (lambda _: b"ip,t000\n10.0.0.1,3.5\n", "not read without scikit-learn ("),
    (_cut("joblib", 0.5), "not read without scikit-learn ("),
    (_cut("joblib", 0.97), "not read without scikit-learn ("),  # inside the last array's bytes
    (_cut("pickle-4", 0.8), "not read without scikit-learn ("),
    (_cut("joblib-zlib", 0.6), "compressed stream truncated"),
    (_cut("joblib-xz", 0.6), "compressed stream truncated"),
    (lambda _: b"\x04\x22\x4d\x18" + bytes(40), "lz4-compressed"),
    (lambda _: b"ZF0x00000000000001b5" + bytes(40), "compressed by joblib before 0.10"),
], ids=["empty", "random", "csv", "joblib-half", "joblib-array-cut", "pickle-cut", "zlib-cut", "xz-cut", "lz4",
        "joblib-0.9"])
def test_unreadable_files(make: Callable[[Path], bytes], message: str, tmp_path: Path) -> None:
    path = tmp_path / "s.save"
    path.write_bytes(make(tmp_path))
    with pytest.raises(Unsupported, match=f"^{re.escape(f'scaler s.save: {message}')}") as refused:
        read_scaler(str(path))
    assert "\n" not in str(refused.value)


def test_reads_without_scikit_learn_joblib_pandas_or_tensorflow(tmp_path: Path) -> None:
    path = written(fitted(SCALERS["pipeline"], 1), "joblib-zlib", tmp_path / "s.save")
    code = ("import sys; import numpy as np; from batchpredict.scoring.scalers import read_scaler; "
            "s = read_scaler(sys.argv[1]); s.inverse_transform(s.transform(np.arange(5.0)).reshape(1, -1)[:, :1]); "
            "print(sorted(m for m in ('sklearn', 'joblib', 'pandas', 'tensorflow') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
