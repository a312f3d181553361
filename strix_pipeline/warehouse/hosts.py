"""The ``hosts`` table: one row per machine, its facts those of its newest run."""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb

from strix_pipeline.warehouse.connection import in_transaction

# No key constraint backs hosts.name (DuckLake has none): every write is a MERGE on the name. Two
# writers of a DuckLake that insert the same NEW name at once both commit (concurrent inserts do not
# conflict there; tests/integration/postgres/test_ducklake.py provokes it), leaving two rows; every
# write of a name first folds its rows back into one (merge_duplicates), so such a pair lives until
# that host's next write.

_FACTS = ("rocm_version", "kernel", "firmware", "kernel_cmdline", "ttm_pages_limit")


def merge_duplicates(con: duckdb.DuckDBPyConnection, names: list[str]) -> None:
    """Fold every name of ``names`` that has more than one row into one (inside the caller's
    transaction): kind and description of any row that has them, the widest first/last seen, and the
    facts of the row seen last (a write that refreshes no facts, upsert_host, must not blank them)."""
    facts = ", ".join(f"arg_max_null({f}, last_seen)" for f in _FACTS)
    dups = con.execute(
        "SELECT name, any_value(kind), any_value(description), min(first_seen), max(last_seen), "
        f"{facts} FROM hosts WHERE list_contains(?, name) GROUP BY name HAVING count(*) > 1",
        [names],
    ).fetchall()
    columns = ("name", "kind", "description", "first_seen", "last_seen", *_FACTS)
    for row in dups:
        con.execute("DELETE FROM hosts WHERE name = ?", [row[0]]).fetchall()
        con.execute(
            f"INSERT INTO hosts ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})", list(row)
        ).fetchall()


def upsert_host(con: duckdb.DuckDBPyConnection, name: str, kind: str | None, description: str | None) -> None:
    now = datetime.now(UTC)
    sql = (
        "MERGE INTO hosts USING (SELECT ?::VARCHAR AS name, ?::VARCHAR AS kind, ?::VARCHAR AS description, "
        "?::TIMESTAMPTZ AS seen) AS s ON hosts.name = s.name "
        "WHEN MATCHED THEN UPDATE SET kind = coalesce(s.kind, hosts.kind), "
        "description = coalesce(s.description, hosts.description), last_seen = s.seen "
        "WHEN NOT MATCHED THEN INSERT (name, kind, description, first_seen, last_seen) "
        "VALUES (s.name, s.kind, s.description, s.seen, s.seen)"
    )

    def upsert() -> None:
        merge_duplicates(con, [name])
        con.execute(sql, [name, kind, description, now]).fetchall()

    in_transaction(con, upsert)


def refresh_hosts(con: duckdb.DuckDBPyConnection, hosts: list[str]) -> None:
    """Widen first/last seen to cover the hosts' runs and take the facts of each host's newest run."""
    # One statement; the facts are those of the newest run by started_at (so an old run loaded late
    # does not overwrite them).
    merge_duplicates(con, hosts)
    con.execute(
        "MERGE INTO hosts USING (SELECT host AS name, min(started_at) AS first_seen, "
        "max(started_at) AS last_seen, "
        + ", ".join(f"arg_max_null({f}, started_at) AS {f}" for f in _FACTS)
        + " FROM runs WHERE list_contains(?, host) GROUP BY host) AS s ON hosts.name = s.name "
        "WHEN MATCHED THEN UPDATE SET first_seen = least(hosts.first_seen, s.first_seen), "
        "last_seen = greatest(hosts.last_seen, s.last_seen), "
        + ", ".join(f"{f} = s.{f}" for f in _FACTS)
        + f" WHEN NOT MATCHED THEN INSERT (name, first_seen, last_seen, {', '.join(_FACTS)}) "
        f"VALUES (s.name, s.first_seen, s.last_seen, {', '.join('s.' + f for f in _FACTS)})",
        [hosts],
    ).fetchall()
