"""The `regal` command: each command's calls, nothing else (its grammar, the parser and every
flag's check, is `regal.arguments`).

Heavy modules (TensorFlow, numba) are imported inside the command that needs
them, so `regal data info` on a CostGraphDef never pays for TensorFlow.
User errors print one line and exit with code 2 (set REGAL_DEBUG=1 for a traceback).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from regal.arguments import (DEFAULT_BUDGET, build_parser, check_device_counts, check_output,
                             checked_policy_dir, parse_pins)
from regal.stop_flag import StopFlag
from regal.user_errors import EXIT_INTERRUPTED, report_user_errors

EXIT_INFEASIBLE = 3  # `regal optimize`: no solution found within the memory limits
EXIT_RUNS_FAILED = 1  # `regal compare`: some runs failed (the others are recorded)


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
    check_output("--out", args.out, folder=True)
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
    check_output("--out", args.out, inputs=(args.model,))
    graph = load_graph_or_model(args.model, batch_size=args.batch, training=args.training,
                                run=args.run, trust_code=args.trust_code,
                                **_loss_args(args, args.model))
    import warnings
    with warnings.catch_warnings(record=True) as caught:  # what the format cannot keep
        warnings.simplefilter("always")
        save_graph(graph, args.out)
    for warning in caught:
        print(f"regal: warning: {warning.message}", file=sys.stderr)
    s = summarize(graph)
    print(f"wrote {args.out}: {s['ops']:,} ops, {s['tensors']:,} tensors, "
          f"{format_bytes(s['total bytes'])} of tensors, "
          f"{format_bytes(s['persistent bytes'])} persistent")
    return 0


def cmd_data_real(args) -> int:
    from pathlib import Path

    check_output("--out", args.out, folder=True)  # before TensorFlow is paid for
    from regal.io.tf_models import README_TITLE, build_real_set, write_real_readme

    # the table's file, checked before the imports (they may take an hour): the default
    # OUT/../README.md is replaced only when this command wrote it (the project's data/)
    readme = args.readme or str(Path(args.out).parent / "README.md")
    if args.readme is not None:  # the default's folder is made with OUT's
        check_output("--readme", readme)
    elif os.path.isfile(readme):
        with open(readme, encoding="utf-8", errors="replace") as f:
            first = f.readline().rstrip("\n")
        if first != README_TITLE:
            raise ValueError(f"--readme: {readme} exists and is not a table this command "
                             f"wrote; name the table's file with --readme")
    paths = build_real_set(args.out, models=args.models, progress=not args.quiet)
    write_real_readme(args.out, readme)
    print(f"{len(paths)} real graphs in {args.out}; table in {readme}")
    return 0


def cmd_data_large(args) -> int:
    check_output("--out", args.out, folder=True)  # before TensorFlow is paid for
    from regal.io.tf_large import LARGE_BATCH_SIZES, build_large_set, write_large_readme

    records = build_large_set(args.out, models=args.models,
                              batch_sizes=args.batch or LARGE_BATCH_SIZES,
                              microbatches=args.microbatches or (1,), progress=not args.quiet)
    write_large_readme(args.out)
    print(f"{len(records)} large graphs in {args.out}; table in {args.out}/README.md")
    return 0


def _takes(method, name: str) -> bool:
    """Whether `method` names keyword `name` itself: a **options catch-all does not count,
    since regal and seeded-brkga set `initial` themselves and would get it twice."""
    import inspect

    return name in inspect.signature(method).parameters


def _fit_search(problem, budget, seed):
    """`regal.fit_search.smallest_device_count` at min(budget, FIT_BUDGET) evaluations per
    device count, with a progress bar (shown only when it takes more than a second)."""
    from tqdm import tqdm

    from regal.fit_search import FIT_BUDGET, fit_cap, smallest_device_count

    d = problem.devices.count
    cap = fit_cap(d)
    with tqdm(total=cap - d + 1, unit="count", desc="smallest device count that fits",
              leave=False, delay=1.0) as bar:
        def progress(count):  # the counts before this one are done
            bar.update(count - d - bar.n)
        return smallest_device_count(problem, min(budget or FIT_BUDGET, FIT_BUDGET), seed,
                                     cap=cap, progress=progress)


def _device_speeds(args) -> dict:
    """DeviceSpec's speed fields from --device-preset, --device-flops (TFLOP/s) and
    --device-bandwidth (GB/s): each one value for every device or one per device; an
    explicit flag overrides the presets' value of its field. A bad count or an unknown
    preset is a ValueError naming the flag."""
    from regal.sim.speeds import GBPS, TFLOPS, preset

    count = args.devices

    def per_device(flag: str, values, what: str) -> list:
        values = values if isinstance(values, list) else [values]
        if len(values) not in (1, count):
            raise ValueError(f"{flag}: expected one {what} or {count} (one per device), "
                             f"got {len(values)}")
        return values * count if len(values) == 1 else values

    fields = {}
    names = getattr(args, "device_preset", None)
    if names is not None:
        names = per_device("--device-preset", names, "name")
        try:
            found = [preset(name) for name in names]
        except ValueError as exc:
            raise ValueError(f"--device-preset: {exc}") from None
        fields = {"flops": [p.flops for p in found],
                  "memory_bandwidth": [p.memory_bandwidth for p in found],
                  "presets": [p.name for p in found]}
    for flag, field, unit, value in (
            ("--device-flops", "flops", TFLOPS, getattr(args, "device_flops", None)),
            ("--device-bandwidth", "memory_bandwidth", GBPS,
             getattr(args, "device_bandwidth", None))):
        if value is not None:
            fields[field] = [x * unit for x in per_device(flag, value, "number")]
    return fields


def cmd_optimize(args) -> int:
    from tqdm import tqdm

    from regal import optimizers
    from regal.io.sources import load_graph_or_model
    from regal.sim import DeviceSpec
    from regal.sim.speeds import check_speeds

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
    speeds = _device_speeds(args)  # a bad preset or count fails before the graph is read
    if args.init is not None and not _takes(method, "initial"):
        raise ValueError(f"--init: method {args.method!r} takes no warm start "
                         "(brkga, local-search, cpsat and cpsat-lns do)")
    if args.formulation is not None:
        if not _takes(method, "formulation"):
            raise ValueError(f"--formulation: method {args.method!r} builds no CP-SAT model "
                             "of its own (--method cpsat does)")
        options["formulation"] = args.formulation
    if args.policy is not None:
        if not _takes(method, "policy_dir"):
            raise ValueError(f"--policy: method {args.method!r} uses no policy "
                             "(regal and regal-paper do)")
        options["policy_dir"] = checked_policy_dir(args.policy)
    # --out may replace its own --init (an improved solution in place), nothing else read
    check_output("--out", args.out, inputs=(args.graph, args.plot))
    check_output("--plot", args.plot, inputs=(args.graph, args.init))
    graph = load_graph_or_model(args.graph, batch_size=args.batch, training=args.training,
                                run=args.run, trust_code=args.trust_code,
                                **_loss_args(args, args.graph))
    imported = graph  # what `regal apply` re-imports: the user's constraints come on top
    if args.pin or args.colocate:
        from regal.constraints import with_constraints
        graph = with_constraints(graph, pins=parse_pins(args.pin),
                                 colocate=[c.split(",") for c in args.colocate or ()],
                                 num_devices=args.devices)
    links = {name: value for name, value in (("bandwidth", args.bandwidth),
                                              ("latency", args.latency)) if value is not None}
    devices = DeviceSpec(args.devices, memory_limit=args.memory_limit, **links, **speeds)
    try:
        check_speeds(graph, devices)  # a graph without FLOP counts cannot take speeds
    except ValueError as exc:
        raise ValueError(f"{args.graph}: {exc}") from None
    problem = optimizers.Problem(graph, devices, args.objective)
    if args.init is not None:
        from regal.io.solution import read_solution_file
        try:
            options["initial"] = optimizers.read_solution(read_solution_file(args.init), problem,
                                                          imported.fingerprint())
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
    # the first Ctrl-C stops the search, which still returns (and we write) its best so far
    # (a method that cannot be asked to stop is interrupted as before)
    stop, searches = StopFlag((signal.SIGINT,)), _takes(method, "should_stop")
    if searches:
        options["should_stop"] = lambda: stop.raised
    try:
        with stop if searches else contextlib.nullcontext():
            solution = optimizers.solve(args.method, problem, budget, args.seed,
                                        progress=progress, **options)
    except ValueError as exc:
        if str(exc).startswith("budget"):  # a method's own minimum: name the flag
            raise ValueError(f"--{exc}") from None
        raise
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
    fit = None
    stopped = stop.raised
    if not solution.feasible and not args.no_fit_search and not stopped:
        fit = _fit_search(problem, budget, args.seed)
    print(f"{args.graph}: {graph.num_nodes:,} op{'s' * (graph.num_nodes != 1)} on "
          f"{devices.count} device{'s' * (devices.count != 1)}")
    if devices.has_speeds:
        from regal.sim.speeds import describe_speed
        names = devices.presets or ()
        print("device speeds: " + "; ".join(
            f"{k}: {names[min(k, len(names) - 1)] + ' ' if names else ''}"
            f"{describe_speed(devices.flops and devices.flops[k], devices.memory_bandwidth and devices.memory_bandwidth[k])}"
            for k in range(devices.count)))
    print("\n".join(optimizers.describe(problem, solution, references, fit=fit)))
    if solution.extra.get("stopped_by") == "time_limit":
        print(f"stopped at the time limit ({args.time_limit:g} s)")
    elif solution.extra.get("stopped_by") == "budget":
        print(f"stopped at the budget ({budget:,} evaluations) before the time limit")
    status = solution.extra.get("status")
    if status is not None:
        print(f"solver status: {status}" + ("" if solution.extra.get("time_limit") is None
                                           else f" (time limit {solution.extra['time_limit']} s)"))
    if args.objective == "peak_memory":
        from regal.bounds import lower_bound
        extra = {}
        if solution.extra.get("bound") is not None and solution.method == "cpsat":
            extra["cpsat"] = solution.extra["bound"]  # proven for peak memory, any status
        bound = lower_bound(graph, devices, extra=extra)
        # a valid lower bound certifies the answer: the optimum lies between the two
        print(_certified(solution.value, bound.value, bound.source))
    elif solution.feasible:      # a step over a limit is no step: nothing to certify
        from regal.bounds_time import step_time_bound
        from regal.units import format_duration_us
        bound = step_time_bound(graph, devices)
        print(_certified(solution.makespan, bound.value, bound.source, format_duration_us,
                         objective="makespan"))
    for path in written:
        print(f"wrote {path}")
    if stopped:
        print("regal: interrupted: the best solution found so far is above", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0 if solution.feasible else EXIT_INFEASIBLE


def cmd_compare(args) -> int:
    from regal.harness import run_experiment

    check_output("--out", args.out, folder=True)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    method_options = None
    from regal import optimizers
    from regal.regal_method import (policy_content_hash, portable_policy_dir,
                                    resolve_policy_dir)

    takers = [m for m in methods if _takes(optimizers.get_method(m), "policy_dir")]
    if args.policy is not None and not takers:
        raise ValueError(f"--policy: none of the methods {','.join(methods)} uses a policy "
                         "(regal and regal-paper do)")
    if takers:
        # the runs' options, and so their records' keys, name the policy by its folder and
        # its content: a policy replaced in place, or another $REGAL_POLICY_DIR, runs again
        if args.policy is not None:
            folder = checked_policy_dir(args.policy)
        else:   # the default, or $REGAL_POLICY_DIR: a bad one is named as such
            folder = str(resolve_policy_dir(None))
            if not os.path.isfile(os.path.join(folder, "config.json")):
                raise ValueError(f"the default policy {folder} ($REGAL_POLICY_DIR, else "
                                 f"data/policy) holds no stored policy (config.json); pass "
                                 f"--policy DIR")
        policy = {"policy_dir": portable_policy_dir(folder),
                  "policy_hash": policy_content_hash(folder)}
        method_options = {m: dict(policy) for m in takers}
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
    if summary.failed:
        print(f"regal: error: {summary.failed} run{'s' * (summary.failed != 1)} failed (the "
              f"records keep why; the same command runs them again)", file=sys.stderr)
        return EXIT_RUNS_FAILED
    return 0


def cmd_report(args) -> int:
    from regal.report import write_report

    if args.out is not None:
        check_output("--out", args.out, folder=True)
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
                 "polish_share", "race", "init_from")
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
    check_output("--out", out, folder=True)  # before TensorFlow is paid for
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
    val = summary["val_improvement"]  # a fraction of uniform BRKGA's value
    shown = "none yet" if val is None else f"{100 * val:+.2f}% over uniform BRKGA"
    print(f"stopped ({summary['stopped']}) at step {summary['step']} after "
          f"{summary['wall_time'] / 60:.1f} min; last validation: {shown}; policy in "
          f"{summary['policy']}")
    if summary.get("signal"):  # Ctrl-C or SIGTERM, checkpoint saved: 128 + N, as `compare`
        print(f"regal: interrupted; `regal train --resume {out}` continues", file=sys.stderr)
        return 128 + summary["signal"]
    return 0


def _loss_args(args, source=None) -> dict:
    """--loss and --custom-objects as the importer takes them; plain mistakes fail here,
    before TensorFlow is paid for (an unknown loss name fails in the importer, one line).
    `source`: what is read; a graph file is not checked here (the loader then says that
    these flags are for models, where this would advise adding --training)."""
    from regal.io.sources import is_model

    check = source is None or is_model(source)
    microbatches = getattr(args, "microbatches", None)   # import and optimize
    if check and args.loss is not None and not args.training:
        raise ValueError("--loss: only a training step has a loss (add --training)")
    if check and args.custom_objects is not None:
        from pathlib import Path
        if not Path(args.custom_objects).is_file():
            raise ValueError(f"--custom-objects {args.custom_objects}: no such file")
    if check and microbatches is not None and not args.training:
        raise ValueError("--microbatches: only a training step has micro-batches "
                         "(add --training)")
    return {name: value for name, value in (("loss", args.loss),
                                            ("custom_objects", args.custom_objects),
                                            ("microbatches", microbatches))
            if value is not None}


def cmd_apply(args) -> int:
    check_output("--out", args.out, folder=True,  # before TensorFlow is paid for
                 inputs=(args.model, args.solution))
    loss_args = _loss_args(args)
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
                            device_format=args.device_format, trust_code=args.trust_code,
                            **loss_args)
    print(f"applied {args.solution}: {result['control_edges']} control edges chain each "
          f"device's order")
    if result.get("loss"):
        print(f"training step: {result['loss']}")
    if result["moved"]:
        print(f"{len(result['moved'])} ops moved to their variable's device (TensorFlow "
              f"colocates ops that use a variable)")
    else:
        print("0 ops moved: TensorFlow runs every op on the solution's device")
    if result["unmatched_variables"]:
        print(f"saved_model: {result['unmatched_variables']} variables not found in the "
              f"source got random values")
    if result.get("signatures"):
        print(f"saved_model signatures: {', '.join(result['signatures'])}")
    if result.get("no_saved_model"):
        print(f"regal: warning: {result['no_saved_model']}", file=sys.stderr)
    for path in result["files"]:
        print(f"wrote {path}")
    return 0


def cmd_measure(args) -> int:
    check_output("--json", args.json, inputs=(args.solution, args.model))  # before TensorFlow
    loss_args = _loss_args(args)
    from regal.io.solution import read_solution_file
    solution = read_solution_file(args.solution)  # a bad file: one line, before TensorFlow
    from regal.io.sources import is_model
    if not is_model(args.model):
        raise ValueError(f"{args.model}: a graph file; measure needs the model it was "
                         f"imported from (it runs the ops)")
    from regal.measure import measure

    result = measure(args.model, solution, args.devices, batch_size=args.batch,
                     training=args.training, kind=args.device_type, runs=args.runs,
                     timed_runs=args.timed_runs, seed=args.seed, trust_code=args.trust_code,
                     **loss_args)
    print("\n".join(result.lines()))
    if args.json:
        from regal.files import write_json
        write_json(args.json, result.to_dict(), indent=1)
        print(f"wrote {args.json}")
    return 0



def cmd_best_known(args) -> int:
    from regal.bestknown import build_store
    from regal.units import format_bytes, format_duration_us

    if args.bounds_only:
        return _best_known_bounds(args)
    if args.again:
        raise ValueError("--again: only with --bounds-only (it recomputes stored bounds)")
    if args.bound_time is not None:
        raise ValueError("--bound-time: only with --bounds-only (a build gives each bound a "
                         "fixed few seconds)")
    if args.time_per_graph is None:
        raise ValueError("--time-per-graph: required (portfolio CPU seconds per graph and "
                         "device count), unless --bounds-only")
    if not args.time_per_graph > 0:
        raise ValueError(f"--time-per-graph: expected a positive number of seconds, "
                         f"got {args.time_per_graph}")
    check_output("--out", args.out)
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
    for graph, d, before, after, bound in summary.rows:
        if after is None:
            continue
        change = "new" if before is None else \
            ("unchanged" if after >= before else f"{(before - after) / before:+.2%} better")
        certified = _certified(after, bound, unit=unit, objective=args.objective)
        print(f"  {graph} d={d}: {unit(after)} ({change})"
              + (f"; {certified}" if certified else ""))
    print(f"{summary.keys} graph x device entries: {summary.skipped} already had the time, "
          + (f"{summary.not_beaten} not beaten by a record, " if beaten_by is not None else "")
          + f"{summary.chunks} chunks run, {summary.improved} improvements in "
          f"{summary.seconds:.0f} s; store {args.out}")
    return 0


def _certified(value: float, bound, source: str | None = None, unit=None,
               objective: str = "peak_memory") -> str:
    """'certified: at most 2.10% above the optimum (lower bound 1.00 MiB, argument op_start)'
    or 'certified: proven optimal (...)', the line `regal optimize` prints, for a value and a
    valid lower bound in bytes (or in what `unit` formats); a step time's float bound sits a
    little below its exact value, so it proves within `PROVEN_TOLERANCE`; '' without a bound."""
    if bound is None:
        return ""
    from regal.bounds import gap_to_bound
    from regal.bounds_time import PROVEN_TOLERANCE
    from regal.units import format_bytes
    gap = gap_to_bound(value, bound)
    tolerance = PROVEN_TOLERANCE if objective == "makespan" else 0.0
    return ("certified: proven optimal" if 0 <= gap <= tolerance else
            f"certified: at most {100 * gap:.2f}% above the optimum") + \
        f" (lower bound {(unit or format_bytes)(bound)}" + ("" if source is None else
                                                          f", argument {source}") + ")"


def _best_known_bounds(args) -> int:
    """`regal best-known --bounds-only`: lower bounds added to a store's entries."""
    from regal.bestknown import add_bounds
    from regal.units import format_bytes, format_duration_us

    if not os.path.isfile(args.out):
        raise ValueError(f"--out {args.out}: no such store (--bounds-only adds to one)")
    summary = add_bounds(args.out, args.graphs, devices=args.devices,
                         missing_only=not args.again,
                         **({} if args.bound_time is None else {"time_limit": args.bound_time}))
    for graph, d, value, bound, source, objective in summary.rows:
        unit = format_bytes if objective == "peak_memory" else format_duration_us
        print(f"  {graph} d={d} ({objective.replace('_', ' ')}): {unit(value)}; "
              f"{_certified(value, bound, source, unit, objective)}")
    print(f"{summary.keys} entries: {summary.bounded} bounded now, {summary.unchanged} "
          f"unchanged, {summary.had_bound} had a bound, {summary.no_graph} without their "
          f"graph here, in {summary.seconds:.0f} s; store {args.out}")
    return 0


def cmd_bounds(args) -> int:
    """`regal bounds`: each graph's lower bound on the peak memory (`regal.bounds`), or with
    `--objective makespan` on the step time (`regal.bounds_time`), its argument and every
    argument's value."""
    from regal.bounds import format_bound, lower_bound
    from regal.bounds_time import step_time_bound
    from regal.io import load_graph
    from regal.sim import DeviceSpec
    from regal.units import format_bytes, format_duration_us

    step = args.objective == "makespan"
    unit = format_duration_us if step else format_bytes
    for path in args.graphs:
        graph = load_graph(path)
        for d in args.devices:
            bound = step_time_bound(graph, d) if step else \
                lower_bound(graph, DeviceSpec(d), time_limit=args.time_limit)
            if args.bytes:
                print(f"{path} d={d}: {bound.value}")
                continue
            shown = f"step time at least {unit(bound.value)}" if step else format_bound(bound)
            print(f"{path} d={d}: {shown} [argument: {bound.source}]")
            print("  every argument: " + ", ".join(
                f"{name} {unit(value)}" for name, value in bound.components.items()))
    return 0


# what each command name of the parser (`regal.arguments.build_parser`) runs
COMMANDS = {
    "data_info": cmd_data_info,
    "data_synth": cmd_data_synth,
    "data_real": cmd_data_real,
    "data_large": cmd_data_large,
    "import": cmd_import,
    "optimize": cmd_optimize,
    "compare": cmd_compare,
    "report": cmd_report,
    "train": cmd_train,
    "best_known": cmd_best_known,
    "bounds": cmd_bounds,
    "apply": cmd_apply,
    "measure": cmd_measure,
}


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
    args = build_parser().parse_args(argv)

    def command() -> int:
        check_device_counts(args)
        return int(COMMANDS[args.command](args) or 0)

    return report_user_errors("regal", command)


if __name__ == "__main__":
    sys.exit(main())
