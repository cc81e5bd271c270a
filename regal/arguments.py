"""The `regal` command line's grammar: its parser, and the check of every flag's value.

Why apart from `regal.cli`: the commands there only call; what a flag accepts (sizes with
units, device counts, finite numbers, writable outputs, pins) is decided here once, and a
bad value is refused before any work with one line naming the flag. Light: no numpy.
"""

from __future__ import annotations

import argparse
import os

from regal import version
from regal.harness import MAX_BYTES, MAX_DEVICES  # a light module (no numpy)

# the defaults of `regal optimize`: evaluations when neither --budget nor --time-limit, method
DEFAULT_BUDGET = 5000
# README, "Which method": it needs no policy and leads for the running time under memory
# limits; regal and seeded-brkga lead (slightly) for peak memory
DEFAULT_METHOD = "local-search"

__all__ = ["DEFAULT_BUDGET", "DEFAULT_METHOD", "build_parser", "parse_size", "parse_sizes",
           "parse_speeds", "parse_names",
           "device_count", "check_device_counts", "check_output", "parse_pins",
           "int_list", "checked_policy_dir",
           "non_negative_int", "positive_int", "positive_float", "non_negative_float"]


_SIZE_UNITS = {"": 1, "b": 1, "byte": 1, "bytes": 1,
               "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str) -> int:
    """'16GiB', '500MB', '1.5 GiB', '123 bytes' or '123' -> bytes (KB/MB/GB are powers of 1000)."""
    import re

    from decimal import Decimal

    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match and _SIZE_UNITS.get(match.group(2).lower())
    if not unit:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: expected a number with an optional unit "
            "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 16GiB")
    exponent = match.group(1).partition("e")[2]
    if exponent and int(exponent) > 30:  # Decimal would build a number of that many digits
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: at most 2**62 bytes (4 EiB)")
    value = round(Decimal(match.group(1)) * unit)  # exact: no float rounding of big counts
    if value > MAX_BYTES:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: at most 2**62 bytes (4 EiB)")
    return int(value)


def parse_sizes(text: str):
    """--memory-limit: one size for every device, or 'SIZE,SIZE,...' one per device (a list;
    its length is checked against --devices by the command)."""
    if "," not in str(text):
        return parse_size(text)
    return [parse_size(part) for part in str(text).split(",")]


def parse_speeds(text: str):
    """--device-flops, --device-bandwidth: one finite number > 0 for every device, or
    'X,Y,...' one per device (a list; its length is checked against --devices by the
    command). The unit (TFLOP/s, GB/s) is the flag's."""
    parts = str(text).split(",")
    values = [positive_float(part.strip()) for part in parts]
    return values[0] if len(values) == 1 else values


def parse_names(text: str) -> list[str]:
    """--device-preset: 'NAME' or 'NAME,NAME,...' (the names are checked by the command)."""
    names = [part.strip() for part in str(text).split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected NAME or NAME,NAME,..., got {text!r}")
    return names


def device_count(text: str) -> int:
    """--devices: an integer (its range is checked by `check_device_counts`)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a device count, got {text!r}") from None


def check_device_counts(args) -> None:
    """--devices of every command in 1..MAX_DEVICES: a billion devices would allocate
    hundreds of GiB of per-device arrays before anything could refuse them."""
    value = getattr(args, "devices", None)
    for count in value if isinstance(value, list) else [value]:
        if count is not None and not 1 <= count <= MAX_DEVICES:
            raise ValueError(f"--devices: expected a device count in 1..{MAX_DEVICES}, "
                             f"got {count}")


def _int_at_least(low: int):
    """An argparse type: an integer >= low (the message names the bound)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text}")
        return value
    return parse


def _finite_float(low: float, inclusive: bool):
    """An argparse type: a finite number > low (>= low if inclusive); refuses nan and inf."""
    import math

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value < low or (value == low and not inclusive):
            raise argparse.ArgumentTypeError(
                f"expected a finite number {'>=' if inclusive else '>'} {low:g}, got {text!r}")
        return value
    return parse


non_negative_int = _int_at_least(0)
positive_int = _int_at_least(1)
positive_float = _finite_float(0.0, inclusive=False)
non_negative_float = _finite_float(0.0, inclusive=True)


def check_output(flag: str, path, folder: bool = False, inputs: tuple = ()) -> None:
    """Fails before any work when `path` cannot be written: a file's folder must exist and
    be writable, and the path must not be a folder (or, for a folder, a file); a folder that
    does not exist yet needs a writable nearest existing parent. `inputs`: files the command
    reads, which the output must not replace."""
    if path is None:
        return
    for given in inputs:
        if given is not None and _same_file(path, given):
            raise ValueError(f"{flag} {path}: is also an input of this command (it would be "
                             "overwritten); write elsewhere")
    path = os.path.abspath(path)
    if os.path.isdir(path) != folder and os.path.exists(path):
        raise ValueError(f"{flag} {path}: is {'not a folder' if folder else 'a folder'}")
    if folder:
        target = path
        while not os.path.exists(target):
            parent = os.path.dirname(target)
            if parent == target:
                break
            target = parent
        if not os.path.isdir(target):
            raise ValueError(f"{flag} {path}: {target} is not a folder")
    else:
        target = os.path.dirname(path)
        if not os.path.isdir(target):
            raise ValueError(f"{flag} {path}: the folder {target} does not exist")
        if os.path.exists(path) and not os.path.isfile(path):
            raise ValueError(f"{flag} {path}: not a regular file")
        if os.path.exists(path) and not os.access(path, os.W_OK):
            raise ValueError(f"{flag} {path}: the file is not writable")
    if not os.access(target, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: the folder {target} is not writable")


def _same_file(a, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet): compare the paths
        return os.path.abspath(a) == os.path.abspath(b)


def parse_pins(items) -> dict:
    """['OP=DEVICE', ...] -> {OP: device}; ValueError naming a malformed item."""
    pins = {}
    for item in items or ():
        op, sep, device = item.rpartition("=")
        if not sep or not op or not device.strip().lstrip("-").isdigit():
            raise ValueError(f"--pin {item!r}: expected OP=DEVICE (OP a name or pattern, "
                             f"DEVICE an integer)")
        if op in pins and pins[op] != int(device):
            raise ValueError(f"--pin {item!r}: {op!r} is pinned to device {pins[op]} already")
        pins[op] = int(device)
    return pins


def checked_policy_dir(path: str) -> str:
    """--policy DIR checked to be a folder (with a config.json, as a stored policy has)."""
    if not os.path.isdir(path):
        raise ValueError(f"--policy {path}: no such folder")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError(f"--policy {path}: not a stored policy (no config.json)")
    return os.path.abspath(path)


def int_list(text: str) -> list[int]:
    """'5000' or '1000,5000' -> [5000] / [1000, 5000]."""
    try:
        return [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}")


TRAINING_HELP = ("a model's training step: forward, the loss, backward, Adam update; the "
                 "loss is the model's compiled loss (Keras compile(loss=...)) on label "
                 "inputs, else a stand-in, the sum of the outputs' mean squares (--loss)")


def _model_options(p) -> None:
    """--batch, --training, --run, --trust-code, --loss, --custom-objects, --microbatches: how
    `import` and `optimize` import a model."""
    p.add_argument("--batch", type=positive_int, default=None, metavar="B",
                   help="a model's batch size (default 1)")
    p.add_argument("--training", action="store_true", help=TRAINING_HELP)
    p.add_argument("--run", action="store_true",
                   help="run the model once and use TensorFlow's measured cost graph")
    _trust_code_option(p)
    _loss_options(p)
    p.add_argument("--microbatches", type=positive_int, default=None, metavar="K",
                   help="a Keras model's training step as K micro-batches of --batch each: K "
                        "forward and backward passes, one update, so the search can "
                        "pipeline them (default 1)")


def _loss_options(p) -> None:
    """--loss, --custom-objects: every command that imports a model (import, optimize,
    apply, measure); a solution applies to the graph imported with the same ones."""
    p.add_argument("--loss", default=None, metavar="NAME",
                   help="the training step's loss instead of the model's compiled one: "
                        "stand-in, or a tf.keras.losses name (mse, categorical_crossentropy, "
                        "sparse_categorical_crossentropy, ...; the cross-entropies also as "
                        "NAME_from_logits); needs --training")
    p.add_argument("--custom-objects", default=None, metavar="FILE",
                   help="a Python file defining the custom layers (or losses) of a "
                        ".keras/.h5 model: its CUSTOM_OBJECTS dict, else its top-level names, "
                        "go to Keras; the file runs, so pass only your own code")


def _trust_code_option(p) -> None:
    """--trust-code: every command that loads a model file."""
    p.add_argument("--trust-code", action="store_true",
                   help="load a .keras/.h5 file whose layers carry Python code (Lambda "
                        "layers), which then runs; only for files you trust")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="regal",
        description="Place and schedule the ops of a computation graph (a TensorFlow model or "
                    "a graph file) on several devices, so that the busiest device's peak memory "
                    "is as low as possible, or the step time under per-device memory limits.",
        epilog="Start with `regal optimize GRAPH --devices 4`; `regal COMMAND --help` for "
               "each command. Exit codes: 0 ok, 2 bad input or an output that cannot be "
               "written (one line says what), 3 no solution within the memory limits, 1 some "
               "compare runs failed, 130 interrupted (train: 128 + the signal, after its "
               "checkpoint).")
    parser.add_argument("--version", action="version", version=f"regal {version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    data = sub.add_parser("data", help="graph sets: inspect, generate, build")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    p = data_sub.add_parser("info", help="print ops, tensors, bytes and depth of graph files")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--json", action="store_true",
                   help="one JSON line per file with the exact figures (bytes, us)")
    p.set_defaults(command="data_info")
    p = data_sub.add_parser("synth", help="generate synthetic graphs from a seed (resumable)")
    p.add_argument("--recipe", metavar="SPLIT", help="a REGAL-like split: train, valid or test")
    p.add_argument("--count", type=int, help="number of graphs (with --recipe: the first N)")
    p.add_argument("--min-ops", type=int, help="fewest ops per graph (default 50)")
    p.add_argument("--max-ops", type=int, help="most ops per graph (default 200)")
    p.add_argument("--seed", type=non_negative_int, help="seed of the whole set (default 0)")
    p.add_argument("--family", help="random (default), cnn, inception, transformer or mixed")
    p.add_argument("--training", action="store_true", help="append backward pass and updates")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the .npz files")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(command="data_synth")
    p = data_sub.add_parser("real", help="import the real TensorFlow graph set (resumable)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the .npz files")
    p.add_argument("--models", nargs="+", metavar="NAME", help="a subset (default: all)")
    p.add_argument("--readme", metavar="FILE", help="table to write (default: OUT/../README.md)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(command="data_real")
    p = data_sub.add_parser("large", help="import GPT-2 / BERT-large-shaped training steps, "
                            "too big for one device (resumable)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the .npz files")
    p.add_argument("--models", nargs="+", metavar="NAME",
                   help="a subset of gpt2_small, gpt2_medium, gpt2_large, bert_large "
                   "(default: all)")
    p.add_argument("--batch", type=positive_int, nargs="+", metavar="B",
                   help="batch sizes (default 1 4)")
    p.add_argument("--microbatches", type=positive_int, nargs="+", metavar="K",
                   help="micro-batch counts: K forward and backward passes of the batch, one "
                   "update (default 1)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(command="data_large")

    p = sub.add_parser("import", help="import a TensorFlow model as a graph file")
    p.add_argument("model", metavar="MODEL", help="SavedModel dir, .keras/.h5, GraphDef "
                   ".pb/.pbtxt, keras.applications.NAME or package.module:attr")
    p.add_argument("--out", required=True, metavar="FILE", help="graph file (.npz, .pbtxt, .pb)")
    _model_options(p)
    p.set_defaults(command="import")

    p = sub.add_parser("optimize", help="place and schedule a model or a graph file on "
                       "several devices")
    p.add_argument("graph", metavar="MODEL", help="a model, as for `regal import`, or a graph "
                   "file (.npz, CostGraphDef .pb/.pbtxt)")
    p.add_argument("--devices", type=device_count, required=True, metavar="D",
                   help=f"number of devices (1..{MAX_DEVICES})")
    _model_options(p)
    p.add_argument("--memory-limit", type=parse_sizes, default=None, metavar="SIZE[,SIZE...]",
                   help="memory of each device, e.g. 16GiB, or one size per device "
                        "(1GiB,2GiB; default: unlimited)")
    p.add_argument("--bandwidth", type=positive_float, default=None, metavar="BYTES_PER_US",
                   help="link bandwidth in bytes/us (1 GB/s = 1000; default 100000)")
    p.add_argument("--latency", type=non_negative_float, default=None, metavar="US",
                   help="per-transfer latency in us (default 5)")
    p.add_argument("--device-flops", type=parse_speeds, default=None,
                   metavar="TFLOPS[,TFLOPS...]",
                   help="each device's sustained compute speed in TFLOP/s, one for all or one "
                        "per device (default: the cost model's 10, a V100 at realistic fp32 "
                        "efficiency); needs a graph imported from TensorFlow (FLOP counts)")
    p.add_argument("--device-bandwidth", type=parse_speeds, default=None,
                   metavar="GBPS[,GBPS...]",
                   help="each device's own memory bandwidth in GB/s (not the link between "
                        "devices: that is --bandwidth), one for all or one per device "
                        "(default: the cost model's 500)")
    p.add_argument("--device-preset", type=parse_names, default=None,
                   metavar="NAME[,NAME...]",
                   help="GPU presets for both speeds, one for all or one per device: V100, T4, "
                        "L4, A100-40GB, A100-80GB, H100-SXM, H100-PCIE, H200, RTX3090, "
                        "RTX4090 (datasheet peaks scaled so V100 is the default; "
                        "--device-flops/--device-bandwidth override them; README)")
    p.add_argument("--objective", choices=("peak_memory", "makespan"), default="peak_memory")
    p.add_argument("--method", default=DEFAULT_METHOD,
                   help=f"optimizer (default: {DEFAULT_METHOD}: it needs no policy nor "
                        "reference heuristics; regal is ahead of it on data/real and the "
                        "synthetic test split at 5,000 evaluations; see the README)")
    p.add_argument("--init", default=None, metavar="SOLUTION.json",
                   help="warm start from an earlier solution of this graph (brkga, "
                        "local-search, cpsat, cpsat-lns)")
    p.add_argument("--policy", default=None, metavar="DIR",
                   help="trained policy folder for --method regal (default: data/policy)")
    p.add_argument("--formulation", default=None,
                   choices=("auto", "sequence", "cumulative", "timed"),
                   help="the CP-SAT model of --method cpsat (default auto: one op or copy at "
                        "a time, a relaxation; timed: the simulator's timing and eager "
                        "starts, peak memory only, at most 200 ops)")
    p.add_argument("--budget", type=int, default=None,
                   help=f"performance-model evaluations (default {DEFAULT_BUDGET}; with "
                        "--time-limit: no budget unless given, else whichever ends first)")
    p.add_argument("--time-limit", type=positive_float, default=None, metavar="SECONDS",
                   help="anytime search: stop when the time is up and keep the best found "
                        "(every search method; cpsat's own limit; one-shot heuristics "
                        "just run)")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--no-fit-search", action="store_true",
                   help="when the answer is over the memory limits, do not look for the "
                        "smallest device count that fits (10 s at most)")
    p.add_argument("--out", metavar="JSON", help="write the solution here")
    p.add_argument("--plot", metavar="PNG", help="draw memory over time and a Gantt chart")
    p.add_argument("--pin", action="append", metavar="OP=DEVICE",
                   help="run OP's colocation group on DEVICE (repeatable; OP is a name, a "
                        "glob like 'dense*' or re:REGEX)")
    p.add_argument("--colocate", action="append", metavar="OP,OP,...",
                   help="run these ops (and their groups) on one device (repeatable)")
    p.set_defaults(command="optimize")

    p = sub.add_parser("compare", help="run methods on graph folders and record every run "
                       "(resumable)")
    p.add_argument("--methods", required=True, help="comma-separated, e.g. brkga,random,cpsat")
    p.add_argument("--graphs", required=True, action="append", metavar="DIR",
                   help="folder of graph files; repeat for several datasets (named by folder)")
    p.add_argument("--devices", type=int_list, default=[2], metavar="D[,D...]")
    p.add_argument("--budget", type=int_list, default=[5000], metavar="N[,N...]",
                   help="performance-model evaluations per run (default 5000)")
    p.add_argument("--seeds", type=positive_int, default=3,
                   help="seeds 0..N-1 per graph (default 3)")
    p.add_argument("--objective", choices=("peak_memory", "makespan"), default="peak_memory")
    p.add_argument("--memory-limit", type=parse_size, default=None, metavar="SIZE",
                   help="per-device memory, e.g. 16GiB (default: unlimited)")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="only the first N graphs of each folder")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="processes (default: all cores)")
    p.add_argument("--ray", action="store_true", help="fan out on a local Ray cluster")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="fan out on this Ray cluster (implies --ray)")
    p.add_argument("--policy", default=None, metavar="DIR",
                   help="trained policy folder for regal (recorded with each run)")
    p.add_argument("--time-limit", type=positive_float, default=None, metavar="SECONDS",
                   help="also stop each run after this wall time (whichever of it and "
                        "--budget ends first; cpsat's own limit); recorded in the options")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for records.jsonl")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(command="compare")

    p = sub.add_parser("report", help="Table 1 (Markdown, CSV, bar chart) from compare records")
    p.add_argument("results", metavar="DIR", help="folder of records (*.jsonl, recursively)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="where to write (default: DIR, or the folder of a records file)")
    p.add_argument("--baseline-budget", type=positive_int, default=5000,
                   help="budget of the brkga runs that are the baseline (default 5000)")
    p.add_argument("--no-chart", action="store_true", help="tables only")
    p.add_argument("--best-known", nargs="+", default=None, metavar="STORE",
                   help="best-known stores for the gap from best (default: the stores of "
                        "data/bestknown/; given ones replace them)")
    p.add_argument("--no-bounds", action="store_true",
                   help="no lower bounds computed from the graph files (it reads every "
                        "one); the bounds the best-known stores keep are still used")
    p.add_argument("--pool-limits", action="store_true",
                   help="one row per method over graphs that each ran under their own memory "
                        "limit (e.g. transfer.py's makespan runs), not a setting per limit")
    p.set_defaults(command="report")

    p = sub.add_parser(
        "train", help="train the REGAL policy with REINFORCE (resumable)",
        argument_default=argparse.SUPPRESS,  # absent flags: defaults, or the stored run's
        description="Train a policy into the run folder RUN (checkpoints, history, the final "
                    "policy in RUN/policy). `regal train --resume RUN` continues a run exactly "
                    "with the configuration stored in RUN/train_config.json, no flag repeated; "
                    "--steps, --max-minutes (the whole run's wall time, earlier sessions "
                    "included), --workers, --ray, --checkpoint-minutes and --quiet may be "
                    "given to change them, any other flag must equal the stored value.")
    p.add_argument("--train", metavar="DIR|RECIPE",
                   help="training graphs: a folder, or a synth recipe such as train or "
                        "train:500 (required for a new run)")
    p.add_argument("--val", metavar="DIR|RECIPE",
                   help="validation graphs (required for a new run)")
    p.add_argument("--out", metavar="RUN", help="run folder (checkpoints, logs)")
    p.add_argument("--resume", nargs="?", const=True, default=False, metavar="RUN",
                   help="continue the run in RUN (or --out RUN) with its stored configuration")
    p.add_argument("--steps", type=int, help="policy-gradient steps (default 200)")
    p.add_argument("--budget", type=int, help="BRKGA evaluations per rollout (default 1000)")
    p.add_argument("--devices", type=device_count, nargs="+", metavar="D",
                   help="device counts the graphs are drawn with (default 2 4)")
    p.add_argument("--objective", choices=("peak_memory", "makespan"),
                   help="default peak_memory")
    p.add_argument("--graphs-per-step", type=int, help="default 4")
    p.add_argument("--samples", type=int, help="rollouts per graph (default 4)")
    p.add_argument("--learning-rate", type=positive_float, help="default 0.001")
    p.add_argument("--entropy-coef", type=non_negative_float, help="default 0.001")
    p.add_argument("--val-every", type=int, help="steps between validations (default 10)")
    p.add_argument("--val-graphs", type=int, help="default 16")
    p.add_argument("--checkpoint-minutes", type=positive_float, help="default 3")
    p.add_argument("--max-minutes", type=positive_float,
                   help="stop after this wall time (the whole run's; default: no limit)")
    p.add_argument("--workers", type=positive_int, help="rollout processes (default 2)")
    p.add_argument("--ray", action="store_true", help="run rollouts on a local Ray")
    p.add_argument("--seed", type=non_negative_int, help="default 0")
    p.add_argument("--learn", choices=("both", "placement", "scheduling"),
                   help="which key groups the policy learns (ablation; default both)")
    p.add_argument("--no-elite-bias", action="store_true", help="do not learn the elite bias")
    p.add_argument("--seeds-per-action", type=int,
                   help="BRKGA seeds per sampled action, common to a graph's actions (default 1)")
    p.add_argument("--pretrain-from", metavar="STORE[,STORE...]",
                   help="best-known store (JSON lines) for supervised pretraining")
    p.add_argument("--pretrain-steps", type=int,
                   help="the first this many steps are supervised on --pretrain-from "
                        "(default 0)")
    p.add_argument("--augment", type=float, metavar="SCALE",
                   help="jitter each REINFORCE graph's costs and sizes by log-normal factors "
                        "of this scale (default 0: none)")
    p.add_argument("--init-from", metavar="POLICY_DIR",
                   help="start a new run from this stored policy's weights (fine-tuning; its "
                        "network shape and menus must be the run's)")
    p.add_argument("--polish-share", type=float, metavar="SHARE",
                   help="share of each rollout's budget left to local search from BRKGA's "
                        "best, as in the regal method (without the fresh climbs from the "
                        "heuristics it races, which ignore the policy; default 0: BRKGA alone)")
    p.add_argument("--race", action="store_true",
                   help="each rollout runs the regal method's whole schedule (BRKGA's tenth, "
                        "then its climb raced against the fresh climbs): the reward is the "
                        "pipeline's final value")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(command="train")

    p = sub.add_parser("best-known", help="build or extend a store of best-known solutions "
                       "with long portfolio runs (resumable, monotone)")
    p.add_argument("graphs", nargs="+", metavar="GRAPHS", help="graph files or folders")
    p.add_argument("--devices", type=device_count, nargs="+", required=True, metavar="D")
    p.add_argument("--objective", choices=("peak_memory", "makespan"), default="peak_memory")
    p.add_argument("--memory-limit", type=parse_size, default=None, metavar="SIZE",
                   help="per-device memory limit (makespan objective)")
    p.add_argument("--time-per-graph", type=positive_float, default=None, metavar="SECONDS",
                   help="portfolio CPU seconds per graph and device count, in total over reruns "
                        "(required unless --bounds-only)")
    p.add_argument("--time-per-kop", type=float, default=0.0, metavar="SECONDS",
                   help="extra CPU seconds per 1,000 ops of the graph (default 0)")
    p.add_argument("--extra", action="store_true",
                   help="spend the time on every entry again, whatever it has had (default: "
                        "top each entry up to that total)")
    p.add_argument("--beaten-by", metavar="RECORDS",
                   help="harness records (a results folder or its records.jsonl): only the "
                        "entries some record there beats, and those the store lacks, get time")
    p.add_argument("--out", required=True, metavar="STORE", help="store file (.jsonl)")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--workers", type=positive_int, default=None,
                   help="processes (default: all cores)")
    p.add_argument("--ray", action="store_true", help="fan out on a local Ray cluster")
    p.add_argument("--bounds-only", action="store_true",
                   help="no portfolio: add a valid lower bound (of the peak memory, or of "
                        "the step time for makespan entries) to the store's entries of these "
                        "graphs that have none, at these device counts")
    p.add_argument("--bound-time", type=positive_float, default=None, metavar="SECONDS",
                   help="with --bounds-only: seconds for the bound of each graph and device "
                        "count (default 5)")
    p.add_argument("--again", action="store_true",
                   help="with --bounds-only: compute the bound of entries that have one too, "
                        "and keep the higher (after the bounds have improved)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(command="best_known")

    p = sub.add_parser("bounds", help="a valid lower bound on the peak memory (or the step "
                       "time) of graphs")
    p.add_argument("graphs", nargs="+", metavar="GRAPH", help="graph files")
    p.add_argument("--devices", type=device_count, nargs="+", required=True, metavar="D")
    p.add_argument("--bytes", action="store_true",
                   help="print the bound as a number only (bytes; µs for the step time)")
    p.add_argument("--time-limit", type=positive_float, default=None, metavar="SECONDS",
                   help="seconds per graph and device count for the min-cut argument "
                        "(start_cut) to try every op: a tighter bound for more time "
                        "(default: the cheap bound)")
    p.add_argument("--objective", choices=("peak_memory", "makespan"), default="peak_memory",
                   help="makespan: the step time's bound (any memory limit; "
                        "regal.bounds_time)")
    p.set_defaults(command="bounds")

    model_help = ("the model the solution's graph was imported from (as for `regal import`)")
    p = sub.add_parser("apply", help="write a model's graph with a solution's devices and "
                       "order (GraphDef, SavedModel, device map)")
    p.add_argument("model", metavar="MODEL", help=model_help)
    p.add_argument("--solution", required=True, metavar="JSON", help="from regal optimize")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    p.add_argument("--batch", type=int, default=1, metavar="B", help="batch size (default 1)")
    p.add_argument("--training", action="store_true",
                   help="the training step was solved (see regal import --help); the "
                        "SavedModel then also has a train_step signature: inputs and labels "
                        "-> the loss, after one placed training step")
    p.add_argument("--device-type", choices=("CPU", "GPU"), default="GPU",
                   help="device of solution device k: /device:TYPE:k (default GPU)")
    p.add_argument("--device-format", default=None, metavar="FMT",
                   help="device string with {k}, e.g. /job:worker/task:0/device:GPU:{k}")
    _trust_code_option(p)
    _loss_options(p)
    p.set_defaults(command="apply")

    p = sub.add_parser("measure", help="run a placed model on D devices; measured vs "
                       "simulated per-device peak memory and step time")
    p.add_argument("model", metavar="MODEL", help=model_help)
    p.add_argument("--solution", required=True, metavar="JSON", help="from regal optimize")
    p.add_argument("--devices", type=device_count, default=None, metavar="D",
                   help="devices to run on (default: the solution's count)")
    p.add_argument("--batch", type=int, default=1, metavar="B", help="batch size (default 1)")
    p.add_argument("--training", action="store_true", help="the training step was solved")
    p.add_argument("--device-type", choices=("auto", "cpu", "gpu"), default="auto",
                   help="auto: logical GPUs when a GPU exists, else logical CPUs")
    p.add_argument("--runs", type=non_negative_int, default=3,
                   help="warm-up runs before measuring")
    p.add_argument("--timed-runs", type=non_negative_int, default=5, metavar="N",
                   help="timed runs after the warm-up; the measured step time is their "
                        "median wall time (default 5; 0: not timed)")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the random weights and inputs")
    p.add_argument("--json", metavar="FILE", help="also write the numbers here")
    _trust_code_option(p)
    _loss_options(p)
    p.set_defaults(command="measure")

    return parser
