"""The forest plot's rows: C3's TTFT ratio with its interval and C5's memory ratio where
both runs have a held figure, each with its threshold and verdict; a row of a paired comparison is
drawn the same way, its verdict beside its point."""

from __future__ import annotations

import json

from support.decision_seed import SEPT

from strix_pipeline.analysis.charts.forest import ForestRow, criterion_rows, forest_spec
from strix_pipeline.analysis.decision import CRITERIA, Decision, Wording
from strix_pipeline.records import CriterionResult
from strix_pipeline.units import GIB

W = Wording("vLLM", "llama-server", "0.32.0")


def crit(
    cid: str, status: str, value: float | None, threshold: float | None, ci=(None, None)
) -> CriterionResult:
    return CriterionResult(
        "e1",
        SEPT,
        "local",
        "stay",
        cid,
        CRITERIA[cid],
        True,
        status,
        value,
        threshold,
        *ci,
        None,
        ["cand", "base"],
        [],
        False,
        "why",
        None,
    )


def test_c3_and_c5_give_one_row_each_with_interval_threshold_and_verdict() -> None:
    d = Decision(
        "stay",
        "e1",
        SEPT,
        "local",
        [crit("C3", "fail", 2.88, 1.0, (2.57, 3.30)), crit("C5", "fail", 6.6 * GIB, 0.55 * GIB)],
    )
    c3, c5 = criterion_rows(d, {"cand": 6.6 * GIB, "base": 0.5 * GIB}, W)
    assert (c3.ratio, c3.low, c3.high, c3.threshold, c3.verdict, c3.run_id) == (
        2.88,
        2.57,
        3.30,
        1.0,
        "fail",
        "cand",
    )
    assert c5.ratio == 6.6 / 0.5 and c5.threshold == 1.1 and c5.low is None and c5.verdict == "fail"
    # no baseline held figure: no memory row (never a ratio to zero)
    assert [r.label for r in criterion_rows(d, {"base": None}, W)] == ["C3 TTFT p95 at 5"]
    assert criterion_rows(None, {}, W) == []


def test_a_row_with_a_verdict_shows_it_beside_its_point() -> None:
    rows = [
        ForestRow("C3 TTFT p95 at 5", 2.88, 2.57, 3.30, 1.0, "fail"),
        ForestRow("decode tok/s, b6500 vs b6400", 0.97, 0.95, 0.99, None, "different"),
        ForestRow("no verdict", 1.2, None, None, None),
    ]
    spec = json.dumps(forest_spec(rows))
    assert '"verdict_text": "2.9\\u00d7 \\u00b7 fail"' in spec
    assert '"verdict_text": "0.97\\u00d7 \\u00b7 different"' in spec
    assert '"verdict_text": "1.2\\u00d7"' in spec
    assert '"type": "log"' in spec and '"one": 1.0' in spec
    assert "no comparison measured this week" in json.dumps(forest_spec([]))
