"""Imported once by the forkserver so that every forked worker starts warm.

Import only: running a TensorFlow op here would start TF's thread pools, which do not survive
a fork. Environment set here is inherited by every worker.
"""
import ctypes
import os
import signal
import warnings

# The forkserver leaves when the coordinator closes its end of a pipe; a coordinator killed with
# SIGKILL must take it down as surely, and with it every worker (they die with the forkserver).
ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

if os.environ.get("BATCHPREDICT_DEVICE", "cpu") == "cpu":
    # These models are tiny; a GPU context costs seconds per process (docs/design.md §6).
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")
else:
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# oneDNN's primitive set-up costs more than it saves on one small window per process:
# ~300 -> ~210 ms median per job on the bundled LSTMs (docs/performance.md, "What each change bought").
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

warnings.filterwarnings("ignore", module="keras")
warnings.filterwarnings("ignore", module="sklearn")

# TensorFlow's import prints absl INFO lines that TF_CPP_MIN_LOG_LEVEL no longer hides.
_stderr = os.dup(2)
os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
try:
    import h5py  # noqa: F401
    import joblib  # noqa: F401
    import sklearn.preprocessing  # noqa: F401
    import tensorflow  # noqa: F401
    import keras  # noqa: F401
    import tf_keras  # noqa: F401

    from . import worker  # noqa: F401
finally:
    os.dup2(_stderr, 2)
    os.close(_stderr)
