"""The charts show the gap that decides: every chart comparing engines shares one y scale (read from
the Vega-Lite spec), each engine keeps one colour in every chart and each of its model profiles one
shade of it (read from every chart's spec), C3 over time is on a linear axis,
the throughput-per-user chart marks its frontier, and the charts index draws the charts interactively
under the verdict and the forest plot."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from support.decision_seed import run_record, run_result, september_runs
from support.report_seed import make_run_warehouse

from strix_pipeline.analysis.charts import chart_builders, write_charts
from strix_pipeline.analysis.charts.frontier import frontier
from strix_pipeline.analysis.charts.marks import ENGINE_COLORS, ENGINE_SHADES, is_note_chart
from strix_pipeline.warehouse import Warehouse

ROLES = {"vllm": "candidate", "llamacpp": "baseline"}


def _charts(tmp_path: Path) -> tuple[dict[str, dict[str, Any]], str]:
    wh, _ = make_run_warehouse(tmp_path / "w.duckdb")
    with wh:
        cs = write_charts(wh, tmp_path / "charts", roles=ROLES)
    specs = {name: json.loads(c.json.read_text()) for name, c in cs.charts.items()}
    return specs, cs.index_html.read_text()


def _walk(node: Any) -> list[dict[str, Any]]:
    out = []
    if isinstance(node, dict):
        out.append(node)
        for v in node.values():
            out += _walk(v)
    elif isinstance(node, list):
        for v in node:
            out += _walk(v)
    return out


def _mark_colors(panel: dict[str, Any]) -> set[str]:
    return {
        n["mark"]["color"] for n in _walk(panel) if isinstance(n.get("mark"), dict) and "color" in n["mark"]
    }


def test_engines_compared_share_one_y_scale_and_keep_their_colour(tmp_path: Path) -> None:
    specs, _ = _charts(tmp_path)
    for name in ("ttft_p95_by_version", "memory_held_by_version"):
        spec = specs[name]
        panels = spec["vconcat"]
        engines = [p["title"]["text"] if isinstance(p["title"], dict) else p["title"] for p in panels]
        assert any(t.startswith("llamacpp") for t in engines) and any(t.startswith("vllm") for t in engines)
        assert spec["resolve"]["scale"]["y"] == "shared", name  # 0.5 GiB and 6.6 GiB on one axis
        for title, panel in zip(engines, panels, strict=True):
            engine = title.split(" ", 1)[0]
            colors = _mark_colors(panel) - {"#c62828", "#ef6c00"}  # failure and change marks
            assert colors == {ENGINE_COLORS[engine]}, (name, title, colors)


def test_c3_over_time_is_linear_and_coloured_by_engine(tmp_path: Path) -> None:
    specs, _ = _charts(tmp_path)
    nodes = _walk(specs["switch_metric"])
    y_scales = [
        n["y"].get("scale", {})
        for n in nodes
        if isinstance(n.get("y"), dict) and n["y"].get("field") == "ttft_p95_ms"
    ]
    assert y_scales and all(s.get("type") != "log" for s in y_scales)
    colors = [
        n["color"]["scale"] for n in nodes if isinstance(n.get("color"), dict) and "scale" in n["color"]
    ]
    by_label = dict(zip(colors[0]["domain"], colors[0]["range"], strict=True))
    assert by_label == {
        "llamacpp (baseline) · gemma3-270m": ENGINE_COLORS["llamacpp"],
        "vllm (candidate) · gemma3-270m": ENGINE_COLORS["vllm"],
    }


def test_throughput_per_user_is_a_curve_per_engine_with_its_frontier(tmp_path: Path) -> None:
    specs, _ = _charts(tmp_path)
    spec = specs["throughput_per_user"]
    points = [r for n in _walk(spec) for r in (n.get("values") or []) if isinstance(r, dict) and "curve" in r]
    assert {p["engine"] for p in points} == {"vllm", "llamacpp"}
    assert all(p["per_user_tok_s"] > 0 and "on_frontier" in p for p in points)
    # the frontier: levels no other level beats on both axes
    curve = [
        {"level": 1, "per_user_tok_s": 38.0, "output_tokens_per_s": 38.0},
        {"level": 2, "per_user_tok_s": 30.0, "output_tokens_per_s": 55.0},
        {"level": 4, "per_user_tok_s": 20.0, "output_tokens_per_s": 50.0},  # beaten by 2 clients
        {"level": 5, "per_user_tok_s": 14.0, "output_tokens_per_s": 70.0},
    ]
    assert frontier(curve) == {1, 2, 5}


def test_the_charts_index_draws_the_charts_under_the_verdict_and_forest_plot(tmp_path: Path) -> None:
    specs, index = _charts(tmp_path)
    markup = re.sub(r"<script.*?</script>", "", index, flags=re.S)  # the page's own, not the Vega bundle's
    assert "<img" not in markup  # interactive charts, not PNGs blown up
    answer = index.index("id='verdict-sentence'")
    forest = index.index("data-target='chart-forest'")
    first_chart = index.index("data-target='chart-ttft_p95_by_version'")
    assert answer < forest < first_chart
    assert "Stay: keep llama-server." in index
    for name, spec in specs.items():  # drawn, or (nothing to draw) its note alone: no empty panel
        drawn = f"data-target='chart-{name}'" in index
        assert drawn != is_note_chart(spec) and f"<h2 id='{name}'>" in index, name


# charts whose colour says something else than the series: a support-matrix cell's outcome, a
# criterion's status
NOT_SERIES_COLOURED = {"support_matrix", "decision_timeline"}


def _unit_colours(node: Any, datasets: dict[str, list], rows: list[dict[str, Any]], out: dict) -> None:
    """Each drawn record's (engine, model profile) -> the colours its marks are drawn in, from the
    spec: a mark's own colour, or its colour channel's scale (domain -> range) read at the record."""
    if isinstance(node, list):
        for n in node:
            _unit_colours(n, datasets, rows, out)
        return
    if not isinstance(node, dict):
        return
    data = node.get("data")
    if isinstance(data, dict):
        rows = data.get("values") or datasets.get(data.get("name"), [])
    if "mark" in node:
        mark = node["mark"] if isinstance(node["mark"], dict) else {}
        channel = (node.get("encoding") or {}).get("color") or {}
        for r in rows:
            # a failed run is drawn in the failure's red whatever its engine
            if not isinstance(r, dict) or "model_profile" not in r or r.get("usable") is False:
                continue
            if "value" in channel:
                colour = channel["value"]
            elif "scale" in channel and "range" in channel["scale"]:
                scale = channel["scale"]
                colour = scale["range"][scale["domain"].index(r[channel["field"]])]
            elif "color" in mark:
                colour = mark["color"]
            else:
                continue
            out.setdefault((r["engine"], r["model_profile"]), set()).add(colour)
    for key in ("layer", "vconcat", "hconcat", "concat", "spec"):
        if key in node:
            _unit_colours(node[key], datasets, rows, out)


def test_each_engines_model_profile_keeps_one_colour_in_every_chart(tmp_path: Path) -> None:
    """llama-server on two profiles (its production Q4 and the equal-weights BF16) and vLLM on one:
    three series, three colours, each the same in every chart, each a shade of its engine's hue."""
    runs = september_runs()
    bf16 = run_record(
        "llama-qwen-bf16",
        "llamacpp",
        started_at=runs[2].run.started_at,
        tag="server-rocm-b6500",
        profile="qwen3-30b-a3b-bf16",
        quant="BF16",
        held_gib=60.0,
        digest="sha256:" + "b" * 64,
    )
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.load_runs([*runs, run_result(bf16, ttft5=(1900.0, 1800.0, 2000.0))])
        builders = chart_builders(wh, changes=[], roles={"vllm": "candidate", "llamacpp": "baseline"})
        specs = {name: build()[0].to_dict() for name, build in builders.items()}
    seen: dict[tuple[str, str], set[str]] = {}
    per_chart: dict[str, dict] = {}
    for name, spec in specs.items():
        if name in NOT_SERIES_COLOURED:
            continue
        found: dict[tuple[str, str], set[str]] = {}
        _unit_colours(spec, spec.get("datasets") or {}, [], found)
        per_chart[name] = found
        for key, colours in found.items():
            seen.setdefault(key, set()).update(colours)
    # the charts drawing both of llama-server's profiles: by version (TTFT, memory), over time, the
    # newest line and the throughput-per-user curves
    both = [
        n
        for n, f in per_chart.items()
        if {k[1] for k in f if k[0] == "llamacpp"} >= {"qwen3-30b-a3b-q4", "qwen3-30b-a3b-bf16"}
    ]
    assert set(both) >= {"ttft_p95_by_version", "memory_held_by_version", "switch_metric"}, per_chart
    assert all(len(c) == 1 for c in seen.values()), seen  # one colour per profile, in every chart
    colour = {k: next(iter(c)) for k, c in seen.items()}
    assert len(set(colour.values())) == len(colour), colour  # two profiles never share one
    for (engine, _), c in colour.items():
        assert c in ENGINE_SHADES[engine], (engine, c)  # a shade of its engine's hue
    # an engine's profiles take its shades in name order, a failed run's profile too (vLLM's
    # gpt-oss-120b, drawn only as a failure): a profile's colour does not move when a run fails
    assert colour[("llamacpp", "qwen3-30b-a3b-bf16")] == ENGINE_COLORS["llamacpp"]
    assert colour[("llamacpp", "qwen3-30b-a3b-q4")] == ENGINE_SHADES["llamacpp"][1]
    assert colour[("vllm", "qwen3-30b-a3b")] == ENGINE_SHADES["vllm"][1]
