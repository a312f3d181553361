"""TTFT p99, ITL p50 and ITL p99 with their 95 % intervals (TTFT p95's interval function, over the
aggregate's own values), in the engines-side-by-side table and on the run page; no percentile for a
level too small for it, and no interval where there are too few values for one, said so."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from support.report_seed import REPORT_AT, history_warehouse

from strix_pipeline.loadgen.metrics import metric_values
from strix_pipeline.records import RequestRecord
from strix_pipeline.report import write_report
from strix_pipeline.report.intervals import interval_key, level_intervals
from strix_pipeline.report.names import run_page
from strix_pipeline.report.run_detail import _percentile_cell
from strix_pipeline.stats.quantiles import min_samples_for_ci, quantile_ci


def _requests(n: int, seed: int = 7) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ttft = float(rng.lognormal(6.5, 0.2))
        gaps = rng.lognormal(3.0, 0.3, size=8)
        events = [ttft, *(ttft + np.cumsum(gaps)).tolist()]
        out.append(
            RequestRecord(
                run_id="r",
                scenario="concurrency_sweep",
                level=5,
                level_kind="concurrency",
                request_index=i,
                warmup=False,
                sent_at=datetime(2026, 9, 1, tzinfo=UTC),
                sent_offset_ms=float(i),
                queue_ms=0.0,
                ttfb_ms=ttft,
                ttft_ms=ttft,
                e2e_ms=events[-1],
                input_tokens=100,
                input_tokens_estimated=False,
                output_tokens=9,
                output_tokens_estimated=False,
                cached_tokens=None,
                ok=True,
                error_class=None,
                error_message=None,
                event_offsets_ms=events,
                event_tokens=[1] * 9,
            )
        )
    return out


def test_each_interval_is_ttft_p95s_over_the_aggregates_own_values() -> None:
    records = _requests(400)
    values = metric_values(records)
    got = level_intervals(records)
    for metric, p in (("ttft", 99), ("itl", 50), ("itl", 99)):
        i = got[interval_key(metric, p)]
        assert (i.low, i.high) == quantile_ci(values[metric], p)
        assert i.low is not None and i.low <= np.percentile(values[metric], p) <= i.high
    assert got["itl_p99_ci"].values == 400 * 8  # every gap between two content events, pooled


def test_too_few_values_for_an_interval_says_so() -> None:
    got = level_intervals(_requests(150))
    ttft = got["ttft_p99_ci"]
    assert ttft.low is None and ttft.values == 150
    need = min_samples_for_ci(99)
    assert ttft.text(812.4, "ms") == f"812 ms (no interval: 150 requests, a p99 interval needs {need})"
    itl = got["itl_p99_ci"]  # 1,200 gaps: enough
    assert itl.text(20.0, "ms") == f"20 ms (95 % CI {itl.low:,.0f}–{itl.high:,.0f} ms)"


def _cells(html: str) -> dict[str, list[str]]:
    rows = (re.findall(r"<td[^>]*>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", html))
    return {re.sub("<[^>]+>", "", r[0]): [re.sub("<[^>]+>", "", c) for c in r[1:]] for r in rows if r}


def test_the_side_by_side_table_and_the_run_page_print_tail_percentiles_with_intervals(
    tmp_path: Path,
) -> None:
    wh, cfg = history_warehouse(tmp_path / "w.duckdb")
    with wh:
        # the seeded runs' 200 requests at 5 clients: their aggregates get the tail percentiles
        for run_id in ("vllm-qwen", "llama-qwen"):
            rows = wh.con.execute(
                "SELECT ttft_ms, event_offsets_ms FROM requests WHERE run_id = ? AND level = 5", [run_id]
            ).fetchall()
            ttft = [r[0] for r in rows]
            itl = [b - a for _, ev in rows for a, b in zip(ev, ev[1:], strict=False)]
            wh.con.execute(
                "UPDATE aggregates SET ttft_p99_ms = ?, itl_p50_ms = ?, itl_p99_ms = ? "
                "WHERE run_id = ? AND scenario = 'concurrency_sweep' AND level = 5",
                [np.percentile(ttft, 99), np.percentile(itl, 50), np.percentile(itl, 99), run_id],
            )
        site = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT)
    index = site.index.read_text()
    side = _cells(re.search(r"<section id='side-by-side'.*?</section>", index, re.S).group())
    need = min_samples_for_ci(99)
    for cell in side["TTFT p99 at 5 clients"][1:3]:
        assert re.fullmatch(rf"[\d,]+ ms \(no interval: 200 requests, a p99 interval needs {need}\)", cell), (
            cell
        )
    # the seed's requests have one gap each, of 20 ms: 200 values, enough for a p50's interval only
    no_p99 = f"20 ms (no interval: 200 gaps between tokens, a p99 interval needs {need})"
    assert side["ITL p50 at 5 clients"][1:3] == ["20 ms (95 % CI 20–20 ms)"] * 2
    assert side["ITL p99 at 5 clients"][1:3] == [no_p99] * 2

    page = (site.out_dir / run_page("vllm-qwen")).read_text()
    tails = re.search(r"<h3>Tail percentiles</h3>.*?</table>", page, re.S).group()
    row = _cells(tails)["concurrency_sweep"]
    assert row[0] == "5" and row[2:] == ["20 ms (95 % CI 20–20 ms)", no_p99]
    assert row[1].endswith(f"(no interval: 200 requests, a p99 interval needs {need})")


def test_no_tail_percentile_for_a_level_too_small_for_it() -> None:
    records = _requests(50)
    agg = {"requests_ok": 50, "itl_p50_ms": 20.0, "itl_p99_ms": 31.0, **level_intervals(records)}
    assert _percentile_cell(agg, "itl_p99_ms", 99) == "no p99: 50 requests, a p99 needs 100"
    i = agg["itl_p50_ci"]
    assert _percentile_cell(agg, "itl_p50_ms", 50) == f"20 ms (95 % CI {i.low:,.0f}–{i.high:,.0f} ms)"
