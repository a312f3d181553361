"""`strix query "SQL"`, `strix export --parquet DIR` (read-only) and `strix import --parquet DIR | FILE`.

`strix import FILE` loads another tool's result file as a run (:mod:`strix_pipeline.peers`).

Query and export open the file read-only, so a write statement fails inside DuckDB itself (not by our
parsing of the SQL); all three wait briefly when a benchmark run is writing, then say why they cannot.
Query's connection is also sandboxed by DuckDB's own settings (``Warehouse.open(sandbox=True)``): the
SQL reads the warehouse and nothing else -- no COPY to or from files, no read_csv/read_text/glob of
other files, no ATTACH, no INSTALL/LOAD, no SET/RESET. Export on a DuckDB file is sandboxed too (it
reads Arrow batches and writes the Parquet files in Python); import opens a writable one.

Output follows the DuckDB CLI's habits: ``--format`` table (duckbox-like: a result wider than the
terminal keeps its first and last columns and hides the middle ones behind a ``…`` column, long
values are cut with ``…``; it never switches to another shape), csv, json (one array), jsonl (one
object per line), markdown (a GitHub table), line (``column = value``, one block per row), parquet.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

import duckdb

from strix_pipeline.cli.bounded import Bounds, Fetched, OutOfTime, fetch
from strix_pipeline.cli.common import (
    config_of,
    error,
    lock_wait_arg,
    on_warehouse,
    open_reader,
    open_warehouse,
    warehouse_arg,
)
from strix_pipeline.cli.formats import escape_controls, print_table, render_chunks, write_parquet_chunks
from strix_pipeline.cli.out_guard import check_out, protected
from strix_pipeline.config import MAX_ROWS, QueryConfig, check_timeout, memory_bytes
from strix_pipeline.peers import FORMATS as PEER_FORMATS
from strix_pipeline.peers import ImportOptions, PeerFormatError, load_peer_file
from strix_pipeline.records import RunRecord
from strix_pipeline.safe_write import Protected, UnsafeTarget, write_file
from strix_pipeline.warehouse import Warehouse, WarehouseError

T = TypeVar("T")

FORMATS = ("table", "csv", "json", "jsonl", "markdown", "line", "parquet")
TEXT_FORMATS = ("csv", "json", "jsonl", "markdown", "line")
DEFAULT_TIMEOUT_S = QueryConfig().timeout_s  # [query] timeout_s when the configuration does not say


def register(sub: argparse._SubParsersAction) -> None:
    q = sub.add_parser(
        "query",
        help="run read-only SQL against the warehouse",
        description="Run SQL against the warehouse, opened read-only; the SQL can read no other file, write "
        "none, attach no database, load no extension and change no setting. Views: v_runs, "
        "v_latest_by_engine, "
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
        type=_timeout,
        metavar="SECONDS",
        help=f"stop the query after this long, its output included (default: [query] timeout_s, "
        f"{DEFAULT_TIMEOUT_S:g} unless set; 0: no limit; at least 0.001, at most a week); while it runs, no "
        "writer can load into a warehouse file",
    )
    q.add_argument(
        "--max-rows",
        type=_positive,
        metavar="N",
        help=f"the most rows a result gives; a longer one is cut, said, exit 1 (default: [query] max_rows, "
        f"{QueryConfig().max_rows:,} unless set)",
    )
    q.add_argument(
        "--max-bytes",
        type=_size,
        metavar="SIZE",
        help="the most memory a result may hold in this process, e.g. 1GB; a bigger one is cut, "
        "said, exit 1 "
        f"(default: [query] max_bytes, {QueryConfig().max_bytes} unless set)",
    )
    q.add_argument(
        "--memory-limit",
        metavar="SIZE",
        help="DuckDB memory limit for the query, e.g. 2GB (default: [query] memory_limit, else "
        "DuckDB's: 80%% "
        "of RAM); a query needing more fails (it has no spill directory)",
    )
    q.add_argument(
        "--limit",
        type=_rows_shown,
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
        description="Load a `strix export --parquet` directory (e.g. from another Box), or one "
        "result file of "
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
    i.add_argument(
        "--engine",
        help="engine kind that served the run, e.g. llamacpp, vllm (default: from the file, else unknown)",
    )
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


def _timeout(text: str) -> float:
    # the configuration's rule (config.check_timeout): nan, inf, negative and sub-millisecond refused
    try:
        return check_timeout(float(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            str(e) if "time limit" in str(e) else f"{text!r} is not a number"
        ) from None


def _count(text: str, least: int) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
    if not least <= n <= MAX_ROWS:
        raise argparse.ArgumentTypeError(f"{text[:40]}: give a whole number from {least} to {MAX_ROWS:,}")
    return n


def _positive(text: str) -> int:
    return _count(text, 1)


def _rows_shown(text: str) -> int:
    return _count(text, 0)


def _size(text: str) -> str:
    try:
        memory_bytes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


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


def run_query(args: argparse.Namespace) -> int:
    if args.format == "parquet" and not args.out:
        return error("--format parquet needs --out FILE")
    if args.out and args.format == "table":
        return error(
            f"--out is for {', '.join(TEXT_FORMATS)} and parquet; --format table prints to the terminal"
        )
    if args.out:
        refused = check_out(args)
        if refused:
            return error(refused)
    bounds = config_of(args).query  # a bad file: ConfigError, exit 2
    args.timeout = bounds.timeout_s if args.timeout is None else args.timeout
    args.memory_limit = bounds.memory_limit if args.memory_limit is None else args.memory_limit
    max_rows = bounds.max_rows if args.max_rows is None else args.max_rows
    max_bytes = memory_bytes(bounds.max_bytes if args.max_bytes is None else args.max_bytes)
    # one deadline for executing, fetching and writing the result out
    deadline = time.monotonic() + args.timeout if args.timeout else None
    limits = Bounds(max_rows=max_rows, max_bytes=max_bytes, deadline=deadline)
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
            # each statement of a multi-statement string runs (in this sandbox); the last one's rows are shown
            rel = wh.con.sql(args.sql)
            # the terminal shows --limit rows: fetch one more to know whether there were more
            got = fetch(rel, limits, rows=args.limit + 1 if args.format == "table" else None)
            return _emit(got, args, limits)
        except (duckdb.InterruptException, OutOfTime) as e:
            if (timer is not None and timer.finished.is_set()) or isinstance(e, OutOfTime):
                return error(
                    f"query stopped after its --timeout of {args.timeout:g}s (--timeout N for longer, 0 for "
                    f"no limit); nothing was changed{' or written to --out' if args.out else ''}"
                    + (f" ({e})" if str(e) else "")
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


def _emit(got: Fetched, args: argparse.Namespace, limits: Bounds) -> int:
    df = got.df
    if args.format == "table":
        print_table(df, args.limit, got.types)
    elif args.out is None:
        for chunk in render_chunks(df, args.format):
            limits.check_time()
            sys.stdout.write(chunk)
    else:
        out = Path(args.out)

        def fill(f: BinaryIO) -> None:
            if args.format == "parquet":
                for _ in write_parquet_chunks(df, f):
                    limits.check_time()
                return
            for chunk in render_chunks(df, args.format):
                limits.check_time()  # a slow write is stopped too; the file is then left as it was
                f.write(chunk.encode("utf-8"))

        try:
            write_file(out, fill, replace=args.force, protected=Protected.of(protected(args)))
        except FileExistsError:
            return error(f"--out {out}: the file exists (made while the query ran); --force replaces it")
        except OSError as e:
            return error(f"--out {out}: cannot write it: {e.strerror or e}")
        print(f"{df.height} rows -> {out}", file=sys.stderr)
    if got.cut:
        return error(got.cut)
    return 0


def _on_warehouse(
    args: argparse.Namespace, action: Callable[[Warehouse], T], failure: str, *, read_only: bool = True
) -> tuple[T | None, int]:
    """``on_warehouse`` with this module's opening (its lock wait and notice)."""
    return on_warehouse(args, action, failure, read_only=read_only, opener=_open)


def run_export(args: argparse.Namespace) -> int:
    def export(wh: Warehouse) -> tuple[dict[str, Path], dict[str, int]]:
        try:
            written = wh.export_parquet(args.parquet, args.table)
        except UnsafeTarget as e:  # a link where a file goes: named, nothing written through it
            raise WarehouseError(str(e)) from e
        return written, {t: wh.count(t) for t in written}

    def reader(args: argparse.Namespace, *, read_only: bool) -> Warehouse:
        # sandboxed as strix query is (on a file): the export reads through Arrow, never COPY
        wait = lambda msg: print(f"strix: {msg}", file=sys.stderr)  # noqa: E731
        return open_reader(args, read_only=read_only, lock_retry_s=args.lock_wait, on_wait=wait)

    done, rc = on_warehouse(args, export, "export failed", opener=reader)
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
        _escaping(lambda wh: wh.import_parquet(args.parquet, replace=args.replace)),
        "import failed, nothing was changed",
        read_only=False,
    )
    if counts is None:
        return rc
    for t, n in counts.items():
        print(f"{shown(t):<16} {n:>10} rows imported")
    return 0


def run_import_peer(args: argparse.Namespace) -> int:
    """One result file of another tool, loaded as one run (all of it, or nothing)."""
    # the command's options are named as ImportOptions' fields
    opts = ImportOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ImportOptions)})
    try:
        result = load_peer_file(args.file, args.format, opts)
    except PeerFormatError as e:
        return error(shown(f"import refused, nothing was loaded: {e}"))

    def load(wh: Warehouse) -> RunRecord:
        # the default id is the file's hash: only the same file's earlier import has it; a --run-id
        # may name any run, a strix benchmark's included
        if opts.run_id is not None and not args.replace and wh.count("runs", opts.run_id):
            raise WarehouseError(
                f"run {opts.run_id} is already in the warehouse; give --replace to replace it with "
                f"{args.file}"
            )
        wh.load_run(result)
        return result.run

    run, rc = _on_warehouse(args, _escaping(load), "import failed, nothing was changed", read_only=False)
    if run is None:
        return rc
    # run ids, versions and scenario names come from the file (another Box's export, another tool):
    # printed through query's terminal escaping, so an escape sequence in them is shown, not obeyed
    print(
        f"run {shown(run.run_id)}: {shown(run.harness_version)}, {len(result.aggregates)} level(s), "
        f"fingerprint {shown(run.fingerprint)}"
    )
    for a in result.aggregates:
        ttft = "-" if a.ttft_p50_ms is None else f"{a.ttft_p50_ms:.2f} ms"
        out = "-" if a.output_tokens_per_s is None else f"{a.output_tokens_per_s:.2f} tok/s"
        pre = "" if a.prefill_tokens_per_s is None else f"  prefill {a.prefill_tokens_per_s:.2f} tok/s"
        print(
            f"  {shown(a.scenario):<12} {shown(a.level_kind)} {shown(a.level):<6} TTFT p50 "
            f"{ttft:<12} output {out}{pre}"
        )
    return 0


def _escaping(action: Callable[[Warehouse], T]) -> Callable[[Warehouse], T]:
    """``action`` whose refusal (it quotes the imported values) is printed escaped, as query prints."""

    def run(wh: Warehouse) -> T:
        try:
            return action(wh)
        except (WarehouseError, duckdb.Error) as e:
            raise WarehouseError(shown(e)) from e

    return run


def shown(value: object) -> str:
    """A value from outside as `strix query` prints strings: what a terminal would act on escaped."""
    return escape_controls(str(value))
