"""The words the report, the charts and the Dagster assets use, each said once: the site's glossary
page and docs/glossary.md are both written from :data:`TERMS` (a test keeps the file in step)."""

from __future__ import annotations

import textwrap

from strix_pipeline.analysis.decision import HEADLINES
from strix_pipeline.report.markup import esc, page

# (anchor, term, definition); the anchors are the page's fragment ids (glossary.html#c5)
TERMS: tuple[tuple[str, str, str], ...] = (
    (
        "c1",
        "C1 — the official image starts",
        "The newest official vLLM release image reaches ready on the decision host with no patch and no "
        "HSA_OVERRIDE_GFX_VERSION. Evidence: a run of that image digest that reached ready.",
    ),
    (
        "c2",
        "C2 — serves the medium MoE model",
        "vLLM serves the configured medium mixture-of-experts model (Qwen3-30B-A3B class): its smoke "
        "request returned valid output. Not required on a CPU host, which cannot serve it.",
    ),
    (
        "c3",
        "C3 — TTFT p95 at 5 clients below llama-server's",
        "vLLM's 95th-percentile time to first token with 5 concurrent clients, divided by llama-server's "
        "on the same host and model family, is below the threshold (1.0× by default) with its whole 95 % "
        "interval. An interval that holds the threshold leaves C3 unknown: more requests decide it.",
    ),
    (
        "c4",
        "C4 — serves gpt-oss-120b from MXFP4",
        "vLLM serves gpt-oss-120b from its published MXFP4 weights, with no conversion.",
    ),
    (
        "c5",
        "C5 — memory held not above llama-server's",
        "The memory vLLM holds after load (above the idle baseline) is at most llama-server's own held "
        "memory for the same context length, plus the configured tolerance (0 % by default). The "
        "“allowed” figure is therefore llama-server's own held memory.",
    ),
    (
        "production-matchup",
        "production match-up",
        "Each engine in the format it would serve in production: llama-server with its GGUF quantization "
        "(Q4_K_M), vLLM with its own weights (BF16). It answers “what would the users get?”.",
    ),
    (
        "equal-weights-matchup",
        "equal-weights match-up",
        "llama-server serving the candidate's own weights, so both engines compute on the same numbers. "
        "It answers “is it the engine or the weights?”. C3 and C5 are judged on both match-ups; one of "
        "them decides, the other is shown beside it.",
    ),
    (
        "held",
        "held (memory held after load)",
        "Memory the engine holds once loaded and idle, above the host's idle baseline: VRAM + GTT on the "
        "Box, the process's resident memory on a CPU host.",
    ),
    (
        "held-since",
        "held since",
        "The date a criterion first passed in the unbroken run of evaluations that still pass it.",
    ),
    (
        "fingerprint",
        "fingerprint",
        "Everything that must match for two results to be comparable: scenario, engine flags, model and "
        "quantization, host, ROCm, kernel and firmware, harness version and workload. A changed "
        "fingerprint starts a new series: “not comparable”, never a regression.",
    ),
    (
        "canary",
        "canary",
        "One pinned build benchmarked every week. Its figures should not move; when they do, the host "
        "drifted, and a confirmed step is written beside the engine changes on the same measurement in "
        "that window (they are still alerted and bisected).",
    ),
    (
        "interval",
        "95 % interval",
        "The range that holds the true figure with 95 % confidence (distribution-free for percentiles, "
        "by pairs for the match-ups' ratios). A percentile is printed only where its level has enough "
        "requests: at least one request must lie above it (p95: 20, p99: 100).",
    ),
    (
        "ttft",
        "TTFT, ITL, TPOT, E2E",
        "Time to first token (send → first content event); inter-token latency (the gaps between content "
        "events); time per output token after the first; end to end (send → last content event).",
    ),
    (
        "pp-tg",
        "pp / tg",
        "llama-bench's names: pp<N> is prefill of N input tokens (input tokens / TTFT), tg<N> is decode of "
        "N output tokens (tokens after the first / the time after it), each in tokens/s ± the standard "
        "deviation over repeats.",
    ),
    (
        "switch",
        f"{HEADLINES['switch']} (verdict switch)",
        "Every required criterion passes. Provisional until a second run (a repeat of the image, or the "
        "previous version) agrees without the newest candidate run.",
    ),
    (
        "evaluate",
        f"{HEADLINES['evaluate']} (verdict evaluate)",
        "C1–C3 pass but a later criterion (C4 or C5) fails: vLLM starts and is faster, yet something "
        "still stands between it and the switch. Stay on llama-server for now.",
    ),
    (
        "stay",
        f"{HEADLINES['stay']} (verdict stay)",
        "C1 or C2 fails, or C3 fails (vLLM serves but is not faster with confidence): keep llama-server.",
    ),
    (
        "unknown",
        f"{HEADLINES['unknown']} (verdict unknown)",
        "A required criterion has no fresh evidence, or its interval holds its threshold: never silently a "
        "pass or a fail. The answer names the run that would give the evidence.",
    ),
)


def glossary_markdown() -> str:
    """docs/glossary.md's text."""
    lines = [
        "# Glossary",
        "",
        "The words of the weekly report, the charts and the Dagster assets. Written from",
        "`strix_pipeline/report/glossary.py` (the report site's glossary page says the same).",
        "",
    ]
    for anchor, term, text in TERMS:
        lines += [f'<a id="{anchor}"></a>', textwrap.fill(f"**{term}**: {text}", 100), ""]
    return "\n".join(lines)


def glossary_html(csp: str, nav: str) -> str:
    """The site's glossary page: a definition list, each term with its fragment id."""
    items = "".join(f"<dt id='{esc(a)}'>{esc(t)}</dt><dd>{esc(x)}</dd>" for a, t, x in TERMS)
    body = f"<header><h1>Glossary</h1>{nav}</header><main><dl class='glossary'>{items}</dl></main>"
    return page("strix-pipeline glossary", body, csp=csp)
