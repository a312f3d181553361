"""Engine images (table ``images``, keyed by registry, repository and tag) and registry errors."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import duckdb

from strix_pipeline.records import ImageRecord, column_names
from strix_pipeline.warehouse.arrow import records_table
from strix_pipeline.warehouse.connection import in_transaction, registered

_KEY = ("registry", "repository", "tag")


def upsert_images_from(con: duckdb.DuckDBPyConnection, source: str) -> int:
    """THE image upsert: insert or refresh the images a relation holds (an Arrow table registered on
    the connection, or ``read_parquet(...)``), matched by name; first_seen keeps its oldest value.
    Returns the number of rows written."""
    # A MERGE on the key, not ON CONFLICT: no constraint backs the key (DuckLake has none).
    updates = ", ".join(f"{c} = s.{c}" for c in column_names(ImageRecord) if c not in (*_KEY, "first_seen"))
    on = " AND ".join(f"images.{k} = s.{k}" for k in _KEY)
    return con.execute(
        f"MERGE INTO images USING (SELECT * FROM {source}) AS s ON {on} "
        f"WHEN MATCHED THEN UPDATE SET {updates}, first_seen = least(images.first_seen, s.first_seen) "
        "WHEN NOT MATCHED THEN INSERT BY NAME"
    ).fetchall()[0][0]


def upsert_images(con: duckdb.DuckDBPyConnection, images: list[ImageRecord]) -> None:
    """Insert or refresh images keyed by (registry, repository, tag), in one transaction."""
    if not images:
        return
    latest: dict[tuple[str, str, str], ImageRecord] = {}
    for img in images:  # last one wins: a MERGE may not touch a row twice in one statement
        latest[(img.registry, img.repository, img.tag)] = img
    data = records_table(ImageRecord, list(latest.values()))
    with registered(con, "images", data) as name:
        in_transaction(con, lambda: upsert_images_from(con, name))


def known_images(con: duckdb.DuckDBPyConnection, engine: str | None = None) -> list[ImageRecord]:
    cols = ", ".join(column_names(ImageRecord))
    sql = f"SELECT {cols} FROM images"
    params: list[Any] = []
    if engine is not None:
        sql += " WHERE engine = ?"
        params.append(engine)
    sql += " ORDER BY engine, registry, repository, sort_key, tag"
    return [ImageRecord(*row) for row in con.execute(sql, params).fetchall()]


def mark_images_gone(
    con: duckdb.DuckDBPyConnection, registry: str, repository: str, tags: list[str], at: datetime
) -> None:
    if not tags:
        return
    sql = (
        "UPDATE images SET gone = true, gone_since = coalesce(gone_since, ?) "
        "WHERE registry = ? AND repository = ? AND list_contains(?, tag) AND NOT gone"
    )
    in_transaction(con, lambda: con.execute(sql, [at, registry, repository, list(tags)]).fetchall())


def record_registry_error(
    con: duckdb.DuckDBPyConnection, registry: str, repository: str, error: str, at: datetime
) -> None:
    in_transaction(
        con,
        lambda: con.execute(
            "INSERT INTO registry_errors VALUES (?, ?, ?, ?)", [registry, repository, error, at]
        ).fetchall(),
    )
