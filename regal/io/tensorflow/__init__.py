"""TensorFlow importer: a Keras model, tf.function, SavedModel or GraphDef -> ComputationGraph.

`import_model` builds one inference (or training) step of the source in a fresh
`tf.compat.v1.Graph`, prunes it to what the step runs, and converts it in one of two modes:

* static (default): tensor bytes = static shape x dtype size (the leading batch dimension
  of every input is set from `batch_size`); compute cost from a FLOP estimate under a
  roofline (`costs`). An output whose shape is not fully known is a `GraphError` naming
  the tensor as `op:port` (the only exemption is the opaque reserve-space outputs of fused
  batch norm, which are counted as 0 bytes).
* run (`run=True`): the graph is executed in a `tf.compat.v1.Session` with
  `build_cost_model=1` and a full trace, and TensorFlow's own CostGraphDef of that step
  (real output sizes, measured op times) is converted by `regal.io.costgraph`.

| module        | job                                                                          |
| ------------- | ---------------------------------------------------------------------------- |
| `sources`     | a model spec resolved; a Keras file's version and the code it carries; Keras 3 export; a GraphDef read |
| `step`        | one inference or training step built in a fresh graph, and the ops it runs   |
| `ops`         | op-type classes, static shapes and bytes, shared by the others               |
| `convert`     | static mode: the step's ops -> ComputationGraph (sizes, variables, colocation) |
| `costs`       | the roofline compute-cost model                                              |
| `scratch`     | conv-gradient kernels' temporary memory                                      |
| `forwarding`  | in-place buffer forwarding as aliases                                        |
| `measured`    | run mode: TensorFlow's measured cost graph of one step                       |

Control flow: If/While/Case stay single ordinary ops (their bodies are not expanded; the
cost estimate ignores them); `import_model` warns when it sees one.

TensorFlow is imported here, through `regal.tfenv`, before any of the package's modules
runs (a package's `__init__` executes before its submodules), so they import it plainly.
"""

from __future__ import annotations

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import regal.tfenv  # noqa: E402,F401  (OR-Tools before TensorFlow: see regal/tfenv.py)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# oneDNN's CPU graph rewrite fuses and renames ops (Conv2D+BiasAdd), so a measured cost graph
# would no longer line up with the static one; off unless the caller chose otherwise (only
# effective when this package is the first to import TensorFlow).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import warnings  # noqa: E402
from typing import NamedTuple, Sequence  # noqa: E402

with regal.tfenv.quiet_native_logs():  # a `regal` command's errors stay one line
    import tensorflow as tf  # noqa: E402

from regal.graph import ComputationGraph  # noqa: E402
from regal.io.tensorflow.convert import _static_graph, colocation_pairs  # noqa: E402
from regal.io.tensorflow.costs import BYTES_PER_US, FLOPS_PER_US, LAUNCH_US  # noqa: E402
from regal.io.tensorflow.forwarding import FORWARDING_OPS, with_forwarding  # noqa: E402
from regal.io.tensorflow.measured import _run_cost_graph  # noqa: E402
from regal.io.tensorflow.ops import _CONTROL_FLOW_OPS  # noqa: E402
from regal.io.tensorflow.scratch import (  # noqa: E402
    conv2d_backprop_filter_scratch, conv2d_backprop_input_scratch)
from regal.io.tensorflow.sources import (  # noqa: E402
    code_in_keras_file, export_keras3, keras_major_version, load_custom_objects, resolve_model)
from regal.io.tensorflow.step import STAND_IN, _build_step, _prune, resolve_loss  # noqa: E402

__all__ = ["import_model", "import_step", "resolve_model", "with_forwarding", "colocation_pairs",
           "keras_major_version", "export_keras3", "code_in_keras_file",
           "load_custom_objects", "resolve_loss", "STAND_IN",
           "conv2d_backprop_filter_scratch", "conv2d_backprop_input_scratch", "ImportedStep", "FORWARDING_OPS",
           "FLOPS_PER_US", "BYTES_PER_US", "LAUNCH_US"]


def import_model(source, *, batch_size: int = 1, training: bool = False, run: bool = False,
                 input_shapes: Sequence[Sequence[int]] | None = None,
                 learning_rate: float = 1e-3, seed: int = 0, grappler: bool = False,
                 warmup_runs: int = 1, forwarding: bool = True,
                 kernel_scratch: bool = True, trust_code: bool = False, loss=None,
                 custom_objects=None, microbatches: int = 1) -> ComputationGraph:
    """Imports `source` as the graph of one inference (or training) step.

    `source`: a tf.keras Model, a zero-argument callable returning one (built inside the
    importer's graph, the cheap route), a tf.function with an input signature or a
    ConcreteFunction, a SavedModel directory, a `.keras`/`.h5` file, a GraphDef file
    (`.pb` binary, `.pbtxt` text), or a model spec string (see `resolve_model`).
    `batch_size` fills each input's leading dimension where it is unknown; `input_shapes`
    overrides the inputs' full shapes instead. `run=True` measures one step (after
    `warmup_runs` unmeasured ones) on this machine's devices. Static mode only:
    `forwarding` models in-place buffer forwarding as aliases, `kernel_scratch` sets the
    conv-gradient kernels' temporary memory (see `forwarding`, `scratch`). `trust_code` lets a
    Keras file whose layers carry Python code load (and run that code).
    `loss` (training only): None, the model's compiled loss if it has one, else the stand-in
    (sum of mean squares of the outputs); "stand-in"; a tf.keras.losses name or Loss (see
    `step`). `custom_objects`: a dict, or a Python file (run) whose names Keras gets when
    it loads a `.keras` / `.h5` file (`load_custom_objects`). `microbatches` K > 1 (a Keras
    model's training step): K forward and backward passes, each of its own `batch_size`
    inputs under a `microbatchM/` scope, whose gradients are summed into one update
    (`step`), so placement and order can pipeline them.
    """
    step, ops = _pruned_step(source, batch_size=batch_size, training=training,
                             input_shapes=input_shapes, learning_rate=learning_rate,
                             trust_code=trust_code, loss=loss, custom_objects=custom_objects,
                             microbatches=microbatches)
    flow = sorted({op.type for op in ops} & _CONTROL_FLOW_OPS)
    if flow:
        warnings.warn(f"graph contains control-flow ops {flow}; each is one ordinary op "
                      f"(bodies not expanded)", stacklevel=2)
    if run:
        return _run_cost_graph(step, ops, seed=seed, grappler=grappler, warmup_runs=warmup_runs)
    return _static_graph(ops, step.fetches, forwarding=forwarding,
                         kernel_scratch=kernel_scratch)


def _pruned_step(source, *, batch_size, training, input_shapes, learning_rate,
                 trust_code, loss=None, custom_objects=None, microbatches: int = 1) -> tuple:
    """The step `import_model` and `import_step` convert, and the ops it runs."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if isinstance(microbatches, bool) or int(microbatches) != microbatches or microbatches < 1:
        raise ValueError(f"microbatches must be an integer >= 1, got {microbatches!r}")
    if microbatches > 1 and not training:
        raise ValueError("--microbatches: only a training step has micro-batches "
                         "(add --training)")
    step = _build_step(source, batch_size=batch_size, training=training,
                       input_shapes=input_shapes, learning_rate=learning_rate,
                       trust_code=trust_code, loss=loss, custom_objects=custom_objects,
                       microbatches=int(microbatches))
    ops = _prune(step.graph, step.fetches)
    return step, ops


# ---------------------------------------------------------------------------
# added for regal.measure (issue 7): the tf.Graph behind import_model's static graph


class ImportedStep(NamedTuple):
    """A static import together with the tf.compat.v1 graph it was converted from."""
    graph: ComputationGraph   # exactly what import_model(..., run=False) returns
    tf_graph: tf.Graph        # the step, built as import_model builds it
    feeds: list               # placeholder tensors, fully shaped
    fetches: list             # tensors and ops one step runs
    ops: list                 # tf ops of `graph`, in its node order
    values: dict = {}         # variable op name -> initial value the source carries
    #                           (a SavedModel's or tf.function's weights; {} for Keras
    #                           models, whose weights regal.measure reads from the model)
    outputs: list = []        # the model's outputs (tensors of tf_graph, fetched)
    labels: list = []         # label placeholders of the training loss (also in feeds)
    loss: object = None       # the training loss tensor; not among `ops` for the stand-in
    loss_text: str = ""       # what the training loss is, in words
    train_ops: list = []      # the optimizer update and Keras' own updates (fetched)


def import_step(source, *, batch_size: int = 1, training: bool = False,
                input_shapes: Sequence[Sequence[int]] | None = None,
                learning_rate: float = 1e-3, forwarding: bool = True,
                kernel_scratch: bool = True, trust_code: bool = False, loss=None,
                custom_objects=None, microbatches: int = 1) -> ImportedStep:
    """`import_model` (static mode) that also hands back the TensorFlow graph, so a solution
    for the graph can be applied to the very ops it was computed for (regal.measure)."""
    step, ops = _pruned_step(source, batch_size=batch_size, training=training,
                             input_shapes=input_shapes, learning_rate=learning_rate,
                             trust_code=trust_code, loss=loss, custom_objects=custom_objects,
                             microbatches=microbatches)
    graph = _static_graph(ops, step.fetches, forwarding=forwarding,
                          kernel_scratch=kernel_scratch)
    kept = {op.name for op in ops}
    values = {name: v for name, v in step.values.items() if name in kept}
    return ImportedStep(graph, step.graph, step.feeds, step.fetches, ops, values,
                        step.outputs, step.labels, step.loss, step.loss_text, step.train_ops)
