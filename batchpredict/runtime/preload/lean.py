"""The lean forkserver's set: numpy, h5py and the numpy engine; never TensorFlow nor scikit-learn.

Fork plus exit costs more the larger the forking process is (~2 ms with numpy alone, ~21 ms once
scikit-learn is imported, ~35 ms with TensorFlow), so this set is only what a lean job needs. The
package's __init__ (the prctl and the environment) has run first.

Then it runs one job on each tiny bundled model (warmup/, made by scripts/make_warmup.py), so
that what a first job pays once per process (lazy imports, regex and codec caches, h5py's and
zipfile's first use, the weights cache's read) is paid here, before any fork: ~21 -> ~15 ms a lean job. Nothing it runs
starts a thread, and it leaves no file open.
"""
import gc
import os
import tempfile

import h5py  # noqa: F401
import numpy  # noqa: F401

from ...job import Job
from ...scoring import engine, prediction  # noqa: F401

prediction.LEAN = True

_WARMUP = os.path.join(os.path.dirname(__file__), "warmup")
# Twice each, with a weights cache of its own: a miss (HDF5, zipfile, the cache's write), then a hit (its read).
_cache = os.environ.get("BATCHPREDICT_CACHE")
with tempfile.TemporaryDirectory() as _warm:
    os.environ["BATCHPREDICT_CACHE"] = _warm
    for _model in ("warmup.h5", "warmup.keras", "warmup.h5", "warmup.keras"):
        prediction.run_job(Job("warm-up", [str(i) for i in range(30)], [float(i % 7) for i in range(30)], _WARMUP,
                           _model, "warmup.save", 1.0))
if _cache is None:
    del os.environ["BATCHPREDICT_CACHE"]
else:
    os.environ["BATCHPREDICT_CACHE"] = _cache

# Every page a worker writes is copied from this process first (~6 us a page here); the collector
# would write to every object it walks. What exists now is never collected, and a worker, which
# lives for one job, does not collect at all: its memory goes back to the system when it exits.
gc.freeze()
gc.disable()
