"""`strix query "SQL"`, `strix export --parquet DIR` (read-only) and `strix import --parquet DIR | FILE`.

`strix import FILE` loads another tool's result file as a run (:mod:`strix_pipeline.peers`).

Query and export open the file read-only, so a write statement fails inside DuckDB itself (not by our
parsing of the SQL); all three wait briefly when a benchmark run is writing, then say why they cannot.
Query's connection is also sandboxed by DuckDB's own settings (``Warehouse.open(sandbox=True)``): the
SQL reads the warehouse and nothing else -- no COPY to or from files, no read_csv/read_text/glob of
other files, no ATTACH, no INSTALL/LOAD, no SET/RESET. Export keeps a plain read-only connection
(it COPYs to Parquet files); import a writable one.

Output follows the DuckDB CLI's habits: ``--format`` table (duckbox-like: a result wider than the
terminal keeps its first and last columns and hides the middle ones behind a ``…`` column, long
values are cut with ``…``; it never switches to another shape), csv, json (one array), jsonl (one
object per line), markdown (a GitHub table), line (``column = value``, one block per row), parquet.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import duckdb
import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text

from strix_pipeline.cli.common import (
    error,
    lock_wait_arg,
    on_warehouse,
    open_warehouse,
    warehouse_arg,
    warehouse_path,
)
from strix_pipeline.config import DuckLakeTarget, config_path
from strix_pipeline.config_load import load_config
from strix_pipeline.peers import FORMATS as PEER_FORMATS
from strix_pipeline.peers import ImportOptions, PeerFormatError, load_peer_file
from strix_pipeline.warehouse import Warehouse, WarehouseError
from strix_pipeline.warehouse.spool import spool_dir

T = TypeVar("T")

FORMATS = ("table", "csv", "json", "jsonl", "markdown", "line", "parquet")
TEXT_FORMATS = ("csv", "json", "jsonl", "markdown", "line")
MAX_CELL = 32  # characters a table cell shows before it is cut with "…" (the full value: --format line)
DEFAULT_TIMEOUT_S = 300.0  # a query that runs longer is stopped (--timeout); it holds the file meanwhile


def register(sub: argparse._SubParsersAction) -> None:
    q = sub.add_parser(
        "query",
        help="run read-only SQL against the warehouse",
        description="Run SQL against the warehouse, opened read-only; the SQL can read no other file, write "
        "none, attach no database, load no extension and change no setting. Views: v_runs, v_latest_by_engine, "
        "v_ttft_at_concurrency, v_prefill_ladder, v_memory, v_decisions, v_compare, v_support_matrix, "
        "v_server_metrics (see docs/warehouse.md). Formats as in the DuckDB CLI: table (wide results hide "
        "middle columns, never change shape), csv, json, jsonl, markdown, line; and parquet.",
    )
    q.add_argument("sql", help='the query, e.g. "SELECT * FROM v_latest_by_engine"')
    q.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    q.add_argument(
        "--out",
        help="write to this new file instead of stdout (required for parquet; not for table); never the "
        "warehouse, its WAL, the spool or the configuration",
    )
    q.add_argument("--force", action="store_true", help="let --out replace an existing file")
    q.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"stop the query after this long (default {DEFAULT_TIMEOUT_S:g}; 0: no limit); while it runs, "
        "no writer can load into a warehouse file",
    )
    q.add_argument(
        "--memory-limit",
        metavar="SIZE",
        help="DuckDB memory limit for the query, e.g. 2GB (default DuckDB's: 80%% of RAM); a query needing "
        "more fails (it has no spill directory)",
    )
    q.add_argument(
        "--limit",
        type=int,
        default=200,
        help="rows shown by --format table (default 200); the other formats give every row",
    )
    _common(q)
    q.set_defaults(func=run_query)

    e = sub.add_parser("export", help="write every warehouse table to Parquet files")
    e.add_argument("--parquet", required=True, metavar="DIR", help="directory for <table>.parquet files")
    e.add_argument("--table", action="append", help="only this table (repeatable)")
    _common(e)
    e.set_defaults(func=run_export)

    i = sub.add_parser(
        "import",
        help="load a `strix export --parquet` directory, or another tool's result file, into the warehouse",
        description="Load a `strix export --parquet` directory (e.g. from another Box), or one result file of "
        "another tool as a run: vLLM `bench serve --save-result` JSON, GuideLLM 0.8 benchmarks JSON, AIPerf "
        "0.13 profile_export_aiperf.json, `llama-bench -o json`/`jsonl`. A peer run records the tool and its "
        "version as its harness_version, so its fingerprint is its own and it never joins a strix series; "
        "v_compare sets it beside a strix run of the same host, scenario and level. A file no reader knows, "
        "or one with a missing or malformed field, is refused with the field named and loads nothing.",
    )
    i.add_argument("file", nargs="?", metavar="FILE", help="another tool's result file (see --format)")
    i.add_argument("--parquet", metavar="DIR", help="directory holding <table>.parquet files")
    i.add_argument(
        "--format",
        choices=tuple(PEER_FORMATS),
        help="which tool wrote FILE (default: told from the file's keys)",
    )
    i.add_argument(
        "--tool-version",
        help="the tool's version where the file does not record it (vLLM's result JSON; a llama-bench "
        "built from a source archive), e.g. 0.32.0",
    )
    i.add_argument(
        "--host", default="adhoc", help="host the run is recorded on (default adhoc, as strix bench --save)"
    )
    i.add_argument("--engine", help="engine kind that served the run, e.g. llamacpp, vllm (default: from the file, else unknown)")  # fmt: skip
    i.add_argument("--model", help="model name (default: from the file)")
    i.add_argument("--quantization", help="quantization (default: from the file, else unknown)")
    i.add_argument("--scenario", help="scenario name of the run's levels (default: per tool, e.g. random)")
    i.add_argument("--run-id", help="run id (default: <tool>-<hash of the file>, so a re-import replaces)")
    i.add_argument(
        "--replace",
        action="store_true",
        help="let the imported runs and decisions replace the ones of the same ids (without it, an id "
        "already in the warehouse is refused, named, and nothing is imported; a FILE imported again under "
        "its default run id replaces its earlier import)",
    )
    _common(i)
    i.set_defaults(func=run_import)


def _common(p: argparse.ArgumentParser) -> None:
    warehouse_arg(p)
    lock_wait_arg(p)


def _open(args: argparse.Namespace, *, read_only: bool = True, sandbox: bool = False) -> Warehouse:
    extra = {"sandbox": True, "memory_limit": getattr(args, "memory_limit", None)} if sandbox else {}
    return open_warehouse(
        args,
        read_only=read_only,
        lock_retry_s=args.lock_wait,
        on_wait=lambda msg: print(f"strix: {msg}", file=sys.stderr),
        **extra,
    )


def _protected(args: argparse.Namespace) -> list[tuple[Path, str]]:
    """The files and folders --out must never be (or be inside): the warehouse and its WAL and spill
    directory (or the lake's data directory), the spool, the configuration."""
    found: list[tuple[Path, str]] = []
    try:
        target = warehouse_path(args)
    except Exception:  # noqa: BLE001 - the open that follows says what is wrong with the configuration
        target = None
    if isinstance(target, DuckLakeTarget):
        found.append((target.data_path, "the DuckLake warehouse's data directory"))
    elif target is not None:
        found.append((target, "the warehouse"))
        for suffix in (".wal", ".wal.checkpoint", ".wal.recovery", ".tmp"):
            found.append((Path(f"{target}{suffix}"), "the warehouse's WAL/spill file"))
    cfg = Path(args.config) if getattr(args, "config", None) else config_path()
    found.append((cfg, "the configuration"))
    try:
        found.append((spool_dir(load_config(getattr(args, "config", None)).artifacts_dir()), "the spool"))
    except Exception:  # noqa: BLE001, S110 - no readable configuration: no spool to protect
        pass
    return found


def _within(path: Path, folder: Path) -> bool:
    try:
        if path.exists() and folder.exists() and os.path.samefile(path, folder):
            return True
    except OSError:
        pass
    p, f = path.resolve(), folder.resolve()
    return p == f or f in p.parents


def check_out(args: argparse.Namespace) -> str | None:
    """Why ``--out`` cannot be written (one line), or None."""
    out = Path(args.out)
    for place, what in _protected(args):
        if _within(out, place):
            return f"--out {out}: that is {what} ({place}); choose another file"
    if out.is_dir():
        return f"--out {out}: is a directory; give a file name"
    if not out.resolve().parent.is_dir():
        return f"--out {out}: the directory {out.resolve().parent} does not exist"
    if out.exists() and not args.force:
        return f"--out {out}: the file exists; --force replaces it"
    return None


def run_query(args: argparse.Namespace) -> int:
    if args.format == "parquet" and not args.out:
        return error("--format parquet needs --out FILE")
    if args.out and args.format != "table":
        refused = check_out(args)
        if refused:
            return error(refused)
    if args.timeout < 0:
        return error(f"--timeout {args.timeout:g}: give seconds, or 0 for no limit")
    try:
        wh = _open(args, sandbox=True)
    except WarehouseError as e:
        return error(str(e))
    with wh:
        # DuckDB has no statement timeout: a timer interrupts the connection (as Ctrl-C does)
        timer = threading.Timer(args.timeout, wh.con.interrupt) if args.timeout else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            types: list[str] | None = None
            if args.format == "table":
                # the terminal shows --limit rows: fetch one more to know whether there were more
                rel = wh.con.sql(args.sql)
                df = rel.limit(args.limit + 1).pl() if rel is not None else pl.DataFrame()
                types = [str(t).lower() for t in rel.types] if rel is not None else None
            else:
                df = wh.query_df(args.sql)
        except duckdb.InterruptException as e:
            if timer is not None and timer.finished.is_set():
                return error(
                    f"query stopped after its --timeout of {args.timeout:g}s (--timeout N for longer, 0 for "
                    f"no limit); nothing was changed ({e})"
                )
            return error(f"query interrupted; nothing was changed ({e})")
        except duckdb.OutOfMemoryException as e:
            return error(
                f"query needs more memory than its limit (--memory-limit); nothing was changed ({e})"
            )
        except duckdb.CatalogException as e:
            if "extension" in str(e) and "exists in the" in str(e):  # e.g. postgres_query on the lake
                return error(
                    "strix query reads the warehouse and nothing else (no files, other databases or "
                    f"extensions); nothing was read or written ({str(e).splitlines()[0]})"
                )
            return error(f"query failed: {e}")
        except duckdb.PermissionException as e:
            return error(
                "strix query reads the warehouse and nothing else (no files, other databases or "
                f"extensions); nothing was read or written ({e})"
            )
        except duckdb.InvalidInputException as e:
            if "read-only" in str(e):
                return error(f"strix query is read-only; nothing was changed ({e})")
            if "configuration has been locked" in str(e):
                return error(f"strix query cannot change DuckDB settings; nothing was changed ({e})")
            return error(f"query failed: {e}")
        except duckdb.Error as e:
            return error(f"query failed: {e}")
        finally:
            if timer is not None:
                timer.cancel()
    return _emit(df, args, types)


# Control characters a terminal would act on (ESC starts ANSI/OSC sequences: colours, cursor moves,
# hyperlinks, the window title; C1's CSI as one byte; CR and BS overwrite what was shown) and the
# bidirectional overrides that reorder text: strings in the warehouse come from outside (a model name,
# an image label), so the text formats show each as \xNN or \uNNNN. json escapes them itself.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(s: str, keep: str = "") -> str:
    """``s`` with every control character but those in ``keep`` written out as an escape."""

    def esc(m: re.Match[str]) -> str:
        c = m.group()
        if c in keep:
            return c
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    return _CONTROL.sub(esc, s)


def _visible_frame(df: pl.DataFrame, keep: str) -> pl.DataFrame:
    strings = [c for c, t in df.schema.items() if t == pl.String]
    df = df.with_columns(
        pl.col(c).map_elements(lambda v: visible(v, keep), return_dtype=pl.String) for c in strings
    )
    return df.rename({c: visible(c) for c in df.columns if visible(c) != c})


def _flatten(df: pl.DataFrame) -> pl.DataFrame:
    # CSV has no nested values: lists and structs become JSON text.
    nested = [c for c, t in df.schema.items() if isinstance(t, (pl.List, pl.Array, pl.Struct, pl.Map))]
    if not nested:
        return df
    return df.with_columns(
        pl.Series(c, [json.dumps(v, default=str) for v in df[c].to_list()], dtype=pl.String) for c in nested
    )


def _emit(df: pl.DataFrame, args: argparse.Namespace, types: list[str] | None = None) -> int:
    out = Path(args.out) if args.out else None
    if args.format == "parquet":
        assert out is not None
        try:
            with open(out, "wb" if args.force else "xb") as f:  # "x": a file made meanwhile is kept
                df.write_parquet(f)
        except OSError as e:
            return error(f"--out {out}: cannot write it: {e.strerror or e}")
        print(f"{df.height} rows -> {out}", file=sys.stderr)
        return 0
    if args.format == "table":
        if out is not None:
            return error(
                f"--out is for {', '.join(TEXT_FORMATS)} and parquet; --format table prints to the terminal"
            )
        _print_table(df, args.limit, types)
        return 0
    text = render(df, args.format)
    if out is not None:
        try:
            with open(out, "w" if args.force else "x") as f:
                f.write(text)
        except OSError as e:
            return error(f"--out {out}: cannot write it: {e.strerror or e}")
        print(f"{df.height} rows -> {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def render(df: pl.DataFrame, fmt: str) -> str:
    """The whole result as text in one of TEXT_FORMATS (every row, every column, values uncut)."""
    if fmt == "csv":
        return _visible_frame(_flatten(df), keep="\n\t").write_csv()
    if fmt == "json":
        return json.dumps(df.to_dicts(), default=str, indent=1) + "\n"
    if fmt == "jsonl":
        return "".join(json.dumps(rec, default=str) + "\n" for rec in df.to_dicts())
    if fmt == "markdown":
        return _markdown(df)
    if fmt == "line":
        return _lines(df)
    raise ValueError(f"not a text format: {fmt}")


def _text(v: object, null: str = "NULL") -> str:
    """A value as plain text, the way the DuckDB CLI prints it (booleans lower case, nested as JSON)."""
    if v is None:
        return null
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict)):
        return json.dumps(v, default=str)
    return str(v)


def _markdown(df: pl.DataFrame) -> str:
    """A GitHub-flavoured table: numbers right-aligned, `|` escaped, line breaks as <br>, NULL empty."""

    def cell(v: object) -> str:
        text = _text(v, null="").replace("|", "\\|").replace("\r\n", "<br>").replace("\n", "<br>")
        return visible(text)

    header = [visible(c).replace("|", "\\|") for c in df.columns]
    rows = [[cell(v) for v in row] for row in df.iter_rows()]
    right = [df.schema[c].is_numeric() for c in df.columns]
    widths = [max([len(h), 3] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        padded = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)]
        return "| " + " | ".join(padded) + " |"

    rule = (
        "|"
        + "|".join(("-" * (w + 1) + ":") if r else "-" * (w + 2) for w, r in zip(widths, right, strict=True))
        + "|"
    )
    if not df.columns:
        return ""
    return "\n".join([line(header), rule, *(line(r) for r in rows)]) + "\n"


def _lines(df: pl.DataFrame) -> str:
    """DuckDB's (and sqlite's) line mode: `column = value`, names right-aligned, a blank line between rows."""
    if not df.columns:
        return ""
    w = max(len(visible(c)) for c in df.columns)
    blocks = [
        "\n".join(
            f"{visible(name):>{w}} = {visible(_text(v), keep=chr(10))}"
            for name, v in zip(df.columns, row, strict=True)
        )
        for row in df.iter_rows()
    ]
    return "".join(b + "\n\n" for b in blocks)


def _cell(v: object) -> Text:
    if v is None:
        return Text("∅", style="dim")
    if isinstance(v, float):
        s = f"{v:.4g}" if abs(v) < 1e6 else f"{v:.6g}"
    else:
        s = _text(v)
    s = visible(s.replace("\r\n", "↵").replace("\n", "↵"))
    if len(s) > MAX_CELL:
        s = s[: MAX_CELL - 1] + "…"
    return Text(s)


def shown_columns(widths: list[int], available: int) -> tuple[list[int], list[int]]:
    """Which columns a table of these widths shows in `available` characters: all of them, or the first
    and last ones taken alternately from both ends (as DuckDB's duckbox does), the middle hidden
    behind one `…` column. Returns (left, right) column indexes; at least one column is shown."""
    cost = [w + 3 for w in widths]  # a cell's padding and its border
    if sum(cost) + 1 <= available:
        return list(range(len(widths))), []
    budget = available - 1 - 4  # the left edge and the "…" column
    left: list[int] = []
    right: list[int] = []
    lo, hi = 0, len(widths) - 1
    take_left = True
    while lo <= hi:
        i = lo if take_left else hi
        if cost[i] > budget:
            break
        budget -= cost[i]
        if take_left:
            left.append(i)
            lo += 1
        else:
            right.insert(0, i)
            hi -= 1
        take_left = not take_left
    if not left and not right:
        left = [0]
    return left, right


def _print_table(df: pl.DataFrame, limit: int, types: list[str] | None = None) -> None:
    console = Console()
    shown = df.head(limit)
    cells = [[_cell(v) for v in row] for row in shown.iter_rows()]
    types = types if types is not None and len(types) == len(df.columns) else None
    names = [visible(name) for name in df.columns]
    heads = [name if len(name) <= MAX_CELL else name[: MAX_CELL - 1] + "…" for name in names]
    kinds = (
        [(t if len(t) <= MAX_CELL else t[: MAX_CELL - 1] + "…") for t in map(visible, types)]
        if types
        else None
    )
    widths = [
        max([len(heads[i]), len(kinds[i]) if kinds else 0] + [r[i].cell_len for r in cells])
        for i in range(len(df.columns))
    ]
    left, right = shown_columns(widths, console.width)
    hidden = len(df.columns) - len(left) - len(right)
    table = Table(header_style="bold")

    def add(i: int) -> None:
        header = Text(heads[i], style="bold")
        if kinds:
            header.append("\n" + kinds[i], style="dim")
        numeric = df.schema[df.columns[i]].is_numeric()
        # the width is fixed here, so the table never folds or re-flows a column
        table.add_column(
            header,
            justify="right" if numeric else "left",
            no_wrap=True,
            overflow="ellipsis",
            min_width=min(widths[i], max(console.width - 5, 1)),
            max_width=max(console.width - 5, 1),
        )

    for i in left:
        add(i)
    if hidden:
        table.add_column(Text("…\n" if kinds else "…"), no_wrap=True, min_width=1, max_width=1)
    for i in right:
        add(i)
    for row in cells:
        table.add_row(*([row[i] for i in left] + ([Text("…")] if hidden else []) + [row[i] for i in right]))
    console.print(table)
    rows = (
        f"first {limit} rows shown; there are more (--limit N, or --format csv)"
        if df.height > limit
        else f"{df.height} row(s)"
    )
    cols = (
        f"; {len(df.columns)} columns, {len(df.columns) - hidden} shown (--format line shows every column)"
        if hidden
        else ""
    )
    console.print(Text(rows + cols, style="dim"))


def _on_warehouse(
    args: argparse.Namespace, action: Callable[[Warehouse], T], failure: str, *, read_only: bool = True
) -> tuple[T | None, int]:
    """``on_warehouse`` with this module's opening (its lock wait and notice)."""
    return on_warehouse(args, action, failure, read_only=read_only, opener=_open)


def run_export(args: argparse.Namespace) -> int:
    def export(wh: Warehouse) -> tuple[dict[str, Path], dict[str, int]]:
        written = wh.export_parquet(args.parquet, args.table)
        return written, {t: wh.count(t) for t in written}

    done, rc = _on_warehouse(args, export, "export failed")
    if done is None:
        return rc
    written, counts = done
    for t, p in written.items():
        print(f"{t:<16} {counts[t]:>10} rows -> {p}")
    return 0


def run_import(args: argparse.Namespace) -> int:
    if (args.file is None) == (args.parquet is None):
        return error("strix import: give a result FILE of another tool, or --parquet DIR (not both)")
    if args.file is not None:
        return run_import_peer(args)
    counts, rc = _on_warehouse(
        args,
        lambda wh: wh.import_parquet(args.parquet, replace=args.replace),
        "import failed, nothing was changed",
        read_only=False,
    )
    if counts is None:
        return rc
    for t, n in counts.items():
        print(f"{t:<16} {n:>10} rows imported")
    return 0


def run_import_peer(args: argparse.Namespace) -> int:
    """One result file of another tool, loaded as one run (all of it, or nothing)."""
    # the command's options are named as ImportOptions' fields
    opts = ImportOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ImportOptions)})
    try:
        result = load_peer_file(args.file, args.format, opts)
    except PeerFormatError as e:
        return error(f"import refused, nothing was loaded: {e}")

    def load(wh: Warehouse):  # noqa: ANN202 - the loaded run's record
        # the default id is the file's hash: only the same file's earlier import has it; a --run-id
        # may name any run, a strix benchmark's included
        if opts.run_id is not None and not args.replace and wh.count("runs", opts.run_id):
            raise WarehouseError(
                f"run {opts.run_id} is already in the warehouse; give --replace to replace it with {args.file}"
            )
        wh.load_run(result)
        return result.run

    run, rc = _on_warehouse(args, load, "import failed, nothing was changed", read_only=False)
    if run is None:
        return rc
    print(
        f"run {run.run_id}: {run.harness_version}, {len(result.aggregates)} level(s), fingerprint {run.fingerprint}"
    )
    for a in result.aggregates:
        ttft = "-" if a.ttft_p50_ms is None else f"{a.ttft_p50_ms:.2f} ms"
        out = "-" if a.output_tokens_per_s is None else f"{a.output_tokens_per_s:.2f} tok/s"
        pre = "" if a.prefill_tokens_per_s is None else f"  prefill {a.prefill_tokens_per_s:.2f} tok/s"
        print(f"  {a.scenario:<12} {a.level_kind} {a.level:<6} TTFT p50 {ttft:<12} output {out}{pre}")
    return 0
