"""The transfer experiment: REGAL (trained on the synthetic "train" split only) against every
registered baseline on graphs it has never seen, through the harness (regal.harness).

    python experiments/transfer.py --quick     # < 15 min on 2 cores, shipped policy
    python experiments/transfer.py             # full: >= 100 test graphs, every held-out real graph

Writes to experiments/results/transfer_full/ (--quick: transfer_quick/), the folders committed
with the current tables (experiments/results/README.md; transfer_full/README.md gives the
options its run used):
- table1.md   REGAL vs baselines, synthetic test split and real graphs, 2 and 4 devices:
              % improvement over BRKGA-5K (+ Wilcoxon signed-rank p-value, paired by graph),
              % gap from best, headroom captured (definitions: docs/design.md §7, regal.report);
- table3.md   ablation: placement only / scheduling only / both, each with and without a
              learned elite bias. --quick switches heads off at inference on the shipped
              weights; the full run trains each variant (same settings as the shipped policy);
- generalisation.md   graphs of 33,000-50,000 ops, >= 10x any graph of the shipped policy's
              training set (<= 3,300 ops): random DAGs, network-like inference graphs and
              network-like training steps (LARGE_SPLITS); --quick: 2,000-2,400 ops, not 10x;
- timing.md   the policy's wall time against BRKGA's at 5K evaluations;
- makespan.md the running-time objective on the synthetic test split: makespan with every
              device under a per-graph memory limit, MAKESPAN_FACTOR x the graph's best-known
              peak memory (a limit the best-known placement meets, that a careless one breaks);
              best-known = data/bestknown/synth_test_makespan.jsonl (built by `--makespan-store S`);
- records.jsonl (harness records; a rerun resumes, reusing every stored run whose method,
              options, revision (`regal.optimizers.REVISIONS`), graph, seed and budget match:
              a change to a method that alters its answers bumps its revision; `--rerun
              METHOD[,...]` or `--rerun all` remakes runs anyway) and summary.json.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent
PEAK_ONLY = ("cpsat-lns",)   # methods that refuse the step-time objective: no makespan runs
sys.path.insert(0, str(REPO))

from regal import harness, optimizers, report, synth  # noqa: E402
from regal.arguments import (check_output, checked_policy_dir,  # noqa: E402
                             non_negative_float, non_negative_int, positive_int)
from regal.io import load_graph  # noqa: E402
from regal.regal_method import (policy_content_hash,  # noqa: E402
                                portable_policy_dir, resolve_policy_dir)
from regal.search.schedule import DEFAULT_SCHEDULE  # noqa: E402
from regal.user_errors import UserError, refuse_empty, report_user_errors  # noqa: E402

sys.path.insert(0, str(REPO / "experiments"))
from training_set import HELD_OUT_FAMILIES, REAL_MAX_OPS, family_of  # noqa: E402

TRAIN_MAX_OPS = REAL_MAX_OPS  # the shipped policy's training set has no larger graph
ABLATIONS = [  # (label, learn, learn_elite_bias)
    ("placement only", "placement", False), ("placement + elite bias", "placement", True),
    ("scheduling only", "scheduling", False), ("scheduling + elite bias", "scheduling", True),
    ("both", "both", False), ("both + elite bias", "both", True),
]

MAKESPAN_FACTOR = 1.2  # per-device memory limit / the graph's best-known peak memory
MAKESPAN_STORE = REPO / "data" / "bestknown" / "synth_test_makespan.jsonl"
SHIPPED_STEPS = 263  # the shipped policy stopped at step 263 (data/policy/README.md)
QUICK = dict(test_graphs=10, real_graphs=4, large_graphs=2, large_ops=(2000, 2400), seeds=1,
             cpsat_time=2.0, devices=(2, 4), large_devices=(2,))
# large graphs: a 5K run on 40,000 ops takes 25-80 s, so two graphs (the committed tables')
FULL = dict(test_graphs=100, real_graphs=None, large_graphs=2, large_ops=(33000, 50000),
            seeds=3, cpsat_time=10.0, devices=(2, 4), large_devices=(2, 4))


# ---------------------------------------------------------------------------
# graph sets


def synth_split(recipe, folder: Path) -> Path:
    synth.materialize(recipe, folder, progress=False)
    return folder


# the generalisation splits: random DAGs, and graphs like the networks users bring (the
# training set's network-like families), inference graphs and training steps apart
LARGE_SPLITS = {  # dataset -> (families, training steps?, recipe seed)
    "large": ("random", False, 20240610),
    "large_net": (("cnn", "inception", "transformer"), False, 20240611),
    "large_net_train": (("cnn", "inception", "transformer"), True, 20240612),
}
LARGE_NOTE = ("Datasets: `large` random DAGs (the REGAL-like family); `large_net` inference "
              "graphs and `large_net_train` training steps (forward, backward and updates) of "
              "the network-like families (CNN, inception, transformer), which the training set "
              "holds at 150-1,500 ops.")


def large_split_recipes(count: int, ops: tuple[int, int]) -> dict:
    """Dataset name -> the recipe of its `count` graphs of `ops[0]`-`ops[1]` ops."""
    return {name: synth.custom_recipe(count, *ops, seed=seed, family=families,
                                      training=training, name=name)
            for name, (families, training, seed) in LARGE_SPLITS.items()}


def held_out_real_graphs() -> list[Path]:
    """The data/real graphs of the held-out families; UserError when there is none."""
    files = sorted(p for p in (REPO / "data" / "real").glob("*.npz")
                   if family_of(p.name) in HELD_OUT_FAMILIES)
    if not files:
        raise UserError("data/real/ holds no graphs of the held-out families "
                        f"({', '.join(HELD_OUT_FAMILIES)}); build it with `regal data real`, "
                        "or pass --real-graphs 0")
    return files


def real_subset(count: int | None, folder: Path) -> Path:
    """The `count` smallest real graphs of the held-out families (all when None), linked into
    `folder`: the policy never trains on these families (experiments/training_set.py)."""
    files = held_out_real_graphs() if count != 0 else []
    if count is not None:
        files = sorted(files, key=lambda p: (load_graph(p).num_nodes, p.name))[:count]
    folder.mkdir(parents=True, exist_ok=True)
    for path in files:
        target = folder / path.name
        if not target.exists():
            try:
                target.symlink_to(path.resolve())
            except OSError:
                shutil.copy(path, target)
    return folder


# ---------------------------------------------------------------------------
# statistics


def _fmt(value, digits=2, signed=False):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _p(value):
    return "–" if value is None else (f"{value:.1e}" if value < 1e-3 else f"{value:.3f}")


def makespan_limits(factor: float = MAKESPAN_FACTOR, stores=None):
    """`(graph path, devices) -> bytes`: `factor` x the graph's best-known peak memory (the
    shipped stores), or x the reference heuristics' best peak where the store has none."""
    from regal.bestknown import entry_key
    from regal.policy.reference import reference_for
    from regal.sim import DeviceSpec

    best = report.best_known_values(stores)
    cache: dict = {}

    def limit_of(path, devices: int) -> int:
        key = (str(path), int(devices))
        if key not in cache:
            graph = load_graph(path)
            peak = best.get(entry_key(graph.fingerprint(), devices, None, "peak_memory"))
            if peak is None:
                peak = reference_for(graph, DeviceSpec(devices), "peak_memory").value
            cache[key] = int(factor * peak)
        return cache[key]
    return limit_of


def current_records(records, entries, limit_of) -> list[dict]:
    """The records of the graphs as they are now (a rebuilt data/real/ leaves records of old
    versions) and of each method's code as it is now (`harness.current_revisions`), makespan
    ones only under today's limit, each pointing at its graph file here
    (matched by fingerprint: records made in another clone name that clone's paths, and the
    lower bounds and limits read the file)."""
    current = {e.fingerprint: e.path for e in entries}
    records = [dict(r, graph_path=current[r["fingerprint"]])
               for r in harness.current_revisions(records) if r["fingerprint"] in current]
    return [r for r in records if r["objective"] != "makespan"
            or r["memory_limit"] == limit_of(r["graph_path"], r["devices"])]


def summary_rows(records) -> list[dict]:
    """regal.report's rows (improvement, Wilcoxon p and wins/losses against BRKGA-5K, gap
    from the best-known store and to the lower bound) of every setting, once for all tables;
    makespan runs, whose graphs each have their own limit (`makespan_limits`), make one row
    per method, their gap to the lower bound from the step-time bounds the store keeps
    (`regal.bounds_time`; the peak-memory rows' bounds are computed from the graphs)."""
    step_bounds = {key: bound for key, bound in report.best_known_bounds().items()
                   if key[3] == "makespan"}
    return report.summarize(records, best_known=report.best_known_values(),
                            bounds=report.lower_bounds(records), pool_limits=True,
                            known_bounds=step_bounds)


def large_graph_methods(methods: list, method_options: dict) -> tuple[list, dict]:
    """What runs on the graphs >= 10x the training set's: BRKGA-5K, REGAL, and its twin and
    the paper's configuration when this run runs them (others cost too much there), each
    with this run's options for it."""
    run = ["brkga", *[m for m in ("seeded-brkga", "regal-paper") if m in methods], "regal"]
    return run, {name: method_options[name] for name in run if name in method_options}


def table1_labeler(method_options: dict):
    """The label of a summary row in Table 1, the large-graph and the makespan tables: each
    method with the options this run gives it (`method_options`, REGAL's included; none:
    {}), REGAL and BRKGA-5K named as such; None leaves the row out. Records of other
    settings (an earlier schedule's, say) stay in the records file, which is kept across
    runs, but not in the tables."""
    wanted = {method: json.dumps(options, sort_keys=True)
              for method, options in method_options.items()}
    names = {"regal": "**REGAL**", "brkga": "BRKGA-5K"}

    def label(row):
        if row["options"] != wanted.get(row["method"], "{}"):
            return None
        return names.get(row["method"], row["method"])
    return label


def metric_rows(summary, datasets, devices_list, label_of, objective="peak_memory") -> list[dict]:
    """The rows of `summary` (`summary_rows`) for the given datasets, devices and objective,
    labelled by `label_of`."""
    rows = []
    for row in summary:
        if row["objective"] != objective or row["dataset"] not in datasets \
                or row["devices"] not in devices_list:
            continue
        if row["method"] == "brkga" and row["budget"] != 5000:
            continue
        rows.append(dict(row, label=label_of(row), p_value=row["wilcoxon_p"]))
    return rows


def policy_adds(records, method_options: dict) -> list[dict]:
    """What the policy adds, per dataset, device count and objective: `regal` minus its
    no-policy twin `seeded-brkga` (the runs with this table's options), paired per graph over
    the seeds both have, in points of BRKGA-5K's value on the same seeds:
    100 * (twin - regal) / brkga, the difference of their improvements over BRKGA-5K.
    Mean with its standard error over graphs, median, extremes, graphs each is ahead on."""
    wanted = {m: json.dumps(method_options.get(m, {}), sort_keys=True)
              for m in ("regal", "seeded-brkga", "brkga")}
    runs: dict = defaultdict(dict)
    unfit_scale = set()   # (key, seed) of BRKGA-5K runs over the memory limit
    for r in records:
        if r.get("status") != "ok" or r["method"] not in wanted \
                or r["options"] != wanted[r["method"]] or r["budget"] != 5000:
            continue
        key = (r["dataset"], r["devices"], r["objective"], r["fingerprint"])
        runs[key].setdefault(r["method"], {})[r["seed"]] = float(r["value"])
        if r["method"] == "brkga" and r.get("feasible") is False:
            unfit_scale.add((key, r["seed"]))
    groups: dict = defaultdict(list)
    unfit: dict = defaultdict(int)   # graphs whose scale rests on a BRKGA-5K run over the limit
    for key, by_method in runs.items():
        dataset, devices, objective, _ = key
        if len(by_method) < 3:
            continue
        seeds = sorted(set.intersection(*(set(v) for v in by_method.values())))
        if not seeds:
            continue
        mean = {m: statistics.fmean(by_method[m][s] for s in seeds) for m in by_method}
        if mean["brkga"] > 0 and math.isfinite(mean["brkga"]):
            groups[(dataset, devices, objective)].append(
                100.0 * (mean["seeded-brkga"] - mean["regal"]) / mean["brkga"])
            unfit[(dataset, devices, objective)] += any((key, s) in unfit_scale for s in seeds)
    rows = []
    for (dataset, devices, objective), points in sorted(groups.items()):
        se = statistics.stdev(points) / len(points) ** 0.5 if len(points) > 1 else math.nan
        rows.append(dict(dataset=dataset, devices=devices, objective=objective,
                         graphs=len(points), mean=statistics.fmean(points), se=se,
                         median=statistics.median(points), low=min(points), high=max(points),
                         ahead=sum(p > 0 for p in points), behind=sum(p < 0 for p in points),
                         unfit_scale=unfit[(dataset, devices, objective)]))
    return rows


def policy_adds_markdown(rows: list[dict]) -> str:
    lines = ["## What the policy adds: REGAL minus seeded BRKGA (its no-policy twin)", "",
             "Per graph, over the seeds both have: 100 x (twin - REGAL) / BRKGA-5K, the "
             "difference of their improvements over BRKGA-5K; mean (standard error over "
             "graphs), median, extremes, graphs where each is ahead.", ""]
    lines += report.markdown_table(
        ["dataset", "devices", "objective", "graphs", "policy adds (SE)", "median", "min",
         "max", "REGAL / twin ahead"],
        ([r["dataset"], r["devices"], r["objective"], r["graphs"],
          f"{r['mean']:+.2f} ({r['se']:.2f})" + ("†" if r.get("unfit_scale") else ""),
          f"{r['median']:+.2f}", f"{r['low']:+.2f}",
          f"{r['high']:+.2f}", f"{r['ahead']} / {r['behind']}"] for r in rows), "lrlrrrrrr")
    unfit = [f"{r['dataset']} at {r['devices']} devices ({r['objective']}): {r['unfit_scale']} "
             f"of {r['graphs']}" for r in rows if r.get("unfit_scale")]
    if unfit:
        lines += ["", "† on some graphs a BRKGA-5K run of the seeds is over the memory limit, "
                  "so the scale of those graphs' points is its ranking penalty (about five "
                  "times a step), not a step, and their points come out smaller: "
                  + "; ".join(unfit) + "."]
    return "\n".join(lines) + "\n"


def _fmt_wl(row) -> str:
    return "–" if row["wins"] is None else f"{row['wins']}/{row['losses']}"


def markdown(rows, title, note="") -> str:
    lines = [f"## {title}", ""]
    if note:
        lines += [note, ""]
    groups = defaultdict(list)
    for row in rows:
        groups[(row["dataset"], row["devices"], row["objective"])].append(row)
    for (dataset, devices, objective), group in sorted(groups.items()):
        graphs = max(row["graphs"] for row in group)
        makespan = objective == "makespan"
        setting = (f"makespan under a per-graph memory limit ({MAKESPAN_FACTOR:g} x best-known "
                   "peak)" if makespan else "peak memory")
        lines += [f"### {dataset}, {devices} devices, {setting} ({graphs} graphs)", ""]
        header = ["method", "improvement over BRKGA-5K (%)", "Wilcoxon p", "wins/losses",
                  "gap from best-known (%)"] + (["feasible runs (%)"] if makespan else []) \
            + ["gap to lower bound (%)", "headroom captured (%)", "mean wall (s)", "failed"]
        cells = []
        for row in sorted(group, key=lambda r: -(r["improvement_pct"] or -1e9)):
            # a method stopped early (e.g. a killed CP-SAT run) covers fewer graphs: say so;
            # its figures are over the graphs it has
            label = row["label"] + (f" ({row['graphs']} of {graphs} graphs)"
                                    if row["graphs"] < graphs else "")
            mark = report.mark_unfit   # † on a figure that rests on a run over the limit
            cells.append([label,
                          mark(row, "improvement_pct",
                               _fmt(row["improvement_pct"], signed=True)),
                          mark(row, "wilcoxon_p", _p(row["p_value"])),
                          mark(row, "wins", _fmt_wl(row)),
                          mark(row, "gap_pct", _fmt(row["gap_pct"]))]
                         + ([_fmt(row["feasible_pct"], 1)] if makespan else [])
                         + [mark(row, "gap_bound_pct", _fmt(row["gap_bound_pct"])),
                            mark(row, "headroom_pct", _fmt(row["headroom_pct"], 1)),
                            _fmt(row["mean_wall_s"], 2), row["failed"]])
        lines += report.markdown_table(header, cells)
        lines.append("")
        if any(row.get("from_unfit_runs") for row in group):
            lines += [report.UNFIT_NOTE, ""]
        beaten = max(row["store_beaten"] for row in group)
        lines += [f"Some run of this setting (this table's, or one with other options, such "
                  f"as Table 3's variants) beats the best-known store on {beaten} of {graphs} "
                  "graphs; best-known is that run's value there.", ""] if beaten else []
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# the experiment


def timing(graph_paths, policy_dir, budget=5000) -> list[dict]:
    """Policy wall time vs search wall time (BRKGA + polish) of `regal` at `budget` evaluations.

    The method's forward pass is `NumpyPolicy` (no TensorFlow); the first call on a graph
    also warms numpy/BLAS, the second is what every later solve pays."""
    from regal.regal_method import load_policy, solve_regal
    from regal.sim import DeviceSpec

    t0 = time.perf_counter()
    load_policy(policy_dir)
    load_s = time.perf_counter() - t0
    rows = []
    for path in graph_paths:
        graph = load_graph(path)
        problem = optimizers.Problem(graph, DeviceSpec(2))
        for call in ("first", "second"):
            s = solve_regal(problem, budget, 0, policy_dir=policy_dir)
            rows.append(dict(graph=Path(path).stem, ops=graph.num_nodes, call=call,
                             policy_s=s.extra["policy_time"], search_s=s.extra["search_time"],
                             ratio=s.extra["policy_time"] / s.extra["search_time"],
                             load_s=load_s))
    return rows


def _trained(folder: Path, steps: int) -> bool:
    """Whether `folder` holds an ablation policy trained for `steps` steps."""
    made = folder / "training.json"
    return made.exists() and json.loads(made.read_text()).get("steps") == steps \
        and (folder / "weights.npz").exists()


def train_ablation_policies(out: Path, shipped: Path, steps: int, source: Path | None = None
                            ) -> dict:
    """Full run only: one policy per ablation variant, trained like the shipped one.

    Each variant gets the shipped run's `train_config.json` (same graphs, seed, budget, menus)
    with only its heads switched and a fixed step count, so the variants differ in what they
    learn and nothing else. Training runs in `runs/ablation/` (git-ignored, resumable); the
    exported policies are copied to `OUT/ablation_policies/` so the table's records point at
    committed weights. The uniform-BRKGA baseline cache is handed from one variant to the
    next: same graphs, devices and seeds, so the same values. Weights already in
    `OUT/ablation_policies/NAME/` that were trained for `steps` steps (their `training.json`)
    are reused as they are, so a rerun (or a fresh clone) does not retrain; delete the folder
    to retrain. `source` (another results folder) is looked in first: its trained weights
    serve as they are and nothing is copied."""
    from regal.train import BASELINES_FILE, TrainConfig, train

    stored = json.loads((shipped / "train_config.json").read_text())
    dirs, previous = {}, None
    for label, learn, elite in ABLATIONS:
        name = f"{learn}_{'elite' if elite else 'noelite'}"
        run = REPO / "runs" / "ablation" / name
        target = out / "ablation_policies" / name
        if source is not None and _trained(source / "ablation_policies" / name, steps):
            target = source / "ablation_policies" / name
        made = target / "training.json"
        if _trained(target, steps):
            dirs[label] = str(target)
            previous = run  # its baseline cache, if this machine trained it, still serves
            continue
        resume = (run / "checkpoint.npz").exists()
        if not resume and previous is not None and (previous / BASELINES_FILE).exists():
            run.mkdir(parents=True, exist_ok=True)
            shutil.copy(previous / BASELINES_FILE, run / BASELINES_FILE)
        config = TrainConfig(**dict(stored, out=str(run), learn=learn, learn_elite_bias=elite,
                                    steps=steps, max_minutes=None))
        print(f"ablation variant '{label}': training {steps} steps in {run}", flush=True)
        train(config, resume=resume)
        target.mkdir(parents=True, exist_ok=True)
        for file in (run / "policy").iterdir():
            shutil.copy(file, target / file.name)
        made.write_text(json.dumps({"steps": steps, "label": label, "run": str(run.relative_to(
            REPO)), "train_config": json.loads((run / "train_config.json").read_text())},
            indent=1) + "\n")
        dirs[label] = str(target)
        previous = run
    return dirs


def main(argv=None) -> int:
    """The command: a user's error is one line on stderr and exit code 2."""
    return report_user_errors(Path(__file__).name, lambda: _main(argv))


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small subsets, < 15 min")
    parser.add_argument("--out", default=None, help="results folder")
    parser.add_argument("--policy", default="data/policy",
                        help="policy folder (relative: to the repository root, else the cwd)")
    parser.add_argument("--workers", type=positive_int, default=2)
    parser.add_argument("--test-graphs", type=positive_int,
                        help="override the synthetic test count")
    parser.add_argument("--real-graphs", type=non_negative_int, help="override the real-graph "
                        "count (smallest first; 0 = none)")
    parser.add_argument("--large-graphs", type=positive_int,
                        help="override the 10x-larger count")
    parser.add_argument("--seeds", type=positive_int, help="override the seeds per graph")
    parser.add_argument("--methods", help="comma-separated baselines for Table 1 (default: "
                        "every registered method; BRKGA-5K is always run)")
    parser.add_argument("--ablation", choices=("auto", "inference", "skip"), default="auto",
                        help="Table 3: auto = inference-time with --quick, trained variants "
                        "otherwise; inference = switch heads off on one set of weights")
    parser.add_argument("--ablation-steps", type=positive_int, default=SHIPPED_STEPS,
                        help="training steps per trained ablation variant (default: the "
                        f"shipped policy's {SHIPPED_STEPS})")
    parser.add_argument("--ablation-from", metavar="DIR", default=None,
                        help="a results folder whose ablation_policies/ were trained for "
                        "--ablation-steps: its weights are used instead of training")
    parser.add_argument("--rerun", metavar="METHODS", default=None,
                        help="comma-separated methods (or 'all') whose stored records in the "
                        "results folder are removed first, so they run again: records are "
                        "keyed by method, options and revision (regal.optimizers.REVISIONS), "
                        "so do this after a change of code that kept its revision")
    parser.add_argument("--makespan", choices=("run", "skip"), default="run",
                        help="the running-time table (makespan.md; default run)")
    parser.add_argument("--makespan-store", type=non_negative_float, metavar="SECONDS",
                        default=0.0,
                        help="first spend this many portfolio CPU seconds per test graph and "
                        "device count on its makespan best-known entry (data/bestknown/"
                        "synth_test_makespan.jsonl; resumable, monotone; default 0: none)")
    parser.add_argument("--makespan-store-extra", type=non_negative_float, metavar="SECONDS",
                        default=0.0,
                        help="then spend this many more on each makespan entry that some "
                        "record of --out beats (the store is weakest there; default 0: none)")
    args = parser.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    for key in ("test_graphs", "real_graphs", "large_graphs", "seeds"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    out = Path(args.out or REPO / "experiments" / "results" /
               ("transfer_quick" if args.quick else "transfer_full"))
    # every input and the output checked before anything is made or removed (--rerun)
    methods = [m for m in optimizers.available_methods() if m != "regal"]
    if args.methods:
        wanted = {m.strip() for m in args.methods.split(",") if m.strip()} | {"brkga"}
        unknown = wanted - set(methods)
        if unknown:
            parser.error(f"--methods: unknown method(s) {sorted(unknown)}; "
                         f"available: {', '.join(methods)}")
        methods = [m for m in methods if m in wanted]
    rerun = set()
    if args.rerun:
        rerun = {m.strip() for m in args.rerun.split(",") if m.strip()}
        available = set(optimizers.available_methods())
        unknown = rerun - available - {"all"}
        if unknown:
            parser.error(f"--rerun: unknown method(s) {sorted(unknown)}; "
                         f"available: {', '.join(sorted(available))}, all")
    check_output("--out", out, folder=True)
    checked_policy_dir(str(resolve_policy_dir(args.policy)))
    ablation = args.ablation if args.ablation != "auto" else \
        ("inference" if args.quick else "train")
    if ablation == "train" and not (resolve_policy_dir(args.policy)
                                    / "train_config.json").is_file():
        raise UserError(f"--policy {args.policy}: no train_config.json, which the trained "
                        "ablation (the full run's Table 3) trains each variant with; pass "
                        "--ablation inference or skip")
    if args.ablation_from is not None and not resolve_policy_dir(args.ablation_from).is_dir():
        raise UserError(f"--ablation-from {args.ablation_from}: no such folder")
    if cfg["real_graphs"] != 0:
        held_out_real_graphs()
    graphs_dir = REPO / "runs" / "transfer_graphs"  # regenerable, git-ignored
    start = time.perf_counter()
    # records name the policy by its path relative to the repo (a clone elsewhere resumes
    # them) and by its content hash (a replaced policy never reuses the old one's records)
    policy_dir = portable_policy_dir(args.policy)
    policy_hash = policy_content_hash(policy_dir)
    if rerun:
        available = set(optimizers.available_methods())
        dropped = harness.forget_records(out, available if "all" in rerun else rerun)
        print(f"--rerun: removed {dropped} stored record(s) of {', '.join(sorted(rerun))} "
              f"from {out / harness.RECORDS_FILE}", flush=True)

    # one folder per size: a folder holds exactly the graphs of this run (the harness reads
    # every graph file in it)
    test = synth_split(synth.recipe_named("test", cfg["test_graphs"]),
                       graphs_dir / f"synth_test_{cfg['test_graphs']}")
    real = real_subset(cfg["real_graphs"],
                       graphs_dir / f"real_heldout_{cfg['real_graphs'] or 'all'}")
    datasets = {"synth_test": test, "real": real} if cfg["real_graphs"] != 0 else \
        {"synth_test": test}
    # named by size too: --quick and the full run draw their large graphs from other ranges
    large_recipes = large_split_recipes(cfg["large_graphs"], cfg["large_ops"])
    large_sets = {name: synth_split(recipe, graphs_dir / "{}_{}_{}-{}".format(
        name, cfg["large_graphs"], *cfg["large_ops"]))
        for name, recipe in large_recipes.items()}
    # the full run's large graphs are >= 10x the largest training graph; --quick's are smaller
    # (a 40,000-op graph takes about a minute per 5,000 evaluations) and its table says so
    # checked on the graphs: training steps land within a few percent of the size asked for
    assert args.quick or all(load_graph(path).num_nodes >= 10 * TRAIN_MAX_OPS
                             for folder in large_sets.values() for path in folder.glob("*.npz"))
    large_recipe = large_recipes["large"]  # its op range titles the table

    common = dict(seeds=cfg["seeds"], budgets=5000, workers=args.workers, progress=True)
    # the polish settings are written out so that records of earlier schedules (BRKGA only,
    # one climb, two climbs unraced) differ
    polish = {"polish_share": DEFAULT_SCHEDULE.climb_share,
              "fresh_climbs": DEFAULT_SCHEDULE.fresh_climbs, "race": list(DEFAULT_SCHEDULE.race)}
    regal_opts = {"policy_dir": policy_dir, "policy_hash": policy_hash, **polish}
    method_options = {"regal": regal_opts, "seeded-brkga": polish,
                      "regal-paper": {"policy_dir": policy_dir, "policy_hash": policy_hash},
                      "cpsat": {"time_limit": cfg["cpsat_time"]},
                      "cpsat-lns": {"time_limit": cfg["cpsat_time"]}}
    # options of the methods this run runs only (--methods picks a subset)
    method_options = {name: options for name, options in method_options.items()
                      if name in methods or name == "regal"}

    # Table 1: every method, synthetic test split and real graphs
    harness.run_experiment(methods + ["regal"], datasets, out,
                           devices=list(cfg["devices"]),
                           method_options=method_options, **common)
    # Table 3: ablations on the synthetic test split
    if ablation == "skip":
        variants, ablation_note = {}, "Skipped (--ablation skip)."
    elif ablation == "inference":
        # "both + elite bias" is the shipped policy as is: its Table 1 records are reused
        variants = {label: regal_opts if (learn, elite) == ("both", True)
                    else dict(regal_opts, learn=learn, learn_elite_bias=elite)
                    for label, learn, elite in ABLATIONS}
        ablation_note = ("Inference-time ablation: one set of weights (the shipped policy, "
                         "trained with every head); a switched-off head is reset to plain "
                         "BRKGA's choice (uniform Beta / elite bias 0.7) at inference. The full "
                         "run trains each variant.")
    else:
        # a relative folder is looked up under the repository root first, as --policy is
        source = None if args.ablation_from is None else resolve_policy_dir(args.ablation_from)
        dirs = train_ablation_policies(out, resolve_policy_dir(policy_dir), args.ablation_steps,
                                       source)
        variants = {label: {"policy_dir": portable_policy_dir(d),
                            "policy_hash": policy_content_hash(d), **polish}
                    for label, d in dirs.items()}
        ablation_note = (f"Trained ablation: each variant trained from scratch for "
                         f"{args.ablation_steps} steps with the shipped policy's training "
                         "settings (same graphs, seed, budget, menus), only its heads switched; "
                         "a head that is not learned plays plain BRKGA's choice (uniform Beta / "
                         "elite bias 0.7). Weights in ablation_policies/.")
    for options in variants.values():
        harness.run_experiment(["regal"], {"synth_test": test}, out, devices=list(cfg["devices"]),
                               method_options={"regal": options}, **common)
    # generalisation to >= 10x larger graphs
    large_methods, large_options = large_graph_methods(methods, method_options)
    harness.run_experiment(large_methods, large_sets, out, devices=list(cfg["large_devices"]),
                           method_options=large_options, **common)

    # the running-time objective: makespan under a per-graph memory limit
    limit_of = makespan_limits()
    if args.makespan == "run":
        from regal.bestknown import build_store
        # the store topped up to --makespan-store seconds, then --makespan-store-extra more
        # where a record of this run beats it
        passes = [(args.makespan_store, {})]
        if args.makespan_store_extra > 0 and (out / "records.jsonl").is_file():
            passes.append((args.makespan_store_extra,
                           dict(extra=True, beaten_by=harness.load_records(out))))
        for seconds, where in passes:
            if seconds > 0:
                build_store([test], MAKESPAN_STORE, devices=cfg["devices"],
                            objective="makespan", memory_limit=limit_of,
                            time_per_graph=seconds, workers=args.workers, **where)
        harness.run_experiment([m for m in methods if m not in PEAK_ONLY] + ["regal"],
                               {"synth_test": test}, out,
                               devices=list(cfg["devices"]), objectives="makespan",
                               memory_limits=limit_of,
                               method_options={name: options for name, options
                                               in method_options.items()
                                               if name not in PEAK_ONLY}, **common)

    records = current_records(harness.load_records(out),
                              harness.find_graphs({**datasets, **large_sets}), limit_of)
    summary = summary_rows(records)
    options_label = {json.dumps(o, sort_keys=True): label for label, o in variants.items()}
    table1_label = table1_labeler(method_options)
    t1 = [r for r in metric_rows(summary, {"synth_test", "real"}, cfg["devices"], table1_label)
          if r["label"]]
    t3 = [r for r in metric_rows(summary, {"synth_test"}, cfg["devices"],
                                 lambda r: options_label.get(r["options"]) if r["method"] == "regal"
                                 else ("BRKGA-5K (reference)" if r["method"] == "brkga" else None))
          if r["label"]]
    gen = [r for r in metric_rows(summary, set(large_sets), cfg["large_devices"], table1_label)
           if r["label"]]
    running = [r for r in metric_rows(summary, {"synth_test"}, cfg["devices"], table1_label,
                                      objective="makespan") if r["label"]]
    refuse_empty(t1, f"{out / harness.RECORDS_FILE}: no record of this run's settings")

    # baselines named by what the records hold (a resumed run may pass fewer --methods)
    baselines_run = sorted({r["method"] for r in records
                            if r["dataset"] in datasets and r["method"] != "regal"})
    biggest = sorted(real.glob("*.npz")) if "real" in datasets else sorted(test.glob("*.npz"))
    by_size = sorted(test.glob("*.npz"), key=lambda p: load_graph(p).num_nodes)
    timing_rows = timing([by_size[0], by_size[-1],
                          max(biggest, key=lambda p: load_graph(p).num_nodes)], policy_dir)
    policy_meta = json.loads((resolve_policy_dir(policy_dir) / "config.json").read_text())
    header = (f"Policy: {policy_dir} (content hash {policy_hash}, hidden "
              f"{policy_meta['hidden']}, {policy_meta['num_layers']} "
              f"layers); every method at 5,000 performance-model evaluations, "
              f"{cfg['seeds']} seed(s) per graph"
              + (f"; cpsat (and cpsat-lns) time limit {cfg['cpsat_time']} s"
                 if "cpsat" in baselines_run or "cpsat-lns" in baselines_run else "")
              + f". Run {'--quick' if args.quick else 'full'}: {cfg['test_graphs']} synthetic "
              f"test graphs, {cfg['real_graphs'] if cfg['real_graphs'] is not None else 'all'} "
              f"real graphs of the held-out families ({', '.join(HELD_OUT_FAMILIES)}), "
              f"{cfg['large_graphs']} large graphs per generalisation split; baselines: "
              f"{', '.join(baselines_run)}. Improvement = mean over graphs of "
              f"(BRKGA-5K - method) / BRKGA-5K; p = two-sided Wilcoxon signed-rank test on the "
              f"per-graph objectives vs BRKGA-5K; best-known = the shipped store of long "
              f"portfolio runs (data/bestknown/), or a record where one is lower; lower bound = "
              f"regal.bounds; headroom = improvement / best-known improvement.")
    (out / "table1.md").write_text(markdown(t1, "Table 1: transfer to unseen graphs", header)
                                   + "\n")
    (out / "policy_adds.md").write_text(policy_adds_markdown(policy_adds(records, method_options)))
    (out / "table3.md").write_text(markdown(t3, "Table 3: ablation (synthetic test split)",
                                            ablation_note) + "\n")
    (out / "generalisation.md").write_text(markdown(
        gen, f"Generalisation to larger graphs ({large_recipe.min_ops:,}-"
        f"{large_recipe.max_ops:,} ops; {large_recipe.min_ops / TRAIN_MAX_OPS:.1f}x or more the "
        f"training set's largest, <= {TRAIN_MAX_OPS:,} ops)",
        header + " " + LARGE_NOTE) + "\n")
    (out / "makespan.md").write_text(markdown(
        running, "Running time under memory limits (synthetic test split)",
        f"Objective: makespan with every device under a memory limit of {MAKESPAN_FACTOR:g} x "
        "the graph's best-known peak memory (per graph and device count; a run over it ranks "
        "behind every run within it). The policy was trained on peak memory only. Best-known: "
        "data/bestknown/synth_test_makespan.jsonl where it has the graph, else the best "
        "record." + ("" if running else " Skipped (--makespan skip).")) + "\n")
    lines = ["## Policy time vs search time (BRKGA + polish) at 5K evaluations (2 devices)", "",
             (f"Policy load (numpy weights, no TensorFlow) {timing_rows[0]['load_s']:.3f} s "
              "once per process." if timing_rows[0]["load_s"] > 0.001 else "Policy already "
              "loaded in this process (the harness ran in it).")
             + " The forward pass is regal.policy.NumpyPolicy (same weights and logits as the "
             "TensorFlow Policy used for training).", ""]
    lines += report.markdown_table(
        ["graph", "ops", "call", "policy (ms)", "search (s)", "policy / search"],
        ([r["graph"], r["ops"], r["call"], f"{1000 * r['policy_s']:.2f}", f"{r['search_s']:.3f}",
          f"{100 * r['ratio']:.1f}%"] for r in timing_rows), "lrlrrr")
    (out / "timing.md").write_text("\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps(
        {"table1": t1, "table3": t3, "generalisation": gen, "makespan": running,
         "timing": timing_rows,
         "wall_s": time.perf_counter() - start, "quick": args.quick}, indent=1, default=str) + "\n")
    for name in ("table1.md", "policy_adds.md", "table3.md", "generalisation.md", "makespan.md",
                 "timing.md"):
        print((out / name).read_text())
    print(f"wall time {time.perf_counter() - start:.0f} s; results in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
