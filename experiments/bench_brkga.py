"""How much of a BRKGA run is the GA itself, and how does it compare with pymoo's BRKGA?

Both optimisers search the same chromosome with the same decoder and simulator
(`regal.sim.evaluate`, one call per generation) under the same evaluation budget.
Wall time is split into evaluation (time inside the simulator call) and everything
else (the GA's own work: sampling, crossover, sorting, bookkeeping). The issue's
bar: the GA's share stays <= 10% at n = 500 ops, population 100. Another row runs
our BRKGA with per-gene Beta parameters, as REGAL's policy drives it (each op
picks an (alpha, beta) pair per key group from the policy's default menu).

    .venv/bin/python experiments/bench_brkga.py            # n=500, d=4, pop 100, budget 5000
    .venv/bin/python experiments/bench_brkga.py --repeats 3 --graph data/real/x.npz

Our BRKGA runs as `regal optimize` runs it: children and uniform mutants come from
the compiled backend (`regal.breed`: numba, both cores), which breeds and promotes
exactly as brkga's numpy backend does (the "numpy backend" row: same best objective,
same run).

Measured (2-core EPYC VM, --repeats 5, synthetic n=500 graph, 2026-11-22):

| devices | ours: GA share, wall / CPU | per-gene Beta | numpy backend | pymoo | pymoo/ours wall |
| ---: | ---: | ---: | ---: | ---: | ---: |
| 2 | 7.9% / 6.4% | 27.8% | 32.1% | 86.3% | 7.8x |
| 4 (default) | 6.4-7.1% / 5.9-7.3% | 26-28% | 28-30% | 87% | 7.6-8.2x |
| 8 | 11.2% / 8.5% | 35.9% | 40.4% | 90.5% | 10.4x |

Right after each simulator batch the interpreter's and numpy's code is cold on this VM,
so every small numpy call costs several microseconds there: promotion took 40-70 us a
generation in numpy, 13-20 us compiled. Breeding (~110 us at 3,000 genes, ~215 us at
5,000) is near the memory-traffic floor (read two parents, write one child); per-gene
Beta mutants (~0.45 ms of numpy a generation, log/exp per variate) stay in numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from tqdm import tqdm

from brkga import BRKGA, NumpyBackend
from regal.breed import CompiledBackend
from regal.decode import num_genes
from regal.sim import DeviceSpec, evaluate


class TimedEvaluator:
    """evaluate_batch that accumulates the time spent inside the simulator."""

    def __init__(self, graph, devices, objective):
        self.graph, self.devices, self.objective = graph, devices, objective
        self.seconds = 0.0      # wall time inside the simulator
        self.cpu = 0.0          # CPU time of every thread inside the simulator
        self.main_cpu = 0.0     # CPU time of the calling thread inside the simulator
        self.rows = 0

    def __call__(self, keys):
        wall, cpu, main_cpu = time.perf_counter(), time.process_time(), time.thread_time()
        values = evaluate(self.graph, self.devices, keys, self.objective)
        self.seconds += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu
        self.main_cpu += time.thread_time() - main_cpu
        self.rows += len(keys)
        return values


class TimedBackend:
    """A brkga backend that accumulates every thread's CPU and the calling thread's CPU
    inside its (multi-threaded) breeding step."""

    def __init__(self, backend):
        self.backend = backend
        self.promote = backend.promote      # single-threaded: the calling thread's CPU
        self.cpu = 0.0          # CPU time of every thread inside breeding
        self.main_cpu = 0.0     # ... of the calling thread

    def breed(self, *args):
        cpu, main_cpu = time.process_time(), time.thread_time()
        self.backend.breed(*args)
        self.cpu += time.process_time() - cpu
        self.main_cpu += time.thread_time() - main_cpu


class Clock:
    """Wall and calling-thread CPU time of a whole run."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.thread_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.thread_time() - self.cpu


def timings(clock: Clock, ev: TimedEvaluator, best: float, backend=None) -> dict:
    """Wall split, and a CPU split that a loaded machine distorts less.

    GA CPU = the calling thread's CPU outside the simulator, plus every other thread's CPU
    inside the (multi-threaded) breeding; evaluation CPU = every thread's CPU inside the
    simulator.
    """
    ga_cpu = clock.cpu - ev.main_cpu
    if backend is not None:
        ga_cpu += backend.cpu - backend.main_cpu
    return dict(total=clock.wall, eval=ev.seconds, ga_cpu=ga_cpu, eval_cpu=ev.cpu,
                evaluations=ev.rows, best=best)


# regal.policy's DEFAULT_BETA_MENU (not imported: that module pulls in TensorFlow)
BETA_MENU = ((1.0, 1.0), (0.5, 0.5), (2.0, 2.0), (5.0, 1.0), (1.0, 5.0), (2.0, 5.0),
             (5.0, 2.0), (0.3, 0.3))


def policy_like_beta(num_ops: int, num_devices: int, seed: int):
    """Per-gene (alpha, beta) in the chromosome layout of docs/design.md §5: one menu pick per op
    for each key group (affinity, priority, transfer), uniformly at random."""
    menu = np.asarray(BETA_MENU)
    pick = np.random.default_rng(seed).integers(len(menu), size=(3, num_ops))
    blocks = [np.repeat(menu[pick[0]], num_devices, axis=0), menu[pick[1]], menu[pick[2]]]
    params = np.concatenate(blocks)
    return params[:, 0].copy(), params[:, 1].copy()


def run_ours(graph, devices, objective, population, budget, seed, beta_params=False,
             compiled=True):
    """Our BRKGA as `regal optimize` runs it (compiled backend), or with brkga's numpy one."""
    ev = TimedEvaluator(graph, devices, objective)
    alpha = beta = None
    if beta_params:
        alpha, beta = policy_like_beta(graph.num_nodes, devices.count, seed)
    backend = TimedBackend(CompiledBackend() if compiled else NumpyBackend())
    ga = BRKGA(num_genes(graph.num_nodes, devices.count), population_size=population,
               elite_fraction=0.2, mutant_fraction=0.2, elite_bias=0.7, alpha=alpha,
               beta=beta, seed=seed, backend=backend)
    with Clock() as clock:
        result = ga.run(ev, budget)
    return timings(clock, ev, result.best_fitness, backend)


def run_ours_beta(graph, devices, objective, population, budget, seed):
    return run_ours(graph, devices, objective, population, budget, seed, beta_params=True)


def run_ours_numpy(graph, devices, objective, population, budget, seed):
    return run_ours(graph, devices, objective, population, budget, seed, compiled=False)


def run_pymoo(graph, devices, objective, population, budget, seed):
    from pymoo.algorithms.soo.nonconvex.brkga import BRKGA as PymooBRKGA
    from pymoo.core.problem import Problem
    from pymoo.optimize import minimize

    ev = TimedEvaluator(graph, devices, objective)
    genes = num_genes(graph.num_nodes, devices.count)

    class Chromosome(Problem):
        def __init__(self):
            super().__init__(n_var=genes, n_obj=1, xl=0.0, xu=1.0)

        def _evaluate(self, x, out, *args, **kwargs):
            out["F"] = ev(x)

    elites, mutants = int(0.2 * population), int(0.2 * population)
    algorithm = PymooBRKGA(n_elites=elites, n_offsprings=population - elites - mutants,
                           n_mutants=mutants, bias=0.7)
    with Clock() as clock:
        res = minimize(Chromosome(), algorithm, ("n_eval", budget), seed=seed, verbose=False)
    return timings(clock, ev, float(res.F[0]))


def main(argv=None) -> int:
    from regal.arguments import (check_device_counts, check_output, device_count,
                                 non_negative_int, positive_int)
    from regal.user_errors import UserError

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", help="graph file (default: a synthetic random DAG)")
    parser.add_argument("--ops", type=positive_int, default=500)
    parser.add_argument("--devices", type=device_count, default=4)
    parser.add_argument("--objective", default="peak_memory",
                        choices=("peak_memory", "makespan"))
    parser.add_argument("--population", type=positive_int, default=100)
    parser.add_argument("--budget", type=positive_int, default=5000)
    parser.add_argument("--repeats", type=positive_int, default=2)
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--json", help="also write the raw timings here")
    args = parser.parse_args(argv)
    check_device_counts(args)
    check_output("--json", args.json, inputs=(args.graph,))

    if args.graph:
        from regal.io import load_graph

        if not os.path.isfile(args.graph):
            raise UserError(f"--graph {args.graph}: "
                            + ("not a file" if os.path.exists(args.graph) else "no such file"))
        graph = load_graph(args.graph)
    else:
        from regal.synth import generate
        graph = generate("random", args.ops, args.seed)
    devices = DeviceSpec(args.devices)
    try:  # the population's size is checked before any timing
        BRKGA(num_genes(graph.num_nodes, devices.count), population_size=args.population,
              elite_fraction=0.2, mutant_fraction=0.2)
    except ValueError as exc:
        raise UserError(f"--population {args.population}: {exc}") from None
    # compile (or load) the simulator and the backend once, outside every timing
    evaluate(graph, devices, np.random.default_rng(0).random((2, num_genes(graph.num_nodes,
                                                                            devices.count))))
    BRKGA(4, population_size=5, seed=0, backend=CompiledBackend()).run(
        lambda keys: keys.sum(axis=1), budget=10)
    runs = {"regal brkga": run_ours, "regal brkga, per-gene Beta": run_ours_beta,
            "regal brkga, numpy backend": run_ours_numpy, "pymoo BRKGA": run_pymoo}
    rows = {name: [] for name in runs}
    jobs = [(name, r) for r in range(args.repeats) for name in runs]
    for name, r in tqdm(jobs, desc="runs", unit="run"):
        rows[name].append(runs[name](graph, devices, args.objective, args.population,
                                     args.budget, args.seed + r))

    print(f"\n{graph.num_nodes} ops, {devices.count} devices, population {args.population}, "
          f"budget {args.budget}, objective {args.objective}, {args.repeats} runs each "
          "(median shown)\n")
    print("| optimizer | evaluations | wall time (s) | evaluation (s) | GA's own work (s) "
          "| GA share (wall) | GA CPU (s) | evaluation CPU (s) | GA share (CPU) "
          "| best objective |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    summary = {}
    for name, results in rows.items():
        total = float(np.median([x["total"] for x in results]))
        ev = float(np.median([x["eval"] for x in results]))
        own = float(np.median([x["total"] - x["eval"] for x in results]))
        share = float(np.median([(x["total"] - x["eval"]) / x["total"] for x in results]))
        ga_cpu = float(np.median([x["ga_cpu"] for x in results]))
        eval_cpu = float(np.median([x["eval_cpu"] for x in results]))
        cpu_share = float(np.median([x["ga_cpu"] / (x["ga_cpu"] + x["eval_cpu"])
                                     for x in results]))
        best = float(np.median([x["best"] for x in results]))
        evals = results[0]["evaluations"]
        summary[name] = dict(total=total, eval=ev, own=own, share=share, ga_cpu=ga_cpu,
                             eval_cpu=eval_cpu, cpu_share=cpu_share, best=best,
                             evaluations=evals, runs=results)
        print(f"| {name} | {evals} | {total:.2f} | {ev:.2f} | {own:.3f} | {share:.1%} "
              f"| {ga_cpu:.3f} | {eval_cpu:.2f} | {cpu_share:.1%} | {best:,.0f} |")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{os.cpu_count()} CPUs, load average {load:.1f} at the end, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    if args.json:
        from regal.files import write_text

        write_text(args.json, json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    from regal.user_errors import report_user_errors

    sys.exit(report_user_errors("bench_brkga.py", main))
