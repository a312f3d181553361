"""The support matrix: engine × image version × model profile -> serves / starts /
fails, with the reason and the run id in each cell, newest versions first -- the view, the chart, the
markdown the trend_charts asset shows in the UI."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
from support.charts import chart_points
from support.decision_seed import SEPT, make_config, run_record, run_result

from assets.analysis import trend_charts
from assets.resources import StrixConfigResource, WarehouseResource
from strix_pipeline.analysis.charts import (
    support_matrix_chart,
    support_matrix_markdown,
    support_matrix_rows,
    write_charts,
)
from strix_pipeline.records import RunResult
from strix_pipeline.warehouse import Warehouse

DAY = timedelta(days=1)


def matrix_runs() -> list[RunResult]:
    """vLLM v0.10-v0.12 and a llama.cpp build on the Box with two model profiles, one local run.

    Dates are NOT in version order: v0.12.0 ran before v0.11.0 (a re-test of an older image), so only
    the version order can put it first.
    """

    def r(
        rid, engine, tag, at, *, profile="qwen3-30b-a3b", status="ok", reason=None, host="strix-halo", **kw
    ):
        rec = run_record(
            rid,
            engine,
            tag=tag,
            started_at=SEPT + at,
            profile=profile,
            status=status,
            failure_reason=reason,
            host=host,
            **kw,
        )
        served = status in ("ok", "partial")
        return run_result(
            rec, smoke_ok=True if served else None, ttft5=(800.0, 700.0, 900.0) if served else None
        )

    return [
        r("v10-qwen", "vllm", "v0.10.0", 0 * DAY),
        r(
            "v10-gpt",
            "vllm",
            "v0.10.0",
            0 * DAY,
            profile="gpt-oss-120b",
            status="failed_start",
            reason="MXFP4 MoE kernels unavailable on gfx1151",
        ),
        # v0.12.0 ran before v0.11.0
        r("v12-qwen", "vllm", "v0.12.0", 1 * DAY, status="partial", reason="3 request(s) failed"),
        r(
            "v12-gpt-1",
            "vllm",
            "v0.12.0",
            1 * DAY,
            profile="gpt-oss-120b",
            status="failed_serve",
            reason="no request succeeded",
        ),
        # a later repeat that served: the newest attempt is the cell
        r("v12-gpt-2", "vllm", "v0.12.0", 2 * DAY, profile="gpt-oss-120b"),
        # ... but a guard refusal after it says nothing about the engine and does not replace it
        r(
            "v12-gpt-3",
            "vllm",
            "v0.12.0",
            3 * DAY,
            profile="gpt-oss-120b",
            status="failed_guard",
            reason="outside the maintenance window",
        ),
        r("v11-qwen", "vllm", "v0.11.0", 4 * DAY, status="error", reason="harness: connection reset | retry"),
        # only ever refused by a guard: not_run
        r(
            "v11-gpt",
            "vllm",
            "v0.11.0",
            4 * DAY,
            profile="gpt-oss-120b",
            status="failed_guard",
            reason="reservations 130 GB over the host's memory_budget_gb 120 GB",
        ),
        # an ok run may carry a note in failure_reason: not a failure, kept out of the cell's text
        r(
            "l-qwen",
            "llamacpp",
            "server-rocm-b6500",
            0 * DAY,
            profile="qwen3-30b-a3b-q4",
            quant="Q4_K_M",
            reason="client: one connection per request was used",
        ),
        r(
            "local-1",
            "llamacpp",
            "b6600",
            0 * DAY,
            profile="gemma3-270m",
            host="local",
            repo=None,
            digest="local:b6600",
            version="b6600",
            sort_key="b6600",
        ),
    ]


@pytest.fixture
def wh(tmp_path: Path):
    with Warehouse.open(tmp_path / "w.duckdb") as w:
        w.load_runs(matrix_runs())
        yield w


def cells(wh: Warehouse) -> dict[tuple[str, str, str, str], dict]:
    return {
        (r["host"], r["engine"], r["image_version"], r["model_profile"]): r
        for r in wh.query_df("SELECT * FROM v_support_matrix").iter_rows(named=True)
    }


def test_the_view_has_one_cell_per_engine_version_and_profile(wh: Warehouse) -> None:
    m = cells(wh)
    box = "strix-halo"
    assert len(m) == 8
    ok = m[(box, "vllm", "v0.10.0", "qwen3-30b-a3b")]
    assert (ok["outcome"], ok["starts"], ok["serves"], ok["fails"]) == ("serves", True, True, False)
    assert ok["run_id"] == "v10-qwen" and ok["reason"] is None and ok["cell"] == "serves (v10-qwen)"

    fail = m[(box, "vllm", "v0.10.0", "gpt-oss-120b")]
    assert (fail["outcome"], fail["starts"], fail["serves"], fail["fails"]) == ("fails", False, False, True)
    assert fail["reason"] == "MXFP4 MoE kernels unavailable on gfx1151" and fail["run_id"] == "v10-gpt"
    assert fail["cell"] == "fails: MXFP4 MoE kernels unavailable on gfx1151 (v10-gpt)"

    partial = m[(box, "vllm", "v0.12.0", "qwen3-30b-a3b")]
    assert (partial["outcome"], partial["status"], partial["reason"]) == (
        "serves",
        "partial",
        "3 request(s) failed",
    )

    # the newest real attempt: served on the repeat; the guard refusal after it does not count
    gpt12 = m[(box, "vllm", "v0.12.0", "gpt-oss-120b")]
    assert (gpt12["outcome"], gpt12["run_id"]) == ("serves", "v12-gpt-2")
    assert (gpt12["attempts"], gpt12["attempts_served"]) == (2, 1)

    assert m[(box, "vllm", "v0.11.0", "qwen3-30b-a3b")]["outcome"] == "fails"  # status error
    refused = m[(box, "vllm", "v0.11.0", "gpt-oss-120b")]
    assert (refused["outcome"], refused["starts"], refused["fails"], refused["attempts"]) == (
        "not_run",
        False,
        False,
        0,
    )
    note = m[(box, "llamacpp", "server-rocm-b6500", "qwen3-30b-a3b-q4")]
    assert note["reason"] == "client: one connection per request was used"
    assert note["cell"] == "serves (l-qwen)"
    # hosts stay apart
    assert m[("local", "llamacpp", "b6600", "gemma3-270m")]["outcome"] == "serves"


def test_starts_means_ready_but_served_nothing(tmp_path: Path) -> None:
    with Warehouse.open(tmp_path / "w.duckdb") as w:
        rec = run_record(
            "s1", "vllm", tag="v0.13.0", status="failed_serve", failure_reason="no request succeeded"
        )
        w.load_run(run_result(rec, smoke_ok=False))
        (row,) = w.query_df("SELECT outcome, starts, serves, fails, reason FROM v_support_matrix").to_dicts()
    assert row == {
        "outcome": "starts",
        "starts": True,
        "serves": False,
        "fails": False,
        "reason": "no request succeeded",
    }


def test_newest_versions_first_by_version_order_not_date(wh: Warehouse) -> None:
    rows = wh.query_df(
        "SELECT DISTINCT image_version, version_rank FROM v_support_matrix "
        "WHERE host = 'strix-halo' AND engine = 'vllm' ORDER BY version_rank"
    ).to_dicts()
    assert [(r["image_version"], r["version_rank"]) for r in rows] == [
        ("v0.12.0", 1),
        ("v0.11.0", 2),
        ("v0.10.0", 3),
    ]
    # the view's own order: host, engine, newest version first
    plain = wh.query_df("SELECT host, engine, image_version FROM v_support_matrix").to_dicts()
    vllm = [r["image_version"] for r in plain if r["engine"] == "vllm"]
    assert vllm == sorted(vllm, key=lambda v: tuple(map(int, v[1:].split("."))), reverse=True)


def test_the_markdown_table(wh: Warehouse) -> None:
    md = support_matrix_markdown(support_matrix_rows(wh))
    lines = md.splitlines()
    assert "**local**" in lines and "**strix-halo**" in lines
    box = lines[lines.index("**strix-halo**") + 2 :]
    header = box[0]
    assert header == "| engine | image version | gpt-oss-120b | qwen3-30b-a3b | qwen3-30b-a3b-q4 |"
    assert box[1] == "|---|---|---|---|---|"
    rows = [line for line in box[2:] if line.startswith("| ")]
    assert [r.split(" | ")[:2] for r in rows] == [
        ["| llamacpp", "server-rocm-b6500"],
        ["| vllm", "v0.12.0"],
        ["| vllm", "v0.11.0"],
        ["| vllm", "v0.10.0"],
    ]
    v12, v11, v10 = rows[1:]
    assert "✅ serves (v12-gpt-2), 1/2 served" in v12
    assert "✅ serves: 3 request\\(s\\) failed (v12-qwen)" in v12
    # a `|` in a reason never breaks the table
    assert "❌ fails: harness: connection reset \\| retry (v11-qwen)" in v11
    assert v11.count(" | ") == 4
    assert "⏭️ not run: reservations 130 GB" in v11
    assert "❌ fails: MXFP4 MoE kernels unavailable on gfx1151 (v10-gpt)" in v10
    assert v10.endswith(" — |")  # not tried with the Q4 profile
    assert rows[0].endswith("| ✅ serves (l-qwen) |")  # the ok run's note is not in the cell
    # older versions than max_versions are left out, and said so
    short = support_matrix_markdown(support_matrix_rows(wh), max_versions=1)
    assert "v0.11.0" not in short and "vllm: 2 older version(s) not shown" in short
    assert support_matrix_markdown([]).startswith("_No run yet")


def test_the_chart(wh: Warehouse, tmp_path: Path) -> None:
    chart, note = support_matrix_chart(wh)
    assert note == ""
    spec = chart.to_dict()
    points = chart_points(spec)
    got = {(p["engine"], p["image_version"], p["model_profile"]): (p["outcome"], p["run_id"]) for p in points}
    assert got[("vllm", "v0.10.0", "gpt-oss-120b")] == ("fails", "v10-gpt")
    assert got[("vllm", "v0.12.0", "gpt-oss-120b")] == ("serves", "v12-gpt-2")
    assert all(p["reason"] is not None for p in points if p["outcome"] != "serves")
    # one panel per (host, engine), versions newest first on the y axis
    panels = spec["vconcat"]
    assert [p["title"] for p in panels] == ["llamacpp @ local", "llamacpp @ strix-halo", "vllm @ strix-halo"]
    y = panels[2]["layer"][0]["encoding"]["y"]
    assert y["sort"] == ["v0.12.0", "v0.11.0", "v0.10.0"]
    # and it is one of the written charts
    cs = write_charts(wh, tmp_path / "charts")
    assert "support_matrix" in cs.charts and cs.charts["support_matrix"].png.exists()
    assert "support_matrix.png" in cs.index_html.read_text()


def test_empty_warehouse(tmp_path: Path) -> None:
    with Warehouse.open(tmp_path / "w.duckdb") as w:
        chart, note = support_matrix_chart(w)
    assert "no run yet" in note


def test_trend_charts_shows_the_matrix_in_the_ui(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = make_config()
    project = base.project.model_copy(
        update={"artifacts": str(tmp_path / "artifacts"), "warehouse": str(tmp_path / "w.duckdb")}
    )
    config = base.model_copy(update={"project": project})
    monkeypatch.setattr(StrixConfigResource, "get", lambda self: config)
    with Warehouse.open(config.warehouse_path()) as w:
        w.load_runs(matrix_runs())
    resources = {
        "strix": StrixConfigResource(config_path="in-code"),
        "warehouse": WarehouseResource(path=config.project.warehouse, lock_retry_s=5.0),
    }
    with dg.instance_for_test() as instance:
        assert dg.materialize([trend_charts], resources=resources, instance=instance).success
        rec = instance.fetch_materializations(dg.AssetKey("trend_charts"), limit=1).records[0]
    meta = rec.asset_materialization.metadata
    md = meta["support_matrix"]
    assert isinstance(md, dg.MarkdownMetadataValue)
    assert "| vllm | v0.12.0 |" in md.value and "(v10-gpt)" in md.value
    assert "### support_matrix" in meta["charts"].value
    assert datetime.now(UTC) - datetime.fromtimestamp(rec.timestamp, UTC) < timedelta(minutes=10)
