"""The optional parts of the install, and the hint that names the one a feature needs.

The base install runs the night on the numpy engine; TensorFlow, tf_keras, scikit-learn and joblib
come with `batchpredict[keras]`, for the TensorFlow pool, `train`, `--engine keras` and `--verify`.
"""
from __future__ import annotations

import functools
from importlib.util import find_spec

from .errors import UsageError

KERAS = "keras"
_MODULES = {KERAS: ("tensorflow", "tf_keras", "keras", "sklearn", "joblib")}


@functools.cache
def installed(extra: str = KERAS) -> bool:
    """Whether the extra's packages are importable here; found, not imported (TensorFlow takes seconds)."""
    return all(find_spec(module) is not None for module in _MODULES[extra])


def needs_tensorflow(what: str) -> str:
    """The one-line message of something that cannot run without the `keras` extra."""
    return f"{what}: it needs TensorFlow, pip install 'batchpredict[{KERAS}]'"


def require_tensorflow(what: str) -> None:
    """UsageError (exit 2) for a command or option that cannot run without the `keras` extra."""
    if not installed(KERAS):
        raise UsageError(needs_tensorflow(what))
