"""Schema v19: the decision's match-ups stored under `matchup`. A warehouse written at v18 (its columns
`pair`, `other_pair` and `decision_pair`) migrates forward and keeps its rows under the new names."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

from support.warehouse import T0, create_at_version, view_names

from strix_pipeline.records import CriterionResult, column_names
from strix_pipeline.warehouse import ComparisonRecord, Warehouse, current_schema_version

# v18's names of the columns v19 renames
V18_NAMES = {"matchup": "pair", "other_matchup": "other_pair"}


def c3() -> CriterionResult:
    return CriterionResult(
        "e1",
        T0,
        "local",
        "stay",
        "C3",
        "ttft_p95_beats_llamacpp_at_5",
        True,
        "fail",
        1.4,
        0.9,
        1.2,
        1.6,
        "ratio",
        ["cand", "llama-q4"],
        [],
        False,
        "slower",
        None,
        matchup="production",
        other_matchup="equal_weights",
        other_status="fail",
        other_value=1.3,
        other_run_ids=["cand", "llama-bf16"],
        other_reason="slower too",
    )


def engine_comparison() -> ComparisonRecord:
    return ComparisonRecord(
        comparison_id="cmp-1",
        host="local",
        engine="llamacpp vs vllm",
        release_a="llamacpp b1 gemma3-270m",
        release_b="vllm 0.1 gemma3-270m-bf16",
        metric="ttft_p95_ms",
        higher_is_better=False,
        pairs=3,
        ratio=1.4,
        low=1.2,
        high=1.6,
        verdict="different",
        looks=1,
        target=0.1,
        alpha=0.05,
        look_alpha=0.0045,
        cap=10,
        seed=7,
        values_a=[900.0, 910.0, 905.0],
        values_b=[1260.0, 1270.0, 1265.0],
        orders=["AB", "BA", "AB"],
        dropped_pairs=0,
        started_at=T0,
        ended_at=T0 + timedelta(minutes=2),
        matchup="production",
    )


def test_a_v18_warehouse_keeps_its_match_ups_under_the_new_column_names(tmp_path: Path) -> None:
    path = tmp_path / "v18.duckdb"
    old = create_at_version(path, 18)
    cols = [r[0] for r in old.con.execute("SELECT name FROM pragma_table_info('decisions')").fetchall()]
    assert "pair" in cols and "other_pair" in cols and "matchup" not in cols
    result = dataclasses.asdict(c3())
    v18_cols = [V18_NAMES.get(c, c) for c in column_names(CriterionResult)]
    old.con.execute(
        f"INSERT INTO decisions ({', '.join(v18_cols)}) VALUES ({', '.join('?' * len(v18_cols))})",
        [result[c] for c in column_names(CriterionResult)],
    ).fetchall()
    comparison = {**dataclasses.asdict(engine_comparison()), "decision_pair": "production"}
    del comparison["matchup"]
    v18_comparisons = {
        r[0] for r in old.con.execute("SELECT name FROM pragma_table_info('comparisons')").fetchall()
    }
    comparison = {k: v for k, v in comparison.items() if k in v18_comparisons}  # the later columns: NULL
    old.con.execute(
        f"INSERT INTO comparisons ({', '.join(comparison)}) VALUES ({', '.join('?' * len(comparison))})",
        list(comparison.values()),
    ).fetchall()
    old.close()

    with Warehouse.open(path) as w:
        assert w.schema_version == current_schema_version() >= 19
        decisions = w.query_df("SELECT matchup, other_matchup, other_reason FROM decisions").to_dicts()
        assert decisions == [
            {"matchup": "production", "other_matchup": "equal_weights", "other_reason": "slower too"}
        ]
        assert "pair" not in w.query_df("SELECT * FROM decisions").columns
        assert w.query_df("SELECT matchup FROM comparisons")["matchup"].to_list() == ["production"]
        assert "v_decision_matchups" in view_names(w)
        shown = w.query_df(
            "SELECT matchup, decides, status FROM v_decision_matchups ORDER BY matchup"
        ).to_dicts()
        assert shown == [
            {"matchup": "equal_weights", "decides": False, "status": "fail"},
            {"matchup": "production", "decides": True, "status": "fail"},
        ]
        assert w.query_df("SELECT matchup FROM v_comparisons")["matchup"].unique().to_list() == ["production"]
    with Warehouse.open(path, read_only=True) as w:
        newest = w.engine_comparisons("local", "ttft_p95_ms", T0)
        assert list(newest) == ["production"] and newest["production"] == engine_comparison()
