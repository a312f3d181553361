"""`strix query`'s output formats as text (csv, json, jsonl, markdown, line) and its terminal table
(duckbox-like: the first and last columns of a wide result, the middle behind a ``…`` column; long
values cut with ``…``); every control character in a string shown as its escape."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterator
from typing import BinaryIO

import polars as pl
from pyarrow import parquet
from rich.console import Console
from rich.table import Table
from rich.text import Text

CHUNK_ROWS = 10_000  # rows rendered at a time (a writer checks the query's deadline between pieces)
MAX_CELL = 32  # characters a table cell shows before it is cut with "…" (the full value: --format line)


# Control characters a terminal would act on (ESC starts ANSI/OSC sequences: colours, cursor moves,
# hyperlinks, the window title; C1's CSI as one byte; CR and BS overwrite what was shown) and the
# bidirectional overrides that reorder text: strings in the warehouse come from outside (a model name,
# an image label), so the text formats show each as \xNN or \uNNNN. json escapes them itself.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def escape_controls(s: str, keep: str = "") -> str:
    """``s`` with every character of ``_CONTROL`` but those in ``keep`` written out as ``\\xNN``/``\\uNNNN``.

    Not :func:`strix_pipeline.outside_text.visible` (every Unicode control and format character, for the
    other commands' cells): `strix query` shows the data as stored, so a zero-width joiner in an emoji
    stays whole and only what a terminal would act on is escaped (the formats keep tab or newline)."""

    def esc(m: re.Match[str]) -> str:
        c = m.group()
        if c in keep:
            return c
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    return _CONTROL.sub(esc, s)


def _escaped_frame(df: pl.DataFrame, keep: str) -> pl.DataFrame:
    strings = [c for c, t in df.schema.items() if t == pl.String]
    df = df.with_columns(
        pl.col(c).map_elements(lambda v: escape_controls(v, keep), return_dtype=pl.String) for c in strings
    )
    return df.rename({c: escape_controls(c) for c in df.columns if escape_controls(c) != c})


def _flatten(df: pl.DataFrame) -> pl.DataFrame:
    # CSV has no nested values: lists and structs become JSON text.
    nested = [c for c, t in df.schema.items() if isinstance(t, (pl.List, pl.Array, pl.Struct, pl.Map))]
    if not nested:
        return df
    return df.with_columns(
        pl.Series(c, [json.dumps(v, default=str) for v in df[c].to_list()], dtype=pl.String) for c in nested
    )


def render(df: pl.DataFrame, fmt: str) -> str:
    """The whole result as text in one of TEXT_FORMATS (every row, every column, values uncut)."""
    return "".join(render_chunks(df, fmt))


def render_chunks(df: pl.DataFrame, fmt: str, rows: int = CHUNK_ROWS) -> Iterator[str]:
    """:func:`render`'s text in pieces of about ``rows`` rows, so a writer can stop between them (a
    query's time limit covers its output); the pieces joined are the whole text."""
    if fmt not in ("csv", "json", "jsonl", "markdown", "line"):
        raise ValueError(f"not a text format: {fmt}")
    if fmt == "markdown":
        yield from _markdown(df, rows)
        return
    if fmt == "json" and df.height == 0:
        yield "[]\n"
        return
    for start in range(0, max(df.height, 1), rows):
        part = df.slice(start, rows)
        if fmt == "csv":
            yield _escaped_frame(_flatten(part), keep="\n\t").write_csv(include_header=start == 0)
        elif fmt == "json":
            # json.dumps(list, indent=1), one element at a time: each element's lines indented by one
            items = ",\n".join(
                textwrap.indent(json.dumps(rec, default=str, indent=1), " ", lambda _: True)
                for rec in part.to_dicts()
            )
            last = start + rows >= df.height
            yield ("[\n" if start == 0 else "") + items + ("\n]\n" if last else ",\n")
        elif fmt == "jsonl":
            yield "".join(json.dumps(rec, default=str) + "\n" for rec in part.to_dicts())
        else:
            yield _lines(part)


def write_parquet_chunks(df: pl.DataFrame, f: BinaryIO, rows: int = CHUNK_ROWS) -> Iterator[None]:
    """``df`` as one Parquet file (zstd, as Polars writes it), a row group of about ``rows`` rows at a
    time, yielding after each so a writer can stop between them: Polars' own writer to a Python file
    holds the whole encoded file in memory first, another copy of the result."""
    writer = None
    try:
        for start in range(0, max(df.height, 1), rows):
            table = df.slice(start, rows).to_arrow()
            if writer is None:
                writer = parquet.ParquetWriter(f, table.schema, compression="zstd")
            writer.write_table(table)
            del table
            yield
    finally:
        if writer is not None:
            writer.close()


def _text(v: object, null: str = "NULL") -> str:
    """A value as plain text, the way the DuckDB CLI prints it (booleans lower case, nested as JSON)."""
    if v is None:
        return null
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict)):
        return json.dumps(v, default=str)
    return str(v)


def _markdown(df: pl.DataFrame, rows_per_chunk: int = CHUNK_ROWS) -> Iterator[str]:
    """A GitHub-flavoured table: numbers right-aligned, `|` escaped, line breaks as <br>, NULL empty.
    The widths need every row: the cells are made chunk by chunk first (an empty piece after each, for
    the writer's clock), then written."""

    def cell(v: object) -> str:
        text = _text(v, null="").replace("|", "\\|").replace("\r\n", "<br>").replace("\n", "<br>")
        return escape_controls(text)

    if not df.columns:
        return
    header = [escape_controls(c).replace("|", "\\|") for c in df.columns]
    rows: list[list[str]] = []
    for start in range(0, df.height, rows_per_chunk):
        rows += [[cell(v) for v in row] for row in df.slice(start, rows_per_chunk).iter_rows()]
        yield ""
    right = [df.schema[c].is_numeric() for c in df.columns]
    widths = [max([len(h), 3] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        padded = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)]
        return "| " + " | ".join(padded) + " |\n"

    rule = (
        "|"
        + "|".join(("-" * (w + 1) + ":") if r else "-" * (w + 2) for w, r in zip(widths, right, strict=True))
        + "|\n"
    )
    yield line(header) + rule
    for start in range(0, len(rows), rows_per_chunk):
        yield "".join(line(r) for r in rows[start : start + rows_per_chunk])


def _lines(df: pl.DataFrame) -> str:
    """DuckDB's (and sqlite's) line mode: `column = value`, names right-aligned, a blank line between rows."""
    if not df.columns:
        return ""
    w = max(len(escape_controls(c)) for c in df.columns)
    blocks = [
        "\n".join(
            f"{escape_controls(name):>{w}} = {escape_controls(_text(v), keep=chr(10))}"
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
    s = escape_controls(s.replace("\r\n", "↵").replace("\n", "↵"))
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


def print_table(df: pl.DataFrame, limit: int, types: list[str] | None = None) -> None:
    console = Console()
    shown = df.head(limit)
    cells = [[_cell(v) for v in row] for row in shown.iter_rows()]
    types = types if types is not None and len(types) == len(df.columns) else None
    names = [escape_controls(name) for name in df.columns]
    heads = [name if len(name) <= MAX_CELL else name[: MAX_CELL - 1] + "…" for name in names]
    kinds = (
        [(t if len(t) <= MAX_CELL else t[: MAX_CELL - 1] + "…") for t in map(escape_controls, types)]
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
