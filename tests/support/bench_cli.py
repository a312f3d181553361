"""`strix bench ARGV` in-process, through the same argparse registration the CLI uses."""

from __future__ import annotations

import argparse

from strix_pipeline.cli import bench as cli_bench


def bench(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    cli_bench.register(parser.add_subparsers())
    args = parser.parse_args(["bench", *argv])
    return int(args.func(args))
