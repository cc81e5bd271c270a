"""Apply a solution to a real TensorFlow graph, run it on several devices, measure peak memory.

`apply_solution` writes the step's GraphDef with every op's device set and each device's
order enforced by control dependencies (consecutive ops of a device, in the order the
simulator ran them), a SavedModel for Keras and SavedModel sources (with the source's
weights where it has them), and a `device_map.json` (op -> device).

`measure` runs the placed step on `D` devices and reads each device's peak memory:

* GPUs: `D` logical GPUs (split from the physical ones), each with its own BFC allocator;
  the peak is `tf.config.experimental.get_memory_info("GPU:k")["peak"]` after a reset, so it
  includes everything TensorFlow holds there (variables, constants, rounding, copies).
* CPU only: logical CPUs share one allocator, so the per-device peak is *replayed* from the
  run's step statistics: every op's output buffers (allocated bytes and pointer, so a buffer
  an op forwards is not counted twice) are allocated on its device when it starts and freed
  when its last consumer on that device finishes; a tensor received from another device is a
  copy on the receiver (allocated when its producer finishes); an op's scratch memory (its
  allocator peak beyond its new outputs) is held while it runs; variables and constants
  are held for the whole run; fetched tensors stay to the end.

Beside the peaks, the step time: the median wall time of the timed (untraced) runs after the
warm-up, against the simulator's makespan of the same placement. On logical CPUs the devices
share the machine's cores, so it shows no parallel speed-up, and a copy between them is a
pointer handed over at once; `extra["simulated_run_times_instant_copies"]` is the simulator
with the run's op times and such copies (what logical CPUs do), which isolates timing from
the tensor sizes and freeing rule that the CPU replay checks.

Resource colocation: TensorFlow runs every op that takes a variable handle on the handle's
device (it silently overrides the requested device). The importer records these groups in
the graph (`colocation`), so every placement regal produces keeps a group together and
nothing moves. A solution that splits a group anyway (made for a graph without groups) is
applied with the group on the device where the model charges the variables' bytes (the
member with the most persistent memory); `moved` lists such ops. The simulated peaks that
`measure` compares against are those of the applied placement.

Call `configure_devices` (or `measure`, which calls it) before anything else in the process
initialises TensorFlow's devices: logical devices cannot be changed afterwards.

The jobs: `placed` (solution -> placed GraphDef), `apply` (`regal apply`), `run` (devices,
running, `measure`) and `replay` (the CPU replay). Importing any of them loads TensorFlow,
quietly and with Keras 2, here first.
"""

from __future__ import annotations

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import regal.tfenv  # noqa: E402,F401  (OR-Tools before TensorFlow: see regal/tfenv.py)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # no oneDNN rewrite: ops keep their names

with regal.tfenv.quiet_native_logs():  # a `regal` command's errors stay one line
    import tensorflow as tf  # noqa: E402,F401  (the package loads it first, quietly)

from regal.io.tensorflow import with_forwarding  # noqa: E402
from regal.measure.apply import apply_solution  # noqa: E402
from regal.measure.placed import (PlacedStep, check_solution, device_name,  # noqa: E402
                                  load_solution_record, place, placed_graph_def)
from regal.measure.replay import replay_step_stats  # noqa: E402
from regal.measure.run import (CPU_METHOD, DEFAULT_GPU_MEMORY_MB, GPU_METHOD,  # noqa: E402
                               Measurement, configure_devices, measure)

__all__ = ["PlacedStep", "Measurement", "configure_devices", "load_solution_record",
           "check_solution", "place", "placed_graph_def", "apply_solution", "measure",
           "replay_step_stats", "device_name", "CPU_METHOD", "GPU_METHOD",
           "DEFAULT_GPU_MEMORY_MB", "with_forwarding"]
