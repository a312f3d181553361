"""The report's first section answers: the plain answer's words, the deciding figure with its interval,
what would change it, the forest plot right under it and the caveats one line each; then the two
engines side by side with the workload beside each figure and no percentile for a level too small for
it; and a glossary page one click away from every page."""

from __future__ import annotations

import json
import re
from pathlib import Path

from support.report_seed import MAKE_RUN_AT, REPORT_AT, history_warehouse, make_run_warehouse

from strix_pipeline.report import write_report
from strix_pipeline.report.glossary import TERMS, glossary_markdown
from strix_pipeline.report.names import GLOSSARY, run_page
from strix_pipeline.report.workload import min_requests, percentile_text, too_few, workload_text

ROOT = Path(__file__).resolve().parents[3]


def _site(tmp_path: Path, kind: str) -> tuple[Path, str]:
    make, at = {"make_run": (make_run_warehouse, MAKE_RUN_AT), "history": (history_warehouse, REPORT_AT)}[
        kind
    ]
    wh, cfg = make(tmp_path / "w.duckdb")
    with wh:
        site = write_report(wh, cfg, tmp_path / "site", now=at)
    return site.out_dir, site.index.read_text()


def _first_section(index: str) -> str:
    main = index.split("<main>", 1)[1]
    assert main.startswith("<section id='answer'"), main[:200]
    return main.split("</section>", 1)[0]


def test_the_first_section_holds_the_answer_words_the_deciding_figure_and_the_forest_plot(
    tmp_path: Path,
) -> None:
    _, index = _site(tmp_path, "make_run")
    first = _first_section(index)
    text = re.sub(r"<script.*?</script>", "", first, flags=re.S)
    assert "<strong class='answer-word'>Stay:</strong> keep llama-server." in text
    deciding = re.search(r"<p id='deciding-figure'>(.*?)</p>", text).group(1)
    assert "C3" in deciding and "2.9×" in deciding and "95 % interval 2.6–3.3×" in deciding
    assert "What would change the answer:</strong> switching needs it below 1.0× and C5 to pass" in text
    # the forest plot is in this section, under the answer
    assert text.index("verdict-sentence") < first.index("data-target='chart-forest'")
    spec = json.loads(re.search(r"data-target='chart-forest'>(.*?)</script>", first, re.S).group(1))
    assert spec["layer"]
    caveats = re.findall(r"<li>(.*?)</li>", re.search(r"<ul id='caveats'.*?</ul>", text).group())
    assert any(c.startswith("Unequal weights: vLLM serves BF16, llama-server Q4_K_M") for c in caveats)
    assert any(c.startswith("Threads: llama-server ") for c in caveats)
    # the criteria and their reason cells come after, not before
    assert index.index("id='answer'") < index.index("id='verdict'")


def test_not_yet_names_the_memory_ratio_in_words(tmp_path: Path) -> None:
    _, index = _site(tmp_path, "history")
    text = re.sub(r"<script.*?</script>", "", _first_section(index), flags=re.S).replace("&#x27;", "'")
    assert "<strong class='answer-word'>Not yet:</strong> stay on llama-server for now." in text
    deciding = re.search(r"<p id='deciding-figure'>(.*?)</p>", text).group(1)
    assert "C5" in deciding and "2.2× llama-server's memory" in deciding
    assert "C5 allows no more than llama-server's own 19.0 GiB" in deciding


def test_the_engines_side_by_side_with_the_workload_and_the_decisions_interval(tmp_path: Path) -> None:
    _, index = _site(tmp_path, "history")
    section = re.search(r"<section id='side-by-side'.*?</section>", index, re.S).group()
    rows = {
        re.sub("<[^>]+>", "", tr[0]): [re.sub("<[^>]+>", "", c) for c in tr[1:]]
        for tr in (re.findall(r"<td[^>]*>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", section))
        if tr
    }
    workload, base, cand, change, interval = rows["TTFT p95 at 5 clients"]
    assert workload == "5 clients · 200 requests"
    assert base.startswith("1,450 ms") and cand.startswith("820 ms")
    assert change == "-43.4 % (better)" and interval == "-48 % to -39 % (C3)"
    assert rows["memory held after load"][1:3] == ["19.00 GiB", "41.50 GiB"]


def test_no_percentile_for_a_level_too_small_for_it() -> None:
    assert (min_requests(50), min_requests(95), min_requests(99)) == (2, 20, 100)
    assert percentile_text(812.0, 95, 4, "ms") == "no p95: 4 requests, a p95 needs 20"
    assert percentile_text(812.0, 95, 20, "ms", 790.0, 850.0) == "812 ms (95 % CI 790–850 ms)"
    assert too_few(99, 90) == "no p99: 90 requests, a p99 needs 100"
    agg = {"scenario": "concurrency_sweep", "level": 5, "requests_ok": 4, "requests_failed": 0,
           "input_tokens_mean": 1502.0, "output_tokens_total": 1024}  # fmt: skip
    assert workload_text(agg) == "1,502 in / 256 out tokens · 5 clients · 4 requests"


def test_a_run_page_prints_no_p95_for_a_level_of_one_request(tmp_path: Path) -> None:
    out, _ = _site(tmp_path, "make_run")
    pages = [p.read_text() for p in (out / "runs").glob("*.html")]
    small = []
    for page in pages:
        for row in re.findall(r"<tr>(.*?)</tr>", page):
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
            n = re.search(r"· (\d+) requests?\b", cells[2]) if len(cells) > 3 else None
            if n and int(n.group(1)) < 20:
                small.append(cells)
                assert re.fullmatch(rf"no p95: {n.group(1)} requests?, a p95 needs 20", cells[3]), cells
    assert small  # the seeded runs have levels too small for a p95


def test_a_glossary_one_click_away_on_every_page(tmp_path: Path) -> None:
    out, index = _site(tmp_path, "make_run")
    assert f"<a href='{GLOSSARY}'>Glossary</a>" in index
    for p in (out / "runs").glob("*.html"):
        assert f"href='../{GLOSSARY}'" in p.read_text(), p.name
    glossary = (out / GLOSSARY).read_text()
    words = ["C1", "C2", "C3", "C4", "C5", "production match-up", "equal-weights match-up", "held since"]
    words += ["fingerprint", "canary", "Not yet:", "Switch:", "Stay:", "Can&#x27;t tell yet:"]
    for word in words:
        assert word in glossary, word
    assert len({a for a, _, _ in TERMS}) == len(TERMS)
    # docs/glossary.md is the same list, written from it
    assert (ROOT / "docs" / "glossary.md").read_text() == glossary_markdown()
    assert run_page("x").startswith("runs/")
