"""`strix workload import FILE`: a recorded trace checked, stored for replay and summarised.

The file is parsed whole before anything is written (a bad line is named with its number and field,
and nothing is stored); then its normalised requests go to ``<artifacts>/traces/<name>.jsonl``
(traces/store.py) and its digests and summary to the warehouse's ``traces`` table. A profile replays it
with ``[profiles.<name>.trace] name = "<name>"``.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.table import Table

from strix_pipeline.cli.common import as_markup, config_of, error, on_warehouse, warehouse_arg
from strix_pipeline.config.rules import NAME_RULE, Name
from strix_pipeline.traces.formats import FORMATS, read_trace
from strix_pipeline.traces.model import TraceError
from strix_pipeline.traces.store import save_trace
from strix_pipeline.traces.summary import TraceSummary, summarise
from strix_pipeline.warehouse import Warehouse
from strix_pipeline.warehouse.traces import TraceRecord


def register(sub: argparse._SubParsersAction) -> None:
    w = sub.add_parser("workload", help="recorded traffic as a workload (import a trace)")
    wsub = w.add_subparsers(dest="workload_command", metavar="COMMAND")
    i = wsub.add_parser(
        "import",
        help="check a trace file, store it for replay and print its summary",
        description="Import a trace (an OpenAI-compatible request log, vLLM custom JSONL, ShareGPT JSON, "
        "an Azure LLM inference trace CSV or a Mooncake JSONL) under a name a profile's trace.name uses. "
        "Only lengths, arrival times and which prefix blocks requests share are kept, never text.",
    )
    i.add_argument("file", metavar="FILE")
    i.add_argument("--name", help="the name profiles use (default: the file's name without its suffix)")
    i.add_argument("--format", default="auto", choices=("auto", *FORMATS), help="default: detected")
    warehouse_arg(i)
    i.set_defaults(func=run_import)
    w.set_defaults(func=lambda args: (w.print_help(), 2)[1])


def default_name(path: Path) -> str:
    stem = path.name.split(".")[0]
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in stem)[:64] or "trace"


def summary_table(name: str, row: TraceRecord, s: TraceSummary) -> Table:
    def f(v: float | None, fmt: str = "{:.0f}") -> str:
        return "n/a" if v is None else fmt.format(v)

    t = Table(title=f"trace {name}")
    t.add_column("figure")
    t.add_column("value", justify="right")
    est = " (estimated from text)" if row.lengths_estimated else ""
    t.add_row("format", row.format)
    t.add_row("requests", str(s.requests))
    t.add_row(
        f"input tokens p50 / p90 / p99 / max{est}",
        f"{s.input_p50:.0f} / {s.input_p90:.0f} / {s.input_p99:.0f} / {s.input_max}",
    )
    t.add_row(
        f"output tokens p50 / p90 / p99 / max{est}",
        f"{s.output_p50:.0f} / {s.output_p90:.0f} / {s.output_p99:.0f} / {s.output_max}",
    )
    t.add_row("arrivals span (s)", f(s.span_s, "{:.1f}"))
    t.add_row("request rate (req/s)", f(s.rate_per_s, "{:.3f}"))
    t.add_row("concurrency mean / peak", f"{f(s.concurrency_mean, '{:.2f}')} / {f(s.concurrency_peak)}")
    t.add_row("prefix reuse (share of input tokens)", f"{s.prefix_reuse:.1%}")
    t.add_row("source digest", row.source_digest)
    t.add_row("stored as", row.content_digest)
    return t


def run_import(args: argparse.Namespace) -> int:
    path = Path(args.file)
    name = args.name or default_name(path)
    try:
        TypeAdapter(Name).validate_python(name)
    except ValidationError:
        return error(f"--name {name!r}: {NAME_RULE}")
    try:
        trace = read_trace(path, args.format)
    except TraceError as e:
        return error(str(e))
    config = config_of(args)
    stored = save_trace(config.traces_dir(), name, trace)
    s = summarise(trace)
    row = TraceRecord(
        name,
        datetime.now(UTC),
        trace.format,
        path.name,
        trace.source_digest,
        stored.content_digest,
        s.requests,
        trace.lengths_estimated,
        s.input_p50,
        s.input_p90,
        s.input_p99,
        s.input_max,
        s.output_p50,
        s.output_p90,
        s.output_p99,
        s.output_max,
        s.span_s,
        s.rate_per_s,
        s.concurrency_mean,
        s.concurrency_peak,
        s.prefix_reuse,
    )

    def keep(wh: Warehouse) -> None:
        wh.save_trace(row)

    _, rc = on_warehouse(args, keep, "storing the trace", read_only=False)
    if rc:
        return rc
    console = Console()
    console.print(summary_table(name, row, s))
    for note in trace.notes:
        console.print(as_markup(note))
    console.print(
        f"stored {as_markup(stored.path)}; replay it with [profiles.<profile>.trace] name = {name!r}"
    )
    return 0
