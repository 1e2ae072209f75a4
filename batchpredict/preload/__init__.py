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
    # These models are tiny; a GPU context costs seconds per process.
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")
else:
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# oneDNN's primitive set-up costs more than it saves on one small window per process:
# ~300 -> ~210 ms median per job on the bundled LSTMs (docs/performance.md).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
