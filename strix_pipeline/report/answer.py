"""The report's first screen: the plain answer, the one figure that decides it with its interval and
the ratio in words, what would change the answer, the forest plot right under it, and the caveats an
expert raises first, one line each."""

from __future__ import annotations

import re

from strix_pipeline.analysis.charts.forest import criterion_rows
from strix_pipeline.analysis.decision import (
    Decision,
    Wording,
    allowed_text,
    change_needed,
    criterion_title,
    format_value,
    headline,
    held_text,
    interval_text,
    memory_ratio_words,
    no_evaluation_sentence,
    ratio_x,
    verdict_sentence,
)
from strix_pipeline.records import CriterionResult
from strix_pipeline.report.bench_table import threads_of
from strix_pipeline.report.forest import forest_chart
from strix_pipeline.report.markup import esc
from strix_pipeline.report.side_by_side import decision_pair
from strix_pipeline.report.site_data import ReportData

# the dtype a command line asks the engine to compute in (vLLM's --dtype)
_DTYPE = re.compile(r"--dtype(?:\s+|=)(\S+)")
# one spelling per dtype, so "BF16" and "bfloat16" read as the same
_DTYPE_NAMES = {"bfloat16": "bf16", "float16": "f16", "half": "f16", "float32": "f32", "float": "f32"}


def deciding_criterion(d: Decision) -> CriterionResult | None:
    """The criterion the answer turns on: the first failing required one (stay; for not yet the first
    with a figure), the first without evidence (can't tell yet), C3 for a switch."""
    required = [c for c in d.criteria if c.required]
    if d.verdict == "unknown":
        return next((c for c in required if c.status == "unknown"), None)
    if d.verdict == "switch":
        return next((c for c in required if c.criterion == "C3"), required[0] if required else None)
    failed = [c for c in required if c.status == "fail"]
    if d.verdict == "evaluate":  # C1-C3 passed: of the failures, the one with a figure to draw
        return next((c for c in failed if c.value is not None), failed[0] if failed else None)
    return failed[0] if failed else None


def deciding_text(c: CriterionResult, w: Wording) -> str:
    """The deciding figure in words: the ratio with its interval, or the memory both hold."""
    title = f"{c.criterion} ({criterion_title(c.criterion, w)})"
    if c.criterion == "C5" and c.unit == "bytes" and c.value is not None and c.threshold is not None:
        ratio = memory_ratio_words(c, w)
        return (
            f"{title}, {c.status}: {w.candidate} holds {held_text(c.value)} after load"
            + (f", {ratio}" if ratio else "")
            + f"; {allowed_text(c, w)}."
        )
    if c.unit == "ratio" and c.value is not None:
        ci = interval_text(c)
        thr = f", threshold {ratio_x(c.threshold)}×" if c.threshold is not None else ""
        return (
            f"{title}, {c.status}: {w.candidate} at {ratio_x(c.value, c.threshold)}× "
            f"{w.baseline_engine}'s" + (f" ({ci}{thr})" if ci else thr) + "."
        )
    if c.value is not None:
        return f"{title}, {c.status}: {format_value(c.value, c.unit)}."
    return f"{title}, {c.status}: {c.reason}"


def _dtype(text: str | None) -> str:
    t = (text or "").strip().lower().split(":")[0]
    return _DTYPE_NAMES.get(t, t)


def caveats(data: ReportData) -> list[str]:
    """The caveats an expert raises first about the pair of runs the answer rests on: unequal weights,
    the dtype the candidate actually ran in, the threads each engine ran on."""
    pair = decision_pair(data)
    if pair is None:
        return []
    c, b = data.run(pair[0]) or {}, data.run(pair[1]) or {}
    w = data.wording
    out = []
    if c.get("quantization") and b.get("quantization") and c["quantization"] != b["quantization"]:
        out.append(
            f"Unequal weights: {w.candidate_engine} serves {c['quantization']}, {w.baseline_engine} "
            f"{b['quantization']}; the equal-weights match-up compares the same weights."
        )
    m = _DTYPE.search(c.get("launch_command") or "")
    ran = m.group(1) if m else (c.get("engine_dtype") or "").split(":")[0] or None
    if ran and c.get("quantization") and _dtype(ran) != _dtype(c["quantization"]):
        out.append(
            f"Dtype actually run: {w.candidate_engine}'s command computes in {ran}, while its weights are "
            f"labelled {c['quantization']}."
        )
    threads = [
        f"{name} {threads_of(r.get('launch_command'))}"
        for name, r in ((w.baseline_engine, b), (w.candidate_engine, c))
        if r
    ]
    if threads:
        out.append("Threads: " + ", ".join(threads) + ".")
    return out


def answer_html(data: ReportData) -> str:
    """The first section of the page (see the module docstring)."""
    d, w = data.decision, data.wording
    sentence = data.sentences.get(d.evaluation_id) or verdict_sentence(d, w) if d else None
    text = sentence or no_evaluation_sentence(data.host, w)
    word = headline(d.verdict if d else None)
    rest = text.removeprefix(word)
    parts = [
        "<section id='answer' aria-label='The answer'>",
        f"<p class='verdict-sentence' id='verdict-sentence' data-host='{esc(data.host)}'>"
        + (
            f"<strong class='answer-word'>{esc(word)}</strong>{esc(rest)}"
            if text.startswith(word)
            else esc(text)
        )
        + "</p>",
    ]
    c = deciding_criterion(d) if d else None
    if c is not None:
        parts.append(
            "<p id='deciding-figure'><strong>The figure that decides:</strong> "
            f"{esc(deciding_text(c, w))}</p>"
        )
    change = change_needed(d, w) if d else ""
    if change:
        parts.append(
            f"<p id='what-would-change'><strong>What would change the answer:</strong> {esc(change)}.</p>"
        )
    held = {r["run_id"]: r["held_bytes"] for r in data.runs}
    chart = forest_chart(criterion_rows(d, held, w))
    note = f"<p class='muted'>{esc(chart.note)}</p>" if chart.note else ""
    parts.append(f"<div class='chart'><h3 id='forest'>{esc(chart.title)}</h3>{chart.html()}{note}</div>")
    lines = caveats(data)
    if lines:
        parts.append(
            "<ul id='caveats' class='caveats'>" + "".join(f"<li>{esc(x)}</li>" for x in lines) + "</ul>"
        )
    parts.append("</section>")
    return "".join(parts)
