import json
import os

import pytest

from batchpredict.errors import JobError, UsageError
from batchpredict.io.store import Store


@pytest.fixture
def root(tmp_path):
    for sub in ("model", "sc", "std"):
        (tmp_path / sub).mkdir()
    (tmp_path / "std" / "std.json").write_text(json.dumps({"a": 1.0, "b": 2, "bad": "x", "2001:db8::1": 3.0}))
    for ip in ("a", "b", "bad", "2001:db8::1"):
        (tmp_path / "sc" / f"{ip}.save").write_bytes(b"")
    return tmp_path


def status_of(store, ip):
    with pytest.raises(JobError) as err:
        store.artefacts(ip)
    return err.value.status, str(err.value)


def test_finds_each_format(root):
    (root / "model" / "a.h5").write_bytes(b"")
    (root / "model" / "b").mkdir()
    (root / "model" / "b" / "saved_model.pb").write_bytes(b"")
    (root / "model" / "2001:db8::1.keras").write_bytes(b"")
    store = Store(str(root))
    assert store.artefacts("a").model == os.path.join("model", "a.h5")
    assert store.artefacts("b").model == os.path.join("model", "b")
    assert store.artefacts("2001:db8::1").std == 3.0


def test_two_artefacts_is_a_load_error_naming_both(root):
    (root / "model" / "a.h5").write_bytes(b"")
    (root / "model" / "a.keras").write_bytes(b"")
    status, message = status_of(Store(str(root)), "a")
    assert status == "load_error" and "a.h5" in message and "a.keras" in message


@pytest.mark.parametrize("ip", ["", "../etc/passwd", "a/b", ".hidden", "-rf", "a b", "x" * 256])
def test_invalid_ids(root, ip):
    assert status_of(Store(str(root)), ip)[0] == "invalid_input"


def test_symlink_out_of_the_store_is_refused(root, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "evil.h5"
    outside.write_bytes(b"")
    (root / "model" / "a.h5").symlink_to(outside)
    assert status_of(Store(str(root)), "a")[0] == "invalid_input"


def test_missing_pieces_are_no_model(root):
    (root / "model" / "c.h5").write_bytes(b"")
    store = Store(str(root))
    assert status_of(store, "zz")[0] == "no_model"
    assert "scaler" in status_of(store, "c")[1]
    (root / "sc" / "c.save").write_bytes(b"")
    assert "scaler" in status_of(store, "c")[1]  # the store was listed when it was opened
    assert "std.json" in status_of(Store(str(root)), "c")[1]


def test_bad_std_value_is_load_error(root):
    (root / "model" / "bad.h5").write_bytes(b"")
    assert status_of(Store(str(root)), "bad")[0] == "load_error"


def test_missing_store_and_broken_std_json(tmp_path):
    with pytest.raises(UsageError):
        Store(str(tmp_path / "none"))
    (tmp_path / "model").mkdir()
    (tmp_path / "std").mkdir()
    (tmp_path / "std" / "std.json").write_text("{not json")
    with pytest.raises(UsageError, match="cannot read .*std.json"):
        Store(str(tmp_path))


@pytest.mark.parametrize("model", ["missing", "a file"])
def test_a_folder_without_a_model_folder_is_no_store_but_one_train_may_fill(tmp_path, model):
    """--models pointing at a parent folder or an empty mount gave every IP no_model and exit 0."""
    if model == "a file":
        (tmp_path / "model").write_text("")
    with pytest.raises(UsageError, match=f"is no model store: its model/ folder {'is not a folder' if model == 'a file' else 'is missing'}"):
        Store(str(tmp_path))
    if model == "missing":
        assert Store(str(tmp_path), fresh=True).ips() == []


def test_a_folder_that_is_a_link_out_of_the_store_takes_every_id_along(root, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere")
    (outside / "a.h5").write_bytes(b"")
    (root / "model").rmdir()
    (root / "model").symlink_to(outside)
    store = Store(str(root))
    assert status_of(store, "a") == ("invalid_input", "model/a.h5 resolves outside the store")
    assert status_of(store, "zz")[0] == "invalid_input"  # nothing there for it: the path still leaves


def test_links_inside_the_store_are_followed(root):
    (root / "models-real").mkdir()
    (root / "models-real" / "saved_model.pb").write_bytes(b"")
    (root / "model" / "a").symlink_to(root / "models-real")
    (root / "sc" / "b.save").unlink()
    (root / "sc" / "b.save").symlink_to(root / "sc" / "a.save")
    (root / "model" / "b.keras").write_bytes(b"")
    store = Store(str(root))
    assert store.artefacts("a").model == os.path.join("model", "a")
    assert store.artefacts("b").scaler == os.path.join("sc", "b.save")


@pytest.mark.parametrize("kind", ["nested", "fifo", "outside", "dangling"])
@pytest.mark.parametrize("name", ["std/std.json", "manifest.json"])
def test_a_store_json_file_that_is_no_data_file_of_the_store_is_one_error(root, tmp_path_factory, kind, name):
    """Nested past the parser's depth, a FIFO (which would block the run for good), a link out of the store or to
    nothing: exit 2 naming the file, never a traceback, a hang or a store read as empty."""
    path = root / name
    path.unlink(missing_ok=True)
    if kind == "nested":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "outside":
        elsewhere = tmp_path_factory.mktemp("elsewhere") / "std.json"
        elsewhere.write_text(json.dumps({"a": 1.0}))
        path.symlink_to(elsewhere)
    else:
        path.symlink_to(root / "gone.json")
    with pytest.raises(UsageError, match=f"{path}") as caught:
        Store(str(root))
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400


@pytest.mark.parametrize("name", ["std/std.json", "manifest.json"])
def test_a_store_json_file_that_is_a_folder_is_named_as_one(root, name):
    """open() on the folder's descriptor named the descriptor: 'IsADirectoryError: [Errno 21] Is a directory: 4'."""
    path = root / name
    path.unlink(missing_ok=True)
    path.mkdir()
    with pytest.raises(UsageError) as caught:
        Store(str(root))
    assert str(caught.value) == f"{path} is not a regular file"


def test_a_model_or_scaler_that_is_a_fifo_is_a_load_error_not_missing(root):
    (root / "model" / "a.h5").write_bytes(b"")
    os.mkfifo(root / "model" / "b.h5")
    (root / "sc" / "a.save").unlink()
    os.mkfifo(root / "sc" / "a.save")
    store = Store(str(root))
    assert status_of(store, "a") == ("load_error", "sc/a.save is not a regular file")
    assert status_of(store, "b") == ("load_error", "model/b.h5 is not a regular file")


def test_a_link_in_a_loop_is_a_load_error_of_its_own_ip_not_the_end_of_the_listing(root):
    """os.scandir's is_file raises on a link that resolves to itself: the rest of the folder must still be
    listed, or every IP after it in the listing's order would be no_model."""
    ips = [f"h{i}" for i in range(40)]
    for ip in ips:
        (root / "model" / f"{ip}.h5").write_bytes(b"")
        (root / "sc" / f"{ip}.save").write_bytes(b"")
    (root / "std" / "std.json").write_text(json.dumps(dict.fromkeys([*ips, "loop", "a"], 1.0)))
    (root / "model" / "loop.h5").symlink_to("loop.h5")
    (root / "model" / "a.h5").write_bytes(b"")
    (root / "sc" / "a.save").unlink()
    (root / "sc" / "a.save").symlink_to("a.save")
    store = Store(str(root))
    assert status_of(store, "loop") == ("load_error", "model/loop.h5 is not a regular file")
    assert status_of(store, "a") == ("load_error", "sc/a.save is not a regular file")
    assert [store.artefacts(ip).model for ip in ips] == [f"model/{ip}.h5" for ip in ips]
