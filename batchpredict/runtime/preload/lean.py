"""The lean forkserver's set: numpy and the numpy engine; never h5py, TensorFlow nor scikit-learn.

Fork plus exit costs more the larger the forking process is (~1.5 ms with numpy and the engine,
~1.8 ms once h5py is imported, ~21 ms with scikit-learn, ~35 ms with TensorFlow), so this set is
only what a job whose weights come from the weights cache needs; a worker that misses the cache
imports h5py itself (~25 ms, once per model file: `batchpredict train` fills the cache). The
package's __init__ (the prctl and the environment) has run first.

Then it runs one job on each tiny bundled model (warmup/, made by scripts/make_warmup.py), so
that what a first job pays once per process (lazy imports, regex and codec caches, the weights
cache's read) is paid here, before any fork: ~21 -> ~15 ms a lean job. The misses that fill its
cache run in a child of its own, which takes h5py with it. Nothing it runs starts a thread, and
it leaves no file open.
"""
import gc
import os
import tempfile

import numpy  # noqa: F401

from ...job import Job
from ...scoring import engine, prediction  # noqa: F401

prediction.LEAN = True

_WARMUP = os.path.join(os.path.dirname(__file__), "warmup")
_MODELS = ("warmup.h5", "warmup.keras")


def _warm_up() -> None:
    for model in _MODELS:
        prediction.run_job(Job(ip="warm-up", labels=[str(i) for i in range(30)],
                               values=[float(i % 7) for i in range(30)], store=_WARMUP, model=model,
                               scaler="warmup.save", std=1.0, std_mode=("store", 0), method=None))


# In a weights cache of its own: the misses (HDF5, zipfile, the cache's write) in a child, then the hits here.
_cache = os.environ.get("BATCHPREDICT_CACHE")
with tempfile.TemporaryDirectory() as _warm:
    os.environ["BATCHPREDICT_CACHE"] = _warm
    _child = os.fork()
    if _child == 0:
        try:
            _warm_up()
        finally:
            os._exit(0)
    os.waitpid(_child, 0)
    _warm_up()
if _cache is None:
    del os.environ["BATCHPREDICT_CACHE"]
else:
    os.environ["BATCHPREDICT_CACHE"] = _cache

# Every page a worker writes is copied from this process first (1-3 us a page here); the collector
# would write to every object it walks. What exists now is never collected, and a worker, which
# lives for one job, does not collect at all: its memory goes back to the system when it exits.
gc.freeze()
gc.disable()
