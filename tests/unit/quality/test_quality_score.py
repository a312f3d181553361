"""The score's interval and the item-by-item comparison of two sides."""

from __future__ import annotations

import pytest

from strix_pipeline.quality.score import compare, score


def test_wilson_interval_matches_the_textbook_figure() -> None:
    s = score(14, 16)
    # Wilson 95 % for 14/16: 0.640 .. 0.965 (Newcombe 1998's formula)
    assert s.low == pytest.approx(0.640, abs=0.002) and s.high == pytest.approx(0.965, abs=0.002)
    assert score(16, 16).high == 1.0 and score(0, 16).low == 0.0
    assert "14/16" in s.text()


def test_a_side_that_loses_many_items_scores_lower() -> None:
    items = [f"i{n}" for n in range(16)]
    base = dict.fromkeys(items, True)
    worse = {i: n >= 6 for n, i in enumerate(items)}  # 6 lost, none gained
    c = compare(base, worse)
    assert c.lower and c.lost == items[:6] and c.gained == []
    assert c.p_value == pytest.approx(0.5**6)
    assert "scores lower" in c.text()


def test_one_lost_and_one_gained_is_not_lower() -> None:
    base = {"a": True, "b": False, "c": True}
    other = {"a": False, "b": True, "c": True}
    c = compare(base, other)
    assert not c.lower and c.lost == ["a"] and c.gained == ["b"]


def test_only_items_both_were_asked_count() -> None:
    assert compare({"a": True, "b": True}, {"c": False}).p_value == 1.0
