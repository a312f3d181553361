"""The evaluation set every run answers: short prompts whose answers a program can check.

Completion prompts, not chat: a few worked lines and then the one to complete, so a 270M model
answers them as well as a 120B one would, with no chat template in the way (the embedded Gemma's
GGUF carries none that llama-server applies). Each is sent greedy (temperature 0), cut at the first
newline, and checked by its ``kind`` (strix_pipeline/quality/checks.py). The set is fixed: its
version is the digest of its items, so two runs' scores are compared only on the same set.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Literal

Kind = Literal["number", "word", "json", "code"]


@dataclass(frozen=True)
class EvalItem:
    item_id: str
    kind: Kind
    prompt: str
    # number: the integer; word: the word; json: the whole object as JSON text; code: the calls and
    # their results as JSON text, [[[args...], result], ...]
    expected: str
    max_tokens: int = 8


def _sums(a: int, b: int) -> str:
    return f"2 + 3 = 5\n4 + 4 = 8\n{a} + {b} ="


def _capital(country: str) -> str:
    return f"The capital of Italy is Rome.\nThe capital of Germany is Berlin.\nThe capital of {country} is"


ITEMS: tuple[EvalItem, ...] = (
    EvalItem("sum-7-5", "number", _sums(7, 5), "12"),
    EvalItem("sum-6-3", "number", _sums(6, 3), "9"),
    EvalItem("sum-10-10", "number", _sums(10, 10), "20"),
    EvalItem("count-by-ten", "number", "10, 20, 30, 40,", "50"),
    EvalItem("count-by-two", "number", "2, 4, 6, 8,", "10"),
    EvalItem("capital-france", "word", _capital("France"), "Paris"),
    EvalItem("capital-japan", "word", _capital("Japan"), "Tokyo"),
    EvalItem("capital-spain", "word", _capital("Spain"), "Madrid"),
    EvalItem("weekday", "word", "Monday, Tuesday, Wednesday,", "Thursday"),
    EvalItem("number-word", "word", "one, two, three, four,", "five"),
    EvalItem(
        "opposite",
        "word",
        "The opposite of hot is cold.\nThe opposite of up is down.\nThe opposite of big is",
        "small",
    ),
    EvalItem("json-pairs", "json", '{"a": 1, "b": 2}\n{"a": 3, "b": 4}\n{"a": 5, "b":', '{"a": 5, "b": 6}'),
    EvalItem(
        "json-names",
        "json",
        '{"name": "Ann", "city": "Rome"}\n{"name": "Bob", "city": "Rome"}\n{"name": "Cy", "city":',
        '{"name": "Cy", "city": "Rome"}',
    ),
    EvalItem("code-add", "code", "def add(a, b):\n    return", "[[[1, 2], 3], [[5, 7], 12], [[-4, 4], 0]]"),
    EvalItem("code-square", "code", "def square(x):\n    return", "[[[3], 9], [[-2], 4], [[0], 0]]"),
    EvalItem(
        "code-max", "code", "def bigger(a, b):\n    return", "[[[3, 9], 9], [[9, 3], 9], [[-1, -5], -1]]"
    ),
)


def set_version(items: tuple[EvalItem, ...] = ITEMS) -> str:
    """``quality-<12 hex>``: the digest of the items, so a changed set never compares with the old."""
    blob = json.dumps([asdict(i) for i in items], sort_keys=True).encode()
    return f"quality-{hashlib.sha256(blob).hexdigest()[:12]}"
