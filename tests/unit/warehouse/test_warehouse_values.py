"""The load path keeps every tricky value exactly: None vs NaN, empty lists, unicode, time zones.

The Arrow conversions (``records_table`` for lists of records, ``request_table_arrow`` for the load
generator's ``RequestTable``) are tuned for speed; these tests pin both to an independent,
obviously-correct reference (``dataclasses.asdict`` rows through ``pa.Table.from_pylist``) and to a
round trip through DuckDB.
"""

from __future__ import annotations

import dataclasses
import gc
import math
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from support.tricky_values import CEST, NAN, T0, same_value, tricky_request, tricky_requests

from strix_pipeline.records import (
    LevelAggregate,
    MemorySample,
    RequestRecord,
    RequestTable,
    RunRecord,
    RunResult,
    ServerMetricSample,
    column_names,
)
from strix_pipeline.warehouse import (
    Warehouse,
    WarehouseError,
    arrow_schema,
    records_table,
    request_table_arrow,
)


def reference_table(cls: type, rows: list) -> pa.Table:
    """The slow, obviously-correct conversion the fast path must equal."""
    return pa.Table.from_pylist([dataclasses.asdict(r) for r in rows], schema=arrow_schema(cls))


@pytest.mark.parametrize("handover", ["list", "table"])
def test_records_table_equals_the_reference_for_tricky_values(handover: str) -> None:
    rows = tricky_requests()
    if handover == "list":
        fast = records_table(RequestRecord, rows)
    else:  # split over several tables, as a backfill of several runs is
        fast = request_table_arrow([RequestTable(rows[:3]), RequestTable(), RequestTable(rows[3:])])
    ref = reference_table(RequestRecord, rows)
    assert fast.schema == ref.schema
    # Table.equals treats NaN as unequal to itself; compare value by value with NaN == NaN instead
    assert fast.num_rows == ref.num_rows
    for name in fast.column_names:
        got, want = fast.column(name).to_pylist(), ref.column(name).to_pylist()
        assert all(same_value(g, w) for g, w in zip(got, want, strict=True)), name
    # None stays NULL and NaN stays NaN, in scalars and in lists; an empty list is not NULL
    ttft = fast.column("ttft_ms")
    assert ttft[1].as_py() is None and math.isnan(ttft[2].as_py())
    assert fast.column("event_offsets_ms")[1].as_py() == []
    assert fast.column("event_offsets_ms").null_count == 0


def test_other_record_kinds_equal_the_reference() -> None:
    agg = LevelAggregate(
        "r", "s", 1, "concurrency", 3, 0, None, ttft_p95_ms=NAN, output_tokens_estimated=True
    )
    mem = MemorySample("r", datetime(2026, 1, 1, tzinfo=CEST), "idle", "sysfs:card0", "vram_used", 2**40)
    met = ServerMetricSample("r", "s", 1, T0, "during", "vllm:kv_cache_usage_perc", '{"a": "ü"}', 0.25)
    for cls, rows in ((LevelAggregate, [agg]), (MemorySample, [mem]), (ServerMetricSample, [met])):
        fast, ref = records_table(cls, rows), reference_table(cls, rows)
        assert fast.schema == ref.schema
        for name in fast.column_names:
            got, want = fast.column(name).to_pylist(), ref.column(name).to_pylist()
            assert all(same_value(g, w) for g, w in zip(got, want, strict=True)), (cls, name)


def _run(requests: list[RequestRecord], handover: str = "list") -> RunResult:
    run = RunRecord(
        run_id="tricky",
        host="h",
        engine="vllm",
        engine_kind="vllm",
        image_repository=None,
        image_tag=None,
        image_digest=None,
        model_profile="m",
        model="M",
        quantization="BF16",
        suite="standard",
        profile="quick",
        fingerprint="fp",
        harness_version="0.1.0",
        engine_build=None,
        launch_command="vllm serve — ünïcödé",
        engine_flags="[]",
        status="ok",
        failure_reason=None,
        log_tail=None,
        started_at=datetime(2026, 3, 1, 13, 0, tzinfo=CEST),
        ended_at=None,
    )
    return RunResult(run=run, requests=RequestTable(requests) if handover == "table" else requests)


@pytest.mark.parametrize("handover", ["list", "table"])
def test_tricky_values_round_trip_through_the_warehouse(tmp_path: Path, handover: str) -> None:
    rows = tricky_requests()
    with Warehouse.open(tmp_path / "t.duckdb") as wh:
        wh.load_run(_run(rows, handover))
        got = wh.con.execute(
            f"SELECT {', '.join(column_names(RequestRecord))} FROM requests ORDER BY request_index"
        ).fetchall()
        nan_in_db = wh.con.execute(
            "SELECT isnan(ttft_ms), event_offsets_ms IS NULL, len(event_offsets_ms) FROM requests "
            "WHERE request_index IN (1, 2) ORDER BY request_index"
        ).fetchall()
    by_index = {r.request_index: r for r in rows}
    assert len(got) == len(rows)
    for values in got:
        back = RequestRecord(*values)
        want = by_index[back.request_index]
        for f in column_names(RequestRecord):
            a, b = getattr(back, f), getattr(want, f)
            if isinstance(b, datetime):
                assert a == b and a.utcoffset() == timedelta(0), f  # same instant, read back in UTC
            else:
                assert same_value(a, b) or (isinstance(a, float) and a == b), (f, a, b)
    # row 1: NULL scalar, empty (not NULL) list; row 2: NaN (not NULL)
    assert nan_in_db == [(None, False, 0), (True, False, 3)]


def test_a_bad_value_or_type_anywhere_is_refused_before_writing(tmp_path: Path) -> None:
    with Warehouse.open(tmp_path / "t.duckdb") as wh:
        for bad in (
            tricky_request(9, event_tokens=[1, "2"]),  # a string in an int list
            tricky_request(9, level=2**63),  # overflows BIGINT
            tricky_request(9, sent_at="2026-03-01"),  # not a datetime
        ):
            with pytest.raises(WarehouseError):
                wh.load_run(_run([*tricky_requests(), bad]))
        with pytest.raises(TypeError, match="expected RequestRecord"):
            wh.load_run(_run([*tricky_requests(), MemorySample("tricky", T0, "idle", "s", "m", 1)]))  # type: ignore[list-item]
        with pytest.raises(WarehouseError, match="carries run_id 'other'"):
            wh.load_run(_run([*tricky_requests(), tricky_request(9, run_id="other")]))
        assert wh.count("runs") == 0 and wh.count("requests") == 0


@pytest.mark.parametrize("enabled", [True, False])
def test_a_load_restores_the_gc_state(tmp_path: Path, enabled: bool) -> None:
    (gc.enable if enabled else gc.disable)()
    try:
        with Warehouse.open(tmp_path / "t.duckdb") as wh:
            wh.load_run(_run(tricky_requests()))
            assert gc.isenabled() is enabled
            with pytest.raises(WarehouseError):
                wh.load_run(_run([tricky_request(0, level=2**63)]))
            assert gc.isenabled() is enabled
    finally:
        gc.enable()
