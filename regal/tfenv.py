"""Import this module before the first `import tensorflow` in any REGAL module.

Why, twice over:
- spektral 1.3 breaks on Keras 3, so TensorFlow must come up with Keras 2 from
  tf-keras: `TF_USE_LEGACY_KERAS=1` has to be set before TensorFlow is imported.
- TensorFlow and OR-Tools each bundle their own copies of native libraries
  (absl, protobuf). When TensorFlow's are loaded first, CP-SAT crashes the
  process (SIGSEGV) on any model with interval constraints; when OR-Tools
  is loaded first, both work. A process that imported TensorFlow (the
  policy, the importer, `measure`) may later run the CP-SAT baseline (the
  harness, the transfer experiment), so OR-Tools' native module is loaded here.
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

try:  # pragma: no cover - ortools is a hard dependency; keep TF usable without it
    from ortools.sat.python import cp_model as _cp_model  # noqa: F401
except ImportError:
    pass

import contextlib  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402


def from_cli() -> bool:
    """True in a `regal` command's process: its errors must be one line (exit 2), so
    TensorFlow's log lines are kept out of stderr there (REGAL_DEBUG=1 lets them through)."""
    main = getattr(sys.modules.get("__main__"), "__spec__", None)  # `python -m regal.cli`
    return ("regal.cli" in sys.modules or getattr(main, "name", None) == "regal.cli") \
        and not os.environ.get("REGAL_DEBUG")


if from_cli():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow loads
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    try:
        from absl import logging as _absl_logging
        _absl_logging.set_verbosity(_absl_logging.ERROR)
    except ImportError:  # pragma: no cover - absl comes with TensorFlow
        pass


@contextlib.contextmanager
def quiet_native_logs():
    """In a `regal` command, hides what native code writes straight to file descriptor 2
    while TensorFlow loads (absl's "before absl::InitializeLog()" notices, the CUDA probe),
    which TF_CPP_MIN_LOG_LEVEL does not reach. Elsewhere it does nothing."""
    if not from_cli():
        yield
        return
    from regal.c_output import silenced

    with silenced(2):
        yield
