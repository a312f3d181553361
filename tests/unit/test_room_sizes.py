"""Rooms a newcomer can read: no module of the project over 500 lines, no function of the Dagster
layer's assets and schedules over 60 (they call library code; a night in an asset is a runner's),
and a README read in five minutes (at most 250 lines)."""

from __future__ import annotations

import ast

from support.paths import REPO

MAX_MODULE_LINES = 500
MAX_DAGSTER_FUNCTION_LINES = 60
MAX_README_LINES = 250
LAYERS = ("strix_pipeline", "assets", "schedules", "strix_dagster")


def test_no_module_is_a_giant() -> None:
    giants = {
        str(p.relative_to(REPO)): n
        for root in LAYERS
        for p in (REPO / root).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not giants, f"split along a seam: {giants}"


def test_asset_and_schedule_functions_stay_thin() -> None:
    long = {}
    for root in ("assets", "schedules"):
        for p in (REPO / root).rglob("*.py"):
            for node in ast.walk(ast.parse(p.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_DAGSTER_FUNCTION_LINES:
                        long[f"{p.relative_to(REPO)}:{node.name}"] = lines
    assert not long, f"move the work into plain library code: {long}"


def test_the_readme_is_short() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= MAX_README_LINES
