"""A placed large model that trains as it is (tracker issue 40's acceptance): `regal apply` of a
committed large training step (`regal.io.tf_large`, default GPT-2 medium at batch 1) with a
layer-split solution on 2 logical CPU devices, then, in a fresh process, the SavedModel
loaded and its `train_step` signature run once.

The table: import and apply seconds and peak RSS; `saved_model.pb` against `variables/`;
load seconds, the model's parameters, whether the sampled Adam slots are zero; the training
step's seconds and loss, whether the weights changed, and how many of the ops TensorFlow
reports in the step's statistics ran on their solution's device. About 3 minutes and 13 GiB
of memory for GPT-2 medium on 2 CPU cores.

    python experiments/apply_large.py --model gpt2_medium --out experiments/results/apply_large.md
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def apply_step(model: str, out: Path) -> dict:
    """Imports, solves with layer-split on 2 devices, applies; figures of this process."""
    from regal import optimizers
    from regal.io.tensorflow import import_step
    from regal.io.tf_large import LARGE_MODELS
    from regal.measure import apply_solution

    start = time.perf_counter()
    step = import_step(LARGE_MODELS[model], batch_size=1, training=True)
    imported = time.perf_counter()
    problem = optimizers.Problem(step.graph, 2)
    solution = optimizers.solve("layer-split", problem, 2, 0)
    record = optimizers.solution_record(problem, solution, 2)
    result = apply_solution(step, record, out, batch_size=1, training=True, kind="CPU",
                            saved_model=True)
    applied = time.perf_counter()
    saved = out / "saved_model"
    variables = sum(f.stat().st_size for f in (saved / "variables").iterdir())
    return {"ops": step.graph.num_nodes, "import_s": imported - start,
            "apply_s": applied - imported, "apply_rss_gib": _rss_gib(),
            "saved_model_pb": (saved / "saved_model.pb").stat().st_size,
            "variables_bytes": variables, "moved": len(result["moved"]),
            "unmatched": result["unmatched_variables"], "loss_text": step.loss_text}


def run_step(out: Path, seed: int = 0) -> dict:
    """Loads the SavedModel in this (fresh) process and runs `train_step` once."""
    import numpy as np
    import regal.measure  # noqa: F401  (TensorFlow quietly, with Keras 2)
    import tensorflow as tf

    device_map = json.loads((out / "device_map.json").read_text())
    start = time.perf_counter()
    graph = tf.Graph()
    config = tf.compat.v1.ConfigProto(device_count={"CPU": 2}, allow_soft_placement=False)
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], str(out / "saved_model"))
        loaded = time.perf_counter()
        variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
        slots = [v for n, v in variables.items() if n.endswith(("/Adam", "/Adam_1"))]
        params = sum(int(np.prod(v.shape)) for n, v in variables.items()
                     if not n.endswith(("/Adam", "/Adam_1")) and "power" not in n)
        sample = slots[::max(1, len(slots) // 20)]
        zero = all(not sess.run(v.value()).any() for v in sample)
        probe = next(v for n, v in variables.items() if n.endswith("ff1/kernel"))
        before = sess.run(probe.value())
        signature = meta.signature_def["train_step"]
        rng = np.random.default_rng(seed)
        feed = {}
        for name, info in signature.inputs.items():
            tensor = graph.get_tensor_by_name(info.name)
            feed[info.name] = rng.integers(0, 1000, tensor.shape.as_list()).astype(
                tensor.dtype.as_numpy_dtype)
        stats = tf.compat.v1.RunMetadata()
        ran_start = time.perf_counter()
        loss = sess.run(signature.outputs["loss"].name, feed,
                        options=tf.compat.v1.RunOptions(
                            trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                        run_metadata=stats)
        ran = time.perf_counter()
        changed = not np.allclose(before, sess.run(probe.value()))
    where = {}
    for dev in stats.step_stats.dev_stats:
        for node in dev.node_stats:
            where[node.node_name] = "/device:CPU:" + dev.device.rsplit(":", 1)[-1]
    seen = [n for n in device_map if n in where]
    return {"load_s": loaded - start, "parameters": params, "slots_zero": zero,
            "step_s": ran - ran_start, "loss": float(loss), "weights_changed": changed,
            "ops_seen": len(seen), "ops_on_their_device": sum(where[n] == device_map[n]
                                                              for n in seen),
            "devices_used": sorted(set(where[n] for n in seen)), "run_rss_gib": _rss_gib()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gpt2_medium")
    parser.add_argument("--out", default=str(REPO / "experiments/results/apply_large.md"))
    parser.add_argument("--run-only", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_only:  # the fresh process
        print(json.dumps(run_step(Path(args.run_only))))
        return 0
    import contextlib

    from regal.arguments import check_output
    from regal.c_output import silenced
    from regal.user_errors import UserError

    # TensorFlow's native notices while it loads would bury a refusal's one line
    with contextlib.nullcontext() if os.environ.get("REGAL_DEBUG") else silenced(2):
        from regal.io.tf_large import LARGE_MODELS

    if args.model not in LARGE_MODELS:
        raise UserError(f"--model: unknown {args.model!r}; expected one of "
                        f"{', '.join(LARGE_MODELS)}")
    check_output("--out", args.out)     # before the minutes of the apply
    with tempfile.TemporaryDirectory(prefix="regal-apply-large-") as tmp:
        folder = Path(tmp)
        applied = apply_step(args.model, folder)
        child = subprocess.run([sys.executable, __file__, "--run-only", str(folder)],
                               capture_output=True, text=True, check=True)
        ran = json.loads(child.stdout.strip().splitlines()[-1])
    rows = [("model", f"`{args.model}` training step, batch 1, {applied['ops']:,} ops"),
            ("loss", applied["loss_text"]),
            ("import / apply", f"{applied['import_s']:.0f} s / {applied['apply_s']:.0f} s, "
                               f"peak RSS {applied['apply_rss_gib']:.1f} GiB"),
            ("saved_model.pb / variables/", f"{applied['saved_model_pb'] / 2**20:.1f} MiB / "
                                            f"{applied['variables_bytes'] / 2**30:.2f} GiB"),
            ("load", f"{ran['load_s']:.0f} s; {ran['parameters']:,} model parameters; "
                     f"sampled Adam slots zero: {ran['slots_zero']}"),
            ("train_step", f"{ran['step_s']:.1f} s, loss {ran['loss']:.4f}; weights changed: "
                           f"{ran['weights_changed']}"),
            ("placement kept", f"{ran['ops_on_their_device']:,} of {ran['ops_seen']:,} ops "
                               f"seen in the step's statistics on their solution's device; "
                               f"devices {', '.join(ran['devices_used'])}"),
            ("run peak RSS", f"{ran['run_rss_gib']:.1f} GiB")]
    from regal.files import write_text
    from regal.report import markdown_table
    text = ("# A placed large model that trains as it is\n\nMade by `python "
            f"experiments/apply_large.py --model {args.model}` (layer-split on 2 logical CPU "
            "devices; the run in a fresh process).\n\n"
            + "\n".join(markdown_table(["", "measured"], rows, align="ll")) + "\n")
    print(text)
    write_text(args.out, text)
    return 0


if __name__ == "__main__":
    from regal.user_errors import report_user_errors

    sys.exit(report_user_errors("apply_large.py", main))
