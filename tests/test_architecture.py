"""The arrows point inward: the domain (strix_pipeline/) never imports the orchestrator."""

from __future__ import annotations

import ast
from pathlib import Path

DOMAIN = Path(__file__).resolve().parent.parent / "strix_pipeline"
OUTER = ("dagster", "dagster_webserver", "dagster_graphql", "assets", "schedules", "strix_dagster")


def test_no_file_of_the_domain_imports_dagster_or_the_dagster_layer() -> None:
    offenders = []
    files = sorted(DOMAIN.rglob("*.py"))
    assert len(files) > 50  # the walk found the package
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [
                f"{path.relative_to(DOMAIN.parent)}: {n}" for n in names if n.split(".")[0] in OUTER
            ]
    assert offenders == []
