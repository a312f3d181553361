"""`strix query "SQL"`, `strix export --parquet DIR` (read-only) and `strix import --parquet DIR`.

Query and export open the file read-only, so a write statement fails inside DuckDB itself (not by our
parsing of the SQL); all three wait briefly when a benchmark run is writing, then say why they cannot.
Query's connection is also sandboxed by DuckDB's own settings (``Warehouse.open(sandbox=True)``): the
SQL reads the warehouse and nothing else -- no COPY to or from files, no read_csv/read_text/glob of
other files, no ATTACH, no INSTALL/LOAD, no SET/RESET. Export keeps a plain read-only connection
(it COPYs to Parquet files); import a writable one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import duckdb
import polars as pl
from rich.console import Console
from rich.table import Table

from strix_pipeline.cli.common import error, open_warehouse, warehouse_arg
from strix_pipeline.warehouse import Warehouse, WarehouseError

FORMATS = ("table", "csv", "json", "parquet")


def register(sub: argparse._SubParsersAction) -> None:
    q = sub.add_parser(
        "query",
        help="run read-only SQL against the warehouse",
        description="Run SQL against the warehouse, opened read-only; the SQL can read no other file, write "
        "none, attach no database, load no extension and change no setting. Views: v_runs, v_latest_by_engine, "
        "v_ttft_at_concurrency, v_prefill_ladder, v_memory, v_decisions, v_compare (see docs/warehouse.md).",
    )
    q.add_argument("sql", help='the query, e.g. "SELECT * FROM v_latest_by_engine"')
    q.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    q.add_argument("--out", help="write to this file instead of stdout (required for parquet)")
    q.add_argument("--limit", type=int, default=200, help="rows shown by --format table (default 200)")
    _common(q)
    q.set_defaults(func=run_query)

    e = sub.add_parser("export", help="write every warehouse table to Parquet files")
    e.add_argument("--parquet", required=True, metavar="DIR", help="directory for <table>.parquet files")
    e.add_argument("--table", action="append", help="only this table (repeatable)")
    _common(e)
    e.set_defaults(func=run_export)

    i = sub.add_parser(
        "import",
        help="load a `strix export --parquet` directory (e.g. from another Box) into the warehouse",
    )
    i.add_argument("--parquet", required=True, metavar="DIR", help="directory holding <table>.parquet files")
    _common(i)
    i.set_defaults(func=run_import)


def _common(p: argparse.ArgumentParser) -> None:
    warehouse_arg(p)
    p.add_argument(
        "--lock-wait",
        type=float,
        default=10.0,
        help="seconds to wait while a writer holds the file (default 10)",
    )


def _open(args: argparse.Namespace, *, read_only: bool = True, sandbox: bool = False) -> Warehouse:
    return open_warehouse(
        args,
        read_only=read_only,
        lock_retry_s=args.lock_wait,
        on_wait=lambda msg: print(f"strix: {msg}", file=sys.stderr),
        sandbox=sandbox,
    )


def run_query(args: argparse.Namespace) -> int:
    if args.format == "parquet" and not args.out:
        return error("--format parquet needs --out FILE")
    try:
        wh = _open(args, sandbox=True)
    except WarehouseError as e:
        return error(str(e))
    with wh:
        try:
            if args.format == "table":
                # the terminal shows --limit rows: fetch one more to know whether there were more
                rel = wh.con.sql(args.sql)
                df = rel.limit(args.limit + 1).pl() if rel is not None else pl.DataFrame()
            else:
                df = wh.query_df(args.sql)
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
    return _emit(df, args)


def _flatten(df: pl.DataFrame) -> pl.DataFrame:
    # CSV has no nested values: lists and structs become JSON text.
    nested = [c for c, t in df.schema.items() if isinstance(t, (pl.List, pl.Array, pl.Struct))]
    if not nested:
        return df
    return df.with_columns(
        pl.Series(c, [json.dumps(v, default=str) for v in df[c].to_list()], dtype=pl.String) for c in nested
    )


def _emit(df: pl.DataFrame, args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else None
    if args.format == "parquet":
        assert out is not None
        df.write_parquet(out)
        print(f"{df.height} rows -> {out}", file=sys.stderr)
        return 0
    if args.format == "csv":
        text = _flatten(df).write_csv()
    elif args.format == "json":
        text = json.dumps(df.to_dicts(), default=str, indent=1) + "\n"
    else:
        if out is not None:
            return error("--out is for csv, json and parquet; --format table prints to the terminal")
        _print_table(df, args.limit)
        return 0
    if out is not None:
        out.write_text(text)
        print(f"{df.height} rows -> {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _cell(v: object) -> str:
    if v is None:
        return "[dim]∅[/dim]"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e6 else f"{v:.6g}"
    return str(v)


def _print_table(df: pl.DataFrame, limit: int) -> None:
    console = Console()
    shown = df.head(limit)
    cells = [[_cell(v) for v in row] for row in shown.iter_rows()]
    widths = [max([len(name)] + [min(len(r[i]), 40) for r in cells]) for i, name in enumerate(df.columns)]
    # a little folding is readable; beyond that, columns become slivers
    if sum(widths) + 3 * len(widths) + 1 <= console.width * 1.25 or len(df.columns) <= 2:
        table = Table(header_style="bold")
        for name in df.columns:
            numeric = df.schema[name].is_numeric()
            table.add_column(name, justify="right" if numeric else "left", overflow="fold")
        for row in cells:
            table.add_row(*row)
        console.print(table)
    else:
        # Too wide for the terminal: one block per row, "column  value" (like psql's \x), rather
        # than columns folded into unreadable slivers.
        for i, row in enumerate(cells, start=1):
            block = Table(title=f"row {i}", title_justify="left", show_header=False, box=None, padding=(0, 2))
            block.add_column(style="bold")
            block.add_column(overflow="fold")
            for name, value in zip(df.columns, row, strict=True):
                block.add_row(name, value)
            console.print(block)
    if df.height > limit:
        console.print(f"[dim]first {limit} rows shown; there are more (--limit N, or --format csv)[/dim]")
    else:
        console.print(f"[dim]{df.height} row(s)[/dim]")


def run_export(args: argparse.Namespace) -> int:
    try:
        wh = _open(args)
    except WarehouseError as e:
        return error(str(e))
    with wh:
        try:
            written = wh.export_parquet(args.parquet, args.table)
            counts = {t: wh.count(t) for t in written}
        except (WarehouseError, duckdb.Error) as e:
            return error(f"export failed: {e}")
    for t, p in written.items():
        print(f"{t:<16} {counts[t]:>10} rows -> {p}")
    return 0


def run_import(args: argparse.Namespace) -> int:
    try:
        wh = _open(args, read_only=False)
    except WarehouseError as e:
        return error(str(e))
    with wh:
        try:
            counts = wh.import_parquet(args.parquet)
        except (WarehouseError, duckdb.Error) as e:
            return error(f"import failed, nothing was changed: {e}")
    for t, n in counts.items():
        print(f"{t:<16} {n:>10} rows imported")
    return 0
