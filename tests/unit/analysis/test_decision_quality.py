"""C7: a candidate that answers the evaluation set worse than the baseline on the same weights fails,
whatever its speed; equal answers pass and are then required; runs without answers leave C7 out."""

from __future__ import annotations

from datetime import timedelta

from support.decision_seed import SEPT, judge_runs, make_config, run_record, run_result
from support.decision_seed import switch_runs as published_switch

from strix_pipeline.analysis.decision import decision_markdown
from strix_pipeline.quality.items import ITEMS, set_version
from strix_pipeline.records import QualityAnswer

NOW = SEPT + timedelta(days=1)


def answered(results, wrong: dict[str, int]) -> list:
    """Every run of these results answers the set; the first ``wrong[engine]`` items wrongly."""
    for r in results:
        misses = wrong.get(r.run.engine, 0)
        r.quality = [
            QualityAnswer(r.run.run_id, set_version(), item.item_id, n >= misses, "x")
            for n, item in enumerate(ITEMS)
        ]
    return results


def switch_runs():
    """Everything passes, and llama-server also served the candidate's BF16 weights (the equal-weights
    match-up C7 reads; slower and heavier there too, so C3 and C5 pass on both match-ups)."""
    same_weights = run_result(
        run_record(
            "llama-bf16",
            "llamacpp",
            started_at=SEPT - timedelta(minutes=10),
            tag="server-rocm-b6500",
            family="qwen3-30b-a3b",
            held_gib=60.0,
        ),
        ttft5=(2000.0, 1900.0, 2100.0),
    )
    return [*published_switch(), same_weights]


def c7(decision):
    return next(c for c in decision.criteria if c.criterion == "C7")


def test_without_answers_there_is_no_c7() -> None:
    d = judge_runs(switch_runs(), make_config(), NOW)
    assert d.verdict == "switch" and "C7" not in {c.criterion for c in d.criteria}


def test_equal_answers_pass_and_are_required() -> None:
    d = judge_runs(answered(switch_runs(), {}), make_config(), NOW)
    assert d.verdict == "switch", decision_markdown(d)
    assert c7(d).status == "pass" and c7(d).required
    assert f"{len(ITEMS)}/{len(ITEMS)}" in c7(d).reason


def test_a_faster_candidate_that_answers_wrongly_is_not_switched_to() -> None:
    # every other criterion passes: the candidate is faster and lighter, and misses 6 items
    d = judge_runs(answered(switch_runs(), {"vllm": 6}), make_config(), NOW)
    assert c7(d).status == "fail" and c7(d).required
    assert "scores lower" in c7(d).reason and ITEMS[0].item_id in c7(d).reason
    assert d.verdict == "stay", decision_markdown(d)
    assert all(c.status == "pass" for c in d.criteria if c.criterion != "C7")


def test_one_item_either_way_is_not_lower() -> None:
    d = judge_runs(answered(switch_runs(), {"vllm": 1}), make_config(), NOW)
    assert c7(d).status == "pass" and d.verdict == "switch"
