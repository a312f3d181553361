"""A `strix query` result fetched within bounds: at most ``max_rows`` rows and ``max_bytes`` of Arrow
memory, and one deadline for executing, fetching and writing it out.

DuckDB's ``memory_limit`` bounds the query, not its result: a result handed to Python whole
(``.pl()``) is materialised outside it, several times over while it is converted (300 MB of result
took 1.8 GB). So the result is read in record batches and reading stops at the first bound reached;
what was read is shown and the cut is said.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import duckdb
import polars as pl
import pyarrow as pa

BATCH_ROWS = 10_000  # rows per record batch read (and per chunk of text written: deadline checks)


class OutOfTime(Exception):
    """The deadline passed while the result was being fetched or written."""


@dataclass(frozen=True)
class Bounds:
    max_rows: int
    max_bytes: int
    deadline: float | None  # time.monotonic() value; None: no time limit

    def check_time(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise OutOfTime


@dataclass(frozen=True)
class Fetched:
    df: pl.DataFrame
    types: list[str] | None  # DuckDB's column types, lower case
    cut: str | None  # why the result was cut short, or None: it is whole


def fetch(rel: duckdb.DuckDBPyRelation | None, bounds: Bounds, *, rows: int | None = None) -> Fetched:
    """Up to ``rows`` (and the bounds) rows of ``rel``; ``rel`` None (no result) is an empty frame."""
    if rel is None:
        return Fetched(pl.DataFrame(), None, None)
    types = [str(t).lower() for t in rel.types]
    max_rows = bounds.max_rows if rows is None else min(rows, bounds.max_rows)
    reader = rel.fetch_arrow_reader(BATCH_ROWS)
    batches: list[pa.RecordBatch] = []
    n = size = 0
    cut = None
    for batch in reader:
        bounds.check_time()
        if n + batch.num_rows > max_rows:
            batch = batch.slice(0, max_rows - n)
            cut = "rows" if rows is None or max_rows < rows else None
        if size + batch.nbytes > bounds.max_bytes:
            # keep the rows that fit, at the batch's average row size
            fit = int(batch.num_rows * (bounds.max_bytes - size) / max(batch.nbytes, 1))
            batch = batch.slice(0, max(fit, 0))
            cut = "bytes"
        batches.append(batch)
        n += batch.num_rows
        size += batch.nbytes
        if cut is not None or n >= max_rows:
            if cut is None and rows is None:
                cut = _more_rows(reader)
            break
    reader.close()
    table = pa.Table.from_batches(batches, schema=reader.schema)
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    return Fetched(df, types, _said(cut, n, bounds))


def _more_rows(reader: pa.RecordBatchReader) -> str | None:
    # exactly max_rows read: cut only when the result had more
    for batch in reader:
        if batch.num_rows:
            return "rows"
    return None


def _said(cut: str | None, n: int, bounds: Bounds) -> str | None:
    if cut == "rows":
        return (
            f"result cut at {n:,} rows, the most a query gives ([query] max_rows, --max-rows N for more); "
            f"the output holds the first {n:,}"
        )
    if cut == "bytes":
        return (
            f"result cut at {n:,} rows: the rows read reached {bounds.max_bytes:,} bytes, the most a query "
            f"holds ([query] max_bytes, --max-bytes SIZE for more); the output holds the first {n:,}"
        )
    return None
