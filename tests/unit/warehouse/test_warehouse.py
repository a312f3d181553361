"""The DuckDB warehouse: schema mirrors the records, migrations, idempotent all-or-nothing loads, views,
images / decisions / change points, and the locking behaviour with a real second process."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from support.warehouse import T0, counts, create_at_version, image, make_run, seed, start_holder, view_names

from strix_pipeline import warehouse as wmod
from strix_pipeline.fingerprint import comparability, series_fingerprint
from strix_pipeline.records import (
    CriterionResult,
    QualityAnswer,
    RequestRecord,
    RunRecord,
    column_names,
)
from strix_pipeline.units import GIB
from strix_pipeline.warehouse import (
    ChangeRecord,
    SchemaTooNew,
    Warehouse,
    WarehouseError,
    WarehouseLocked,
    current_schema_version,
)
from strix_pipeline.warehouse import runs as wruns
from strix_pipeline.warehouse import schema as wschema
from strix_pipeline.warehouse.connection import CommitConflict, insert
from strix_pipeline.warehouse.errors import WarehouseUnavailable
from strix_pipeline.warehouse.faults import WarehouseDiskFull

# ---- schema ---------------------------------------------------------------------------------------


def test_tables_mirror_the_records_in_name_and_column_order(wh: Warehouse) -> None:
    for table, cls in wmod.RECORD_TABLES.items():
        cols = [r[0] for r in wh.con.execute(f"SELECT name FROM pragma_table_info('{table}')").fetchall()]
        assert cols == column_names(cls), table
    lists = dict(
        wh.con.execute(
            "SELECT column_name, data_type FROM duckdb_columns() "
            "WHERE table_name IN ('requests', 'decisions') AND data_type LIKE '%[]'"
        ).fetchall()
    )
    assert lists == {
        "event_offsets_ms": "DOUBLE[]",
        "event_tokens": "BIGINT[]",
        "evidence_run_ids": "VARCHAR[]",
        "image_digests": "VARCHAR[]",
        "other_run_ids": "VARCHAR[]",
    }
    assert {"hosts", "changes", "registry_errors", "schema_version"} <= set(wh.table_names())
    assert wh.schema_version == current_schema_version() >= 2


# run columns later migrations added (v2: model_family; v6: the production window)
AFTER_V1 = {
    "model_family",
    "production_down_at",
    "production_up_at",
    "production_overhead_s",
    # v7: decode efficiency and its inputs
    "bandwidth_bytes_per_s",
    "bandwidth_threads",
    "model_weight_bytes",
    "kv_bytes_per_token",
    "decode_tok_s",
    "decode_context_tokens",
    "decode_efficiency",
    "efficiency_problem",
    # v9: the compile cache at the engine's start
    "compile_cache",
    # v10: the device total as HIP sees it and the amdttm limit
    "hip_device_total_bytes",
    "amdttm_pages_limit",
    # v12: the environment the engine started with, the configuration's and the image's own
    "engine_env",
    "image_env",
    # v13: the held memory by the engine's own log, its KV capacity, the production pool
    "weights_bytes",
    "kv_cache_bytes",
    "kv_capacity_tokens",
    "production_pool_bytes",
    # v14: the dtype a CPU engine computes in, and why
    "engine_dtype",
    # v18: what the suite profile asks of the engine
    "workload",
    # v21: power, energy and the throttling mark
    "idle_power_w",
    "power_source",
    "decode_j_per_request",
    "decode_tokens_per_j",
    "decode_power_w",
    "load_level",
    "load_j_per_request",
    "load_tokens_per_j",
    "load_power_w",
    "energy_problem",
    "throttled",
    "throttle_reason",
    "baseline_source",
}


def test_v1_warehouse_migrates_to_current_with_its_data(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    v1 = create_at_version(path, 1)
    run = make_run("old-run").run
    v1_cols = [c for c in column_names(RunRecord) if c not in AFTER_V1]
    v1.con.execute(
        f"INSERT INTO runs ({', '.join(v1_cols)}) VALUES ({', '.join('?' * len(v1_cols))})",
        [getattr(run, c) for c in v1_cols],
    ).fetchall()
    v1.con.execute("INSERT INTO hosts VALUES ('strix-halo', 'docker', 'the Box', ?, ?)", [T0, T0]).fetchall()
    assert "model_family" not in [
        r[0] for r in v1.con.execute("SELECT name FROM pragma_table_info('runs')").fetchall()
    ]
    v1.close()

    with Warehouse.open(path) as w:
        assert w.schema_version == current_schema_version()
        versions = [r[0] for r in w.con.execute("SELECT version FROM schema_version ORDER BY 1").fetchall()]
        assert versions == list(range(1, current_schema_version() + 1))
        row = w.query_df("SELECT run_id, model_profile, model_family, held_bytes FROM runs").to_dicts()
        assert row == [
            {
                "run_id": "old-run",
                "model_profile": run.model_profile,
                "model_family": run.model_profile,  # backfilled: the best v1 knew
                "held_bytes": run.held_bytes,
            }
        ]
        host = w.query_df("SELECT kind, description, rocm_version, kernel FROM hosts").to_dicts()
        assert host == [
            {"kind": "docker", "description": "the Box", "rocm_version": "7.0.2", "kernel": "6.17.0"}
        ]
        assert "changes" in w.table_names()
        assert {"v_runs", "v_compare", "v_memory"} <= set(view_names(w))
        assert w.query_df("SELECT run_id FROM v_runs")["run_id"].to_list() == ["old-run"]
        # and it is now a normal current warehouse: a run loads beside the migrated one
        w.load_run(make_run("new-run"))
        assert w.count("runs") == 2


def test_failed_migration_leaves_the_warehouse_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w.duckdb"
    with Warehouse.open(path) as w:
        w.load_run(make_run("r1"))
    broken = tmp_path / "migrations"
    shutil.copytree(wschema.MIGRATIONS_DIR, broken)
    n = current_schema_version() + 1
    (broken / f"{n:04d}_broken.sql").write_text(
        "ALTER TABLE runs ADD COLUMN extra INTEGER;\nDELETE FROM requests;\nSELECT * FROM no_such_table;\n"
    )
    monkeypatch.setattr(wschema, "MIGRATIONS_DIR", broken)
    with pytest.raises(WarehouseError, match=rf"migration {n:04d}_broken failed, warehouse left unchanged"):
        Warehouse.open(path)
    monkeypatch.undo()
    with Warehouse.open(path, read_only=True) as w:
        assert w.schema_version == n - 1
        assert "extra" not in w.query_df("SELECT * FROM runs").columns
        assert w.count("requests") == 8
        assert len(view_names(w)) >= 7  # the views were dropped inside the rolled-back transaction only


def test_newer_schema_is_refused_in_both_modes(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with Warehouse.open(path) as w:
        w.con.execute("INSERT INTO schema_version VALUES (99, 'from_the_future', now())").fetchall()
    for ro in (False, True):
        with pytest.raises(SchemaTooNew, match=r"schema is v99, newer than this strix-pipeline"):
            Warehouse.open(path, read_only=ro)


def test_read_only_open_of_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(wmod.WarehouseMissing, match="no warehouse here yet"):
        Warehouse.open(tmp_path / "nope.duckdb", read_only=True)
    assert not (tmp_path / "nope.duckdb").exists()


# ---- loads ----------------------------------------------------------------------------------------


def test_reloading_a_run_gives_identical_counts_and_replaces_rows(wh: Warehouse) -> None:
    seed(wh)
    before = counts(wh)
    assert before == {
        "runs": 5,
        "requests": 32,
        "aggregates": 16,
        "memory_samples": 12,
        "server_metrics": 4,
        "quality_answers": 0,
    }
    r = make_run("l2", engine="llamacpp", started_at=T0 + timedelta(days=7), ttft_p95_at_5=480.0)
    r.quality = [QualityAnswer("l2", "quality-test", item, item == "a", "x") for item in ("a", "b")]
    before = {**before, "quality_answers": 2}
    wh.load_run(r)
    wh.load_run(r)
    assert counts(wh) == before
    # a reload with different content replaces, it does not merge
    smaller = make_run("l2", engine="llamacpp", started_at=T0 + timedelta(days=7), requests_per_level=3)
    wh.load_run(smaller)
    assert wh.count("requests", "l2") == 6
    assert counts(wh)["requests"] == before["requests"] - 2


def test_round_trip_keeps_every_value(wh: Warehouse) -> None:
    r = make_run("rt")
    wh.load_run(r)
    got = wh.con.execute(
        f"SELECT {', '.join(column_names(RequestRecord))} FROM requests ORDER BY level, request_index"
    ).fetchall()
    assert [RequestRecord(*row) for row in got] == r.requests
    run_row = wh.con.execute(f"SELECT {', '.join(column_names(RunRecord))} FROM runs").fetchall()
    assert RunRecord(*run_row[0]) == r.run


def test_an_exception_mid_load_leaves_counts_unchanged(
    wh: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(wh)
    before = counts(wh)
    # 1. the database rejects the last table (NOT NULL) after runs/requests/aggregates were replaced
    bad = make_run("l1", ttft_p95_at_5=999.0, requests_per_level=6)
    bad.server_metrics[0].labels = None  # type: ignore[assignment]
    with pytest.raises(Exception, match="NOT NULL"):
        wh.load_run(bad)
    assert counts(wh) == before
    assert wh.query_df("SELECT ttft_p95_ms FROM aggregates WHERE run_id='l1' AND level=5")[
        "ttft_p95_ms"
    ].to_list() == [500.0]

    # 2. the process is interrupted between two inserts
    real_insert = wruns.insert

    def interrupted(con, table, data):
        if table == "memory_samples":
            raise KeyboardInterrupt
        return real_insert(con, table, data)

    monkeypatch.setattr(wruns, "insert", interrupted)
    with pytest.raises(KeyboardInterrupt):
        wh.load_run(make_run("brand-new"))
    with pytest.raises(KeyboardInterrupt):
        wh.load_run(make_run("l2", requests_per_level=9))
    monkeypatch.undo()
    assert counts(wh) == before
    assert "brand-new" not in wh.run_ids()
    # and the connection is usable afterwards
    wh.load_run(make_run("brand-new"))
    assert counts(wh)["runs"] == before["runs"] + 1


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (lambda: CommitConflict("another writer won"), CommitConflict),
        (lambda: duckdb.IOException("write failed: No space left on device"), WarehouseDiskFull),
    ],
)
def test_a_failed_host_refresh_keeps_the_class_of_its_error(
    wh: Warehouse,
    monkeypatch: pytest.MonkeyPatch,
    raised,
    expected,
) -> None:
    """The runs are loaded; the hosts' MERGE after them fails. What failed decides what a caller does
    (the spool drain stops on WarehouseUnavailable instead of calling a good file unreadable), so the
    class survives the added context."""

    def refresh(con, hosts):
        raise raised()

    monkeypatch.setattr(wruns, "refresh_hosts", refresh)
    with pytest.raises(expected, match="loaded, but refreshing the rows of host") as info:
        wh.load_run(make_run("h1"))
    assert isinstance(info.value, WarehouseUnavailable)
    monkeypatch.undo()
    assert "h1" in wh.run_ids()


def test_rows_of_another_run_are_refused_before_anything_is_written(wh: Warehouse) -> None:
    r = make_run("a")
    r.requests[3].run_id = "b"
    with pytest.raises(WarehouseError, match="carries run_id 'b'"):
        wh.load_run(r)
    assert counts(wh) == dict.fromkeys(wmod.RUN_TABLES, 0)


def test_a_value_of_the_wrong_type_is_refused_before_anything_is_written(wh: Warehouse) -> None:
    wh.load_run(make_run("a"))
    before = counts(wh)
    r = make_run("a", requests_per_level=9)
    r.requests[5].level = "five"  # type: ignore[assignment]
    with pytest.raises(WarehouseError, match="RequestRecord: a value does not fit the schema"):
        wh.load_run(r)
    assert counts(wh) == before


def test_delete_run_removes_it_everywhere(wh: Warehouse) -> None:
    seed(wh)
    wh.delete_run("v1")
    for t in wmod.RUN_TABLES:
        assert wh.count(t, "v1") == 0
    assert wh.count("runs") == 4


def test_a_run_without_fingerprint_gets_the_one_function_s(wh: Warehouse) -> None:
    r = make_run("nofp")
    expected = r.run.fingerprint
    r.run.fingerprint = ""
    wh.load_run(r)
    assert r.run.fingerprint == ""  # the caller's record is left alone
    assert wh.query_df("SELECT fingerprint FROM runs").item() == expected


def test_load_runs_batches_in_one_transaction(wh: Warehouse) -> None:
    wh.load_runs([make_run("a"), make_run("b")])
    assert wh.count("runs") == 2
    with pytest.raises(WarehouseError, match="twice"):
        wh.load_runs([make_run("c"), make_run("c")])
    assert wh.count("runs") == 2


def test_records_table_has_the_explicit_schema() -> None:
    t = wmod.records_table(RequestRecord, make_run("x").requests)
    assert t.column_names == column_names(RequestRecord)
    assert t.schema.field("event_offsets_ms").type == pa.list_(pa.float64())
    assert t.schema.field("sent_at").type == pa.timestamp("us", tz="UTC")
    empty = wmod.records_table(RequestRecord, [])
    assert empty.num_rows == 0 and empty.schema == t.schema


# ---- views ----------------------------------------------------------------------------------------


def test_v_runs(wh: Warehouse) -> None:
    seed(wh)
    df = wh.query_df("SELECT * FROM v_runs ORDER BY run_id")
    assert df["run_id"].to_list() == ["l1", "l2", "v1", "v2", "v3"]
    l1 = df.row(0, named=True)
    assert (l1["requests_ok"], l1["requests_failed"], l1["scenarios"], l1["levels"]) == (10, 2, 2, 4)
    assert l1["duration_s"] == 1800.0 and l1["held_gib"] == 20.0
    assert l1["image"] == "example/llamacpp:b6000" and l1["model_family"] == "qwen3-30b-a3b"
    v3 = df.row(4, named=True)
    assert (v3["status"], v3["requests_ok"], v3["failure_reason"]) == ("failed_start", 0, "did not start")


def test_v_latest_by_engine_skips_failed_runs(wh: Warehouse) -> None:
    seed(wh)
    df = wh.query_df("SELECT engine, run_id, image_version, held_gib FROM v_latest_by_engine ORDER BY engine")
    assert df.to_dicts() == [
        {"engine": "llamacpp", "run_id": "l2", "image_version": "b6100", "held_gib": 20.0},
        {"engine": "vllm", "run_id": "v2", "image_version": "v0.12.0", "held_gib": 62.0},
    ]


def test_v_ttft_at_concurrency(wh: Warehouse) -> None:
    runs = seed(wh)
    df = wh.query_df(
        "SELECT engine, run_id, series, image_version, ttft_p95_ms, ttft_p95_ci_low_ms, ttft_p95_ci_high_ms, "
        "output_tokens_per_s FROM v_ttft_at_concurrency WHERE concurrency = 5 ORDER BY engine, image_sort_key"
    )
    assert df["run_id"].to_list() == ["l1", "l2", "v1", "v2"]
    assert df["ttft_p95_ms"].to_list() == [500.0, 480.0, 400.0, 300.0]
    assert df["ttft_p95_ci_low_ms"].to_list() == pytest.approx([450.0, 432.0, 360.0, 270.0])
    assert df["output_tokens_per_s"].to_list() == [500.0] * 4
    # the series is exactly the one fingerprint function's answer for that scenario
    r = runs["l1"].run
    expected = series_fingerprint(scenario="concurrency_sweep", **comparability(r))
    assert df["series"].to_list()[:2] == [expected, expected]  # two versions, one series
    assert df["series"][2] != expected  # vLLM BF16 is another series


def test_v_prefill_ladder(wh: Warehouse) -> None:
    seed(wh)
    df = wh.query_df(
        "SELECT engine, input_tokens, prefill_tokens_per_s FROM v_prefill_ladder WHERE run_id IN ('l2', "
        "'v2') "
        "ORDER BY engine, input_tokens"
    )
    assert df.rows() == [
        ("llamacpp", 2048, 2000.0),
        ("llamacpp", 4096, 2000.0),
        ("vllm", 2048, 3000.0),
        ("vllm", 4096, 3000.0),
    ]


def test_v_memory(wh: Warehouse) -> None:
    seed(wh)
    df = wh.query_df("SELECT * FROM v_memory WHERE run_id IN ('l2', 'v2', 'v3') ORDER BY run_id")
    assert df["held_gib"].to_list() == [20.0, 62.0, 20.0]
    assert df["samples"].to_list() == [3, 3, None]
    assert df["max_gtt_used_bytes"].to_list() == [21 * GIB, 63 * GIB, None]
    assert df["usable"].to_list() == [True, True, False]


def test_v_decisions_marks_the_latest_evaluation(wh: Warehouse) -> None:
    def evaluation(eid: str, at: datetime, verdict: str) -> list[CriterionResult]:
        return [
            CriterionResult(
                eid,
                at,
                "strix-halo",
                verdict,
                c,
                n,
                True,
                s,
                v,
                None,
                None,
                None,
                None,
                ["v2"],
                ["sha256:v2"],
                c == "C3",
                "why",
                None,
            )
            for c, n, s, v in (
                ("C1", "official_image_starts", "pass", None),
                ("C3", "ttft_p95_beats_llamacpp_at_5", "pass", 300.0),
            )
        ]

    wh.save_decision(evaluation("e1", T0, "stay"))
    wh.save_decision(evaluation("e2", T0 + timedelta(days=1), "evaluate"))
    wh.save_decision(evaluation("e2", T0 + timedelta(days=1), "evaluate"))  # idempotent
    df = wh.query_df(
        "SELECT evaluation_id, criterion, verdict, latest, evidence_run_ids FROM v_decisions ORDER BY "
        "evaluation_id, criterion"
    )
    assert df["latest"].to_list() == [False, False, True, True]
    assert df["verdict"].to_list() == ["stay", "stay", "evaluate", "evaluate"]
    assert df["evidence_run_ids"].to_list()[0] == ["v2"]
    with pytest.raises(WarehouseError, match="one evaluation per call"):
        wh.save_decision(evaluation("e3", T0, "x") + evaluation("e4", T0, "x"))


def test_v_compare_a_vs_b(wh: Warehouse) -> None:
    seed(wh)
    df = wh.query_df(
        "SELECT scenario, level, metric, a_value, b_value, ratio, delta_pct, b_better, quantization_differs, "
        "same_model_family, same_series FROM v_compare WHERE a_run_id = 'l2' AND b_run_id = 'v2' "
        "ORDER BY scenario, level, metric"
    )
    ttft5 = df.filter((pl.col("metric") == "ttft_p95_ms") & (pl.col("level") == 5)).row(0, named=True)
    assert ttft5["a_value"] == 480.0 and ttft5["b_value"] == 300.0
    assert ttft5["ratio"] == pytest.approx(0.625) and ttft5["delta_pct"] == pytest.approx(-37.5)
    assert ttft5["b_better"] is True and ttft5["quantization_differs"] is True
    assert ttft5["same_model_family"] is True and ttft5["same_series"] is False
    prefill = df.filter(pl.col("metric") == "prefill_tokens_per_s")
    assert prefill["ratio"].to_list() == [1.5, 1.5] and all(prefill["b_better"])
    # a version-to-version comparison of one engine is one series and one quantization
    same = wh.query_df(
        "SELECT DISTINCT quantization_differs, same_series FROM v_compare WHERE a_run_id='l1' AND "
        "b_run_id='l2'"
    )
    assert same.rows() == [(False, True)]


# ---- images, hosts, registry errors, changes ------------------------------------------------------


def test_images_upsert_known_and_gone(wh: Warehouse) -> None:
    a = image("v0.11.0", "sha256:a", T0)
    b = image("latest", "sha256:b", T0)
    c = image("b6000", "sha256:c", T0, engine="llamacpp", registry="ghcr.io", repository="ggml-org/llama.cpp")
    wh.upsert_images([a, b, c])
    assert wh.known_images("vllm") == [b, a] or wh.known_images("vllm") == sorted(
        [a, b], key=lambda i: i.sort_key
    )
    assert len(wh.known_images()) == 3
    later = T0 + timedelta(days=3)
    wh.upsert_images([dataclasses.replace(b, digest="sha256:b2", first_seen=later, last_seen=later)])
    (got,) = [i for i in wh.known_images("vllm") if i.tag == "latest"]
    assert (got.digest, got.first_seen, got.last_seen) == ("sha256:b2", T0, later)
    wh.mark_images_gone("docker.io", "vllm/vllm-openai-rocm", ["v0.11.0"], later)
    wh.mark_images_gone("docker.io", "vllm/vllm-openai-rocm", ["v0.11.0"], later + timedelta(days=1))
    (gone,) = [i for i in wh.known_images("vllm") if i.tag == "v0.11.0"]
    assert gone.gone and gone.gone_since == later
    assert not [i for i in wh.known_images() if i.tag != "v0.11.0" and i.gone]


def test_hosts_and_registry_errors(wh: Warehouse) -> None:
    wh.upsert_host("strix-halo", "docker", "the Box")
    seed(wh)
    h = wh.query_df("SELECT name, kind, description, first_seen, rocm_version FROM hosts").row(0, named=True)
    assert (h["kind"], h["description"], h["first_seen"], h["rocm_version"]) == (
        "docker",
        "the Box",
        T0,
        "7.0.2",
    )
    wh.record_registry_error("docker.io", "lmsysorg/sglang", "429 Too Many Requests", T0)
    assert wh.query_df("SELECT error, occurred_at FROM registry_errors").rows() == [
        ("429 Too Many Requests", T0)
    ]


def test_changes_save_list_ack_keeps_ack_on_resave(wh: Warehouse) -> None:
    row = ChangeRecord(
        change_id="",  # derived on save
        fingerprint="abc/concurrency_sweep",
        engine="vllm",
        host="strix-halo",
        metric="ttft_p95_ms",
        scenario="concurrency_sweep",
        level=5,
        version_before="v0.11.0",
        version_after="v0.12.0",
        sort_key_after="0012.0000",
        magnitude_pct=12.5,
        pvalue=0.0001,
        status="provisional",
        ack_status="",  # "active" on save
        ack_reason=None,
        detected_at=T0,
    )
    wh.save_changes([row])
    (c,) = wh.list_changes()
    assert c.ack_status == "active" and c.change_id == Warehouse.change_id(row)
    assert dataclasses.replace(c, change_id="", ack_status="") == row  # every column round-trips
    assert wh.ack_change(c.change_id, "known: new default scheduler") is True
    assert wh.ack_change("nope", "x") is False
    wh.save_changes([dataclasses.replace(row, status="confirmed")])  # found again by the next version
    (c2,) = wh.list_changes(engine="vllm")
    assert (c2.status, c2.ack_status, c2.ack_reason) == (
        "confirmed",
        "acknowledged",
        "known: new default scheduler",
    )
    assert wh.list_changes(ack_status="active") == []
    view = wh.query_df("SELECT series, version_after, magnitude_pct, ack_status FROM v_changes").rows()
    assert view == [("abc/concurrency_sweep", "v0.12.0", 12.5, "acknowledged")]
    with pytest.raises(WarehouseError, match="missing"):
        wh.save_changes([dataclasses.replace(row, host=None, level=None)])


# ---- read-only and locking ------------------------------------------------------------------------


def test_read_only_open_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with Warehouse.open(path) as w:
        seed(w)
    with Warehouse.open(path, read_only=True) as r:
        with pytest.raises(Exception, match="read-only"):
            r.query_df("DELETE FROM runs")
        with pytest.raises(WarehouseError, match="read-only"):
            r.load_run(make_run("x"))
        assert r.count("runs") == 5


def test_a_reader_succeeds_while_a_writer_holds_the_file(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with Warehouse.open(path) as w:
        seed(w)
    proc = start_holder(path, hold=1.5)
    try:
        t = time.monotonic()
        told: list[str] = []
        with Warehouse.open(path, read_only=True, lock_retry_s=20, on_wait=told.append) as r:
            waited = time.monotonic() - t
            ids = r.run_ids()
            held = r.query_df("SELECT error FROM registry_errors")["error"].to_list()
        assert waited >= 0.5, "the reader should have had to wait for the writer"
        assert waited < 15
        assert "from-writer" in ids and len(ids) == 6  # it sees the writer's committed work
        assert held == ["held"]
        assert len(told) == 1 and "held by a writer" in told[0]
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_reader_gives_up_with_a_reason_when_the_writer_stays(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    Warehouse.open(path).close()
    proc = start_holder(path, hold=20)
    try:
        t = time.monotonic()
        with pytest.raises(WarehouseLocked, match=r"another process \(.*PID \d+\).*waited 0.6s"):
            Warehouse.open(path, read_only=True, lock_retry_s=0.6)
        assert 0.5 <= time.monotonic() - t < 5
        with pytest.raises(WarehouseLocked):  # a second writer waits and gives up the same way
            Warehouse.open(path, lock_retry_s=0.3)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_same_process_reader_beside_an_open_writer_is_explained(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with Warehouse.open(path) as w:
        with pytest.raises(WarehouseLocked, match="this process already has the warehouse open"):
            Warehouse.open(path, read_only=True, lock_retry_s=0.2)
        w.load_run(make_run("still-fine"))
    with Warehouse.open(path, read_only=True) as r:
        assert r.run_ids() == ["still-fine"]


def test_an_export_from_a_v1_warehouse_imports_into_the_current_one(tmp_path: Path) -> None:
    old = create_at_version(tmp_path / "v1.duckdb", 1)
    run = make_run("from-v1")
    v1_cols = [c for c in column_names(RunRecord) if c not in AFTER_V1]
    old.con.execute(
        f"INSERT INTO runs ({', '.join(v1_cols)}) VALUES ({', '.join('?' * len(v1_cols))})",
        [getattr(run.run, c) for c in v1_cols],
    ).fetchall()
    insert(old.con, "requests", wmod.records_table(RequestRecord, run.requests))
    old.export_parquet(tmp_path / "out")
    old.close()
    with Warehouse.open(tmp_path / "new.duckdb") as wh:
        got = wh.import_parquet(tmp_path / "out")
        assert got["runs"] == 1 and got["requests"] == 8
        assert wh.query_df("SELECT model_family FROM v_runs").item() == run.run.model_profile


def test_changed_views_are_reinstalled_on_the_next_writable_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "w.duckdb"
    Warehouse.open(path).close()
    views = tmp_path / "views.sql"
    views.write_text(
        wschema.VIEWS_FILE.read_text() + "\nCREATE OR REPLACE VIEW v_extra AS SELECT 1 AS one;\n"
    )
    monkeypatch.setattr(wschema, "VIEWS_FILE", views)
    with Warehouse.open(path, read_only=True) as r:  # a reader never changes the file
        assert "v_extra" not in view_names(r)
    with Warehouse.open(path) as w:
        assert "v_extra" in view_names(w) and "v_compare" in view_names(w)
    monkeypatch.undo()
    # and back: the project's views are the current file's again; v_extra is no longer the project's,
    # so it is named and left alone (a name read from the catalog is never put into SQL)
    with caplog.at_level(logging.WARNING), Warehouse.open(path) as w:
        assert "v_extra" in view_names(w) and "v_compare" in view_names(w)
        assert w.con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'v_compare'").fetchall()
    assert "'v_extra' is not the project's; left alone" in caplog.text
