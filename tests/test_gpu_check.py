"""experiments/gpu_check.py on logical CPU devices, and the step time of regal.measure.

The script's code path (a child process per device count, an optimized placement run by
`regal.measure.measure`, the table) runs here for the smallest model at 2 logical CPUs; the
logical-device set-up needs a fresh process, which the script makes itself. The step-time
plumbing is checked in this process on one device (which any TensorFlow set-up has).
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("tensorflow")

ROOT = Path(__file__).resolve().parents[1]
# experiments/results/sim_vs_measured_cpu.md: max 5.7% between the CPU replay and the model
TOLERANCE_PCT = 10.0


def test_gpu_check_cpu_path_two_devices(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "gpu_check.py"), "--kind", "cpu",
         "--models", "mlp", "--devices", "2", "--budget", "200", "--runs", "1",
         "--timed-runs", "3", "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "summary (CPU)" in proc.stdout
    with open(tmp_path / "gpu_check_cpu.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    # a row per device
    assert [r["device"] for r in rows] == ["/device:CPU:0", "/device:CPU:1"]
    assert all(r["model"] == "mlp" and r["devices"] == "2" and r["mode"] == "train"
               for r in rows)
    for r in rows:
        assert int(r["ops_on_device"]) > 0  # the placement uses both devices
        for column in ("simulated_peak", "measured_peak", "diff_pct", "sim_run_times_peak",
                       "sim_instant_copies_peak", "diff_instant_copies_pct",
                       "simulated_step_us", "measured_step_us", "step_diff_pct",
                       "traced_step_us", "sim_step_run_times_us"):
            assert math.isfinite(float(r[column])), (column, r[column])
        assert float(r["measured_peak"]) > 0 and float(r["simulated_peak"]) > 0
        assert float(r["measured_step_us"]) > 0 and float(r["simulated_step_us"]) > 0
        assert int(r["misplaced_ops"]) == 0
        assert float(r["max_output_diff"]) <= 1e-5  # the placed step computes the same
        # The replay uses the simulator's freeing rule, so given what logical CPUs do (the
        # run's op times; a copy is a pointer handed over at once) it agrees to the byte
        # nearly; with the model's µs op times and 100 GB/s links, which buffers coincide
        # can differ (this placement: -11.2% on device 1, a 1 MiB gradient still in its
        # modelled copy when the next gradient is allocated), so that column is reported,
        # not bounded here
        assert abs(float(r["diff_instant_copies_pct"])) <= TOLERANCE_PCT, r
    table = (tmp_path / "gpu_check_cpu.md").read_text()
    assert table.count("| mlp | train | 2 | /device:CPU:") == 2


def test_measure_reports_step_time_beside_the_simulated_one():
    """One logical CPU: the median of the timed runs' wall times, the simulator's makespan of
    the same placement, both in the result, its lines and its dict."""
    import tensorflow as tf

    from regal import measure as rm
    from regal import optimizers
    from regal.io.tensorflow import import_step
    from regal.sim import simulate

    def tiny():
        x = tf.keras.Input((16,), name="features")
        return tf.keras.Model(x, tf.keras.layers.Dense(4, name="out")(x))

    step = import_step(tiny, batch_size=4)
    problem = optimizers.Problem(step.graph, 1)
    record = optimizers.solution_record(problem, optimizers.single_device(problem), 0)
    m = rm.measure(step, record, 1, kind="cpu", runs=1, timed_runs=3, check_outputs=False)
    assert len(m.step_samples_us) == 3 and all(t > 0 for t in m.step_samples_us)
    assert m.measured_step_us == pytest.approx(float(np.median(m.step_samples_us)))
    placed = rm.place(step, record, 1)
    expected = simulate(step.graph, placed.devices, placed.placement, placed.priority,
                        placed.transfer_priority).makespan
    assert m.simulated_step_us == pytest.approx(expected) and expected > 0
    assert m.step_difference_pct == pytest.approx(
        (m.measured_step_us - expected) / expected * 100)
    assert any(line.startswith("step time: simulated") and "median wall time of 3 runs" in line
               for line in m.lines())
    d = json.loads(json.dumps(m.to_dict(), allow_nan=False))  # standard JSON: no NaN
    assert d["measured_step_us"] == pytest.approx(m.measured_step_us)
    assert d["simulated_step_us"] == pytest.approx(expected)
    assert len(d["simulated_run_times_instant_copies"]) == 1
    assert d["traced_step_us"] is None or d["traced_step_us"] > 0

    untimed = rm.measure(step, record, 1, kind="cpu", runs=1, timed_runs=0,
                         check_outputs=False)
    assert math.isnan(untimed.measured_step_us) and untimed.step_samples_us == []
    assert json.loads(json.dumps(untimed.to_dict(), allow_nan=False))["measured_step_us"] is None
    with pytest.raises(ValueError, match="timed runs"):
        rm.measure(step, record, 1, kind="cpu", timed_runs=-1)
