"""Every model format people have, through the real loader in real workers, each prediction checked
against the runtime that saved it (generated models) or the runtime that reads it (real files)."""
import json
import logging
import re
import shutil
import warnings
from pathlib import Path

import joblib
import numpy as np
import pytest
from conftest import (
    BROKEN,
    FORMATS,
    RIGHT_OUTPUT,
    SHARED,
    WRONG_OUTPUT,
    build_models,
    last_window,
    series_for,
    wide_table,
    write_scaler,
    write_stds,
)
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler

from batchpredict import RunOptions, predict_table
from batchpredict.errors import JobError
from batchpredict.scoring.loading import describe, load_scaler

REPO = Path(__file__).resolve().parents[2]

# what the debug log must say each was read with, by engine; auto takes numpy where it can
READ_WITH = {
    "10.4.0.1": r"h5 keras_version=3\.\S+ via (keras|numpy),",
    "10.4.0.2": r"keras keras_version=3\.\S+ via keras,",  # its Lambda layer is TensorFlow's under auto too
    "10.4.0.3": r"h5 keras_version=2\.\S+ via (tf_keras|numpy),",
    "10.4.0.4": r"savedmodel keras_version=2\.\S+ via tf.saved_model signature serving_default,",
    "10.4.0.5": r"savedmodel keras_version=none via tf.saved_model signature serving_default,",
    "10.4.0.6": r"savedmodel keras_version=none via tf.saved_model signature predict,",
    "10.4.0.7": r"savedmodel keras_version=none via tf.saved_model __call__,",
    "10.4.0.8": r"keras keras_version=2\.\S+ via (tf_keras|numpy), timesteps variable",
}
NUMPY_UNDER_AUTO = {"10.4.0.1", "10.4.0.3", "10.4.0.8"}


@pytest.mark.parametrize("engine", ["auto", pytest.param("keras", marks=pytest.mark.slow)])
def test_every_format_in_one_batch_predicts_what_its_saving_runtime_does(formats_store, tmp_path, caplog, engine):
    store, refs = formats_store
    table = wide_table(tmp_path / "t.csv", {ip: series_for(ip) for ip in FORMATS})
    with caplog.at_level(logging.DEBUG, logger="batchpredict"):
        # Trusted: 10.4.0.2's Lambda layer loads only so (test_worker checks the refusal).
        frame = predict_table(str(table), str(store), options=RunOptions(engine=engine, trust_store=True)).set_index("ip")
    assert (frame["status"] == "ok").all(), frame["error"].to_dict()
    for ip in FORMATS:
        scaler = joblib.load(store / "sc" / f"{ip}.save")
        # compared where the model answers, before inverse scaling
        assert scaler.transform([[frame.loc[ip, "predicted"]]])[0, 0] == pytest.approx(refs[ip], abs=1e-5), ip
        line = re.search(rf"{re.escape(ip)}: {re.escape(frame.loc[ip, 'model'])}: {READ_WITH[ip]}", caplog.text)
        assert line, ip
        assert (" via numpy," in line.group(0)) == (engine == "auto" and ip in NUMPY_UNDER_AUTO), line.group(0)
    engines = frame.attrs["summary"]["engines"]
    assert engines == ({"numpy": 3, "keras": 5} if engine == "auto" else {"keras": 8})
    assert "10.4.0.4: model declares 12 timesteps; using them instead of --window 20" in caplog.text
    assert "pickled with scikit-learn" in caplog.text


def test_unusable_models_are_load_errors_that_say_what_was_tried(formats_store, tmp_path):
    store, _ = formats_store
    table = wide_table(tmp_path / "t.csv", {ip: series_for(ip) for ip in BROKEN})
    frame = predict_table(str(table), str(store)).set_index("ip")
    for ip, (_, message) in BROKEN.items():
        assert frame.loc[ip, "status"] == "load_error"
        assert re.match(message, frame.loc[ip, "error"]), frame.loc[ip, "error"]


@pytest.mark.parametrize("engine", ["auto", pytest.param("keras", marks=pytest.mark.slow)])
def test_a_model_that_does_not_give_one_value_per_window_is_a_load_error(wrong_output_store, tmp_path, engine):
    """Its first value read as the prediction was a number the model never meant, and the row said ok."""
    ips = [*WRONG_OUTPUT, RIGHT_OUTPUT]
    table = wide_table(tmp_path / "t.csv", {ip: series_for(ip) for ip in ips})
    frame = predict_table(str(table), str(wrong_output_store), options=RunOptions(engine=engine)).set_index("ip")
    assert frame.loc[RIGHT_OUTPUT, "status"] == "ok", frame.loc[RIGHT_OUTPUT, "error"]
    for ip, (_, message) in WRONG_OUTPUT.items():
        error = frame.loc[ip, "error"]
        assert frame.loc[ip, "status"] == "load_error" and error.startswith(ip) and "\n" not in error, error
        assert message in error, error
    if engine == "auto":  # the numpy engine's own words; Keras refuses the model without layers in its own
        assert re.fullmatch(r"10\.5\.0\.5\.h5: h5 keras_version=3\.\S+ via keras: the model has no layers",
                            frame.loc["10.5.0.5", "error"])


def test_a_model_giving_other_than_one_value_per_window_is_refused_when_called(wrong_output_store):
    """Where no output shape is declared (a SavedModel may leave it open), the call checks what it gives."""
    from batchpredict.scoring import engine
    from batchpredict.scoring.loading import _checked

    windows = np.zeros((4, 20, 1), np.float32)
    dense3 = engine.load(str(wrong_output_store / "model" / "10.5.0.1.h5")).predict
    with pytest.raises(JobError, match=r"^m: the model outputs \(None, 3\) per window, not one value$"):
        _checked("m", dense3)(windows)
    right = engine.load(str(wrong_output_store / "model" / f"{RIGHT_OUTPUT}.h5")).predict
    assert _checked("m", right)(windows).shape == (4, 1)
    assert _checked("m", lambda x: right(x)[:, :, None])(windows).shape == (4, 1, 1)  # a Reshape head: one value
    assert _checked("m", lambda x: right(x)[:, 0])(windows).shape == (4,)
    with pytest.raises(JobError, match=r"^m: the model outputs \(1, 1\) for 4 windows$"):
        _checked("m", lambda x: right(x)[:1])(windows)


@pytest.mark.timeout(60)
def test_a_config_declaring_more_units_than_its_weights_hold_is_a_load_error_at_once(tmp_path):
    """The weights do not fit the config, so the numpy engine sent the job to TensorFlow, where Keras built the
    10**9-unit LSTM declared until --timeout killed it."""
    import h5py

    store, ip = Path(shutil.copytree(REPO / "models", tmp_path / "store")), "10.0.0.10"
    with h5py.File(store / "model" / f"{ip}.h5", "r+") as h5:
        config = json.loads(h5.attrs["model_config"])
        lstm = next(layer["config"] for layer in config["config"]["layers"] if layer["class_name"] == "LSTM")
        lstm["units"] = 10**9
        h5.attrs["model_config"] = json.dumps(config)
    lines = (REPO / "examples" / "stats.csv").read_text().splitlines()
    table = tmp_path / "t.csv"
    table.write_text("\n".join([lines[0], *(line for line in lines if line.startswith(ip + ","))]) + "\n")
    row = predict_table(str(table), str(store)).set_index("ip").loc[ip]
    assert row["status"] == "load_error", row["error"]
    assert re.fullmatch(rf"{re.escape(ip)}\.h5: h5 keras_version=3\.\S+ via \S+: LSTM '{lstm['name']}': its config "
                        r"declares units 1,000,000,000, but the file holds 16,896 weight values for it", row["error"])


@pytest.mark.parametrize("engine", ["numpy", "keras"])
def test_a_model_declaring_no_timesteps_is_a_load_error_not_an_error_of_an_empty_window(tmp_path, engine):
    """Its 0 timesteps replaced --window: the job then failed in the scaler, `error` naming the MinMaxScaler."""
    import h5py

    store, ip = Path(shutil.copytree(REPO / "models", tmp_path / "store")), "10.0.0.10"
    with h5py.File(store / "model" / f"{ip}.h5", "r+") as h5:
        config = json.loads(h5.attrs["model_config"])
        config["config"]["layers"][0]["config"]["batch_shape"] = [None, 0, 1]
        h5.attrs["model_config"] = json.dumps(config)
    lines = (REPO / "examples" / "stats.csv").read_text().splitlines()
    table = tmp_path / "t.csv"
    table.write_text("\n".join([lines[0], *(line for line in lines if line.startswith(ip + ","))]) + "\n")
    row = predict_table(str(table), str(store), options=RunOptions(engine=engine)).set_index("ip").loc[ip]
    assert row["status"] == "load_error", row["error"]
    assert "input shape (None, 0, 1) declares 0 timesteps; a window needs at least one" in row["error"]


@pytest.mark.parametrize("ip, kind, version, runtime", [
    ("10.4.0.1", "h5", "3.", "keras"), ("10.4.0.2", "keras", "3.", "keras"), ("10.4.0.3", "h5", "2.", "tf_keras"),
    ("10.4.0.4", "savedmodel", "2.", "tf.saved_model"), ("10.4.0.5", "savedmodel", "", "tf.saved_model"),
    ("10.4.0.8", "keras", "2.", "tf_keras"),
])
def test_describe_reads_the_format_from_the_file(formats_store, ip, kind, version, runtime):
    store, _ = formats_store
    path = next((store / "model").glob(ip + "*"))
    fmt = describe(str(path))
    assert (fmt.kind, fmt.runtime) == (kind, runtime) and fmt.keras_version.startswith(version)
    assert bool(fmt.keras_version) == bool(version)


def test_scalers_of_any_kind_and_the_version_that_pickled_them(tmp_path):
    pipeline = make_pipeline(StandardScaler(), MinMaxScaler()).fit([[1.0], [5.0], [9.0]])
    joblib.dump(pipeline, tmp_path / "p.save")
    loaded = load_scaler(str(tmp_path / "p.save"))
    assert loaded.transform(np.array([1.0, 9.0])).ravel().tolist() == [0.0, 1.0]
    assert loaded.note.startswith("scaler p.save: Pipeline pickled with scikit-learn 1.")
    joblib.dump({"not": "a scaler"}, tmp_path / "d.save")
    with pytest.raises(JobError, match="d.save is a dict, without transform/inverse_transform"):
        load_scaler(str(tmp_path / "d.save"))


# The real files of ../shared/fixtures/real-models (PROVENANCE.md): runtime that must read each,
# timesteps it declares.
REAL = SHARED / "fixtures" / "real-models"
REAL_SCALER = "Abhishek-995312__stock-price-prediction-lstm__scaler.pkl"
REAL_MODELS = {
    "Hangtianhengxing__Real-Time-Anomaly-Detection-using-LSTM__lstm.h5": ("tf_keras", "2.2.4", None),
    "NewtOliver__time-series-prediction__lstm.h5": ("tf_keras", "2.3.1", 3),
    "BingqiShen__Stock-price-prediction-using-LSTM__Model_GZMT.xlsx_saved_lstm_model.h5": ("tf_keras", "2.3.0-tf", 90),
    "AJ1401__Stock-Trend-Prediction__keras_model.h5": ("tf_keras", "2.15.0", 100),
    "01235-anuj__Using-LSTM-GRU-NextDayPricePrediction__gru_model.h5": ("keras", "3.10.0", 60),
    "Abhishek-995312__stock-price-prediction-lstm__lstm_model.h5": ("keras", "3.13.2", 60),  # with its real scaler
}


@pytest.fixture(scope="module")
def real_store(tmp_path_factory):
    """The real files copied into a temporary store (never into the project); (store, table, refs)."""
    wanted = [*REAL_MODELS, REAL_SCALER]
    missing = [name for name in wanted if not (REAL / name).is_file()]
    if missing:
        pytest.skip(f"needs the real model files in {REAL} (the team's shared folder beside the clone, or set "
                    "BATCHPREDICT_SHARED to a folder holding fixtures/real-models); missing: "
                    + (f"all {len(wanted)}" if len(missing) == len(wanted) else ", ".join(missing))
                    + "; each is <owner>__<repository>__<path> of a public GitHub repository")
    tmp = tmp_path_factory.mktemp("real")
    store, data, references = tmp / "store", {}, []
    (store / "model").mkdir(parents=True)
    for i, (name, (runtime, _, window)) in enumerate(REAL_MODELS.items()):
        ip = f"real-{i}"
        shutil.copy(REAL / name, store / "model" / f"{ip}.h5")
        data[ip] = series_for(ip, 130)
        if name.startswith("Abhishek"):
            shutil.copy(REAL / REAL_SCALER, store / "sc" / f"{ip}.save")
        else:
            write_scaler(store, ip, MinMaxScaler().fit(data[ip].reshape(-1, 1)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the real scaler's version and feature-name warnings
            inputs = last_window(data[ip], window or 20)
            x = joblib.load(store / "sc" / f"{ip}.save").transform(inputs.reshape(-1, 1))
        references.append({"key": ip, "path": str(REAL / name), "runtime": runtime, "input": x.ravel().tolist()})
    write_stds(store, {ip: 1.0 for ip in data})
    return store, wide_table(tmp / "t.csv", data), build_models(store, [], references)


@pytest.mark.parametrize("engine", ["auto", pytest.param("keras", marks=pytest.mark.slow)])
def test_every_real_file_loads_and_predicts_what_its_runtime_does(real_store, caplog, engine):
    store, table, refs = real_store
    with caplog.at_level(logging.DEBUG, logger="batchpredict"):
        frame = predict_table(str(table), str(store), options=RunOptions(engine=engine)).set_index("ip")
    assert (frame["status"] == "ok").all(), frame["error"].to_dict()
    for i, (name, (runtime, version, window)) in enumerate(REAL_MODELS.items()):
        ip = f"real-{i}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scaled = joblib.load(store / "sc" / f"{ip}.save").transform([[frame.loc[ip, "predicted"]]])[0, 0]
        assert scaled == pytest.approx(refs[ip], abs=1e-5), name
        shown = "variable" if window is None else window
        via = "numpy" if engine == "auto" else runtime
        assert f"{ip}: model/{ip}.h5: h5 keras_version={version} via {via}, timesteps {shown}" in caplog.text
    # the real scaler's sklearn version is in the debug log, read by the restricted unpickler whichever the
    # engine (the store is not trusted); its warnings are nowhere (worker stderr included)
    assert "MinMaxScaler pickled with scikit-learn 1.6.1, read without scikit-learn" in caplog.text
    assert "InconsistentVersionWarning" not in caplog.text and "feature names" not in caplog.text
