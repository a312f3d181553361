"""Comparisons by pairs (tables ``comparisons`` and ``comparison_runs``): release B against release A,
or the candidate engine against the baseline on one of the decision's match-ups.

:class:`ComparisonRecord` and :class:`ComparisonRun` are the tables' columns, in order. One
comparison (one `strix compare`) is saved whole when it ends: a row per metric it judged, and a row
per engine start, the failed ones included. runner/pairs.py runs the pairs and stats/paired.py
judges them; this module only stores and reads what they produced.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

from strix_pipeline.records import column_names
from strix_pipeline.warehouse.arrow import records_table
from strix_pipeline.warehouse.connection import WarehouseError, in_transaction, insert

# The allowed values, checked here for every backend (DuckLake has no CHECK constraints).
COMPARISON_VERDICTS = ("different", "same", "unknown", "inconclusive")
RUN_SIDES = ("A", "B")
ORDERS = ("AB", "BA")


@dataclass
class ComparisonRecord:
    """One row of ``comparisons``: one metric of one comparison, as the ladder's last look left it."""

    comparison_id: str
    host: str
    engine: str
    release_a: str
    release_b: str
    metric: str
    higher_is_better: bool
    pairs: int
    ratio: float | None
    low: float | None
    high: float | None
    verdict: str
    looks: int
    target: float
    alpha: float
    look_alpha: float | None
    cap: int
    seed: int
    values_a: list[float]
    values_b: list[float]
    orders: list[str]
    dropped_pairs: int
    started_at: datetime
    ended_at: datetime
    # the decision's match-up an engine comparison is of ("production" | "equal_weights",
    # runner/engine_comparison.py); None: two releases of one engine
    matchup: str | None = None
    # how one run's figure of the metric is computed (runner/pair_model.METRICS); None: stored before it was
    estimator: str | None = None
    # the comparison's verdict is its primary metric's; the others are descriptive
    primary_metric: bool | None = None
    withheld: str | None = None  # why the ladder's verdict was not kept (failures, exclusions)
    # runs not excluded, and those that failed (no figures, or some measured request failed), per side
    runs_a: int | None = None
    failed_runs_a: int | None = None
    runs_b: int | None = None
    failed_runs_b: int | None = None
    failure_p: float | None = None  # the two-proportion test of the failed runs (stats/proportions.py)
    fails_more: str | None = None  # 'A' | 'B': the side failing more with confidence at alpha
    excluded_a: int | None = None  # runs left out for a busy host, per side
    excluded_b: int | None = None
    exclusion_p: float | None = None
    # the evaluation set, item by item: the side answering fewer with confidence ('A' | 'B'), and the
    # one-sided p-value of B answering fewer than A (None: no evaluation set answered)
    scores_lower: str | None = None
    quality_p: float | None = None
    # the fewest measured TTFT requests of a kept run: what its percentiles estimate (quantile_name)
    requests_per_run: int | None = None


@dataclass
class ComparisonRun:
    """One row of ``comparison_runs``: one engine start of a comparison, kept or dropped."""

    comparison_id: str
    run: int
    pair: int
    side: str
    release: str
    kept: bool
    warmup_ms: float | None
    figures: str | None  # JSON {metric: value}
    engine_build: str | None
    error: str | None
    started_at: datetime
    ended_at: datetime
    excluded: bool | None = None  # left out for a busy host (None: stored before it was recorded)
    failure_rate: float | None = None  # failed / measured requests of a run that gave figures


COMPARISON_COLUMNS: tuple[str, ...] = tuple(column_names(ComparisonRecord))
RUN_COLUMNS: tuple[str, ...] = tuple(column_names(ComparisonRun))


def _check(rows: list[ComparisonRecord], runs: list[ComparisonRun]) -> str:
    ids = {r.comparison_id for r in rows} | {r.comparison_id for r in runs}
    if len(ids) != 1:
        raise WarehouseError(f"a comparison is saved whole: one comparison_id, not {sorted(ids)}")
    for r in rows:
        for name in ("fails_more", "scores_lower"):
            if getattr(r, name) not in (None, *RUN_SIDES):
                raise WarehouseError(
                    f"comparison {r.comparison_id} {r.metric}: {name} must be A, B or None "
                    f"(got {getattr(r, name)!r})"
                )
        if r.verdict not in COMPARISON_VERDICTS:
            raise WarehouseError(
                f"comparison {r.comparison_id} {r.metric}: verdict must be one of "
                f"{COMPARISON_VERDICTS} (got {r.verdict!r})"
            )
        if not len(r.values_a) == len(r.values_b) == len(r.orders) or any(o not in ORDERS for o in r.orders):
            raise WarehouseError(
                f"comparison {r.comparison_id} {r.metric}: one value of A, one of B and an order "
                f"({ORDERS}) per pair"
            )
    for x in runs:
        if x.side not in RUN_SIDES:
            raise WarehouseError(
                f"comparison {x.comparison_id} run {x.run}: side must be one of {RUN_SIDES} (got {x.side!r})"
            )
    return ids.pop()


def save_comparison(
    con: duckdb.DuckDBPyConnection, rows: list[ComparisonRecord], runs: list[ComparisonRun]
) -> None:
    """Replace the comparison's rows and runs with these, in one transaction (saving it again is a no-op)."""
    if not rows:
        raise WarehouseError("a comparison without a metric has nothing to store")
    key = _check(rows, runs)
    table = records_table(ComparisonRecord, rows)
    run_table = records_table(ComparisonRun, runs) if runs else None

    def work() -> None:
        con.execute("DELETE FROM comparisons WHERE comparison_id = ?", [key]).fetchall()
        con.execute("DELETE FROM comparison_runs WHERE comparison_id = ?", [key]).fetchall()
        insert(con, "comparisons", table)
        if run_table is not None:
            insert(con, "comparison_runs", run_table)

    in_transaction(con, work)


def list_comparisons(
    con: duckdb.DuckDBPyConnection, *, limit: int | None = None, comparison_id: str | None = None
) -> list[ComparisonRecord]:
    """Comparison rows, newest comparison first, its metrics by name; ``limit``: of comparisons, not rows."""
    where, params = "", []
    if comparison_id is not None:
        where, params = "WHERE comparison_id = ?", [comparison_id]
    elif limit is not None:
        where = (
            "WHERE comparison_id IN (SELECT comparison_id FROM comparisons GROUP BY comparison_id "
            "ORDER BY max(started_at) DESC, comparison_id LIMIT ?)"
        )
        params = [limit]
    sql = (
        f"SELECT {', '.join(COMPARISON_COLUMNS)} FROM comparisons {where} ORDER BY started_at "
        "DESC, comparison_id, metric"
    )
    return [ComparisonRecord(*r) for r in con.execute(sql, params).fetchall()]


def comparison_runs(con: duckdb.DuckDBPyConnection, comparison_id: str) -> list[ComparisonRun]:
    sql = f"SELECT {', '.join(RUN_COLUMNS)} FROM comparison_runs WHERE comparison_id = ? ORDER BY run"
    return [ComparisonRun(*r) for r in con.execute(sql, [comparison_id]).fetchall()]


# The two newest releases an engine's usable runs on a host measured, in version order, and whether a
# comparison by pairs of exactly those two (older as A, newer as B) is stored already.
NEWEST_TWO_SQL = """
SELECT image_version, max(version_order) AS v FROM v_run_base
WHERE host = ? AND engine = ? AND usable AND image_version IS NOT NULL
GROUP BY image_version ORDER BY v DESC LIMIT 2
"""
COMPARED_SQL = (
    "SELECT count(*) FROM comparisons WHERE host = ? AND engine = ? AND release_a = ? AND release_b = ?"
)


def uncompared_newest(con: duckdb.DuckDBPyConnection, host: str, engine: str) -> tuple[str, str] | None:
    """(previous, newest): the week's new release and the one before it on ``host``, when no comparison
    by pairs of the two is stored yet; None with fewer than two releases or once compared."""
    found = con.execute(NEWEST_TWO_SQL, [host, engine]).fetchall()
    if len(found) < 2:
        return None
    newest, previous = found[0][0], found[1][0]
    done = con.execute(COMPARED_SQL, [host, engine, previous, newest]).fetchone()[0]
    return None if done else (previous, newest)


SELF_COMPARED_SQL = (
    "SELECT count(*) FROM comparisons WHERE host = ? AND engine = ? AND release_a = ? AND release_b = ? "
    "AND started_at >= ?"
)


def compared_with_itself_since(
    con: duckdb.DuckDBPyConnection, host: str, engine: str, release: str, since: datetime
) -> bool:
    """Whether ``release`` was compared by pairs against itself (an A/A: the canary's) since ``since``."""
    return con.execute(SELF_COMPARED_SQL, [host, engine, release, release, since]).fetchone()[0] > 0


ENGINE_MATCHUPS_SQL = f"""
SELECT {", ".join(COMPARISON_COLUMNS)} FROM comparisons
WHERE host = ? AND matchup IS NOT NULL AND metric = ? AND started_at >= ? AND ended_at <= ?
ORDER BY started_at DESC, comparison_id
"""


def engine_comparisons(
    con: duckdb.DuckDBPyConnection, host: str, metric: str, since: datetime, until: datetime | None = None
) -> dict[str, ComparisonRecord]:
    """The newest engine comparison's row of ``metric`` per decision match-up on ``host`` since ``since``
    (and ended by ``until``: what an evaluation at that moment could see)."""
    out: dict[str, ComparisonRecord] = {}
    bound = until or datetime.max.replace(tzinfo=since.tzinfo)
    for row in con.execute(ENGINE_MATCHUPS_SQL, [host, metric, since, bound]).fetchall():
        rec = ComparisonRecord(*row)
        out.setdefault(rec.matchup or "", rec)
    return out
