"""GPU check (tracker issue 40): optimized placements run on logical GPUs, each device's
peak memory from TensorFlow's allocator and the step time, beside the simulator's.

The one physical GPU is split into 2, then 4 logical GPUs with a memory limit each
(`regal.measure.configure_devices`); that split must happen before TensorFlow initialises
the GPU, so each device count runs in a process of its own (this script with `--child`).
For each model (the small Keras models of `experiments/sim_vs_measured.py`, training steps
by default) the graph is imported, placed by `regal.optimizers.solve(--method, budget,
seed)` and run by `regal.measure.measure`: warm-up runs, timed runs (the measured step time
is their median wall time), then one run after `reset_memory_stats` whose allocator peak
(`tf.config.experimental.get_memory_info("GPU:k")["peak"]`) is the measured peak.

With `--kind cpu` (and automatically when no GPU is found) the same code runs on logical
CPU devices, where the peak is the step-statistics replay (regal/measure/) and the step time
shares the machine's cores. Writes OUT/gpu_check_{gpu|cpu}.md and .csv (OUT: --out, default
experiments/results). Each child writes its rows, model by model, to
OUT/gpu_check_devices_{N}.partial.json, removed once the table is written: a parent killed
before that leaves the rows measured so far there.

    .venv/bin/python experiments/gpu_check.py [--kind auto|gpu|cpu] [--devices 2 4]
        [--models mlp small_cnn ...] [--budget 1000] [--method local-search] [--out DIR]
"""

from __future__ import annotations

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # the children import TensorFlow; the parent never does

import argparse  # noqa: E402
import csv  # noqa: E402
import datetime  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
DEFAULT_MODELS = ["mlp", "small_cnn", "transformer", "resnet_blocks"]
THRESHOLD_PCT = 5.0  # the bound on |measured - simulated| / simulated on a GPU

COLUMNS = ["model", "mode", "batch", "ops", "devices", "device", "ops_on_device",
           "simulated_peak", "measured_peak", "diff_pct", "sim_run_times_peak",
           "diff_run_times_pct", "sim_instant_copies_peak", "diff_instant_copies_pct",
           "sim_no_scratch_peak", "diff_no_scratch_pct",
           "simulated_step_us", "measured_step_us", "step_diff_pct", "traced_step_us",
           "sim_step_run_times_us", "misplaced_ops", "moved_ops", "max_output_diff",
           "method", "budget", "solve_s", "measure_s"]


def _pct(a: float, b: float) -> float:
    return (a - b) / b * 100.0 if b else math.nan


# ---------------------------------------------------------------------------
# the child: one device count, one process


def run_child(args) -> None:
    """Measures every model on `args.child` logical devices; rows go to `args.child_out`
    (rewritten after each model, so a child stopped by the time limit leaves what it did)."""
    sys.path.insert(0, str(REPO))
    from regal import measure as rm  # imports TensorFlow quietly, Keras 2

    count = args.child
    kind = rm.configure_devices(count, args.kind, args.gpu_memory_mb)  # before anything else

    import numpy as np
    import tensorflow as tf

    from regal import optimizers
    from regal.io.tensorflow import import_step
    from regal.sim import simulate
    from sim_vs_measured import MODELS  # the model builders (this script's folder is on path)

    device_name = ""
    if kind == "GPU":
        details = tf.config.experimental.get_device_details(
            tf.config.list_physical_devices("GPU")[0])
        device_name = details.get("device_name", "GPU")
    out = {"kind": kind, "devices": count, "tensorflow": tf.__version__,
           "device_name": device_name, "rows": [], "errors": []}

    def save():  # whole or not at all: a kill during the write keeps the previous rows
        from regal.files import write_text

        write_text(args.child_out, json.dumps(out))

    save()
    for name in args.models:
        for mode in args.modes:
            start = time.perf_counter()
            try:
                if name not in MODELS:
                    raise ValueError(f"unknown model {name!r}; one of {', '.join(MODELS)}")
                build, batch = MODELS[name]
                step = import_step(build, batch_size=batch, training=mode == "train")
                problem = optimizers.Problem(step.graph, count)
                solution = optimizers.solve(args.method, problem, args.budget, args.seed)
                record = optimizers.solution_record(problem, solution, args.budget)
                solved = time.perf_counter()
                m = rm.measure(step, record, count, kind=kind, runs=args.runs,
                               timed_runs=args.timed_runs, seed=args.seed,
                               gpu_memory_mb=args.gpu_memory_mb)
                placed = rm.place(step, record, count)
                no_scratch = step.graph._replace(
                    temporary_memory=np.zeros_like(step.graph.temporary_memory))
                tensors_only = simulate(no_scratch, placed.devices, placed.placement,
                                        placed.priority, placed.transfer_priority).peak
            except Exception as exc:  # one model failing leaves the others' rows
                out["errors"].append(f"{name} {mode}, {count} devices: "
                                     f"{type(exc).__name__}: {exc}"[:500])
                print(f"gpu_check: {out['errors'][-1]}", file=sys.stderr, flush=True)
                save()
                continue
            done = time.perf_counter()
            instant = m.extra["simulated_run_times_instant_copies"]
            for k in range(count):
                out["rows"].append({
                    "model": name, "mode": mode, "batch": batch, "ops": step.graph.num_nodes,
                    "devices": count, "device": m.devices[k],
                    "ops_on_device": int(np.sum(placed.placement == k)),
                    "simulated_peak": int(m.simulated[k]), "measured_peak": int(m.measured[k]),
                    "diff_pct": _pct(float(m.measured[k]), float(m.simulated[k])),
                    "sim_run_times_peak": int(m.simulated_measured_times[k]),
                    "diff_run_times_pct": _pct(float(m.measured[k]),
                                               float(m.simulated_measured_times[k])),
                    "sim_instant_copies_peak": int(instant[k]),
                    "diff_instant_copies_pct": _pct(float(m.measured[k]), float(instant[k])),
                    "sim_no_scratch_peak": int(tensors_only[k]),
                    "diff_no_scratch_pct": _pct(float(m.measured[k]), float(tensors_only[k])),
                    "simulated_step_us": float(m.simulated_step_us),
                    "measured_step_us": float(m.measured_step_us),
                    "step_diff_pct": float(m.step_difference_pct),
                    "traced_step_us": float(m.extra.get("traced_step_us") or math.nan),
                    "sim_step_run_times_us": float(m.extra["simulated_step_run_times_us"]),
                    "misplaced_ops": len(m.misplaced), "moved_ops": len(m.moved),
                    "max_output_diff": m.max_output_diff, "method": args.method,
                    "budget": args.budget, "solve_s": round(solved - start, 2),
                    "measure_s": round(done - solved, 2)})
            print(f"gpu_check: {name} {mode} on {count} {kind} devices: peaks "
                  f"{[round(x, 1) for x in m.difference_pct.tolist()]}% off, step "
                  f"{m.measured_step_us:.0f} us measured / {m.simulated_step_us:.0f} us "
                  f"simulated ({done - start:.1f} s)", file=sys.stderr, flush=True)
            save()
            tf.keras.backend.clear_session()


# ---------------------------------------------------------------------------
# the parent: one child per device count, then the table


def partial_path(out: Path, count: int) -> Path:
    """Where the child for `count` devices keeps its rows while it runs."""
    return Path(out) / f"gpu_check_devices_{count}.partial.json"


def run_all(args) -> tuple[list, dict]:
    """Runs one child per device count (within --time-limit in all); rows and run facts."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.kind == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU path must not initialise a GPU
    rows, errors, facts = [], [], {"kind": None, "tensorflow": "?", "device_name": "",
                                   "child_seconds": {}, "partial": []}
    start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for count in args.devices:
        left = args.time_limit - (time.perf_counter() - start)
        if left < 20:
            errors.append(f"{count} devices: not run, --time-limit {args.time_limit} s spent")
            continue
        # in the output folder, not a temporary one: a parent killed keeps what was measured
        child_out = partial_path(out, count)
        child_out.unlink(missing_ok=True)  # an earlier run's rows are not this run's
        facts["partial"].append(child_out)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(count),
               "--child-out", str(child_out), "--kind", args.kind,
               "--models", *args.models, "--modes", *args.modes,
               "--budget", str(args.budget), "--method", args.method,
               "--seed", str(args.seed), "--runs", str(args.runs),
               "--timed-runs", str(args.timed_runs)]
        if args.gpu_memory_mb is not None:
            cmd += ["--gpu-memory-mb", str(args.gpu_memory_mb)]
        began = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, cwd=REPO, timeout=left)
            if proc.returncode != 0:
                errors.append(f"{count} devices: the child exited with {proc.returncode}")
        except subprocess.TimeoutExpired:
            errors.append(f"{count} devices: stopped at --time-limit {args.time_limit} s "
                          f"(rows measured before are kept)")
        facts["child_seconds"][count] = round(time.perf_counter() - began, 1)
        if child_out.exists() and child_out.stat().st_size:
            got = json.loads(child_out.read_text())
            rows += got["rows"]
            errors += got["errors"]
            facts["kind"] = facts["kind"] or got["kind"]
            facts["tensorflow"] = got["tensorflow"]
            facts["device_name"] = facts["device_name"] or got["device_name"]
    facts["errors"] = errors
    facts["kind"] = facts["kind"] or ("CPU" if args.kind == "cpu" else args.kind.upper())
    return rows, facts


def peak_summary(rows: list, column: str = "diff_pct") -> dict:
    """Mean / max |diff| over the devices with a simulated peak; how many over 5%."""
    diffs = [abs(r[column]) for r in rows if math.isfinite(r[column])]
    if not diffs:
        return {"count": 0, "mean": math.nan, "max": math.nan, "over": 0}
    return {"count": len(diffs), "mean": sum(diffs) / len(diffs), "max": max(diffs),
            "over": sum(d > THRESHOLD_PCT for d in diffs)}


def summary_line(rows: list, kind: str) -> str:
    s = peak_summary(rows)
    if not s["count"]:
        return "summary: no device with a simulated peak was measured"
    line = (f"summary ({kind}): |measured - simulated| peak over {s['count']} devices: mean "
            f"{s['mean']:.1f}%, max {s['max']:.1f}%, "
            + (f"{s['over']} over {THRESHOLD_PCT:.0f}%" if s["over"]
               else f"none over {THRESHOLD_PCT:.0f}%"))
    timed = peak_summary(rows, "diff_run_times_pct")
    instant = peak_summary(rows, "diff_instant_copies_pct")
    if timed["count"]:
        line += f"; vs the simulator with the run's op times: max {timed['max']:.1f}%"
    if instant["count"]:
        line += f", and instant copies: max {instant['max']:.1f}%"
    steps = {(r["model"], r["mode"], r["devices"]): r["measured_step_us"] / r["simulated_step_us"]
             for r in rows if r["simulated_step_us"] > 0 and math.isfinite(r["measured_step_us"])}
    if steps:
        ratios = sorted(steps.values())
        line += (f"; measured / simulated step time: median {ratios[len(ratios) // 2]:.2f}x "
                 f"(range {ratios[0]:.2f}x..{ratios[-1]:.2f}x over {len(ratios)} placements)")
    if s["over"] and kind == "GPU":
        line += (". Note: over 5% on a GPU: model what is missing (the BFC allocator's "
                 "rounding to 256-byte multiples and its bins, cuDNN workspaces in place of "
                 "the CPU conv-gradient scratch, copies' timing: see the other diff columns)")
    return line


def _mib(x) -> str:
    return f"{x / 2**20:.3f}"


def _us(x) -> str:
    if not math.isfinite(x):
        return "n/a"
    return f"{x / 1000:.2f} ms" if abs(x) >= 1000 else f"{x:.0f} us"


def _diff(x) -> str:
    return f"{x:+.1f}%" if math.isfinite(x) else "n/a"


NOTES = {
    "CPU": """
Columns: `diff vs sim (run times)` is against the simulator with each op's cost replaced by
its time in the traced run; `diff vs sim (run times, instant copies)` also makes every copy
between devices take no time, as on logical CPUs, where a "copy" is a pointer handed over
in one memory; `diff vs sim w/o CPU scratch` leaves the conv-gradient kernels' scratch out
of the model. `traced` is first op start to last op end in the traced run; `sim (run times)`
the simulated step with the run's op times.

What a CPU run can confirm: the peak is rebuilt from the run's step statistics with the
simulator's own freeing rule, so agreement checks the tensor sizes, aliases and scratch
the model charges, not an allocator. Which buffers are live at once depends on timing: the
model's op costs are GPU-scale microseconds and its links carry 100 GB/s, while here ops
take CPU time and copies none, so where the default column differs and the instant-copies
column does not, the difference is timing, not bytes. The step time shares the machine's
cores and one thread pool, so it shows no parallel speed-up (and includes the session's
overhead per run), and the model's costs are not CPU costs: the step-time ratio is not a
check of the model. Only a run on GPUs checks the allocator and the overlap of the devices.
""",
    "GPU": """
Each logical GPU has its own BFC allocator; its peak includes everything TensorFlow holds
there (variables, received copies, the allocator's rounding). The simulated peaks charge
the conv-gradient kernels the scratch of TensorFlow's CPU kernels (`diff vs sim w/o CPU
scratch` leaves it out; cuDNN's workspace is not modelled). `diff vs sim (run times)`:
the simulator with each op's time from the traced run (the links as modelled); `instant
copies` also makes copies take no time. The measured step is the median wall time of a
`session.run` (launch and session overhead included); `traced` is first op start to last
op end in the traced run; `sim (run times)` the simulated step with the run's op times.
""",
}


def write(rows: list, facts: dict, args, wall_s: float) -> list[Path]:
    from regal.files import write_text

    kind = facts["kind"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"gpu_check_{kind.lower()}"
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    write_text(f"{stem}.csv", table.getvalue())
    cpu = cpu_model()
    on = f"{facts['device_name']}, " if facts["device_name"] else ""
    lines = [f"# Simulated vs measured peak memory and step time on logical {kind} devices",
             "",
             f"Ran on: {on}host {platform.node()} ({cpu}, {os.cpu_count()} cores), "
             f"TensorFlow {facts['tensorflow']}, {datetime.date.today().isoformat()}; "
             f"{' and '.join(map(str, args.devices))} logical {kind} devices"
             + (f" of {args.gpu_memory_mb or 4096} MiB each" if kind == "GPU" else "")
             + f"; placements by `{args.method}`, budget {args.budget}, seed {args.seed}; "
             f"{args.runs} warm-up and {args.timed_runs} timed runs. Wall time "
             f"{wall_s:.0f} s (per device count: "
             + ", ".join(f"{c}: {s} s" for c, s in facts["child_seconds"].items())
             + "). Made by `experiments/gpu_check.py`.", "",
             summary_line(rows, kind) + ".", "",
             "Peaks in MiB; diff = (measured - simulated) / simulated. Step times are per "
             "placement (the same on each of its devices' rows).", "",
             "| model | mode | devices | device | ops there | simulated peak | measured peak | "
             "diff | diff vs sim (run times) | diff vs sim (run times, instant copies) | "
             "diff vs sim w/o CPU scratch | simulated step | measured step | diff | traced | "
             "sim (run times) | ops elsewhere |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['mode']} | {r['devices']} | {r['device']} | "
                     f"{r['ops_on_device']} | {_mib(r['simulated_peak'])} | "
                     f"{_mib(r['measured_peak'])} | {_diff(r['diff_pct'])} | "
                     f"{_diff(r['diff_run_times_pct'])} | "
                     f"{_diff(r['diff_instant_copies_pct'])} | "
                     f"{_diff(r['diff_no_scratch_pct'])} | {_us(r['simulated_step_us'])} | "
                     f"{_us(r['measured_step_us'])} | {_diff(r['step_diff_pct'])} | "
                     f"{_us(r['traced_step_us'])} | {_us(r['sim_step_run_times_us'])} | "
                     f"{r['misplaced_ops']} |")
    if facts["errors"]:
        lines += ["", "Not measured:", ""] + [f"* {e}" for e in facts["errors"]]
    lines += [NOTES.get(kind, "")]
    write_text(f"{stem}.md", "\n".join(lines))
    return [Path(f"{stem}.md"), Path(f"{stem}.csv")]


def parse_args(argv=None):
    for folder in (str(HERE), str(REPO)):  # sim_vs_measured, regal
        if folder not in sys.path:
            sys.path.insert(0, folder)
    from regal.arguments import (check_device_counts, check_output, device_count,
                                 non_negative_int, positive_float, positive_int)
    from regal.user_errors import UserError

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=("auto", "gpu", "cpu"), default="auto",
                        help="auto: logical GPUs when a GPU exists, else logical CPUs")
    parser.add_argument("--devices", type=device_count, nargs="+", default=[2, 4])
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS,
                        help="builders of experiments/sim_vs_measured.py (MODELS): mlp, "
                             "small_cnn, mobilenetv2_64, transformer, resnet_blocks")
    parser.add_argument("--modes", nargs="+", choices=("train", "infer"), default=["train"])
    parser.add_argument("--budget", type=positive_int, default=1000)
    parser.add_argument("--method", default="local-search",
                        help="regal.optimizers method (local-search, regal, brkga, ...)")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--runs", type=positive_int, default=3, help="warm-up runs")
    parser.add_argument("--timed-runs", type=positive_int, default=10,
                        help="timed runs; the measured step is their median wall time")
    parser.add_argument("--gpu-memory-mb", type=positive_int, default=None,
                        help="memory limit of each logical GPU (default 4096)")
    parser.add_argument("--time-limit", type=positive_float, default=450.0,
                        help="seconds for all device counts together (default 450)")
    parser.add_argument("--out", default=str(RESULTS), help="folder of the .md and .csv")
    parser.add_argument("--child", type=positive_int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    check_device_counts(args)
    if args.child is None:  # the parent checks the names before any child loads TensorFlow
        from regal.optimizers import METHODS
        from sim_vs_measured import MODELS  # light: it imports TensorFlow on first use

        if args.method not in METHODS:
            raise UserError(f"--method: unknown method {args.method!r}; one of "
                            f"{', '.join(METHODS)}")
        unknown = [name for name in args.models if name not in MODELS]
        if unknown:
            raise UserError(f"--models: unknown model {unknown[0]!r}; one of "
                            f"{', '.join(MODELS)}")
        check_output("--out", args.out, folder=True)
    return args


def cpu_model() -> str:
    """The processor's model name (Linux), or "?"; the tables say what they ran on."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        run_child(args)
        return 0
    start = time.perf_counter()
    rows, facts = run_all(args)
    wall = time.perf_counter() - start
    for e in facts["errors"]:
        print(f"gpu_check: {e}", file=sys.stderr)
    if not rows:
        for path in facts["partial"]:  # no rows in them
            Path(path).unlink(missing_ok=True)
        print("gpu_check: nothing was measured", file=sys.stderr)
        return 1
    paths = write(rows, facts, args, wall)
    print(paths[0].read_text())
    for path in paths:
        print(f"wrote {path}")
    for path in facts["partial"]:  # the table has their rows now
        Path(path).unlink(missing_ok=True)
    print(summary_line(rows, facts["kind"]))
    print(f"wall time {wall:.1f} s")
    return 0 if not facts["errors"] else 3


if __name__ == "__main__":
    from regal.user_errors import report_user_errors

    sys.exit(report_user_errors("gpu_check.py", main))
