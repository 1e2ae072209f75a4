"""What every forkserver does first, before it imports its set (`lean` or `full`).

Import only: running a TensorFlow op in a forkserver would start TF's thread pools, which do not
survive a fork. Environment set here is inherited by every worker.
"""
import ctypes
import os
import signal

# A forkserver leaves when the coordinator closes its end of a pipe; a coordinator killed with
# SIGKILL must take it down as surely, and with it every worker (they die with their forkserver).
ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

if os.environ.get("BATCHPREDICT_DEVICE", "cpu") == "cpu":
    # These models are tiny; a GPU context costs seconds per process (docs/design.md §6).
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")
else:
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# A worker's arithmetic is a few small matrices; OpenBLAS' thread pool, started again in every
# forked worker on its first matmul, cost more than the whole job (~29 -> ~21 ms a lean job).
for _threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")
# oneDNN's primitive set-up costs more than it saves on one small window per process:
# ~300 -> ~210 ms median per job on the bundled LSTMs (docs/performance.md, "What each change bought").
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

# Every worker's entry (executor.serve) and the class its process object names (forkserver.Process):
# imported here once, not by each worker as it unpickles them (10-12 ms a lean worker, with psutil).
from .. import executor  # noqa: E402, F401
