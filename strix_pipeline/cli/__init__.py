"""`strix`: the command line. Each command group is a module of this package with a `register(subparsers)`.

Commands call the domain (strix_pipeline); none imports Dagster: `strix run` starts the Dagster layer
as its own process (see run.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from strix_pipeline.config import ConfigError
from strix_pipeline.signals import restore_default_sigint

# Modules that add sub-commands; each defines register(subparsers) and sets `func` on its parsers.
COMMAND_MODULES = (
    "strix_pipeline.cli.doctor",
    "strix_pipeline.cli.run",
    "strix_pipeline.cli.history",
    "strix_pipeline.cli.bisect",
    "strix_pipeline.cli.compare",
    "strix_pipeline.cli.plan",
    "strix_pipeline.cli.bench",
    "strix_pipeline.cli.query",
    "strix_pipeline.cli.images",
    "strix_pipeline.cli.decide",
    "strix_pipeline.cli.report",
    "strix_pipeline.cli.spool",
    "strix_pipeline.cli.migrate",
    "strix_pipeline.cli.workload",
    "strix_pipeline.cli.backup",
    "strix_pipeline.cli.controller",
    "strix_pipeline.cli.production",
    "strix_pipeline.cli.box",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strix",
        description="Benchmark LLM inference engines, keep every result, decide when to switch the Box.",
    )
    parser.add_argument(
        "--config",
        help="configuration file (default: $STRIX_CONFIG, else ./strix.toml, else the embedded default)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    restore_default_sigint()  # started from a script's `&`, Ctrl-C must still stop a run
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(f"strix: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("strix: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
