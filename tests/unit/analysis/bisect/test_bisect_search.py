"""The bisection's search on plain figures (analysis/bisect/search.py): sides, the run bound, skips."""

from __future__ import annotations

import math

import pytest

from strix_pipeline.analysis.bisect.search import Figure, Search, pair_side, runs_bound, side_of

BEFORE = Figure("b1", 100.0, 95.0, 105.0)
AFTER = Figure("b9", 200.0, 190.0, 210.0)


def test_a_figure_takes_the_side_whose_interval_it_overlaps() -> None:
    assert side_of(Figure("m", 102, 97, 107), BEFORE, AFTER)[0] == "before"
    assert side_of(Figure("m", 198, 188, 208), BEFORE, AFTER)[0] == "after"
    side, why = side_of(Figure("m", 150, 100, 200), BEFORE, AFTER)
    assert side == "inconclusive" and "overlaps both" in why
    side, why = side_of(Figure("m", 170, 168, 172), BEFORE, AFTER)
    assert side == "after" and "neither" in why


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 15, 16, 100, 250])
def test_every_first_release_is_found_within_the_bound(n: int) -> None:
    assert runs_bound(n) <= math.ceil(math.log2(n)) + 1
    for first in range(n + 1):  # first == n: the after bracket itself is the first
        s, runs = Search(n), 0
        while (i := s.next_index()) is not None:
            s.record(i, "after" if i >= first else "before")
            runs += 1
        assert s.found and s.first_index() == first and runs <= runs_bound(n)


def test_a_skipped_release_is_searched_around() -> None:
    s = Search(7)
    mid = s.next_index()
    s.record(mid, "skipped")
    nxt = s.next_index()
    assert nxt is not None and nxt != mid and abs(nxt - mid) == 1
    s.record(nxt, "inconclusive", "overlaps both")
    assert s.next_index() is None and not s.found and s.stopped == "overlaps both"


@pytest.mark.parametrize(
    ("vs_before", "vs_after", "side"),
    [
        ("same", "different", "before"),
        ("different", "same", "after"),
        ("different", "different", "after"),  # the first change is at or before it
        ("same", "same", "inconclusive"),
        ("unknown", "different", "before"),
        ("unknown", "same", "after"),
        ("different", "unknown", "after"),
        ("same", "unknown", "before"),
        ("unknown", "unknown", "inconclusive"),
    ],
)
def test_pair_side_from_the_two_comparisons(vs_before, vs_after, side) -> None:
    got, why = pair_side(vs_before, vs_after)
    assert got == side and why
