"""C3 and C5 compare the candidate against what production serves: the baseline of production's image
and model (``decision.baseline_image`` / ``baseline_model``), the candidate of one model profile
(``candidate_model``) -- never whichever llama-server image or model profile ran last."""

from __future__ import annotations

from datetime import timedelta

import pytest
from support.decision_seed import SEPT, judge_runs, make_config, run_record, run_result, september_runs

PAIRED = {
    "baseline_image": "ghcr.io/ggml-org/llama.cpp",
    "baseline_model": "qwen3-30b-a3b-q4",
    "candidate_model": "qwen3-30b-a3b",
}
NOW = SEPT + timedelta(days=1)


def by_id(decision):
    return {c.criterion: c for c in decision.criteria}


def with_later_runs():
    """September's runs, then a Vulkan toolbox llama-server (slow, big) and a vLLM run of the GGUF
    profile, both after the runs of production's image and of the candidate's own profile."""
    return [
        *september_runs(),
        run_result(
            run_record(
                "llama-toolbox",
                "llamacpp",
                started_at=SEPT + timedelta(hours=3),
                repo="kyuz0/amd-strix-halo-toolboxes",
                tag="vulkan-radv",
                profile="qwen3-30b-a3b-q4",
                quant="Q4_K_M",
                held_gib=60.0,
                digest="sha256:" + "c" * 64,
            ),
            ttft5=(3000.0, 2900.0, 3100.0),
        ),
        run_result(
            run_record(
                "vllm-gguf",
                "vllm",
                started_at=SEPT + timedelta(hours=4),
                tag="v0.12.0",
                profile="qwen3-30b-a3b-q4",
                quant="Q4_K_M",
                held_gib=10.0,
                digest="sha256:" + "d" * 64,
            ),
            ttft5=(5000.0, 4900.0, 5100.0),
        ),
    ]


def test_without_the_pair_configured_the_newest_candidate_meets_its_nearest_rocm_baseline():
    c = by_id(judge_runs(with_later_runs(), make_config(), NOW))
    # the newest candidate run (ROCm) is compared with a ROCm build of its night, not the later
    # Vulkan toolbox (before pairs were made on purpose, the last baseline run of the family decided)
    assert c["C3"].evidence_run_ids == ["vllm-gguf", "llama-qwen"], c["C3"].reason


@pytest.mark.parametrize("criterion", ["C3", "C5"])
def test_the_pair_is_the_candidates_profile_against_productions_image_and_model(criterion):
    c = by_id(judge_runs(with_later_runs(), make_config(**PAIRED), NOW))
    assert c[criterion].evidence_run_ids == ["vllm-qwen", "llama-qwen"], c[criterion].reason
    # September's numbers: vLLM faster at 5 clients (C3 pass), holding more than llama-server (C5 fail)
    assert c[criterion].status == {"C3": "pass", "C5": "fail"}[criterion], c[criterion].reason


@pytest.mark.parametrize("criterion", ["C3", "C5"])
def test_no_run_of_productions_image_is_unknown_saying_so(criterion):
    runs = [r for r in with_later_runs() if r.run.run_id != "llama-qwen"]
    c = by_id(judge_runs(runs, make_config(**PAIRED), NOW))[criterion]
    assert c.status == "unknown"
    assert (
        "llamacpp (production's image ghcr.io/ggml-org/llama.cpp, model qwen3-30b-a3b-q4) runs with"
        in c.reason
    )
    assert "llama-toolbox" not in c.evidence_run_ids


def test_no_run_of_the_candidates_profile_is_unknown_saying_so():
    runs = [r for r in with_later_runs() if r.run.run_id != "vllm-qwen"]
    c = by_id(judge_runs(runs, make_config(**PAIRED), NOW))["C3"]
    assert c.status == "unknown" and "candidate (model qwen3-30b-a3b) runs with" in c.reason, c.reason


def test_a_pair_of_two_model_families_is_refused_when_the_config_is_read():
    with pytest.raises(ValueError, match="different model families"):
        make_config(baseline_model="qwen3-30b-a3b-q4", candidate_model="gpt-oss-120b")
    with pytest.raises(ValueError, match="decision.baseline_model: no model named 'nope'"):
        make_config(baseline_model="nope")


def test_without_an_override_the_baseline_is_production_as_deployed_and_named_so():
    """With no baseline image or model configured, a run of production as deployed is the baseline,
    though a plain run of the baseline engine is nearer the candidate's; the reason names it. A Vulkan
    production is never paired with the ROCm candidate: the backend rule holds for it too."""
    deployed = "production as deployed (sha256:" + "e" * 64 + ")"
    runs = [
        *september_runs(),
        run_result(
            run_record(
                "llama-deployed",
                "llamacpp",
                started_at=SEPT - timedelta(hours=3),  # further from the candidate's than llama-qwen
                tag="server-rocm-b6400",
                profile="qwen3-30b-a3b-q4",
                quant="Q4_K_M",
                held_gib=20.0,
                digest="sha256:" + "e" * 64,
            ),
            ttft5=(2000.0, 1900.0, 2100.0),
        ),
    ]
    plain = by_id(judge_runs(runs, make_config(), NOW))["C3"]
    assert "llama-deployed" not in plain.evidence_run_ids, plain.reason  # the nearer plain run, as today
    runs[-1].run.baseline_source = deployed
    c = by_id(judge_runs(runs, make_config(), NOW))["C3"]
    assert c.evidence_run_ids == ["vllm-qwen", "llama-deployed"], (c.status, c.reason)
    assert "llamacpp 2000 ms" in c.reason and "server-rocm-b6400, production as deployed (" in c.reason, (
        c.reason
    )
    assert "production as deployed" not in plain.reason, plain.reason
    runs[-1].run.image_tag = "server-vulkan"
    vulkan = by_id(judge_runs(runs, make_config(), NOW))["C3"]
    assert vulkan.status == "unknown" and "llamacpp (production as deployed)" in vulkan.reason, vulkan.reason
