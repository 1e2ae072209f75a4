"""extras: which optional part a feature needs. Its absence is checked for real by scripts/check_wheel.py
(`make wheel-check`, in .ci/run): a fresh venv with the base install only."""
from __future__ import annotations

from importlib.util import find_spec

from batchpredict import extras


def test_the_full_install_has_the_keras_extra() -> None:
    assert extras.installed() and find_spec("tensorflow") is not None


def test_the_hint_names_the_extra_to_install() -> None:
    assert extras.needs_tensorflow("model/10.0.0.7 is a SavedModel") == (
        "model/10.0.0.7 is a SavedModel: it needs TensorFlow, pip install 'batchpredict[keras]'")


def test_require_passes_where_tensorflow_is_installed() -> None:
    extras.require_tensorflow("train")  # raises UsageError (exit 2) where it is not
