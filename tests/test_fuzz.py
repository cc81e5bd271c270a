"""Fuzz suite (issue 24): bad input never crashes and never yields a wrong number.

Every case drives `regal.cli.main([...])` in this process (or, for solution files,
`regal.optimizers.read_solution`) and must end in exit 0, 2 or 3, print no traceback,
finish within CASE_LIMIT_S, refuse with one `error:` line, and, when it succeeds, print
figures that hold together (no negative size, feasible flag matching the limits, a report
that equals the report of its valid records alone). Hypothesis runs derandomized (a fixed
seed) without deadlines; each suite has a default size (about two minutes in all) and a
`slow` variant of over 10,000 cases in all (`make test-all`).

Set REGAL_FUZZ_STATS=FILE to get the counts (cases, exits by code, tracebacks, hangs) as JSON.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shlex
import shutil
import signal
import time
import traceback
import tracemalloc
import zipfile
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from regal import harness, optimizers, synth
from regal.cli import main
from regal.io import load_graph, save_graph
from regal.sim import DeviceSpec
from helpers import npz_with_member, strict_json

CASE_LIMIT_S = 60.0  # generous: the machine running the suite may be shared and loaded
STATS: Counter = Counter()
SLOWEST: dict = {}  # suite -> the command of its slowest case
BYTE_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def scaled(default: int, slow: int):
    """Two test parameters: the default size, and the slow-marked large one."""
    return pytest.mark.parametrize("examples", [
        pytest.param(default, id="default"),
        pytest.param(slow, id="slow", marks=pytest.mark.slow)])


def fuzz(examples: int, body, collect: list | None = None) -> None:
    """Runs `body(data)` on `examples` derandomized Hypothesis cases. With `collect`, a
    failing case is noted there and the run goes on (no shrinking): the count of failures
    is what a known-broken reader's suite reports."""
    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck),
              phases=[Phase.generate] if collect is not None else list(Phase))
    @given(data=st.data())
    def run(data):
        if collect is None:
            body(data)
            return
        try:
            body(data)
        except (AssertionError, pytest.fail.Exception) as exc:
            lines = str(exc).strip().splitlines() or [type(exc).__name__]
            collect.append(" / ".join(dict.fromkeys([lines[0][:300], lines[-1][:300]])))
    run()


@pytest.fixture(scope="session", autouse=True)
def _write_stats():
    yield
    target = os.environ.get("REGAL_FUZZ_STATS")
    if target and STATS:
        table: dict = {}
        for (suite, what), count in sorted(STATS.items(), key=str):
            table.setdefault(suite, {})[str(what)] = count
        for suite, argv in SLOWEST.items():
            table[suite]["slowest case"] = argv
        Path(target).write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


class Hang(BaseException):
    """Raised by the alarm inside a case that ran past CASE_LIMIT_S."""


def run_cli(suite: str, argv: list[str], limit: float = CASE_LIMIT_S) -> tuple[int, str, str]:
    """`regal ARGV` in this process: (exit code, stdout, stderr), checked for the promises."""
    out, err = io.StringIO(), io.StringIO()

    def alarm(signum, frame):
        raise Hang()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    start = time.perf_counter()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse refuses with SystemExit(2)
                code = exc.code
    except Hang:
        STATS[suite, "hang"] += 1
        pytest.fail(f"hang: regal {shlex.join(argv)} ran past {limit} s")
    except Exception:
        STATS[suite, "traceback"] += 1
        pytest.fail(f"regal {shlex.join(argv)} raised:\n{traceback.format_exc()}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        seconds = time.perf_counter() - start
        if seconds > STATS[suite, "slowest case s"]:
            STATS[suite, "slowest case s"] = round(seconds, 2)
            SLOWEST[suite] = shlex.join(argv)
    STATS[suite, "cases"] += 1
    STATS[suite, f"exit {code}"] += 1
    stdout, stderr = out.getvalue(), err.getvalue()
    assert code in (0, 2, 3), (argv, code, stderr)
    assert "Traceback" not in stdout + stderr, (argv, stderr)
    if code == 2:
        lines = [line for line in stderr.splitlines() if line.strip()]
        errors = [line for line in lines if "error:" in line]
        assert len(errors) == 1 and lines[-1] == errors[0], (argv, stderr)
        noise = [line for line in lines[:-1] if not line.startswith("regal: warning:")]
        assert not noise or noise[0].startswith("usage:"), (argv, stderr)  # argparse usage
    return code, stdout, stderr


def no_negative_sizes(text: str) -> None:
    assert not re.search(r"-\d[\d.,]*\s*(B|KiB|MiB|GiB|TiB)\b", text), text
    assert "nan" not in text.lower().split(), text


def as_bytes(figure: str) -> float:
    number, unit = figure.split()
    return float(number) * BYTE_UNITS[unit]


def info_figure(text: str) -> float:
    """A `data info` figure as a number: '2,897', '17.00 KiB', '139.0 us'."""
    from regal.units import parse_bytes, parse_duration_us
    if " " not in text:
        return float(text.replace(",", ""))
    return parse_duration_us(text) if text.endswith(("us", "ms", " s")) else parse_bytes(text)


# ---------------------------------------------------------------------------
# fixtures: a few small graphs, their records, their files in every format


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    graphs = root / "graphs"
    synth.materialize(synth.custom_recipe(count=2, min_ops=8, max_ops=14, seed=11), graphs,
                      progress=False)
    (graphs / "recipe.json").unlink()
    results = root / "results"
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        assert main(["compare", "--methods", "random,brkga", "--graphs", str(graphs), "--out",
                     str(results), "--budget", "100", "--seeds", "2", "--workers", "1",
                     "--quiet"]) == 0
    lines = (results / harness.RECORDS_FILE).read_bytes().splitlines(keepends=True)
    assert len(lines) == 8
    (root / "empty").mkdir()
    (root / "a_file").write_text("not a folder\n")
    (root / "garbage.npz").write_bytes(b"PK\x03\x04 not a zip")
    (root / "garbage.jsonl").write_bytes(b'{"kind": "solution", "value": -1}\n\xff\n')
    graph_path = sorted(graphs.glob("*.npz"))[0]
    for suffix in (".pbtxt", ".pb"):
        save_graph(load_graph(graph_path), root / f"graph{suffix}")
    return dict(root=root, graphs=graphs, graph=graph_path, results=results, lines=lines,
                counter=iter(range(10**9)))


def fresh(world, name: str) -> Path:
    """A path nobody used yet (cases must not see each other's outputs)."""
    return world["root"] / "cases" / f"{name}{next(world['counter'])}"


# ---------------------------------------------------------------------------
# records and other .jsonl files in a results folder (`regal report`)

JSON_LEAF = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
JSON_VALUE = st.recursive(JSON_LEAF, lambda inner: st.lists(inner, max_size=3) |
                          st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
REQUIRED = ("method", "dataset", "graph", "fingerprint", "objective", "status", "seed",
            "budget", "devices")
WRONG_TYPE = st.sampled_from([None, [], {}, [1], {"a": 1}, True])
BAD_VALUE = st.sampled_from([-1.0, -1e-9, float("nan"), float("inf"), float("-inf"), 1e300,
                             2.0**70, "12", None, [3.0], True])


def invalid_line(draw, record: dict) -> bytes:
    """A line that is certainly not a valid compare record."""
    kind = draw(st.integers(0, 7))
    if kind == 0:  # any JSON that is not an object
        value = draw(JSON_VALUE.filter(lambda v: not isinstance(v, dict)))
        return json.dumps(value).encode()
    if kind == 1:  # an object without a required field
        broken = dict(record)
        broken.pop(draw(st.sampled_from(REQUIRED)))
        return json.dumps(broken).encode()
    if kind == 2:  # a required field of the wrong type
        broken = dict(record, **{draw(st.sampled_from(REQUIRED)): draw(WRONG_TYPE)})
        return json.dumps(broken).encode()
    if kind == 3:  # an ok record whose value is no size
        return json.dumps(dict(record, status="ok", value=draw(BAD_VALUE))).encode()
    if kind == 4:  # invalid UTF-8 inside
        text = json.dumps(record).encode()
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])) + text[at:]
    if kind == 5:  # cut short
        text = json.dumps(record).encode()
        return text[:draw(st.integers(1, len(text) - 1))]
    if kind == 6:  # nested beyond any recursion limit
        return draw(st.sampled_from([b"[", b'{"a":'])) * draw(st.integers(1000, 120_000))
    return json.dumps(dict(record, devices=draw(st.sampled_from([0, -2, 10**9, 2**80])))
                      ).encode()


def report_csv(world, results: Path) -> tuple[int, str | None]:
    out = fresh(world, "table")
    code, stdout, _ = run_cli("records", ["report", str(results), "--out", str(out),
                                          "--no-chart", "--no-bounds"])
    if code != 0:
        return code, None
    text = (out / "table.csv").read_text()
    check_table(text)
    return code, text


def check_table(text: str) -> None:
    """The figures of a report that must hold whatever the records were."""
    for row in csv.DictReader(io.StringIO(text)):
        num = {k: (float(v) if v not in ("", None) else None) for k, v in row.items()
               if k not in ("objective", "dataset", "method", "options", "memory_limit")}
        assert 0 <= num["failed"] <= num["runs"] and num["graphs"] >= 0, row
        for name in ("gap_pct", "mean_value", "seed_spread_pct", "mean_wall_s",
                     "mean_evaluations", "no_best_known"):
            assert num[name] is None or num[name] >= 0, (name, row)
        assert num["feasible_pct"] is None or 0 <= num["feasible_pct"] <= 100, row
        assert num["wilcoxon_p"] is None or 0 <= num["wilcoxon_p"] <= 1, row
        if num["wins"] is not None:
            assert num["wins"] + num["losses"] <= num["graphs"], row


def records_case(world, data) -> None:
    lines, records = world["lines"], [json.loads(line) for line in world["lines"]]
    keep = data.draw(st.lists(st.sampled_from(range(len(lines))), max_size=10))
    body = [lines[i] for i in keep]
    garbage = data.draw(st.lists(st.sampled_from(records).flatmap(
        lambda r: st.composite(lambda draw: invalid_line(draw, r))()), max_size=4))
    mutate = data.draw(st.integers(0, 4)) == 0  # random byte edits: no oracle, only promises
    if mutate and body:
        i = data.draw(st.integers(0, len(body) - 1))
        line = bytearray(body[i][:-1])
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(0, len(line)))
            op = data.draw(st.integers(0, 2))
            if op == 0 and at < len(line):
                del line[at]
            elif op == 1:
                line[at:at] = bytes([data.draw(st.integers(0, 255))])
            elif at < len(line):
                line[at] = data.draw(st.integers(0, 255))
        body[i] = bytes(line).replace(b"\n", b"") + b"\n"
    messy = fresh(world, "messy")
    messy.mkdir(parents=True)
    mixed = list(body) + [g.replace(b"\n", b" ") + b"\n" for g in garbage]
    order = data.draw(st.permutations(range(len(mixed))))
    (messy / "records.jsonl").write_bytes(b"".join(mixed[i] for i in order) +
                                          data.draw(st.sampled_from([b"", b'{"torn": '])))
    if data.draw(st.booleans()):  # foreign JSON-lines files beside the records
        (messy / "run").mkdir()
        (messy / "run" / "history.jsonl").write_text(
            "".join(json.dumps({"step": s, "loss": 0.1 * s}) + "\n" for s in range(1, 4)))
        notes = data.draw(st.lists(st.dictionaries(st.text(max_size=5), JSON_LEAF, max_size=3),
                                   max_size=3))
        (messy / "notes.jsonl").write_text("".join(json.dumps(n) + "\n" for n in notes))
        shutil.copy(world["root"] / "garbage.jsonl", messy / "store.jsonl")
    code, table = report_csv(world, messy)
    if mutate:
        return
    clean = fresh(world, "clean")
    clean.mkdir(parents=True)
    (clean / "records.jsonl").write_bytes(b"".join(lines[i] for i in keep))
    want_code, want = report_csv(world, clean) if keep else (2, None)
    assert (code, table) == (want_code, want)  # garbage changes no number


@scaled(40, 3000)
def test_fuzz_records_report(world, examples):
    fuzz(examples, lambda data: records_case(world, data))


def resume_case(world, data) -> None:
    """Garbage in records.jsonl: the rerun does exactly the lost runs, with the same values."""
    out = fresh(world, "resume")
    out.mkdir(parents=True)
    lines = world["lines"]
    kept = data.draw(st.lists(st.booleans(), min_size=len(lines), max_size=len(lines)))
    body = []
    for line, keep in zip(lines, kept):
        if keep:
            body.append(line)
        if data.draw(st.booleans()):
            body.append(invalid_line(data.draw, json.loads(line)).replace(b"\n", b" ") + b"\n")
    (out / harness.RECORDS_FILE).write_bytes(b"".join(body))
    code, stdout, _ = run_cli("resume", [
        "compare", "--methods", "random,brkga", "--graphs", str(world["graphs"]), "--out",
        str(out), "--budget", "100", "--seeds", "2", "--workers", "1", "--quiet"])
    assert code == 0
    assert f"{len(lines) - sum(kept)} runs done, {sum(kept)} already recorded" in stdout
    got = {harness.record_key(r): r["value"] for r in harness.load_records(out)}
    want = {harness.record_key(r): r["value"] for r in map(json.loads, lines)}
    assert got == want  # same seeds, same values: nothing lost, nothing doubled


@scaled(6, 300)
def test_fuzz_compare_resume(world, examples):
    fuzz(examples, lambda data: resume_case(world, data))


# ---------------------------------------------------------------------------
# solution files (`read_solution`, which `apply` / `measure` records go through)


def solution_case(world, record, problem, data) -> None:
    record = json.loads(json.dumps(record))
    for _ in range(data.draw(st.integers(1, 3))):
        target = data.draw(st.sampled_from(["top", "op", "graph", "result"]))
        if target == "top":
            key = data.draw(st.sampled_from(["graph", "ops", "devices", "result", "method",
                                             "seed"]))
            holder = record
        elif target == "op" and isinstance(record.get("ops"), dict) and record["ops"]:
            name = data.draw(st.sampled_from(sorted(record["ops"])))
            if data.draw(st.integers(0, 4)) == 0:
                record["ops"][name] = data.draw(JSON_VALUE)
                continue
            holder = record["ops"][name]
            key = data.draw(st.sampled_from(["device", "priority", "transfer_priority"]))
        elif isinstance(record.get(target), dict):
            holder = record[target]
            key = data.draw(st.sampled_from(sorted(holder) or ["x"]))
        else:
            continue
        if not isinstance(holder, dict):
            continue
        if data.draw(st.booleans()):
            holder.pop(key, None)
        else:
            holder[key] = data.draw(JSON_VALUE | st.sampled_from(
                [1.5, 10**30, -1, 2, 1, 0, float("nan"), float("inf"), 2**63]))
    STATS["solution", "cases"] += 1
    try:
        solution = optimizers.read_solution(record, problem)
    except ValueError as exc:
        STATS["solution", "refused"] += 1
        assert "\n" not in str(exc) and str(exc).startswith("solution")
        return
    except Exception:
        STATS["solution", "traceback"] += 1
        raise
    STATS["solution", "read"] += 1
    names = [str(n) for n in problem.graph.names]
    devices = [record["ops"][n]["device"] for n in names]
    assert all(type(d) is int for d in devices)  # no silent cast of 1.5 or True
    assert solution.placement.tolist() == devices
    truth = optimizers.score(problem, np.array(devices), solution.priority,
                             solution.transfer_priority)
    assert solution.value == truth["value"] and solution.value >= 0


@scaled(150, 3000)
def test_fuzz_solution_files(world, examples):
    graph = load_graph(world["graph"])
    problem = optimizers.Problem(graph, DeviceSpec(2))
    found = optimizers.solve("random", problem, 50, 0)
    record = optimizers.solution_record(problem, found, 50)
    fuzz(examples, lambda data: solution_case(world, record, problem, data))


# ---------------------------------------------------------------------------
# argument values of every subcommand that does not need TensorFlow

def values(good, bad):
    """(valid values, invalid values) of one argument."""
    return st.sampled_from(good), st.sampled_from(bad)


DEVICES = values(["1", "2", "3"], ["-1", "0", "257", "1000000000", "99999999999999999999999",
                                   "1e3", "1.5", "abc", "", "0x10", "\u0663\u0663\u0663"])
SIZES = values(["0", "100", "400", "1KiB", "16GiB", "1.5 GiB", "4611686018427387904",
                "0.0000001", " 5e2 B "],
               ["1e30", "1e400", "4611686018427387905", "-1", "abc", "5 EiB", "1e99999999",
                "nan", "inf", "1e2 MB x"])
SEEDS = values(["0", "1", "99999999999999999999"], ["-1", "x", "2.5", ""])
BUDGETS = values(["100", "150", "200"], ["-1", "0", "1", "99", "abc", "1e3", ""])
OBJECTIVES = values(["peak_memory", "makespan"], ["speed", ""])


def path_choice(world, *, graph=False, folder=None):
    """(good, bad) input paths: graph files of each format, or the folder named `folder`."""
    root = world["root"]
    good = [world["graph"], root / "graph.pbtxt", root / "graph.pb"] if graph else \
        [world[folder]]
    bad = [root / "missing" / "x", root / "a_file", root / "empty", root,
           root / "garbage.npz", root / "nothing.npz", world["graphs"] if graph else
           world["graph"]]
    return st.sampled_from([str(p) for p in good]), st.sampled_from([str(p) for p in bad])


def output_choice(world, name: str, suffix: str = ""):
    """(good, bad) output paths: a fresh one; a missing folder, a folder, under a file."""
    bad = [str(world["root"] / "missing" / f"o{suffix}"), str(world["root"] / "empty"),
           str(world["root"] / "a_file" / f"o{suffix}")]
    if not suffix:  # an output folder: a file is the bad one, an existing folder is fine
        bad[1] = str(world["root"] / "a_file")
    return st.builds(lambda: str(fresh(world, name)) + suffix), st.sampled_from(bad)


def build_argv(data, head, parts) -> list[str]:
    """`head` plus, per (flag, (good, bad), optional) part, the flag and a value: every
    value valid but for a few parts chosen to be bad (none in about half the cases), and
    optional flags left out half the time."""
    broken = data.draw(st.sampled_from([0, 0, 0, 1, 1, 2]))
    bad = set(data.draw(st.lists(st.integers(0, len(parts) - 1), max_size=broken)))
    argv = list(head)
    for i, (flag, (good, wrong), optional_flag) in enumerate(parts):
        if i not in bad and optional_flag and data.draw(st.booleans()):
            continue
        value = data.draw(wrong if i in bad else good)
        argv += [flag] if value is None else [flag, value] if flag else [value]
    return argv


def check_optimize(argv, code, out) -> None:
    if code == 2:
        return
    no_negative_sizes(out)
    assert ("feasible: yes" in out) == (code == 0) and ("feasible: NO" in out) == (code == 3)
    limit = None
    if "--memory-limit" in argv:
        limit = argv[argv.index("--memory-limit") + 1]
    for peak, cap in re.findall(r"peak ([\d.]+ \w+) / limit ([\d.]+ \w+)", out):
        if code == 0:  # feasible: every peak within its limit (figures rounded to 0.01)
            assert as_bytes(peak) <= as_bytes(cap) * 1.0001 + 1, out
    if limit is None:
        assert code == 0, out  # nothing can overflow without a limit
    for gap in re.findall(r"at most (-?[\d.]+)% above the optimum", out):
        assert float(gap) >= 0, out  # a valid lower bound is never above a solution
    if "--out" in argv:
        record = json.loads(Path(argv[argv.index("--out") + 1]).read_text())
        assert record["result"]["feasible"] == (code == 0)


def optimize_case(world, data) -> None:
    graph = path_choice(world, graph=True)
    argv = build_argv(data, ["optimize"], [
        ("", graph, False), ("--devices", DEVICES, False), ("--memory-limit", SIZES, True),
        ("--objective", OBJECTIVES, True),
        ("--method", values(["random", "brkga", "local-search", "m-topo", "m-etf", "gp-dfs"],
                            ["nope", "", "cpsat "]), True),
        ("--budget", BUDGETS, False), ("--seed", SEEDS, True),
        ("--out", output_choice(world, "sol", ".json"), True),
    ])
    extra = data.draw(st.integers(0, 9))
    if extra == 0:  # a plot costs a second: a few cases only
        argv += ["--plot", data.draw(data.draw(st.sampled_from(output_choice(world, "plot"))))]
    elif extra == 1:
        argv += ["--time-limit", data.draw(st.sampled_from(["nan", "inf", "-1", "0", "1"]))]
    code, out, _ = run_cli("args:optimize", argv)
    check_optimize(argv, code, out)


def compare_case(world, data) -> None:
    argv = build_argv(data, ["compare", "--quiet"], [
        ("--methods", values(["random", "brkga", "random,m-topo", "brkga,random"],
                             ["nope", "random,nope", "", ",", "random,random"]), False),
        ("--graphs", path_choice(world, folder="graphs"), False),
        ("--devices", values(["2", "1,2", "3"], ["0", "257", "a", "", "1000000000", "-1",
                                                "2,,x"]), True),
        ("--budget", values(["100", "100,150"], ["0", "-1", "x", "99", ""]), False),
        ("--seeds", values(["1", "2"], ["0", "-1", "1000000000", "x"]), False),
        ("--memory-limit", SIZES, True), ("--objective", OBJECTIVES, True),
        ("--limit", values(["1", "2"], ["0", "-1", "x"]), True),
        ("--workers", values(["1"], ["0", "-1", "x"]), False),  # a pool spawns: slow
        ("--out", output_choice(world, "cmp"), False),
    ])
    code, out, _ = run_cli("args:compare", argv)
    if code == 0:
        folder = argv[argv.index("--out") + 1]
        assert all(harness.check_record(r) is None
                   for r in harness.read_records(Path(folder) / harness.RECORDS_FILE))


def report_case(world, data) -> None:
    from regal.report import SHIPPED_STORES
    stores = values([str(next(SHIPPED_STORES.glob("*.jsonl"))),
                     str(world["root"] / "garbage.jsonl"),
                     str(world["results"] / harness.RECORDS_FILE)],
                    [str(world["root"] / "missing.jsonl"), str(world["root"] / "empty")])
    argv = build_argv(data, ["report"], [
        ("", path_choice(world, folder="results"), False),
        ("--out", output_choice(world, "rep"), True),
        ("--baseline-budget", values(["100", "5000"], ["0", "-1", "x", "1e3"]), True),
        ("--best-known", stores, True),
        ("--no-chart", (st.just(None), st.just(None)), data.draw(st.integers(0, 5)) > 0),
        ("--no-bounds", (st.just(None), st.just(None)), True),
    ])
    if "--no-chart" not in argv and data.draw(st.integers(0, 5)):
        argv.append("--no-chart")  # a chart costs a second: a few cases only
    code, out, _ = run_cli("args:report", argv)
    if code == 0:
        folder = argv[argv.index("--out") + 1] if "--out" in argv else argv[1]
        check_table((Path(folder) / "table.csv").read_text())


def bounds_case(world, data) -> None:
    graphs, devices = path_choice(world, graph=True), DEVICES
    argv = build_argv(data, ["bounds"], [
        ("", graphs, False), ("", graphs, True), ("--devices", devices, False),
        ("", devices, True), ("--bytes", (st.just(None), st.just(None)), True)])
    code, out, _ = run_cli("args:bounds", argv)
    if code == 0:
        no_negative_sizes(out)
        if "--bytes" in argv:
            assert all(int(line.rsplit(" ", 1)[1]) >= 0 for line in out.splitlines())


def best_known_case(world, data) -> None:
    argv = build_argv(data, ["best-known", "--quiet"], [
        ("", path_choice(world, graph=True), False), ("--devices", DEVICES, False),
        ("--time-per-graph", values(["0.02", "0.05"], ["0", "-1", "nan", "inf", "abc"]), False),
        ("--out", (output_choice(world, "bk", ".jsonl")[0],
                   output_choice(world, "bk", ".jsonl")[1] |
                   output_choice(world, "bk", ".txt")[0]), False),
        ("--seed", SEEDS, True), ("--objective", OBJECTIVES, True),
        ("--memory-limit", SIZES, True), ("--workers", values(["1"], ["0", "x"]), False),
    ])
    code, out, _ = run_cli("args:best-known", argv)
    if code == 0:
        no_negative_sizes(out)


def data_info_case(world, data) -> None:
    files = path_choice(world, graph=True)
    argv = build_argv(data, ["data", "info"], [("", files, False), ("", files, True),
                                               ("", files, True)])
    code, out, _ = run_cli("args:data-info", argv)
    if code == 0:
        for key, value in re.findall(r"^  (.+?)\s{2,}(.+)$", out, flags=re.M):
            assert info_figure(value) >= 0, (key, value)


def data_synth_case(world, data) -> None:
    if data.draw(st.integers(0, 3)) == 0:  # a recipe (its graphs are larger: count 1)
        argv = build_argv(data, ["data", "synth", "--quiet"], [
            ("--recipe", values(["test", "valid"], ["nope", ""]), False),
            ("--count", values(["1"], ["0", "-1", "x", "100000000"]), False),
            ("--out", output_choice(world, "syn"), False)])
    else:
        argv = build_argv(data, ["data", "synth", "--quiet"], [
            ("--count", values(["1", "2"], ["0", "-1", "x"]), False),
            ("--min-ops", values(["6", "10"], ["0", "-1", "x", "2000000"]), True),
            ("--max-ops", values(["60", "80"], ["0", "-1", "x", "2000000"]), True),
            ("--seed", SEEDS, True),
            ("--family", values(["random", "cnn", "inception", "transformer", "mixed"],
                                ["nope", ""]), True),
            ("--training", (st.just(None), st.just(None)), True),
            ("--out", output_choice(world, "syn"), False)])
    code, out, _ = run_cli("args:data-synth", argv)
    if code == 0:
        folder = Path(argv[argv.index("--out") + 1])
        assert len(list(folder.glob("*.npz"))) == int(out.split()[0])


ARGUMENT_SUITES = {"optimize": (optimize_case, 40), "compare": (compare_case, 20),
                   "report": (report_case, 30), "bounds": (bounds_case, 25),
                   "best-known": (best_known_case, 8), "data-info": (data_info_case, 25),
                   "data-synth": (data_synth_case, 12)}


@pytest.mark.parametrize("command", sorted(ARGUMENT_SUITES))
@pytest.mark.parametrize("scale", [pytest.param(1, id="default"),
                                   pytest.param(20, id="slow", marks=pytest.mark.slow)])
def test_fuzz_arguments(world, command, scale):
    body, examples = ARGUMENT_SUITES[command]
    fuzz(examples * scale, lambda data: body(world, data))


# ---------------------------------------------------------------------------
# graph files of each format: mutated bytes, extreme numbers, wrong dtypes and shapes,
# cycles, dangling references, huge counts (the readers are phase 2 of issue 24)

EXTREME_INTS = st.sampled_from([-1, 0, 2**31 - 1, 2**31, 2**53, 2**53 + 1, 2**62, 2**62 + 1,
                                2**63 - 1, -2**63, 10**30])
EXTREME_FLOATS = st.sampled_from([float("nan"), float("inf"), -float("inf"), -1.0, 1e308,
                                  5e-324, 0.0])


def graph_commands(world, path: Path) -> None:
    code, out, _ = run_cli("graphs", ["data", "info", str(path)])
    if code == 0:
        for key, value in re.findall(r"^  (.+?)\s{2,}(.+)$", out, flags=re.M):
            assert math.isfinite(info_figure(value)) and info_figure(value) >= 0, (key, value)
    argv = ["optimize", str(path), "--devices", "2", "--budget", "100", "--method", "random"]
    code, out, _ = run_cli("graphs", argv)
    check_optimize(argv, code, out)


def mutate_bytes(data, blob: bytes) -> bytes:
    blob = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 6))):
        kind = data.draw(st.integers(0, 3))
        at = data.draw(st.integers(0, max(0, len(blob) - 1)))
        if kind == 0 and blob:
            blob[at] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == 1:
            blob[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif kind == 2:
            del blob[at:at + data.draw(st.integers(1, 16))]
        else:
            blob = blob[:at]
    return bytes(blob)


def npz_case(world, data) -> None:
    with np.load(world["graph"]) as stored:
        arrays = {k: stored[k] for k in stored.files}
    path = fresh(world, "g").with_suffix(".npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    kind = data.draw(st.integers(0, 5))
    name = data.draw(st.sampled_from(sorted(arrays)))
    a = arrays[name]
    if kind == 0 and a.size:  # an extreme value in an integer or float array
        a = a.astype(np.float64 if a.dtype.kind == "f" else np.int64).copy()
        value = data.draw(EXTREME_FLOATS if a.dtype.kind == "f" else EXTREME_INTS)
        if a.dtype.kind != "f" and not -2**63 <= value < 2**63:
            a = a.astype(object)
        flat = a.reshape(-1)  # a 0-d array (format_version) too
        flat[data.draw(st.integers(0, a.size - 1))] = value
        a = flat.reshape(a.shape)
        arrays[name] = a
    elif kind == 1:  # every entry of a size array huge: sums overflow int64
        for field in ("tensor_size", "persistent_memory", "temporary_memory"):
            arrays[field] = np.full_like(arrays[field], data.draw(EXTREME_INTS.filter(
                lambda v: -2**63 <= v < 2**63)))
    elif kind == 2:  # wrong dtype or shape
        rows = a.reshape(-1) if a.ndim == 0 else a  # a 0-d array (format_version) slices as 1-d
        arrays[name] = data.draw(st.sampled_from([
            a.astype(np.float32), a.astype(np.complex64), a.reshape(1, -1), rows[:-1], rows[:0],
            np.array(["x"] * max(1, a.size)), np.concatenate([rows, rows])]))
    elif kind == 3:  # a data edge that points at itself or nowhere (cycle, dangling)
        if arrays["input_tensor"].size:
            edges = arrays["input_tensor"].copy()
            edges[data.draw(st.integers(0, edges.size - 1))] = data.draw(st.sampled_from(
                [-1, 10**6, int(arrays["tensor_producer"].size)]))
            arrays["input_tensor"] = edges
        control = data.draw(st.integers(0, 3))
        arrays["control_src"] = np.array([control, control], np.int32)
        arrays["control_dst"] = np.array([control, (control + 1) % 4], np.int32)
    elif kind == 4:  # a field missing
        arrays.pop(name)
    if kind == 5:
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        path.write_bytes(mutate_bytes(data, buffer.getvalue()))
    else:
        with open(path, "wb") as f:
            np.savez(f, **{k: v for k, v in arrays.items() if v.dtype != object})
    graph_commands(world, path)


def text_case(world, data) -> None:
    text = (world["root"] / "graph.pbtxt").read_text()
    kind = data.draw(st.integers(0, 4))
    numbers = list(re.finditer(r"(?<=: )-?\d+", text))
    if kind == 0:  # extreme numbers
        for _ in range(data.draw(st.integers(1, 3))):
            match = data.draw(st.sampled_from(numbers))
            value = str(data.draw(EXTREME_INTS | EXTREME_FLOATS))
            text = text[:match.start()] + value + text[match.end():]
            numbers = list(re.finditer(r"(?<=: )-?\d+", text))
    elif kind == 1:  # every size huge: sums overflow int64
        huge = str(data.draw(EXTREME_INTS))
        text = re.sub(r"(size|persistent_memory_size|temporary_memory_size): -?\d+",
                      lambda m: f"{m.group(1)}: {huge}", text)
    elif kind == 2:  # a dangling or cyclic reference
        target = data.draw(st.sampled_from(["-1", "0", "3", "99999", "2"]))
        text = re.sub(r"preceding_node: \d+", f"preceding_node: {target}", text, count=1)
        text = text.replace("input_info {\n  }", "input_info {\n    preceding_node: 7\n  }", 1)
    elif kind == 3:  # ids repeated or the node list cut
        text = text.replace("id: 2\n", "id: 1\n") if data.draw(st.booleans()) else \
            text[:data.draw(st.integers(0, len(text)))]
    else:
        text = mutate_bytes(data, text.encode()).decode("latin-1")
    path = fresh(world, "g").with_suffix(".pbtxt")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="latin-1")
    graph_commands(world, path)


def binary_case(world, data) -> None:
    blob = (world["root"] / "graph.pb").read_bytes()
    path = fresh(world, "g").with_suffix(".pb")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(mutate_bytes(data, blob))
    graph_commands(world, path)


READ_LIMIT = 8 * 2**20  # what `data info` may allocate (traced) reading a 14-op graph


def npz_member_case(world, data) -> None:
    """A member of 1-32 MiB of zeros (deflated 1,000-fold), or one whose `.npy` header or zip
    entry declares that much over a few real bytes: skipped when the format does not define
    it, refused naming it otherwise, and never read (issue 36 item 3)."""
    with np.load(world["graph"]) as stored:
        arrays = {k: stored[k] for k in stored.files}
    name = data.draw(st.sampled_from(sorted(arrays) + ["padding", "notes.txt"]))
    dtype = np.dtype(data.draw(st.sampled_from(["|u1", "<i4", "<i8", "<f8"])))
    entries = data.draw(st.integers(2**20, 2**25)) // dtype.itemsize
    forged = data.draw(st.sampled_from([None, "header", "zip size"]))
    body = None if forged is None else bytes(data.draw(st.integers(0, 64)))
    zip_size = 128 + entries * dtype.itemsize if forged == "zip size" else None
    path = fresh(world, "member").with_suffix(".npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    npz_with_member(path, arrays, name, (entries,), dtype, body, zip_size)
    tracemalloc.start()
    try:
        code, _, err = run_cli("graphs.npz-members", ["data", "info", str(path)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < READ_LIMIT, (name, dtype, entries, forged, peak)
    if name in arrays:
        assert code == 2 and f"member '{name}.npy'" in err, (name, forged, err)
    else:
        assert code == 0, (name, forged, err)


GRAPH_SUITES = {".npz": (npz_case, 30), ".pbtxt": (text_case, 30), ".pb": (binary_case, 30),
                "members.npz": (npz_member_case, 20)}


@pytest.mark.parametrize("suffix", sorted(GRAPH_SUITES))
@pytest.mark.parametrize("scale", [pytest.param(1, id="default"),
                                   pytest.param(25, id="slow", marks=pytest.mark.slow)])
def test_fuzz_graph_files(world, suffix, scale):
    body, examples = GRAPH_SUITES[suffix]
    failures: list = []
    fuzz(examples * scale, lambda data: body(world, data), collect=failures)
    STATS[f"graphs{suffix}", "failed cases"] += len(failures)
    assert not failures, f"{len(failures)} of {examples * scale} cases failed, e.g.\n" + \
        "\n".join(sorted(set(failures))[:8])


def test_graph_file_that_is_a_pipe_is_refused(world):
    path = fresh(world, "pipe").with_suffix(".pbtxt")
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    code, _, err = run_cli("graphs", ["data", "info", str(path)], limit=3.0)
    assert code == 2 and str(path) in err


def _npz_with(world, name: str, **fields) -> Path:
    with np.load(world["graph"]) as stored:
        arrays = {k: stored[k] for k in stored.files}
    for field, value in fields.items():
        arrays[field] = np.full_like(arrays[field], value)
    path = fresh(world, name).with_suffix(".npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def _pbtxt_with_persistent(world, ops: int, each: int) -> Path:
    """`ops` unconnected ops of `each` persistent bytes: every value allowed, the sum not."""
    path = fresh(world, "wide").with_suffix(".pbtxt")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f'node {{\n  name: "n{i}"\n  id: {i}\n  output_info {{\n    '
                            f'size: 8\n    alias_input_port: -1\n  }}\n  '
                            f'persistent_memory_size: {each}\n  compute_cost: 1\n}}\n'
                            for i in range(ops)))
    return path


@pytest.mark.parametrize("make", [
    pytest.param(lambda w: _npz_with(w, "t", tensor_size=2**63 - 1), id="npz-tensor-2^63-1"),
    pytest.param(lambda w: _npz_with(w, "p", persistent_memory=2**62), id="npz-persistent-2^62"),
    pytest.param(lambda w: _npz_with(w, "m", temporary_memory=2**63 - 1),
                 id="npz-temporary-2^63-1"),
    pytest.param(lambda w: _pbtxt_with_persistent(w, 1100, 2**53), id="pbtxt-sum-overflows"),
])
def test_known_overflowing_graphs_are_refused_or_exact(world, make):
    """The issue's reproductions of items 1-2: exit 2 naming the op, or exact figures."""
    graph_commands(world, make(world))


# ---------------------------------------------------------------------------
# model sources (these cases import TensorFlow): `package.module:attr` that builds no model,
# Keras files whose config carries code (issue 36 items 4 and 6)

# attributes that are no model builder; none does harm when called without arguments
NOT_BUILDERS = ["time:sleep", "os.path:join", "math:pi", "os:getcwd", "builtins:max",
                "builtins:dict", "json:dumps", "random:random", "string:ascii_letters",
                "collections:OrderedDict"]
SAFE_LAYERS = [
    {"class_name": "Dense", "module": "keras.layers", "config": {
        "name": "dense", "units": 2, "kernel_initializer": {
            "module": "keras.initializers", "class_name": "GlorotUniform",
            "config": {"seed": None}, "registered_name": None}}},
    {"class_name": "TFOpLambda", "module": "tf_keras.src.layers.core.tf_op_layer",
     "config": {"name": "tf.math.add", "function": "math.add"}},  # a TF op, not code
]
CODE_LAYERS = {  # config item that carries code -> the words naming it in the refusal
    "lambda": ({"class_name": "Lambda", "config": {
        "name": "code", "function": ["4wIAAAAAAAAA", None, None], "function_type": "lambda",
        "module": "__main__"}}, "layer 'code' is a Lambda"),
    "named function": ({"class_name": "Lambda", "config": {
        "name": "code", "function": "system", "function_type": "function", "module": "os"}},
        "layer 'code' is a Lambda"),
    "__lambda__": ({"class_name": "Dense", "config": {
        "name": "code", "units": 1, "activation": {"class_name": "__lambda__",
                                                   "config": {"code": "4wIAAAAAAAAA"}}}},
        "layer 'code' is a __lambda__"),
    "module": ({"class_name": "Popen", "module": "subprocess", "registered_name": "Popen",
                "config": {"name": "code"}}, "layer 'code' names module 'subprocess'"),
}


def keras_file_with_code(world, data) -> tuple[Path, str]:
    """A `.h5` or `.keras` file whose model config holds a code-carrying item among safe
    layers, nested 0-2 models deep, and the words its refusal must hold."""
    import h5py

    item, words = CODE_LAYERS[data.draw(st.sampled_from(sorted(CODE_LAYERS)))]
    for depth in range(data.draw(st.integers(0, 2))):
        layers = data.draw(st.permutations(SAFE_LAYERS + [item]))
        item = {"class_name": "Functional", "config": {"name": f"inner{depth}",
                                                       "layers": list(layers)}}
    layers = data.draw(st.permutations(SAFE_LAYERS + [item]))
    config = json.dumps({"class_name": "Functional", "module": "keras.src.models.functional",
                         "config": {"name": "model", "layers": list(layers)}})
    version = data.draw(st.sampled_from(["2.21.0", "3.15.1"]))
    path = fresh(world, "code").with_suffix(data.draw(st.sampled_from([".h5", ".keras"])))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".h5":
        with h5py.File(path, "w") as f:
            f.attrs["model_config"], f.attrs["keras_version"] = config, version
    else:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("config.json", config)
            archive.writestr("metadata.json", json.dumps({"keras_version": version}))
    return path, f"{path}: {words}"


def model_source_case(world, data) -> None:
    if data.draw(st.booleans()):
        source = data.draw(st.sampled_from(NOT_BUILDERS))
        words = source
    else:
        path, words = keras_file_with_code(world, data)
        source = str(path)
    command = data.draw(st.sampled_from(["import", "optimize"]))
    argv = [command, source, "--out", str(fresh(world, "src")) + ".npz"] + \
        (["--devices", "2"] if command == "optimize" else [])
    code, _, err = run_cli("models", argv)
    assert code == 2 and words in err, (argv, err)


@scaled(20, 300)
def test_fuzz_model_sources(world, examples):
    fuzz(examples, lambda data: model_source_case(world, data))


# ---------------------------------------------------------------------------
# issue 36: every output survives a full disk, a second writer and a reader that stops
# early. These run `regal` in a child (helpers.run_regal): a file-size limit or a closed
# stdout cannot be set up in this process.


def no_temporary_files(folder: Path) -> None:
    left = [p for p in folder.rglob(".*") if ".tmp" in p.name]
    assert not left, left


def disk_case(world, name: str, folder: Path) -> tuple[list[str], Path]:
    """`folder` holding what a command's output was before it runs again: (argv, output)."""
    graph, graphs = str(world["graph"]), str(world["graphs"])
    folder.mkdir(parents=True)
    if name == "optimize":  # `--init keep.json --out keep.json`: the file it starts from
        out = folder / "keep.json"
        solution = world["root"] / "keep.json"
        if not solution.exists():
            run_cli("disk", ["optimize", graph, "--devices", "2", "--budget", "100", "--out",
                             str(solution)])
        shutil.copy(solution, out)
        return ["optimize", graph, "--devices", "2", "--budget", "100", "--init", str(out),
                "--out", str(out)], out
    if name == "plot":
        out = folder / "p.png"
        out.write_bytes(b"the previous plot")
        return ["optimize", graph, "--devices", "2", "--budget", "100", "--plot", str(out)], out
    if name == "compare":  # appends 4 records (seed 2) to the 8 there
        out = folder / harness.RECORDS_FILE
        out.write_bytes(b"".join(world["lines"]))
        return ["compare", "--methods", "random,brkga", "--graphs", graphs, "--budget", "100",
                "--seeds", "3", "--workers", "1", "--quiet", "--out", str(folder)], out
    if name == "best-known":
        out = folder / "bk.jsonl"  # a store line from before (a file of none is no store)
        out.write_bytes(b'{"kind": "effort", "fingerprint": "0000000000000000", "devices": 2, '
                        b'"memory_limit": null, "objective": "peak_memory", "seconds": 1.0}\n')
        return ["best-known", graph, "--devices", "2", "--time-per-graph", "1", "--workers",
                "1", "--quiet", "--out", str(out)], out
    if name == "import":
        out = folder / "g.pbtxt"
        out.write_bytes(b"the previous graph file")
        return ["import", graph, "--out", str(out)], out
    out = folder / "synth"  # data synth: a folder of graphs and recipe.json
    return ["data", "synth", "--count", "2", "--min-ops", "60", "--max-ops", "80", "--seed",
            "1", "--quiet", "--out", str(out)], out


def check_disk_case(name: str, code: int, err: str, out: Path, before: bytes | None) -> None:
    """Exit 0 with whole outputs, or exit 2 with one line and the previous output kept."""
    from helpers import one_error_line

    assert code in (0, 2), (name, code, err)
    if code == 2:
        line = one_error_line(err)
        assert "File too large" in line and str(out.parent) in line, line
    if name in ("compare", "best-known"):  # appends: the lines before, then whole lines
        data = out.read_bytes()
        assert data.startswith(before) and data.endswith(b"\n"), data[-200:]
        for line in data.splitlines():
            strict_json(line)
    elif name == "data synth":
        for path in out.glob("*.npz"):
            load_graph(path)  # no torn graph that a rerun would keep as done
        if (out / "recipe.json").exists():
            strict_json((out / "recipe.json").read_text())
    elif code == 2:
        assert out.read_bytes() == before
    elif name == "optimize":
        strict_json(out.read_text())
    elif name == "plot":
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        load_graph(out)
    no_temporary_files(out.parent)


DISK_COMMANDS = ["optimize", "plot", "compare", "best-known", "import", "data synth"]


@pytest.fixture(scope="module")
def output_sizes(world):
    """The size of the largest file each command writes, unconstrained (the limits below
    are fractions of it, so that a write fails at its start, its middle or not at all)."""
    sizes = {}
    for name in DISK_COMMANDS:
        argv, out = disk_case(world, name, fresh(world, "free"))
        assert run_cli("disk", argv)[0] == 0
        folder = out if out.is_dir() else out.parent
        sizes[name] = max(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return sizes


@pytest.mark.parametrize("name", DISK_COMMANDS)
@pytest.mark.parametrize("fraction", [
    pytest.param(0.5, id="default"),
    *[pytest.param(f, id=f"slow{f}", marks=pytest.mark.slow) for f in (0, 0.1, 0.9, 0.99, 2)]])
def test_fuzz_full_disk(world, output_sizes, name, fraction):
    """No file may grow past `fraction` of the command's largest output (RLIMIT_FSIZE: the
    write fails with EFBIG, as on a full disk), or 64 bytes."""
    from helpers import run_regal

    argv, out = disk_case(world, name, fresh(world, "disk"))
    before = out.read_bytes() if out.is_file() else None
    # 64 bytes at least: below that, numba's semaphore in /dev/shm fails, with a warning
    code, _, err = run_regal(argv, file_limit=max(64, int(fraction * output_sizes[name])))
    STATS["full disk", f"exit {code}"] += 1
    check_disk_case(name, code, err, out, before)
    if fraction < 1 and name in ("compare", "best-known", "data synth"):
        assert code == 2  # the append, or a graph, failed: the rerun resumes and completes
        code, _, err = run_regal(argv)
        assert code == 0, err
        check_disk_case(name, code, err, out, before)


@pytest.mark.parametrize("name", ["compare", "best-known"])
def test_fuzz_concurrent_writers(world, name):
    """Two builds of one store, two experiments into one folder, started together: one
    does the work, the other is refused at once (or, started after the first finished,
    finds nothing left to do); no run or chunk is done twice."""
    import subprocess
    import sys

    from helpers import ROOT, one_error_line

    folder = fresh(world, "race")
    folder.mkdir(parents=True)
    if name == "compare":
        argv = ["compare", "--methods", "random,brkga", "--graphs", str(world["graphs"]),
                "--budget", "100", "--seeds", "2", "--workers", "1", "--quiet", "--out",
                str(folder)]
        busy = "another experiment is writing"
    else:
        argv = ["best-known", str(world["graph"]), "--devices", "2", "--time-per-graph", "2",
                "--workers", "1", "--quiet", "--out", str(folder / "bk.jsonl")]
        busy = "another process is writing it"
    env = {k: v for k, v in os.environ.items() if k != "REGAL_DEBUG"}
    procs = [subprocess.Popen([sys.executable, "-m", "regal.cli", *argv], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    codes = sorted(code for code, _, _ in results)
    STATS["concurrent writers", str(codes)] += 1
    assert codes in ([0, 2], [0, 0]), results
    for code, out, err in results:
        if code == 2:
            assert busy in one_error_line(err)
    if name == "compare":
        records = harness.read_records(folder / harness.RECORDS_FILE)
        assert len(records) == len({harness.record_key(r) for r in records}) == 8
    else:
        lines = [strict_json(line) for line in (folder / "bk.jsonl").read_text().splitlines()]
        assert sum(r.get("kind") == "effort" for r in lines) == 1  # one build's one chunk


PIPE_COMMANDS = {
    "optimize": lambda world, out: ["optimize", str(world["graph"]), "--devices", "2",
                                    "--budget", "100", "--out", str(out / "s.json")],
    "infeasible": lambda world, out: ["optimize", str(world["graph"]), "--devices", "2",
                                      "--budget", "100", "--memory-limit", "1", "--out",
                                      str(out / "s.json")],
    "report": lambda world, out: ["report", str(world["results"]), "--out", str(out),
                                  "--no-chart", "--no-bounds"],
    "data info": lambda world, out: ["data", "info", str(world["graph"]),
                                     str(world["root"] / "graph.pbtxt")],
    "compare": lambda world, out: ["compare", "--methods", "random,brkga", "--graphs",
                                   str(world["graphs"]), "--budget", "100", "--seeds", "2",
                                   "--workers", "1", "--quiet", "--out", str(world["results"])],
}


@pytest.mark.parametrize("name", sorted(PIPE_COMMANDS))
@pytest.mark.parametrize("lines", [pytest.param(0, id="default"),
                                   pytest.param(1, id="slow1", marks=pytest.mark.slow),
                                   pytest.param(3, id="slow3", marks=pytest.mark.slow)])
def test_fuzz_closed_pipes(world, name, lines):
    """`regal ... | head -N`: the reader takes N lines and goes. Not an error: the command
    ends as it would have (its exit code, its files whole), with nothing on stderr about
    the pipe."""
    from helpers import run_regal

    out = fresh(world, "pipe")
    out.mkdir(parents=True)
    argv = PIPE_COMMANDS[name](world, out)
    code, stdout, err = run_regal(argv, read_lines=lines)
    STATS["closed pipes", f"exit {code}"] += 1
    assert code == (3 if name == "infeasible" else 0), err
    assert "Traceback" not in err and "BrokenPipe" not in err and "error" not in err, err
    assert stdout.count("\n") <= lines
    if name in ("optimize", "infeasible"):
        record = strict_json((out / "s.json").read_text())
        assert len(record["ops"]) == record["graph"]["ops"]
    if name == "report":
        check_table((out / "table.csv").read_text())
