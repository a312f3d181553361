"""The ``hosts`` table: one row per machine, its facts those of its newest run."""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb


def upsert_host(con: duckdb.DuckDBPyConnection, name: str, kind: str | None, description: str | None) -> None:
    now = datetime.now(UTC)
    con.execute(
        "INSERT INTO hosts (name, kind, description, first_seen, last_seen) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET kind = coalesce(excluded.kind, hosts.kind), "
        "description = coalesce(excluded.description, hosts.description), last_seen = excluded.last_seen",
        [name, kind, description, now, now],
    ).fetchall()


def refresh_hosts(con: duckdb.DuckDBPyConnection, hosts: list[str]) -> None:
    """Widen first/last seen to cover the hosts' runs and take the facts of each host's newest run."""
    # One statement; the facts are those of the newest run by started_at (so an old run loaded late
    # does not overwrite them).
    con.execute(
        "INSERT INTO hosts (name, first_seen, last_seen, rocm_version, kernel, firmware, kernel_cmdline, "
        "ttm_pages_limit) "
        "SELECT host, min(started_at), max(started_at), arg_max_null(rocm_version, started_at), "
        "arg_max_null(kernel, started_at), arg_max_null(firmware, started_at), "
        "arg_max_null(kernel_cmdline, started_at), arg_max_null(ttm_pages_limit, started_at) "
        "FROM runs WHERE list_contains(?, host) GROUP BY host "
        "ON CONFLICT (name) DO UPDATE SET first_seen = least(hosts.first_seen, excluded.first_seen), "
        "last_seen = greatest(hosts.last_seen, excluded.last_seen), rocm_version = excluded.rocm_version, "
        "kernel = excluded.kernel, firmware = excluded.firmware, kernel_cmdline = excluded.kernel_cmdline, "
        "ttm_pages_limit = excluded.ttm_pages_limit",
        [hosts],
    ).fetchall()
