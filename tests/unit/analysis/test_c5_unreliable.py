"""C5 when a run's memory counters contradicted each other: unknown, saying why,
never a pass or a fail on a figure the host's own memory contradicts."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from support.decision_seed import GIB, SEPT, held_facts, make_config

from strix_pipeline.analysis.decision import Evidence, RunFacts, memory_not_above_llamacpp
from strix_pipeline.memory import MEMORY_UNRELIABLE


def facts(run_id: str, engine: str, held_gib: float | None, reason: str | None = None) -> RunFacts:
    return held_facts(
        run_id,
        engine,
        held_gib,
        image_version="v0.11.0" if engine == "vllm" else "b6000",
        launch_command="vllm serve /models/q" if engine == "vllm" else "llama-server -m /models/q.gguf",
        failure_reason=reason,
    )


def test_c5_is_unknown_and_names_the_run_whose_memory_is_unreliable():
    why = (
        "the GPU counters missed memory the host lost: "
        "sysfs VRAM+GTT 0.10 GiB vs MemTotal-MemAvailable 47.50 GiB"
    )
    blind = facts(
        "cand-blind", "vllm", None, f"{MEMORY_UNRELIABLE}: {why}; SMI output not read: amd-smi exited 1"
    )
    ev = Evidence(
        now=SEPT, window_start=SEPT - timedelta(days=1), runs=(blind, facts("base", "llamacpp", 19.5))
    )
    c5 = memory_not_above_llamacpp(ev, make_config())
    assert c5.status == "unknown", c5
    assert f"{MEMORY_UNRELIABLE} on vllm run cand-blind (v0.11.0): {why}" in c5.reason, c5.reason
    assert "SMI output" not in c5.reason  # the reason's own part only
    assert c5.evidence_run_ids == ["cand-blind"]
    # a held figure the counters agree on is judged as before
    ok = replace(blind, held_bytes=int(19 * GIB), failure_reason=None)
    assert memory_not_above_llamacpp(replace(ev, runs=(ok, ev.runs[1])), make_config()).status == "pass"
