"""The `regal` command: argument parsing and calls, nothing else.

Heavy modules (TensorFlow, numba) are imported inside the command that needs
them, so `regal data info` on a CostGraphDef never pays for TensorFlow.
User errors print one line and exit with code 2 (set REGAL_DEBUG=1 for a traceback).
"""

from __future__ import annotations

import argparse
import os
import sys

from regal import version
from regal.harness import MAX_BYTES, MAX_DEVICES  # a light module (no numpy)

EXIT_USAGE = 2
EXIT_INFEASIBLE = 3  # `regal optimize`: no solution found within the memory limits
DEFAULT_BUDGET = 5000  # `regal optimize` evaluations when neither --budget nor --time-limit
# README, "Which method": it needs no policy and leads for the running time under memory
# limits; regal and seeded-brkga lead (slightly) for peak memory
DEFAULT_METHOD = "local-search"


class UserError(Exception):
    """A problem with the user's input; printed as one line, exit code 2."""


# ---------------------------------------------------------------------------
# commands


def cmd_data_info(args) -> int:
    from regal.io import load_graph
    from regal.graph import summarize

    for path in args.files:
        graph = load_graph(path)
        s = summarize(graph)
        if args.json:  # exact figures for scripts: one JSON object per file
            from regal.files import json_text
            print(json_text({"file": str(path), **s}))
            continue
        print(f"{path}")
        for key, value in _human_summary(s).items():
            print(f"  {key:<18} {value}")
    return 0


def _human_summary(summary: dict) -> dict:
    """`regal.graph.summarize` figures as a person reads them: counts with thousands
    separators, bytes in KiB/MiB/GiB, the compute cost in us/ms/s."""
    from regal.units import format_bytes, format_duration_us

    out = {}
    for key, value in summary.items():
        if key.endswith(" (us)"):
            out[key[:-len(" (us)")]] = format_duration_us(value)
        elif key.endswith(("bytes", "tensor")):
            out[key] = format_bytes(value)
        else:
            out[key] = f"{value:,}"
    return out


def cmd_data_synth(args) -> int:
    from regal import synth

    custom = {"--min-ops": args.min_ops, "--max-ops": args.max_ops, "--seed": args.seed,
              "--family": args.family, "--training": args.training or None}
    if args.recipe is not None:
        given = [flag for flag, value in custom.items() if value is not None]
        if given:
            raise ValueError(f"{given[0]} cannot be combined with --recipe (a recipe fixes it)")
        recipe = synth.recipe_named(args.recipe, count=args.count)
    else:
        if args.count is None:
            raise ValueError("--count is required unless --recipe is given")
        recipe = synth.custom_recipe(
            count=args.count, min_ops=50 if args.min_ops is None else args.min_ops,
            max_ops=200 if args.max_ops is None else args.max_ops,
            seed=0 if args.seed is None else args.seed, family=args.family or "random",
            training=args.training)
    _check_output("--out", args.out, folder=True)
    paths = synth.materialize(recipe, args.out, progress=not args.quiet)
    print(f"{len(paths)} graphs of recipe {recipe.name!r} in {args.out} (see recipe.json)")
    return 0


def cmd_import(args) -> int:
    from pathlib import Path

    from regal.graph import summarize
    from regal.io import SUFFIXES, save_graph
    from regal.io.sources import load_graph_or_model
    from regal.units import format_bytes

    # fail on plain mistakes before paying for TensorFlow (and its log lines)
    if Path(args.out).suffix.lower() not in SUFFIXES:
        raise ValueError(f"--out {args.out}: unknown graph file suffix; use one of "
                         f"{', '.join(SUFFIXES)}")
    _check_output("--out", args.out)
    graph = load_graph_or_model(args.model, batch_size=args.batch, training=args.training,
                                run=args.run, trust_code=args.trust_code)
    save_graph(graph, args.out)
    s = summarize(graph)
    print(f"wrote {args.out}: {s['ops']:,} ops, {s['tensors']:,} tensors, "
          f"{format_bytes(s['total bytes'])} of tensors, "
          f"{format_bytes(s['persistent bytes'])} persistent")
    return 0


def cmd_data_real(args) -> int:
    from pathlib import Path

    from regal.io.tf_models import build_real_set, write_real_readme

    paths = build_real_set(args.out, models=args.models, progress=not args.quiet)
    readme = args.readme or str(Path(args.out).parent / "README.md")
    write_real_readme(args.out, readme)
    print(f"{len(paths)} real graphs in {args.out}; table in {readme}")
    return 0


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


def device_count(text: str) -> int:
    """--devices: an integer (its range is checked by `_check_device_counts`)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a device count, got {text!r}") from None


def _check_device_counts(args) -> None:
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


def _check_output(flag: str, path, folder: bool = False) -> None:
    """Fails before any work when `path` cannot be written: a file's folder must exist and
    be writable, and the path must not be a folder (or, for a folder, a file); a folder that
    does not exist yet needs a writable nearest existing parent."""
    if path is None:
        return
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


def _parse_pins(items) -> dict:
    """['OP=DEVICE', ...] -> {OP: device}; ValueError naming a malformed item."""
    pins = {}
    for item in items or ():
        op, sep, device = item.rpartition("=")
        if not sep or not op or not device.strip().lstrip("-").isdigit():
            raise ValueError(f"--pin {item!r}: expected OP=DEVICE (OP a name or pattern, "
                             f"DEVICE an integer)")
        pins[op] = int(device)
    return pins


def _takes(method, name: str) -> bool:
    """Whether `method` names keyword `name` itself: a **options catch-all does not count,
    since regal and seeded-brkga set `initial` themselves and would get it twice."""
    import inspect

    return name in inspect.signature(method).parameters


def _policy_dir(path: str) -> str:
    """--policy DIR checked to be a folder (with a config.json, as a stored policy has)."""
    if not os.path.isdir(path):
        raise ValueError(f"--policy {path}: no such folder")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError(f"--policy {path}: not a stored policy (no config.json)")
    return os.path.abspath(path)


def cmd_optimize(args) -> int:
    from tqdm import tqdm

    from regal import optimizers
    from regal.io.sources import load_graph_or_model
    from regal.sim import DeviceSpec

    method = optimizers.get_method(args.method)  # an unknown method fails before the graph
    options = {}
    # --time-limit: search until the time is up; the budget then stops it only when given
    budget = args.budget if args.budget is not None or args.time_limit is not None \
        else DEFAULT_BUDGET
    if args.time_limit is not None:
        try:
            options["time_limit"] = optimizers.check_time_limit(args.time_limit)
        except ValueError:
            raise ValueError(f"--time-limit: expected a finite number of seconds > 0, "
                             f"got {args.time_limit}") from None
    if isinstance(args.memory_limit, list) and len(args.memory_limit) != args.devices:
        raise ValueError(f"--memory-limit: expected one size or {args.devices} sizes (one per "
                         f"device), got {len(args.memory_limit)}")
    if args.init is not None and not _takes(method, "initial"):
        raise ValueError(f"--init: method {args.method!r} takes no warm start "
                         "(brkga and local-search do)")
    if args.policy is not None:
        if not _takes(method, "policy_dir"):
            raise ValueError(f"--policy: method {args.method!r} uses no policy "
                             "(--method regal does)")
        options["policy_dir"] = _policy_dir(args.policy)
    _check_output("--out", args.out)
    _check_output("--plot", args.plot)
    graph = load_graph_or_model(args.graph, batch_size=args.batch, training=args.training,
                                run=args.run, trust_code=args.trust_code)
    imported = graph  # what `regal apply` re-imports: the user's constraints come on top
    if args.pin or args.colocate:
        from regal.graph import with_constraints
        graph = with_constraints(graph, pins=_parse_pins(args.pin),
                                 colocate=[c.split(",") for c in args.colocate or ()],
                                 num_devices=args.devices)
    links = {name: value for name, value in (("bandwidth", args.bandwidth),
                                              ("latency", args.latency)) if value is not None}
    devices = DeviceSpec(args.devices, memory_limit=args.memory_limit, **links)
    problem = optimizers.Problem(graph, devices, args.objective)
    if args.init is not None:
        from regal.io.solution import read_solution_file
        try:
            options["initial"] = optimizers.read_solution(read_solution_file(args.init), problem)
        except ValueError as exc:
            raise ValueError(f"--init {args.init}: {exc}") from None
    from regal.units import format_bytes, format_duration_us
    human = format_bytes if args.objective == "peak_memory" else format_duration_us
    bars = []  # opened on the first report, so an early argument error prints no bar

    def progress(evaluations, best):
        if not bars:
            bars.append(tqdm(total=budget, unit="eval", desc=args.method, leave=False))
        bars[0].set_postfix(best=human(best), refresh=False)
        bars[0].update(evaluations - bars[0].n)
    try:
        solution = optimizers.solve(args.method, problem, budget, args.seed,
                                    progress=progress, **options)
    finally:
        if bars:
            bars[0].close()
    # the files first: a reader of stdout that stops early (`| head -1`) loses no solution
    written = []
    if args.out:
        from regal.files import write_json
        write_json(args.out, optimizers.solution_record(problem, solution, budget,
                                                        source=args.graph, imported=imported),
                   indent=1)
        written.append(args.out)
    if args.plot:
        from regal.files import replacing
        from regal.plots import plot_solution
        with replacing(args.plot) as tmp:  # its suffix is the plot's: the same format
            plot_solution(problem, solution, tmp, title=f"{args.graph} ({args.method})")
        written.append(args.plot)
    references = optimizers.reference_solutions(problem)
    print(f"{args.graph}: {graph.num_nodes:,} ops on {devices.count} devices")
    print("\n".join(optimizers.describe(problem, solution, references)))
    if solution.extra.get("stopped_by") == "time_limit":
        print(f"stopped at the time limit ({args.time_limit:g} s)")
    elif solution.extra.get("stopped_by") == "budget":
        print(f"stopped at the budget ({budget:,} evaluations) before the time limit")
    status = solution.extra.get("status")
    if status is not None:
        print(f"solver status: {status}" + ("" if solution.extra.get("time_limit") is None
                                           else f" (time limit {solution.extra['time_limit']} s)"))
    if args.objective == "peak_memory":
        from regal.bounds import gap_to_bound, lower_bound
        from regal.units import format_bytes
        extra = {}
        if solution.extra.get("bound") is not None and solution.method == "cpsat":
            extra["cpsat"] = solution.extra["bound"]  # proven for peak memory, any status
        bound = lower_bound(graph, devices, extra=extra)
        print(f"within {100 * gap_to_bound(solution.value, bound):.2f}% of the lower bound "
              f"{format_bytes(bound.value)} ({bound.source})")
    for path in written:
        print(f"wrote {path}")
    return 0 if solution.feasible else EXIT_INFEASIBLE


def _int_list(text: str) -> list[int]:
    """'5000' or '1000,5000' -> [5000] / [1000, 5000]."""
    try:
        return [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}")


def cmd_compare(args) -> int:
    from regal.harness import run_experiment

    _check_output("--out", args.out, folder=True)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    method_options = None
    if args.policy is not None:
        from regal import optimizers
        from regal.regal_method import portable_policy_dir

        takers = [m for m in methods if _takes(optimizers.get_method(m), "policy_dir")]
        if not takers:
            raise ValueError(f"--policy: none of the methods {','.join(methods)} uses a policy "
                             "(regal does)")
        policy_dir = portable_policy_dir(_policy_dir(args.policy))  # records name it
        method_options = {m: {"policy_dir": policy_dir} for m in takers}
    if args.time_limit is not None:  # every run's options: recorded, and part of its key
        method_options = method_options or {}
        for m in methods:
            method_options[m] = {**method_options.get(m, {}), "time_limit": args.time_limit}
    summary = run_experiment(
        methods, args.graphs, args.out, seeds=args.seeds, budgets=args.budget,
        devices=args.devices, objectives=args.objective, memory_limits=args.memory_limit,
        method_options=method_options, limit=args.limit, workers=args.workers, ray=args.ray,
        ray_address=args.ray_address, progress=not args.quiet)
    print(f"{summary.ran} runs done, {summary.skipped} already recorded, "
          f"{summary.failed} failed; records in {summary.path}")
    for method, graph, error in summary.failures[:10]:
        print(f"  failed: {method} on {graph}: {error}")
    for line in summary.skipped_lines:
        print(f"regal: warning: {line}; its run was done again", file=sys.stderr)
    return 0


def cmd_report(args) -> int:
    from regal.report import write_report

    if args.out is not None:
        _check_output("--out", args.out, folder=True)
    result = write_report(args.results, args.out, baseline=("brkga", args.baseline_budget),
                          chart=not args.no_chart, best_known=args.best_known,
                          bounds=not args.no_bounds, pool_limits=args.pool_limits)
    for line in result.get("skipped", ()):
        print(f"regal: warning: {line}", file=sys.stderr)
    print(result["markdown"])
    print("wrote " + ", ".join(result["files"]))
    return 0


# `regal train` flags -> TrainConfig fields; a flag not given takes TrainConfig's default for
# a new run and the stored value on --resume (the parser leaves absent flags out of `args`)
_TRAIN_FIELDS = ("train", "val", "steps", "budget", "devices", "objective", "graphs_per_step",
                 "samples", "learning_rate", "entropy_coef", "val_every", "val_graphs",
                 "checkpoint_minutes", "max_minutes", "workers", "ray", "seed", "learn",
                 "seeds_per_action", "pretrain_from", "pretrain_steps", "augment",
                 "polish_share", "init_from")
# what a resumed run may change (regal.train.RESUMABLE_FIELDS, as flags)
_TRAIN_RESUMABLE = ("steps", "max_minutes", "workers", "ray", "checkpoint_minutes")


def _train_settings(args) -> dict:
    """The TrainConfig fields the command line gives explicitly (progress always)."""
    given = {name: getattr(args, name) for name in _TRAIN_FIELDS if hasattr(args, name)}
    if "devices" in given:
        given["devices"] = tuple(given["devices"])
    if getattr(args, "no_elite_bias", False):
        given["learn_elite_bias"] = False
    given["progress"] = not getattr(args, "quiet", False)
    return given


def _flag(field: str) -> str:
    return "--no-elite-bias" if field == "learn_elite_bias" else "--" + field.replace("_", "-")


def cmd_train(args) -> int:
    import json

    resume = args.resume
    out = getattr(args, "out", None)
    if isinstance(resume, str):  # --resume RUN
        if out is not None and os.path.abspath(out) != os.path.abspath(resume):
            raise ValueError(f"--resume {resume}: differs from --out {out}; give the run "
                             "folder once")
        out = resume
    if out is None:
        raise ValueError("--out: the run folder is required (or --resume RUN)")
    given = _train_settings(args)
    if not resume:
        for flag in ("train", "val"):
            if flag not in given:
                raise ValueError(f"--{flag}: required for a new run (resuming one takes the "
                                 f"stored setting: --resume {out})")
    _check_output("--out", out, folder=True)  # before TensorFlow is paid for
    from regal.train import TrainConfig, stored_config, train

    settings = dict(given, out=out)
    if resume:
        # the stored configuration, with only what may change between sessions changed
        settings = stored_config(out)
        for field, value in given.items():
            same = json.loads(json.dumps(value)) == settings.get(field, value)
            if not same and field not in _TRAIN_RESUMABLE + ("progress",):
                raise ValueError(
                    f"{_flag(field)}: the run in {out} was started with {field}="
                    f"{settings.get(field)!r}; a resumed run may change only "
                    f"{', '.join(_flag(f) for f in _TRAIN_RESUMABLE)} and --quiet (start a "
                    "new run folder to change it)")
            settings[field] = value
    config = TrainConfig(**settings)  # a bad setting: one line, before TensorFlow loads
    summary = train(config, resume=bool(resume))  # locks the run folder, then loads TensorFlow
    print(f"stopped ({summary['stopped']}) at step {summary['step']} after "
          f"{summary['wall_time'] / 60:.1f} min; last validation improvement: "
          f"{summary['val_improvement']}; policy in {summary['policy']}")
    if summary.get("signal"):  # Ctrl-C or SIGTERM, checkpoint saved: 128 + N, as `compare`
        print(f"regal: interrupted; `regal train --resume {out}` continues", file=sys.stderr)
        return 128 + summary["signal"]
    return 0


def cmd_apply(args) -> int:
    _check_output("--out", args.out, folder=True)  # before TensorFlow is paid for
    from regal.io.solution import check_device_format, read_solution_file
    solution = read_solution_file(args.solution)  # a bad file: one line, before TensorFlow
    check_device_format(args.device_format, solution["devices"]["count"])
    from regal.io.sources import is_model
    if not is_model(args.model):
        raise ValueError(f"{args.model}: a graph file; apply needs the model it was imported "
                         f"from (the ops' TensorFlow definitions)")
    from regal.measure import apply_solution

    result = apply_solution(args.model, solution, args.out, batch_size=args.batch,
                            training=args.training, kind=args.device_type,
                            device_format=args.device_format, trust_code=args.trust_code)
    print(f"applied {args.solution}: {result['control_edges']} control edges chain each "
          f"device's order")
    if result["moved"]:
        print(f"{len(result['moved'])} ops moved to their variable's device (TensorFlow "
              f"colocates ops that use a variable)")
    else:
        print("0 ops moved: TensorFlow runs every op on the solution's device")
    if result["unmatched_variables"]:
        print(f"saved_model: {result['unmatched_variables']} variables not found in the "
              f"source got random values")
    if result.get("no_saved_model"):
        print(f"regal: warning: {result['no_saved_model']}", file=sys.stderr)
    for path in result["files"]:
        print(f"wrote {path}")
    return 0


def cmd_measure(args) -> int:
    _check_output("--json", args.json)  # before TensorFlow is paid for
    from regal.io.solution import read_solution_file
    solution = read_solution_file(args.solution)  # a bad file: one line, before TensorFlow
    from regal.measure import measure

    result = measure(args.model, solution, args.devices, batch_size=args.batch,
                     training=args.training, kind=args.device_type, runs=args.runs,
                     seed=args.seed, trust_code=args.trust_code)
    print("\n".join(result.lines()))
    if args.json:
        from regal.files import write_json
        write_json(args.json, result.to_dict(), indent=1)
        print(f"wrote {args.json}")
    return 0



def cmd_best_known(args) -> int:
    from regal.bestknown import build_store
    from regal.units import format_bytes, format_duration_us

    if args.time_per_graph is None or not args.time_per_graph > 0:
        raise ValueError(f"--time-per-graph: expected a positive number of seconds, "
                         f"got {args.time_per_graph}")
    _check_output("--out", args.out)
    beaten_by = None
    if args.beaten_by is not None:
        from regal.harness import load_records
        if not os.path.exists(args.beaten_by):
            raise ValueError(f"--beaten-by: {args.beaten_by}: no such file or folder")
        beaten_by = load_records(args.beaten_by)   # a records file, or a folder of them
        if not beaten_by:
            raise ValueError(f"--beaten-by: {args.beaten_by} holds no harness records (a "
                             "results folder or its records.jsonl)")
    summary = build_store(args.graphs, args.out, devices=args.devices,
                          beaten_by=beaten_by,
                          objective=args.objective, memory_limit=args.memory_limit,
                          time_per_graph=args.time_per_graph,
                          time_per_kop=args.time_per_kop, seed=args.seed, extra=args.extra,
                          workers=args.workers, ray=args.ray, progress=not args.quiet)
    unit = format_bytes if args.objective == "peak_memory" else format_duration_us
    for graph, d, before, after in summary.rows:
        if after is None:
            continue
        change = "new" if before is None else \
            ("unchanged" if after >= before else f"{(before - after) / before:+.2%} better")
        print(f"  {graph} d={d}: {unit(after)} ({change})")
    print(f"{summary.keys} graph x device entries: {summary.skipped} already had the time, "
          + (f"{summary.not_beaten} not beaten by a record, " if beaten_by is not None else "")
          + f"{summary.chunks} chunks run, {summary.improved} improvements in "
          f"{summary.seconds:.0f} s; store {args.out}")
    return 0


def cmd_bounds(args) -> int:
    from regal.bounds import format_bound, lower_bound
    from regal.io import load_graph
    from regal.sim import DeviceSpec

    for path in args.graphs:
        graph = load_graph(path)
        for d in args.devices:
            bound = lower_bound(graph, DeviceSpec(d))
            if args.bytes:
                print(f"{path} d={d}: {bound.value}")
            else:
                print(f"{path} d={d}: {format_bound(bound)}")
    return 0


# ---------------------------------------------------------------------------
# parser


def _model_options(p) -> None:
    """--batch, --training, --run, --trust-code: how `import` and `optimize` import a model."""
    p.add_argument("--batch", type=positive_int, default=None, metavar="B",
                   help="a model's batch size (default 1)")
    p.add_argument("--training", action="store_true",
                   help="a model's training step: forward, backward, optimizer update")
    p.add_argument("--run", action="store_true",
                   help="run the model once and use TensorFlow's measured cost graph")
    _trust_code_option(p)


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
               "written (one line says what), 3 no solution within the memory limits, 130 "
               "interrupted (train: 128 + the signal, after its checkpoint).")
    parser.add_argument("--version", action="version", version=f"regal {version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    data = sub.add_parser("data", help="graph sets: inspect, generate, build")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    p = data_sub.add_parser("info", help="print ops, tensors, bytes and depth of graph files")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--json", action="store_true",
                   help="one JSON line per file with the exact figures (bytes, us)")
    p.set_defaults(func=cmd_data_info)
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
    p.set_defaults(func=cmd_data_synth)
    p = data_sub.add_parser("real", help="import the real TensorFlow graph set (resumable)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the .npz files")
    p.add_argument("--models", nargs="+", metavar="NAME", help="a subset (default: all)")
    p.add_argument("--readme", metavar="FILE", help="table to write (default: OUT/../README.md)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_data_real)

    p = sub.add_parser("import", help="import a TensorFlow model as a graph file")
    p.add_argument("model", metavar="MODEL", help="SavedModel dir, .keras/.h5, GraphDef "
                   ".pb/.pbtxt, keras.applications.NAME or package.module:attr")
    p.add_argument("--out", required=True, metavar="FILE", help="graph file (.npz, .pbtxt, .pb)")
    _model_options(p)
    p.set_defaults(func=cmd_import)

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
    p.add_argument("--objective", choices=("peak_memory", "makespan"), default="peak_memory")
    p.add_argument("--method", default=DEFAULT_METHOD,
                   help=f"optimizer (default: {DEFAULT_METHOD}, the best of the project at "
                        "5,000 evaluations on data/real and the synthetic test split; see the "
                        "README)")
    p.add_argument("--init", default=None, metavar="SOLUTION.json",
                   help="warm start from an earlier solution of this graph (brkga, local-search)")
    p.add_argument("--policy", default=None, metavar="DIR",
                   help="trained policy folder for --method regal (default: data/policy)")
    p.add_argument("--budget", type=int, default=None,
                   help=f"performance-model evaluations (default {DEFAULT_BUDGET}; with "
                        "--time-limit: no budget unless given, else whichever ends first)")
    p.add_argument("--time-limit", type=positive_float, default=None, metavar="SECONDS",
                   help="anytime search: stop when the time is up and keep the best found "
                        "(every search method; cpsat's own limit; one-shot heuristics "
                        "just run)")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--out", metavar="JSON", help="write the solution here")
    p.add_argument("--plot", metavar="PNG", help="draw memory over time and a Gantt chart")
    p.add_argument("--pin", action="append", metavar="OP=DEVICE",
                   help="run OP's colocation group on DEVICE (repeatable; OP is a name, a "
                        "glob like 'dense*' or re:REGEX)")
    p.add_argument("--colocate", action="append", metavar="OP,OP,...",
                   help="run these ops (and their groups) on one device (repeatable)")
    p.set_defaults(func=cmd_optimize)

    p = sub.add_parser("compare", help="run methods on graph folders and record every run "
                       "(resumable)")
    p.add_argument("--methods", required=True, help="comma-separated, e.g. brkga,random,cpsat")
    p.add_argument("--graphs", required=True, action="append", metavar="DIR",
                   help="folder of graph files; repeat for several datasets (named by folder)")
    p.add_argument("--devices", type=_int_list, default=[2], metavar="D[,D...]")
    p.add_argument("--budget", type=_int_list, default=[5000], metavar="N[,N...]",
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
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("report", help="Table 1 (Markdown, CSV, bar chart) from compare records")
    p.add_argument("results", metavar="DIR", help="folder of records (*.jsonl, recursively)")
    p.add_argument("--out", default=None, metavar="DIR", help="where to write (default: DIR)")
    p.add_argument("--baseline-budget", type=int, default=5000,
                   help="budget of the brkga runs that are the baseline (default 5000)")
    p.add_argument("--no-chart", action="store_true", help="tables only")
    p.add_argument("--best-known", nargs="+", default=None, metavar="STORE",
                   help="best-known stores for the gap from best (default: data/bestknown/)")
    p.add_argument("--no-bounds", action="store_true",
                   help="skip the gap to the lower bound (it reads every graph file)")
    p.add_argument("--pool-limits", action="store_true",
                   help="one row per method over graphs that each ran under their own memory "
                        "limit (e.g. transfer.py's makespan runs), not a setting per limit")
    p.set_defaults(func=cmd_report)

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
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("best-known", help="build or extend a store of best-known solutions "
                       "with long portfolio runs (resumable, monotone)")
    p.add_argument("graphs", nargs="+", metavar="GRAPHS", help="graph files or folders")
    p.add_argument("--devices", type=device_count, nargs="+", required=True, metavar="D")
    p.add_argument("--objective", choices=("peak_memory", "makespan"), default="peak_memory")
    p.add_argument("--memory-limit", type=parse_size, default=None, metavar="SIZE",
                   help="per-device memory limit (makespan objective)")
    p.add_argument("--time-per-graph", type=positive_float, required=True, metavar="SECONDS",
                   help="portfolio CPU seconds per graph and device count, in total over reruns")
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
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_best_known)

    p = sub.add_parser("bounds", help="a valid lower bound on the peak memory of graphs")
    p.add_argument("graphs", nargs="+", metavar="GRAPH", help="graph files")
    p.add_argument("--devices", type=device_count, nargs="+", required=True, metavar="D")
    p.add_argument("--bytes", action="store_true", help="print the bound in bytes only")
    p.set_defaults(func=cmd_bounds)

    model_help = ("the model the solution's graph was imported from (as for `regal import`)")
    p = sub.add_parser("apply", help="write a model's graph with a solution's devices and "
                       "order (GraphDef, SavedModel, device map)")
    p.add_argument("model", metavar="MODEL", help=model_help)
    p.add_argument("--solution", required=True, metavar="JSON", help="from regal optimize")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    p.add_argument("--batch", type=int, default=1, metavar="B", help="batch size (default 1)")
    p.add_argument("--training", action="store_true", help="the training step was solved")
    p.add_argument("--device-type", choices=("CPU", "GPU"), default="GPU",
                   help="device of solution device k: /device:TYPE:k (default GPU)")
    p.add_argument("--device-format", default=None, metavar="FMT",
                   help="device string with {k}, e.g. /job:worker/task:0/device:GPU:{k}")
    _trust_code_option(p)
    p.set_defaults(func=cmd_apply)

    p = sub.add_parser("measure", help="run a placed model on D devices; measured vs "
                       "simulated per-device peak memory")
    p.add_argument("model", metavar="MODEL", help=model_help)
    p.add_argument("--solution", required=True, metavar="JSON", help="from regal optimize")
    p.add_argument("--devices", type=device_count, default=None, metavar="D",
                   help="devices to run on (default: the solution's count)")
    p.add_argument("--batch", type=int, default=1, metavar="B", help="batch size (default 1)")
    p.add_argument("--training", action="store_true", help="the training step was solved")
    p.add_argument("--device-type", choices=("auto", "cpu", "gpu"), default="auto",
                   help="auto: logical GPUs when a GPU exists, else logical CPUs")
    p.add_argument("--runs", type=int, default=3, help="warm-up runs before measuring")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the random weights and inputs")
    p.add_argument("--json", metavar="FILE", help="also write the numbers here")
    _trust_code_option(p)
    p.set_defaults(func=cmd_measure)

    return parser


class _Stdout:
    """sys.stdout while a command runs. Once the reader of a pipe has gone (`regal optimize
    ... | head -1`), the rest of the output is dropped instead of raising BrokenPipeError:
    a closed pipe is not an error, and the command still ends as it would have, its files
    written and its own exit code returned (0, or 3 for a solution over the limits)."""

    def __init__(self, stream):
        self.stream, self.reader_gone = stream, False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self._drop_the_rest()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._drop_the_rest()

    def _drop_the_rest(self) -> None:
        # stdout's file descriptor onto /dev/null: what the stream still buffers, and the
        # interpreter's last flush at exit, go there instead of raising again
        self.reader_gone = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.stream.fileno())
        os.close(devnull)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def main(argv: list[str] | None = None) -> int:
    stdout = sys.stdout
    if stdout is None:  # no stdout at all (pythonw): print() already discards
        return _run(argv)
    sys.stdout = _Stdout(stdout)
    try:
        return _run(argv)
    finally:
        sys.stdout.flush()  # here, not at exit: a gone reader is then no traceback
        sys.stdout = stdout


def _run(argv: list[str] | None) -> int:
    """Parses `argv` and runs its command: user errors are one line and exit code 2."""
    from regal.files import WRITE_ERRNOS, WriteError
    from regal.graph import GraphError
    from regal.harness import WorkerDied

    args = build_parser().parse_args(argv)
    try:
        _check_device_counts(args)
        return int(args.func(args) or 0)
    except WorkerDied as exc:  # not the user's input: exit 1, one line, a rerun resumes
        if os.environ.get("REGAL_DEBUG"):
            raise
        print(f"regal: error: {exc}", file=sys.stderr)
        return 1
    except (UserError, GraphError, OSError, ValueError) as exc:
        # an OSError is the user's when it names a file (missing, a folder, not writable),
        # or when an output cannot be written (full disk, `ulimit -f`: regal.files)
        disk = isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS
        if os.environ.get("REGAL_DEBUG") or (isinstance(exc, OSError) and not exc.filename
                                             and not disk):
            raise
        if isinstance(exc, WriteError) or not isinstance(exc, OSError):
            msg = str(exc)
        elif exc.filename:
            msg = f"{exc.strerror}: {exc.filename}"
        else:  # a writer that does not go through regal.files names no file
            msg = f"{exc.strerror} (a file could not be written or read)"
        print(f"regal: error: {msg}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("regal: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
