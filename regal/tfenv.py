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
