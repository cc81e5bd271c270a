"""The simulator's numba kernel against C++ builds of the same algorithm, timed in one run.

Issue 3 compares the kernel with a C++ BRKGA (about 16,600 evaluations/s on this machine class).
This VM's speed drifts 10-20% between minutes, so an absolute rate measured today says little
about one measured another day. A ratio taken in one process, with the two sides alternating
round by round, does not drift with the machine.

`experiments/cpp/sim_port.cpp` is a line-by-line C++ port of the kernel's non-trace path
(same data structures, same order of operations). This script:

1. builds it with $CXX (default g++) at `-O3 -march=native` (what a C++ user would write) and at
   plain `-O3` (the x86-64 baseline);
2. checks that both builds give bit-identical peaks and makespans to `regal.sim.kernel` on the
   bench graphs and 30 small random graphs, half of whose keys are rounded to force ties;
3. times each cell for `--rounds` rounds, one thread, in evaluations per CPU second, and prints
   the medians and the median per-round ratio, numba / C++.

    .venv/bin/python experiments/bench_sim_cpp.py            # 4 cells, 7 rounds
    .venv/bin/python experiments/bench_sim_cpp.py --cells 500x2 --rounds 11
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench_sim import population_for, random_dag
from regal.user_errors import UserError, report_user_errors

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpp", "sim_port.cpp")
BUILDS = {"C++ -O3 -march=native": ["-O3", "-march=native"], "C++ -O3": ["-O3"]}
# dtypes of the 18 arrays `regal.sim.kernel.prepare` returns, in order (int32 byte counts)
STATIC_DTYPES = [np.float64, np.int64, np.int32, np.int32, np.int32, np.int32, np.float64,
                 np.int32, np.int32, np.int32, np.int32, np.int32, np.int32, np.int32, np.int32,
                 np.int32, np.bool_, np.int32]


def build(compiler: str, flags: list[str], out_dir: str, name: str) -> str:
    path = os.path.join(out_dir, f"libsim_{name}.so")
    cmd = [compiler, *flags, "-shared", "-fPIC", SOURCE, "-o", path]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:  # one line: the compiler's first error (or its last line)
        said = [line for line in done.stderr.splitlines() if line.strip()]
        first = next((line for line in said if "error" in line), said[-1] if said else "")
        raise UserError(f"{' '.join(cmd)} failed: {first.strip()}")
    return path


class CppSimulator:
    """`evaluate_serial` of one build of sim_port.cpp, called through ctypes."""

    def __init__(self, library: str):
        self.function = ctypes.CDLL(library).evaluate_serial
        self.function.restype = None
        self.function.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64),
                                  ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                                  ctypes.c_void_p, ctypes.c_void_p]

    def evaluator(self, static: tuple, d: int):
        """`run(keys, peaks, makespans)` for one prepared graph (checks the arrays' dtypes first)."""
        for index, (array, dtype) in enumerate(zip(static, STATIC_DTYPES)):
            if array.dtype != dtype or array.ndim != 1 or not array.flags.c_contiguous:
                raise UserError(f"prepare() array {index} is {array.dtype}, the C++ port "
                                f"expects {np.dtype(dtype)} (graphs with byte counts >= 2**31 "
                                "are not supported by the port)")
        pointers = (ctypes.c_void_p * len(static))(*[a.ctypes.data for a in static])
        lengths = (ctypes.c_int64 * 4)(static[0].shape[0], static[2].shape[0],
                                       static[8].shape[0], static[14].shape[0])
        pointer_array = ctypes.cast(pointers, ctypes.POINTER(ctypes.c_void_p))

        def run(keys, peaks, makespans):
            _ = static  # the arrays must outlive the pointers
            self.function(pointer_array, lengths, d, keys.ctypes.data, keys.shape[0],
                          peaks.ctypes.data, makespans.ctypes.data)
        return run


def numba_evaluator(static: tuple, d: int):
    from regal.sim import kernel

    def run(keys, peaks, makespans):
        kernel.evaluate_batch(static, d, keys, 1, peaks, makespans)
    return run


def check_agreement(simulators: dict) -> tuple[int, int]:
    """Bit-identical peaks and makespans on bench and small random graphs: (graphs, rows) checked."""
    from regal.sim import DeviceSpec, kernel
    rng = np.random.default_rng(12345)
    cases = [(random_dag(n, seed=n), DeviceSpec(d)) for n, d in
             [(500, 2), (500, 4), (500, 8), (2000, 2)]]
    for i in range(30):
        n, d = int(rng.integers(5, 401)), int(rng.integers(1, 9))
        graph = random_dag(n, seed=1000 + i, window=int(rng.integers(2, 80)))
        if i % 3 == 1:  # whole-number costs (some 0) and round transfer times: time ties
            graph = graph._replace(compute_cost=np.floor(graph.compute_cost / 25.0) * 5.0)
            cases.append((graph, DeviceSpec(d, bandwidth=1_000_000.0, latency=float(i % 2))))
        else:
            cases.append((graph, DeviceSpec(d)))
    rows = 0
    for graph, devices in cases:
        n, d = graph.num_nodes, devices.count
        static = kernel.prepare(graph, devices)
        keys = rng.random((200, n * (d + 2)))
        keys[::2] = np.round(keys[::2] * 4) / 4
        results = {}
        for name, simulator in simulators.items():
            peaks, makespans = np.zeros((len(keys), d), np.int64), np.zeros(len(keys))
            simulator(static, d)(keys, peaks, makespans)
            results[name] = (peaks, makespans)
        reference_peaks, reference_makespans = results["numba"]
        for name, (peaks, makespans) in results.items():
            if not (np.array_equal(peaks, reference_peaks)
                    and np.array_equal(makespans, reference_makespans)):
                raise SystemExit(f"bench_sim_cpp: {name} disagrees with regal.sim.kernel on a "
                                 f"{n}-op graph with {d} devices: experiments/cpp/sim_port.cpp "
                                 "no longer matches the kernel and must be updated")
        rows += len(keys)
    return len(cases), rows


def per_cpu_second(run, keys, peaks, makespans, seconds: float) -> float:
    calls, start = 0, time.process_time()
    while True:
        run(keys, peaks, makespans)
        calls += 1
        elapsed = time.process_time() - start
        if elapsed >= seconds:
            return calls * len(keys) / elapsed


def time_cell(simulators: dict, n: int, d: int, rounds: int, seconds: float) -> dict:
    """Median rate of each simulator and median per-round ratio numba / each C++ build."""
    from regal.sim import DeviceSpec, kernel
    graph = random_dag(n, seed=n)
    static = kernel.prepare(graph, DeviceSpec(d))
    population = population_for(n)
    keys = np.random.default_rng(1).random((population, n * (d + 2)))
    peaks, makespans = np.empty((population, d), np.int64), np.empty(population)
    runs = {name: simulator(static, d) for name, simulator in simulators.items()}
    for run in runs.values():
        run(keys[:2], peaks, makespans)  # warm up
    rates = {name: [] for name in runs}
    names = list(runs)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            rates[name].append(per_cpu_second(runs[name], keys, peaks, makespans, seconds))
    out = {name: statistics.median(values) for name, values in rates.items()}
    for name in names[1:]:
        out[f"ratio {name}"] = statistics.median(
            a / b for a, b in zip(rates["numba"], rates[name]))
    return out


def parse_cell(text: str) -> tuple[int, int]:
    try:
        n, d = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise UserError(f"--cells: expected OPSxDEVICES such as 500x2, got {text!r}") from None
    if n < 2 or not 1 <= d <= 64:
        raise UserError(f"--cells: {text!r} needs at least 2 ops and 1-64 devices")
    return n, d


def main(argv=None) -> int:
    """The benchmark; a user's error (no compiler, a bad cell) raises UserError, which
    `report_user_errors` prints as one line (exit 2)."""
    from regal.arguments import positive_float, positive_int

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", nargs="*", default=["500x2", "500x4", "500x8", "2000x2"])
    parser.add_argument("--rounds", type=positive_int, default=7)
    parser.add_argument("--seconds", type=positive_float, default=0.5,
                        help="min CPU time per timing")
    args = parser.parse_args(argv)
    cells = [parse_cell(cell) for cell in args.cells]
    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        raise UserError(f"needs a C++ compiler: {compiler!r} not found (set CXX)")
    import numba
    numba.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="regal-cpp-") as out_dir:
        simulators = {"numba": numba_evaluator}
        for index, (name, flags) in enumerate(BUILDS.items()):
            simulators[name] = CppSimulator(build(compiler, flags, out_dir, str(index))).evaluator
        version = subprocess.run([compiler, "--version"], capture_output=True,
                                 text=True).stdout.splitlines()[0]
        print(f"{version}; numba {numba.__version__}; one thread; "
              f"load average at start {os.getloadavg()[0]:.1f}")
        graphs, rows = check_agreement(simulators)
        print(f"agreement: every build matches regal.sim.kernel bit for bit on {rows:,} "
              f"individuals ({graphs} graphs, half the rows with tied keys)\n")
        builds = list(BUILDS)
        print(f"evaluations per CPU second, median of {args.rounds} alternating rounds "
              f"of >= {args.seconds:g} s; ratio: median per-round numba / C++")
        header = f"{'ops':>6} {'d':>2} {'numba':>8}" + "".join(
            f" {name:>22} {'ratio':>6}" for name in builds)
        print(header)
        for n, d in cells:
            out = time_cell(simulators, n, d, args.rounds, args.seconds)
            print(f"{n:>6} {d:>2} {out['numba']:>8,.0f}" + "".join(
                f" {out[name]:>22,.0f} {out[f'ratio {name}']:>6.2f}" for name in builds),
                flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(report_user_errors("bench_sim_cpp.py", main))
