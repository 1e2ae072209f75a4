"""The lean forkserver's set: numpy, h5py and the numpy engine; never TensorFlow nor scikit-learn.

Fork plus exit costs more the larger the forking process is (~2 ms with numpy alone, ~21 ms once
scikit-learn is imported, ~35 ms with TensorFlow), so this set is only what a lean job needs. The package's __init__ (the prctl and the
environment) has run first.
"""
import h5py  # noqa: F401
import numpy  # noqa: F401

from .. import engine, executor, worker  # noqa: F401

worker.LEAN = True
