"""The TensorFlow forkserver's set: TF, Keras 3, tf_keras and scikit-learn, imported and never run.

Its workers run every job the lean set cannot: other layers, SavedModels, Lambda layers, scalers
of other classes, `--engine keras`, training, and `store check` of what the lean set cannot load.

The package's __init__ (the prctl and the environment) has run before this module.
"""
import gc
import os
import warnings

warnings.filterwarnings("ignore", module="keras")
warnings.filterwarnings("ignore", module="sklearn")

# TensorFlow's import prints absl INFO lines that TF_CPP_MIN_LOG_LEVEL no longer hides.
_stderr = os.dup(2)
os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
try:
    import h5py  # noqa: F401
    import joblib  # noqa: F401
    import keras  # noqa: F401
    import sklearn.preprocessing  # noqa: F401
    import tensorflow  # noqa: F401
    import tf_keras  # noqa: F401

    from ...scoring import prediction  # noqa: F401
finally:
    os.dup2(_stderr, 2)
    os.close(_stderr)

# Every page a worker writes is copied from this process first; the collector would write to every
# object it walks, and here that is all of TensorFlow's.
gc.freeze()
