"""What every forkserver does first, before it imports its set (`lean` or `full`).

Import only: running a TensorFlow op in a forkserver would start TF's thread pools, which do not
survive a fork. Environment set here is inherited by every worker.
"""
import ctypes
import os
import signal
import threading
import time

# A forkserver leaves when the coordinator closes its end of a pipe; a coordinator killed with
# SIGKILL must take it down as surely, and with it every worker (they die with their forkserver).
_libc = ctypes.CDLL(None)
_libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
_PARENT = os.getppid()
if _PARENT == 1:  # the coordinator died before the prctl took effect: no one would ask this server for a worker,
    os._exit(0)   # and it would import its set (TensorFlow: seconds, more on a busy machine) before it noticed


def _watch_parent() -> None:
    """Leave once the coordinator is gone, whatever became of the death signal: a TensorFlow forkserver was seen
    alive long after a kill -9 of its coordinator (on a loaded machine), kept so by a hung worker of its own, which
    holds the server's pipe open and dies only with it. A thread's state is not inherited by the workers forked."""
    while os.getppid() == _PARENT:
        time.sleep(1.0)
    os._exit(0)


threading.Thread(target=_watch_parent, name="batchpredict-parent-watch", daemon=True).start()

# A job allocates and frees arrays of a few hundred kB over and over. glibc maps each one above 128 kB afresh
# and hands the top of its heap back, so a worker faulted in new pages for each (2-3 us a page in a process
# just forked): freed memory is kept for the next array instead. A worker lives for one job, and what it
# holds goes back to the system when it exits.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
if hasattr(_libc, "mallopt"):  # glibc's; another libc keeps its own policy
    _libc.mallopt(_M_MMAP_THRESHOLD, 16 << 20)
    _libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20)

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

# Every worker's entry (workhorse.serve) and the class its process object names (forkserver.Process):
# imported here once, not by each worker as it unpickles them (10-12 ms a lean worker, with psutil).
from .. import forkserver, workhorse  # noqa: E402, F401
