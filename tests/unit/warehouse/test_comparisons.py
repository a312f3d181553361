"""Comparisons by pairs in the warehouse (schema v11): saved whole, read back equal, refused when
malformed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.warehouse import create_at_version, view_names

from strix_pipeline.warehouse import ComparisonRecord, ComparisonRun, Warehouse, WarehouseError

T0 = datetime(2026, 12, 4, 20, 0, tzinfo=UTC)


def row(cid: str = "cmp-1", metric: str = "decode_tokens_per_s", at: datetime = T0, **kw) -> ComparisonRecord:
    base = dict(
        comparison_id=cid,
        host="local",
        engine="llamacpp",
        release_a="b11401",
        release_b="b11434",
        metric=metric,
        higher_is_better=True,
        pairs=3,
        ratio=0.95,
        low=0.93,
        high=0.97,
        verdict="different",
        looks=1,
        target=0.05,
        alpha=0.05,
        look_alpha=0.0045,
        cap=10,
        seed=7,
        values_a=[50.0, 51.0, 49.5],
        values_b=[47.5, 48.4, 47.1],
        orders=["AB", "BA", "AB"],
        dropped_pairs=1,
        started_at=at,
        ended_at=at + timedelta(minutes=2),
    )
    return ComparisonRecord(**(base | kw))


def run(cid: str = "cmp-1", n: int = 1, **kw) -> ComparisonRun:
    base = dict(
        comparison_id=cid,
        run=n,
        pair=(n + 1) // 2,
        side="A" if n % 2 else "B",
        release="b11401",
        kept=True,
        warmup_ms=812.5,
        figures='{"decode_tokens_per_s": 50.0}',
        engine_build="b11401-abc",
        error=None,
        started_at=T0,
        ended_at=T0 + timedelta(seconds=20),
    )
    return ComparisonRun(**(base | kw))


def test_a_comparison_round_trips_with_its_runs_and_view(wh: Warehouse) -> None:
    rows = [row(), row(metric="prefill_tokens_per_s", verdict="same", ratio=1.0, low=0.98, high=1.02)]
    runs = [run(n=1), run(n=2), run(n=3, kept=False, figures=None, warmup_ms=None, error="died")]
    wh.save_comparison(rows, runs)
    wh.save_comparison(rows, runs)  # saving again replaces, never duplicates
    assert wh.list_comparisons() == sorted(rows, key=lambda r: r.metric)
    assert wh.comparison_runs("cmp-1") == runs
    (v,) = wh.query_df("SELECT * FROM v_comparisons WHERE metric = 'decode_tokens_per_s'").to_dicts()
    assert v["runs"] == 3 and v["verdict"] == "different"
    assert v["change_pct"] == pytest.approx(-5.0) and v["low_pct"] == pytest.approx(-7.0)


def test_limit_counts_comparisons_newest_first(wh: Warehouse) -> None:
    for i in range(3):
        at = T0 + timedelta(hours=i)
        wh.save_comparison([row(f"cmp-{i}", at=at), row(f"cmp-{i}", "prefill_tokens_per_s", at=at)], [])
    got = wh.list_comparisons(limit=2)
    assert [r.comparison_id for r in got] == ["cmp-2", "cmp-2", "cmp-1", "cmp-1"]
    assert [r.comparison_id for r in wh.list_comparisons(comparison_id="cmp-0")] == ["cmp-0", "cmp-0"]


@pytest.mark.parametrize(
    ("rows", "runs", "message"),
    [
        ([row(verdict="maybe")], [], "verdict must be one of"),
        ([row(orders=["AB"])], [], "one value of A, one of B and an order"),
        ([row(orders=["AB", "BA", "AA"])], [], "one value of A, one of B and an order"),
        ([row()], [run(side="C")], "side must be one of"),
        ([row(), row("cmp-2")], [], "one comparison_id"),
        ([], [], "without a metric"),
    ],
)
def test_a_malformed_comparison_is_refused_and_nothing_stored(wh: Warehouse, rows, runs, message) -> None:
    with pytest.raises(WarehouseError, match=message):
        wh.save_comparison(rows, runs)
    assert wh.count("comparisons") == 0 and wh.count("comparison_runs") == 0


def test_a_v10_warehouse_gains_the_comparison_tables(tmp_path: Path) -> None:
    path = tmp_path / "v10.duckdb"
    old = create_at_version(path, 10)
    assert "comparisons" not in old.table_names()
    old.close()
    with Warehouse.open(path) as w:
        assert {"comparisons", "comparison_runs"} <= set(w.table_names())
        assert "v_comparisons" in view_names(w)
        w.save_comparison([row()], [run()])
    with Warehouse.open(path, read_only=True) as w:
        assert w.list_comparisons() == [row()]
