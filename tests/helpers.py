"""Helpers shared by the test files (one module; pytest fixtures live in conftest.py).

Test files import these by name (`from helpers import random_graph`); no test file imports
another test file or conftest.py. tests/sim_reference.py is not a helper: it is the
independent reference the simulator is judged by, and stays a module of its own.

- random graphs: `random_graph`, `random_case` (seeded computation graphs and simulator
  inputs, dense in the cases where simulators tend to disagree);
- synthetic graph files and runs: `one_synthetic_graph`, `brkga_and_local_search_run`;
- the command line: `refused` (in this process), `run_regal` and `one_error_line` (in a
  child process, under a file-size limit or a closed stdout);
- files: `npz_with_member` (forged `.npz` members), `strict_json`;
- the rest: `experiment` (an experiments/ script as a module), `randomise_heads` (a policy's
  heads made non-uniform), `alive` (whether a process runs).

Random graphs: small (1-30 ops) but dense in the cases where simulators tend to disagree:
aliases (and alias chains), control edges, temporary and persistent memory, tensors without
consumers, tensors read by several ops on several devices, zero-cost ops, zero-size tensors,
one tensor read on two ports of the same op. Op ids are not in topological order, so that
tie-breaking by id is exercised independently of the dependency order. With `integer=True`
costs, sizes, bandwidth and latency are small integers, so that events coincide in time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from regal.graph import ComputationGraph
from regal.graph_builder import GraphBuilder

__all__ = ["ROOT", "random_graph", "random_case", "one_synthetic_graph",
           "brkga_and_local_search_run", "refused", "run_regal", "one_error_line",
           "npz_with_member", "strict_json", "experiment", "randomise_heads", "alive"]

ROOT = Path(__file__).resolve().parent.parent   # the repository


# ---------------------------------------------------------------------------
# random graphs


def _cost(rng, integer: bool) -> float:
    if rng.random() < 0.2:
        return 0.0
    return float(rng.integers(1, 5)) if integer else float(rng.uniform(0.1, 10.0))


def _bytes(rng, integer: bool, zero_p: float) -> int:
    if rng.random() < zero_p:
        return 0
    return int(rng.integers(1, 5)) * 8 if integer else int(rng.integers(1, 1000))


def random_graph(rng: np.random.Generator, num_ops: int | None = None,
                 integer: bool = False) -> ComputationGraph:
    """A random DAG built with GraphBuilder; `rng` drives everything (seed it)."""
    n = int(rng.integers(1, 31)) if num_ops is None else num_ops
    rank = rng.permutation(n)          # topological rank of op id v; edges go up in rank
    by_rank = np.argsort(rank)         # op id at each rank
    b = GraphBuilder()
    for v in range(n):
        b.add_op(f"op{v}", _cost(rng, integer),
                 temporary_memory=_bytes(rng, integer, 0.6),
                 persistent_memory=_bytes(rng, integer, 0.6))
    num_outputs = rng.integers(0, 4, size=n)
    # a few "hub" producers feed many consumers (several consumers on several devices)
    hubs = set(rng.choice(n, size=min(n, 3), replace=False).tolist())
    inputs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for r in range(1, n):
        v = int(by_rank[r])
        earlier = [int(u) for u in by_rank[:r] if num_outputs[u] > 0]
        if not earlier:
            continue
        weights = np.array([4.0 if u in hubs else 1.0 for u in earlier])
        for _ in range(int(rng.integers(0, 4))):
            u = int(rng.choice(earlier, p=weights / weights.sum()))
            port = int(rng.integers(0, num_outputs[u]))
            inputs[v].append((u, port))
            if rng.random() < 0.15:
                inputs[v].append((u, port))   # the same tensor on two input ports
        rng.shuffle(inputs[v])
    for v in range(n):
        for u, port in inputs[v]:
            b.add_input(v, u, port)
        for _ in range(int(num_outputs[v])):
            alias = int(rng.integers(0, len(inputs[v]))) if inputs[v] and rng.random() < 0.35 else -1
            b.add_output(v, _bytes(rng, integer, 0.15), alias)
    for _ in range(int(rng.integers(0, n // 3 + 2))):
        if n < 2:
            break
        lo, hi = sorted(rng.choice(n, size=2, replace=False).tolist())
        b.add_control(int(by_rank[lo]), int(by_rank[hi]))
    return b.build()


def random_case(rng: np.random.Generator, max_devices: int = 8) -> dict:
    """A random graph plus devices, placement and priorities (memory_limit left None)."""
    integer = bool(rng.random() < 0.6)
    graph = random_graph(rng, integer=integer)
    n = graph.num_nodes
    count = int(rng.integers(1, max_devices + 1))
    used = int(rng.integers(1, count + 1))   # often fewer busy devices than devices
    placement = rng.integers(0, used, size=n)
    if rng.random() < 0.5:    # ties in priorities: few distinct values
        priority = rng.integers(0, 3, size=n).astype(np.float64)
        transfer_priority = rng.integers(0, 3, size=n).astype(np.float64)
    else:
        priority = rng.random(n)
        transfer_priority = rng.random(n)
    if integer:
        bandwidth = float(rng.choice([1.0, 2.0, 4.0, 8.0]))
        latency = float(rng.choice([0.0, 1.0, 2.0]))
    else:
        bandwidth = float(rng.uniform(1.0, 100.0))
        latency = float(rng.uniform(0.0, 3.0))
    return dict(graph=graph, count=count, memory_limit=None, bandwidth=bandwidth,
                latency=latency, placement=placement.astype(np.int64),
                priority=priority, transfer_priority=transfer_priority)


# ---------------------------------------------------------------------------
# synthetic graph files and runs


def one_synthetic_graph(folder, min_ops: int, max_ops: int, seed: int) -> str:
    """The path of one small synthetic graph file written into `folder`."""
    from regal import synth

    (path,) = synth.materialize(synth.custom_recipe(count=1, min_ops=min_ops, max_ops=max_ops,
                                                    seed=seed), folder, progress=False)
    return str(path)


def brkga_and_local_search_run(tmp_path, dataset: str, min_ops: int, max_ops: int, graph_seed: int,
                               seeds: int, budget: int):
    """One small synthetic graph in TMP/graphs and a harness run of brkga and local-search on
    it at 2 devices (records in TMP/res): (graphs folder, graph path, results folder)."""
    from regal import harness

    folder = tmp_path / "graphs"
    folder.mkdir()
    path = one_synthetic_graph(folder, min_ops, max_ops, graph_seed)
    out = tmp_path / "res"
    harness.run_experiment(["brkga", "local-search"], {dataset: folder}, out, seeds=seeds,
                           budgets=budget, devices=[2], workers=1, progress=False)
    return folder, path, out


# ---------------------------------------------------------------------------
# the command line


def refused(argv, capsys, needle: str) -> str:
    """Runs `regal ARGV`: it must exit 2 with no traceback and exactly one error line, which
    names `needle`. Returns stderr."""
    from regal.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2, (argv, err)
    assert "Traceback" not in err
    assert len(errors) == 1 and needle in errors[0], (needle, err)
    return err


def script_refused(main, argv, capsys, needle: str):
    """Runs an experiment script's `main(argv)` as its command line does (through
    `regal.user_errors.report_user_errors`): it must refuse with exit code 2 (its own or
    argparse's), exactly one error line, which names `needle`, and no traceback. Returns
    what it printed (`capsys.readouterr()`: out, err)."""
    from regal.user_errors import report_user_errors

    try:
        code = report_user_errors("script", lambda: main(argv))
    except SystemExit as exc:   # argparse's own refusal
        code = exc.code
    captured = capsys.readouterr()
    err = captured.err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and "Traceback" not in err, err
    assert len(errors) == 1 and needle in errors[0], (needle, err)
    return captured


def script_help(main, capsys) -> str:
    """An experiment script's `--help` (exit code 0), its whitespace folded to single spaces
    (argparse wraps the description where the terminal ends)."""
    try:
        main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0, exc.code
    else:
        raise AssertionError("--help did not exit")
    return " ".join(capsys.readouterr().out.split())


def experiment_keeping_numba_threads(name: str):
    """`experiment(name)` for a script that pins numba to one thread for its own process
    (NUMBA_NUM_THREADS): the variable is put back, so later tests keep their threads."""
    saved = os.environ.get("NUMBA_NUM_THREADS")
    try:
        return experiment(name)
    finally:
        if saved is None:
            os.environ.pop("NUMBA_NUM_THREADS", None)
        else:
            os.environ["NUMBA_NUM_THREADS"] = saved


def run_regal(argv, *, file_limit: int | None = None, read_lines: int | None = None,
              timeout: float = 300) -> tuple[int, str, str]:
    """Runs `python -m regal.cli ARGV`: (exit code, stdout, stderr).

    `file_limit`: no file may grow past this many bytes (RLIMIT_FSIZE with SIGXFSZ ignored,
    so a write past it fails with EFBIG, as on a full disk). `read_lines`: the reader of its
    stdout takes that many lines and closes the pipe (0: before anything is printed, as
    `| head -0`); the child is unbuffered, so every print after that meets a closed pipe."""
    env = {k: v for k, v in os.environ.items() if k != "REGAL_DEBUG"}
    if read_lines is not None:
        env["PYTHONUNBUFFERED"] = "1"

    def limit():
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    proc = subprocess.Popen([sys.executable, "-m", "regal.cli", *map(str, argv)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=limit if file_limit is not None else None)
    if read_lines is None:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    out = "".join(proc.stdout.readline() for _ in range(read_lines))
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=timeout)
    return proc.returncode, out, err


def one_error_line(err: str) -> str:
    """The single `regal: error:` line of a refusal, checked to be the last line written and
    to come without a traceback (progress bars' lines aside)."""
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    assert "Traceback" not in err and len(errors) == 1 and lines[-1] == errors[0], err
    return errors[0]


# ---------------------------------------------------------------------------
# files


def npz_with_member(path, arrays: dict, name: str, shape, dtype, body: bytes | None = None,
                    zip_size: int | None = None):
    """Writes ARRAYS as an `.npz` whose member NAME.npy (added, or in place of that array)
    has a `.npy` header declaring SHAPE of DTYPE and then BODY (None: the zeros the header
    declares, streamed, so a gigabyte member costs no memory here); ZIP_SIZE forges the
    member's size in the zip's central directory. The bloated members of issue 36."""
    import io
    import math
    import struct
    import zipfile

    np.savez(path, **{key: value for key, value in arrays.items() if key != name})
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": np.dtype(dtype).str,
                                                  "fortran_order": False, "shape": tuple(shape)})
    size = math.prod(shape) * np.dtype(dtype).itemsize
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as archive, \
            archive.open(f"{name}.npy", "w", force_zip64=size >= 2**31) as member:
        member.write(header.getvalue())
        if body is not None:
            member.write(body)
        zeros = memoryview(bytes(2**20))
        while body is None and size:
            member.write(zeros[:min(size, 2**20)])
            size -= min(size, 2**20)
    if zip_size is not None:  # the central directory entry: 46 fixed bytes, then the name
        blob = bytearray(Path(path).read_bytes())
        at = blob.rindex(f"{name}.npy".encode()) - 46
        blob[at + 24:at + 28] = struct.pack("<I", zip_size)
        Path(path).write_bytes(blob)
    return path


def strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as every reader outside Python does
    (regal.files writes neither)."""
    def refuse(constant):
        raise ValueError(f"not standard JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


# ---------------------------------------------------------------------------
# the rest


def experiment(name: str):
    """The script experiments/NAME.py loaded as a module (its main() not run)."""
    import importlib.util

    path = ROOT / "experiments" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def randomise_heads(policy, seed, scale=1.5):
    """Non-uniform heads (they start at zero), so sampling and argmax are informative: random
    kernels and biases."""
    rng = np.random.default_rng(seed)
    for head in policy.net.heads.values():
        head.set_weights([rng.normal(0, scale, w.shape).astype(np.float32)
                          for w in head.get_weights()])


def alive(pid: int) -> bool:
    """Running (an exited process nobody has reaped yet, a zombie, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):  # gone meanwhile, or no /proc (not Linux): kill said alive
        return sys.platform != "linux"
