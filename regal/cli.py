"""The `regal` command: argument parsing and calls, nothing else.

Heavy modules (TensorFlow, numba) are imported inside the command that needs
them, so `regal data info` on a CostGraphDef never pays for TensorFlow.
User errors print one line and exit with code 2 (set REGAL_DEBUG=1 for a traceback).
"""

from __future__ import annotations

import argparse
import os
import sys

EXIT_USAGE = 2


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
        print(f"{path}")
        for key, value in s.items():
            print(f"  {key:<18} {value}")
    return 0


# ---------------------------------------------------------------------------
# parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="regal", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    data = sub.add_parser("data", help="graph sets: inspect, generate, build")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    p = data_sub.add_parser("info", help="print ops, tensors, bytes and depth of graph files")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=cmd_data_info)

    return parser


def main(argv: list[str] | None = None) -> int:
    from regal.graph import GraphError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UserError, GraphError, FileNotFoundError, IsADirectoryError, PermissionError,
            ValueError) as exc:
        if os.environ.get("REGAL_DEBUG"):
            raise
        msg = str(exc) if not isinstance(exc, OSError) or not exc.filename else \
            f"{exc.strerror}: {exc.filename}"
        print(f"regal: error: {msg}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("regal: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
