"""How far from optimal the step times are: the step-time lower bound (`regal.bounds_time`)
against a best-known store's step-time entries and a transfer run's step-time records
(tracker issue 39, item 4: a certified gap everywhere).

Why: the step-time searches had no certificate. Certified gap = 100 x (value - bound) /
bound, for each store key (graph, device count, memory limit) whose best entry fits, and for
each method's runs within the limits in `--records` (a mean over seeds per graph first).

    python experiments/certified_step_time.py --store data/bestknown/synth_test_makespan.jsonl \\
        --records experiments/results/transfer_full/records.jsonl \\
        --graphs runs/transfer_graphs/synth_test_100
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from regal.bounds_time import PROVEN_TOLERANCE  # noqa: E402
from regal.files import write_text  # noqa: E402
from regal.report import markdown_table  # noqa: E402
from regal.user_errors import UserError, refuse_empty  # noqa: E402

OUT = REPO / "experiments/results/certified_step_time.md"
METHODS = ("regal", "seeded-brkga", "local-search")


def _row(label: str, devices: int, gaps: list[float]) -> list[str]:
    return [label, str(devices), f"{len(gaps):,}", f"{statistics.median(gaps):.2f}",
            f"{statistics.fmean(gaps):.2f}", f"{max(gaps):.2f}",
            f"{sum(g <= 100 * PROVEN_TOLERANCE for g in gaps)}", f"{sum(g <= 5.0 for g in gaps)}"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="a best-known store")
    parser.add_argument("--records", type=Path, help="a transfer run's records.jsonl")
    parser.add_argument("--graphs", type=Path, nargs="+", required=True,
                        help="folders holding the graphs by file stem")
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    command = " ".join(["python experiments/certified_step_time.py",
                        *(sys.argv[1:] if argv is None else argv)])
    from regal.arguments import check_output
    from regal.bestknown_store import load_store
    from regal.bounds_time import step_time_bound
    from regal.harness import read_records
    from regal.records import current_revisions
    from regal.io import load_graph
    from regal.sim import DeviceSpec

    for flag, path in (("--store", args.store), ("--records", args.records)):
        if path is not None and not path.is_file():
            raise UserError(f"{flag} {path}: no such file")
    for folder in args.graphs:
        if not folder.is_dir():
            raise UserError(f"--graphs {folder}: no such folder")
    check_output("--out", args.out, inputs=(args.store, args.records))
    from regal import optimizers

    unknown = [m for m in args.methods if m not in optimizers.METHODS]
    if unknown:
        raise UserError(f"--methods: unknown method {unknown[0]!r}; one of "
                        f"{', '.join(optimizers.METHODS)}")
    graphs, bounds = {}, {}

    def bound_of(name: str, fingerprint: str, devices: int) -> float | None:
        if (fingerprint, devices) not in bounds:
            if fingerprint not in graphs:
                path = next((folder / f"{name}.npz" for folder in args.graphs
                             if (folder / f"{name}.npz").is_file()), None)
                graph = None if path is None else load_graph(path)
                graphs[fingerprint] = graph if graph is not None \
                    and graph.fingerprint() == fingerprint else None
            graph = graphs[fingerprint]
            bounds[(fingerprint, devices)] = None if graph is None else \
                step_time_bound(graph, DeviceSpec(devices)).value
        return bounds[(fingerprint, devices)]

    rows = []
    store, _ = load_store(args.store)
    by_devices: dict[int, list[float]] = {}
    for entry in store.values():
        if entry.objective != "makespan" or not entry.feasible:
            continue
        bound = bound_of(entry.graph, entry.fingerprint, entry.devices)
        if bound is not None:
            by_devices.setdefault(entry.devices, []).append(
                100.0 * (entry.value - bound) / bound)
    for devices in sorted(by_devices):
        rows.append(_row("best-known", devices, by_devices[devices]))
    if args.records:
        records = current_revisions([r for r in read_records(args.records)
                                     if r.get("objective") == "makespan"
                                     and r.get("method") in args.methods
                                     and r.get("status", "ok") == "ok"])
        per_graph: dict[tuple, list[float]] = {}
        for r in records:
            if not r.get("feasible"):
                continue
            bound = bound_of(r["graph"], r["fingerprint"], r["devices"])
            if bound is not None:
                per_graph.setdefault((r["method"], r["devices"], r["fingerprint"]), []).append(
                    100.0 * (float(r["value"]) - bound) / bound)
        # a records file of another run or script would drop the method rows silently
        refuse_empty(per_graph, f"--records {args.records}: no feasible step-time runs of "
                     f"{', '.join(args.methods)} at the current revisions on the graphs of "
                     "--graphs")
        for method in args.methods:
            for devices in sorted({k[1] for k in per_graph if k[0] == method}):
                gaps = [statistics.fmean(v) for k, v in per_graph.items()
                        if k[0] == method and k[1] == devices]
                rows.append(_row(method, devices, gaps))
    header = ["values", "devices", "keys or graphs", "median gap %", "mean %", "max %",
              "proven optimal", "within 5%"]
    text = ("# Certified step times: the step-time lower bound against the answers\n\n"
            f"Made by `{command}`. Lower bound: `regal.bounds_time.step_time_bound` (the "
            "longest path of least op durations, the least total duration / devices, a "
            "group's or a device's pinned ops' least total; valid under any memory limit). "
            "Gap = 100 x (step - bound) / bound: the answer is at most that far above the "
            "optimum. Best-known: each store key whose best entry fits. Methods: their runs "
            "within the limits at the current revisions, a mean over seeds per graph.\n\n"
            + "\n".join(markdown_table(header, rows, "lrrrrrrr")) + "\n")
    refuse_empty(rows, "--store/--records with --graphs (no graph of theirs found there)")
    print(text)
    write_text(args.out, text)
    return 0


if __name__ == "__main__":
    from regal.user_errors import report_user_errors

    sys.exit(report_user_errors("certified_step_time.py", main))
