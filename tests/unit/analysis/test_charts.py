"""Charts: files exist, the Vega-Lite JSON holds the expected points, failures are marked, empty works."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

from support.charts import chart_points
from support.decision_seed import (
    SEPT,
    local_llamacpp_record,
    make_config,
    run_record,
    run_result,
    seeded,
    september_runs,
)

from strix_pipeline.analysis.changes import detect_changes
from strix_pipeline.analysis.charts import png_base64, write_charts
from strix_pipeline.analysis.decision import evaluate
from strix_pipeline.warehouse import Warehouse

NAMES = {
    "ttft_p95_by_version",
    "throughput_vs_concurrency",
    "throughput_per_user",
    "prefill_vs_input_length",
    "memory_held_by_version",
    "decision_timeline",
    "support_matrix",
    "switch_metric",
    "efficiency_by_version",
}


def trend_runs():
    """vLLM over 8 versions, run in shuffled date order, one failed, a +12 % step at v0.06."""
    out = []
    dates = [3, 7, 1, 0, 5, 2, 6, 4]
    for i in range(8):
        p95 = 500.0 * (1.12 if i >= 6 else 1.0) * (1 + 0.003 * ((-1) ** i))
        status = "failed_start" if i == 4 else "ok"
        r = run_record(
            f"v{i}",
            "vllm",
            tag=f"v0.{i:02d}.0",
            status=status,
            failure_reason="HIP out of memory" if status != "ok" else None,
            started_at=SEPT + timedelta(days=dates[i]),
            held_gib=30.0 + i if status == "ok" else None,
        )
        if status == "ok":
            out.append(
                run_result(
                    r,
                    ttft5=(p95, p95 * 0.9, p95 * 1.1),
                    sweep={1: (p95 / 3, 40.0), 2: (p95 / 2, 70.0), 8: (p95 * 1.6, 150.0)},
                    ladder={2048: 900.0 + i, 4096: 850.0 + i},
                )
            )
        else:
            out.append(run_result(r, smoke_ok=None))
    return out


def test_charts_hold_the_expected_points(tmp_path):
    wh = seeded(tmp_path / "w.duckdb", trend_runs() + september_runs()[2:])
    cfg = make_config()
    changes = detect_changes(wh, cfg, now=SEPT + timedelta(days=10))
    wh.save_decision(evaluate(wh, cfg, now=SEPT + timedelta(days=10)).criteria)
    cs = write_charts(wh, tmp_path / "charts", changes=changes)
    assert set(cs.charts) == NAMES
    for c in cs.charts.values():
        assert c.html.stat().st_size > 1000 and c.json.exists()
        assert c.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    index = cs.index_html.read_text()
    assert all(f"{n}.html" in index and f"{n}.png" in index for n in NAMES)

    spec = json.loads(cs.charts["ttft_p95_by_version"].json.read_text())
    pts = chart_points(spec)
    ok = {p["run_id"]: p for p in pts if p.get("ttft_p95_ms") is not None}
    assert ok["v0"]["ttft_p95_ms"] == 500.0 * 1.003 and ok["v0"]["version"] == "v0.00.0"
    assert ok["v7"]["ttft_p95_ci_low_ms"] == ok["v7"]["ttft_p95_ms"] * 0.9
    assert ok["llama-qwen"]["ttft_p95_ms"] == 1450.0
    # the failed run is marked with its reason, never a zero
    failed = [p for p in pts if p.get("run_id") == "v4"]
    assert failed and all(p.get("ttft_p95_ms") is None for p in failed)
    assert failed[0]["failure_reason"] == "HIP out of memory"
    assert not any(p.get("ttft_p95_ms") == 0 for p in pts)
    # versions evenly spaced in version order, not run-date order
    text = json.dumps(spec)
    assert (
        '"sort": ["v0.00.0", "v0.01.0", "v0.02.0", "v0.03.0", "v0.04.0", "v0.05.0", "v0.06.0", "v0.07.0"]'
        in text
    )
    # the step is annotated where it happened
    marks = {p["change_id"]: p for p in pts if "magnitude_pct" in p}  # rule and label share the records
    assert [m["version"] for m in marks.values()] == ["v0.06.0"]
    assert next(iter(marks.values()))["label"].startswith("+1")

    thr = chart_points(cs.charts["throughput_vs_concurrency"].json)
    newest_vllm = {p["level"]: p["output_tokens_per_s"] for p in thr if p["engine"] == "vllm"}
    assert newest_vllm == {1: 40.0, 2: 70.0, 5: 100.0, 8: 150.0}
    assert {p["run_id"] for p in thr if p["engine"] == "vllm"} == {"v7"}  # newest version only
    pre = chart_points(cs.charts["prefill_vs_input_length"].json)
    assert {(p["level"], p["prefill_tokens_per_s"]) for p in pre} == {(2048, 907.0), (4096, 857.0)}
    mem = chart_points(cs.charts["memory_held_by_version"].json)
    assert any(p.get("run_id") == "v7" and abs(p["held_gib"] - 37.0) < 1e-9 for p in mem)
    tl = chart_points(cs.charts["decision_timeline"].json)
    assert {p["criterion"] for p in tl} == {"C1", "C2", "C3", "C4", "C5"}

    # C3's metric: baseline and candidate on one time axis, with their intervals and the verdict
    sw = chart_points(cs.charts["switch_metric"].json)
    engines = {p["engine_label"] for p in sw if "engine_label" in p}
    assert {"llamacpp", "vllm"} <= engines, engines
    v7 = next(p for p in sw if p.get("run_id") == "v7")
    assert v7["ttft_p95_ci_low_ms"] == v7["ttft_p95_ms"] * 0.9 and v7["version"] == "v0.07.0"
    stored = wh.query_df("SELECT DISTINCT verdict FROM v_decisions").to_series().to_list()
    assert [p["verdict"] for p in sw if "verdict" in p and "evaluated_at" in p] == stored and len(stored) == 1
    assert not any(p.get("run_id") == "v4" for p in sw)  # a failed run has no TTFT to plot
    # no run of these has a decode efficiency: the chart says so instead of drawing zeros
    assert cs.charts["efficiency_by_version"].note.startswith("no run has a decode efficiency yet")

    # without a `changes` argument the stored change points are annotated
    again = write_charts(wh, tmp_path / "stored")
    stored = chart_points(again.charts["ttft_p95_by_version"].json)
    assert {p["version"] for p in stored if "magnitude_pct" in p} == {"v0.06.0"}

    b64 = png_base64(cs.charts["throughput_vs_concurrency"].png, max_width=300)
    small = base64.b64decode(b64)
    assert small[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(small[16:20], "big") <= 310


def test_empty_and_single_run_warehouse(tmp_path):
    wh = Warehouse.open(tmp_path / "w.duckdb")
    cs = write_charts(wh, tmp_path / "empty")
    assert set(cs.charts) == NAMES
    assert all(c.png.exists() and c.html.exists() and c.note for c in cs.charts.values())
    assert "no run has a 5-client sweep yet" in cs.index_html.read_text()

    local = local_llamacpp_record()
    wh.load_run(run_result(local, ttft5=(40.0, 35.0, 45.0), ladder={512: 3000.0}))
    cs = write_charts(wh, tmp_path / "one")
    pts = chart_points(cs.charts["ttft_p95_by_version"].json)
    assert any(p.get("run_id") == "local-1" and p["ttft_p95_ms"] == 40.0 for p in pts)
    assert "one version so far" in cs.charts["ttft_p95_by_version"].note
    assert cs.charts["prefill_vs_input_length"].note == ""


def test_a_broken_chart_leaves_a_note_not_a_crash(tmp_path, monkeypatch):
    import strix_pipeline.analysis.charts.write as charts  # where write_charts finds its builders

    def boom(wh):
        raise ValueError("bad data")

    monkeypatch.setattr(charts, "throughput_chart", boom)
    wh = Warehouse.open(tmp_path / "w.duckdb")
    cs = write_charts(wh, tmp_path / "c")
    broken = cs.charts["throughput_vs_concurrency"]
    assert broken.png.exists() and "bad data" in broken.note
    assert "bad data" in cs.index_html.read_text()


def test_efficiency_chart_plots_the_stored_share_and_names_runs_without_one(tmp_path):
    runs = trend_runs()[:3]
    runs[0].run.decode_efficiency, runs[0].run.decode_tok_s = 0.42, 30.0
    runs[1].run.decode_efficiency, runs[1].run.efficiency_problem = None, "above 1 (1.3): …"
    wh = seeded(tmp_path / "w.duckdb", runs)
    cs = write_charts(wh, tmp_path / "c", roles={"llamacpp": "baseline", "vllm": "candidate"})
    pts = chart_points(cs.charts["efficiency_by_version"].json)
    assert [(p["run_id"], p["decode_efficiency"]) for p in pts if p.get("decode_efficiency") is not None] == [
        (runs[0].run.run_id, 0.42)
    ]
    assert "1 run(s) without a figure" in cs.charts["efficiency_by_version"].note
    labels = {p["engine_label"] for p in chart_points(cs.charts["switch_metric"].json) if "engine_label" in p}
    assert labels <= {"llamacpp (baseline)", "vllm (candidate)"} and labels


def test_a_panel_of_runs_without_a_figure_is_left_out_and_the_note_says_why(tmp_path):
    """`make run`'s equal-weights run (profile decision) measures no decode: its panel would hold no
    point. It is left out (no empty "no figure" panel), the chart's note names the run's problem, and
    the chart still renders (an empty layer once made Vega-Lite fail it)."""
    runs = trend_runs()[:2]
    runs[0].run.decode_efficiency, runs[0].run.decode_tok_s = 0.42, 30.0
    runs[1].run.model_profile = "gemma3-270m-bf16-gguf"  # a panel of its own
    runs[1].run.decode_efficiency = None
    runs[1].run.efficiency_problem = "no single-client decode speed measured"
    wh = seeded(tmp_path / "w.duckdb", runs)
    cs = write_charts(wh, tmp_path / "c")
    chart = cs.charts["efficiency_by_version"]
    assert "failed" not in chart.note, chart.note
    assert "1 run(s) without a figure (no single-client decode speed measured)" in chart.note
    assert not [p for p in chart_points(chart.json) if p.get("run_id") == runs[1].run.run_id]
    spec = json.loads(chart.json.read_text())
    assert "no figure" not in json.dumps(spec)
    assert "gemma3-270m-bf16-gguf" not in json.dumps(spec.get("vconcat", []))
    assert chart.png.stat().st_size > 1000
