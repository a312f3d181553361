"""The evaluation set's checks: each kind passes the right answer and refuses a wrong one, and an
engine's code answer is never run unless it is a harmless expression."""

from __future__ import annotations

import re

import pytest

from strix_pipeline.quality.checks import passes, safe_function
from strix_pipeline.quality.items import ITEMS, EvalItem, set_version

BY_ID = {i.item_id: i for i in ITEMS}


@pytest.mark.parametrize(
    ("item_id", "right", "wrong"),
    [
        ("sum-7-5", " 12\n10 + ", " 13"),
        ("count-by-ten", " 50, 60,", " 60, 70"),
        ("capital-japan", " Tokyo.\nThe capital", " Kyoto."),
        ("json-pairs", " 6}", " 6"),  # the line must close the object to parse
        ("json-names", ' "Rome"}', ' "Paris"}'),
        ("code-add", " a + b", " a - b"),
        ("code-square", " x**2", " x * 2"),
        ("code-max", " max(a, b)", " a + b"),
    ],
)
def test_each_kind_passes_the_answer_and_refuses_another(item_id: str, right: str, wrong: str) -> None:
    item = BY_ID[item_id]
    assert passes(item, right)
    assert not passes(item, wrong)
    assert not passes(item, "")


def test_only_the_first_line_counts() -> None:
    assert not passes(BY_ID["sum-7-5"], " 13\n12")


@pytest.mark.parametrize(
    "body",
    [
        " __import__('os').system('touch /tmp/x')",
        " open('/etc/passwd').read()",
        " a.__class__",
        " (lambda: a)()",
        " a ** 9 ** 9",
        " a ** b",
        " 10 ** 100",
        " [a for a in range(10**9)]",
        " print(a)",
        " a; import os",
        " a if a else b\nimport os",
    ],
)
def test_code_that_could_do_harm_is_never_run(body: str) -> None:
    assert safe_function("def add(a, b):\n    return" + body) is None


def test_a_safe_answer_runs_as_a_function() -> None:
    f = safe_function("def bigger(a, b):\n    return a if a > b else b")
    assert f is not None and f(3, 9) == 9 and f(9, 3) == 9


def test_the_set_has_every_kind_and_a_stable_version() -> None:
    assert {i.kind for i in ITEMS} == {"number", "word", "json", "code"}
    assert len({i.item_id for i in ITEMS}) == len(ITEMS)
    assert re.fullmatch(r"quality-[0-9a-f]{12}", set_version())  # a digest, named as one
    changed = (*ITEMS[:-1], EvalItem(ITEMS[-1].item_id, "code", ITEMS[-1].prompt, "[[[1, 1], 1]]"))
    assert set_version(changed) != set_version()
