"""llama-bench's table for the decision's two runs: prefill (pp<input tokens>) and decode
(tg<output tokens>) in tokens/s, mean ± standard deviation over the repeats of each level, with the
threads each engine ran on."""

from __future__ import annotations

import re

from strix_pipeline.analysis.decision import engine_name
from strix_pipeline.report.markup import esc, table
from strix_pipeline.report.site_data import ReportData

# llama-server's thread count on its command line (-t N, --threads N, --threads=N)
_THREADS = re.compile(r"(?:^|\s)(?:-t|--threads)(?:\s+|=)(\d+)(?=\s|$)")


def threads_of(launch_command: str | None) -> str:
    """The threads a run's command line asked for, or the engine's default."""
    m = _THREADS.search(launch_command or "")
    return m.group(1) if m else "engine default"


def _mean_std(mean: float | None, std: float | None) -> str:
    if mean is None:
        return "–"
    return f"{mean:,.1f} ± {std:,.1f}" if std is not None else f"{mean:,.1f} (one repeat)"


def bench_rows(data: ReportData, run_ids: list[str]) -> list[list[str]]:
    rows = []
    for run_id in run_ids:
        r = data.run(run_id)
        if r is None:
            continue
        name = f"{engine_name(r['engine'])} {r['image_version'] or ''}".strip()
        for b in data.bench.get(run_id, []):
            prefill = b["scenario"] == "prefill_ladder"
            tokens = b["input_tokens"] if prefill else b["output_tokens"]
            mean, std = (b["pp_tok_s"], b["pp_std"]) if prefill else (b["tg_tok_s"], b["tg_std"])
            if mean is None or tokens is None:
                continue
            rows.append(
                [
                    esc(name),
                    esc(r["quantization"] or "–"),
                    esc(threads_of(r["launch_command"])),
                    esc(f"{'pp' if prefill else 'tg'}{tokens:.0f}"),
                    esc(_mean_std(mean, std)),
                    esc(b["repeats"]),
                ]
            )
    return rows


def bench_html(data: ReportData, run_ids: list[str]) -> str:
    rows = bench_rows(data, run_ids)
    if not rows:
        return ""
    return (
        "<h3 id='pp-tg'>Prefill and decode, as llama-bench reports them</h3>"
        "<p class='muted'>pp: input tokens / TTFT; tg: tokens after the first / the time after it; mean ± "
        "standard deviation over the measured repeats of each level (one client).</p>"
        + table(["engine", "weights", "threads", "test", "tokens/s", "repeats"], rows, numeric={4, 5})
    )
