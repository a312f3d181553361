"""Reading a written chart back: the data records of a Vega-Lite spec."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def chart_points(spec: dict[str, Any] | str | Path) -> list[dict[str, Any]]:
    """Every data record in a Vega-Lite spec (top-level datasets and inline values): tests read charts
    back."""
    if isinstance(spec, Path):
        spec = spec.read_text()
    if isinstance(spec, str):
        spec = json.loads(spec)
    out: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "datasets" and isinstance(v, dict):
                    for recs in v.values():
                        out.extend(x for x in recs if isinstance(x, dict))
                elif k == "values" and isinstance(v, list) and v and isinstance(v[0], dict):
                    out.extend(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for x in node:
                walk(x)

    walk(spec)
    return out
