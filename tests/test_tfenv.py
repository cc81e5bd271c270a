"""TensorFlow and CP-SAT in one process (the harness runs the policy and CP-SAT side by side).

The subprocess matters: conftest.py already imports regal.tfenv, which would hide a regression here.
"""

import subprocess
import sys

SCRIPT = r"""
import numpy as np
import regal.policy.model            # a TensorFlow module of REGAL: imports TF through regal.tfenv
import tensorflow as tf
assert tf.reduce_sum(tf.ones(3)).numpy() == 3.0
from regal.optimizers import Problem, solve
from regal.synth import random_dag
solution = solve("cpsat", Problem(random_dag(7, np.random.default_rng(0)), 2), 1, 0, time_limit=5)
print("status", solution.extra["status"], solution.value)
"""


def test_cpsat_runs_after_tensorflow_was_imported():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "status OPTIMAL" in out.stdout


def test_tfenv_selects_legacy_keras():
    out = subprocess.run([sys.executable, "-c",
                          "import regal.tfenv, tensorflow as tf; print(tf.keras.__name__)"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().startswith("tf_keras"), out.stdout  # Keras 2, not Keras 3
