"""C3 and C5 compare pairs made on purpose: the candidate run and the baseline run of
the same host, model family, backend family (ROCm or Vulkan build), host state
(fingerprint.HOST_FIELDS) and night -- the one closest in time within decision.pair_within_hours --
and say what was missing when there is none."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from support.decision_seed import (
    SEPT,
    evidence_of,
    judge_runs,
    make_config,
    run_record,
    run_result,
    seeded,
)

from strix_pipeline.analysis.decision import gather_evidence
from strix_pipeline.fingerprint import backend_family, pair_differences

NOW = SEPT + timedelta(days=2)
TOOLBOX = "kyuz0/amd-strix-halo-toolboxes"
CRITERIA = ["C3", "C5"]


def candidate(at=SEPT, **kw):
    """vLLM's official ROCm image on the Box, faster than llama-server and holding less."""
    return run_result(
        run_record("cand", "vllm", started_at=at, held_gib=15.0, digest="sha256:" + "a" * 64, **kw),
        ttft5=(800.0, 750.0, 850.0),
    )


def baseline(run_id, at, *, repo=None, tag="server-rocm-b6500", **kw):
    """llama-server on the medium MoE's GGUF (the candidate's model family), a ROCm build unless told."""
    return run_result(
        run_record(
            run_id,
            "llamacpp",
            started_at=at,
            repo=repo,
            tag=tag,
            profile="qwen3-30b-a3b-q4",
            quant="Q4_K_M",
            held_gib=19.0,
            **kw,
        ),
        ttft5=(1400.0, 1350.0, 1450.0),
    )


def judged(runs, **decision):
    return {c.criterion: c for c in judge_runs(runs, make_config(**decision), NOW).criteria}


@pytest.mark.parametrize(
    ("repository", "tag", "family"),
    [
        ("ggml-org/llama.cpp", "server-rocm-b6500", "rocm"),
        ("ggml-org/llama.cpp", "server-vulkan-b6500", "vulkan"),
        (TOOLBOX, "vulkan-radv", "vulkan"),
        (TOOLBOX, "rocm-7rc-rocwmma", "rocm"),
        ("vllm/vllm-openai-rocm", "v0.11.0", "rocm"),  # the tag names none: the repository does
        ("kyuz0/vllm-therock-gfx1151", "latest", "rocm"),
        (None, None, None),  # a local build
    ],
)
def test_the_backend_family_is_read_from_the_tag_then_the_repository(repository, tag, family):
    assert backend_family(repository, tag) == family


@pytest.mark.parametrize("criterion", CRITERIA)
def test_a_vulkan_baseline_run_is_never_paired_with_a_rocm_candidate(criterion):
    # the Vulkan toolbox ran nearest the candidate (10 minutes before it), the ROCm build 3 h before
    runs = [
        candidate(),
        baseline("llama-vulkan", SEPT - timedelta(minutes=10), repo=TOOLBOX, tag="vulkan-radv"),
        baseline("llama-rocm", SEPT - timedelta(hours=3)),
    ]
    c = judged(runs)[criterion]
    assert c.evidence_run_ids == ["cand", "llama-rocm"], c.reason
    # without the ROCm build there is no pair at all, and the reason says what the Vulkan one lacked
    c = judged([r for r in runs if r.run.run_id != "llama-rocm"])[criterion]
    assert c.status == "unknown" and c.evidence_run_ids == []
    assert "paired with the candidate's run cand, v0.11.0 (sha256:" in c.reason, c.reason
    assert "1 of another backend (vulkan build; the candidate's rocm build)" in c.reason, c.reason


@pytest.mark.parametrize("criterion", CRITERIA)
@pytest.mark.parametrize("other_night", [False, True])
def test_another_nights_baseline_is_not_used_when_a_same_night_one_exists(criterion, other_night):
    # the later run is the latest of the family (what the rule before pairs took), but a night later
    runs = [
        candidate(),
        baseline("llama-tonight", SEPT - timedelta(hours=2)),
        baseline("llama-next-night", SEPT + timedelta(hours=23)),
    ]
    c = judged(runs, pair_other_night=other_night)[criterion]
    assert c.evidence_run_ids == ["cand", "llama-tonight"], c.reason
    assert "another night" not in c.reason


@pytest.mark.parametrize("criterion", CRITERIA)
def test_of_two_runs_of_the_night_the_nearest_in_time_is_the_pair(criterion):
    runs = [
        candidate(),
        baseline("llama-early", SEPT - timedelta(hours=5)),
        baseline("llama-near", SEPT + timedelta(minutes=40)),
    ]
    assert judged(runs)[criterion].evidence_run_ids == ["cand", "llama-near"]
    # "the night" is the configured span: a window of 4 h leaves the earlier run out either way
    assert judged(runs, pair_within_hours=4)[criterion].evidence_run_ids == ["cand", "llama-near"]


@pytest.mark.parametrize("criterion", CRITERIA)
def test_no_same_night_pair_is_unknown_naming_the_night_unless_the_config_lets_another_stand_in(criterion):
    runs = [candidate(), baseline("llama-last-night", SEPT - timedelta(hours=24))]
    c = judged(runs)[criterion]
    assert c.status == "unknown" and c.evidence_run_ids == []
    assert (
        "of 1 of model family qwen3-30b-a3b, 1 of another night (the nearest 24.0 h from the candidate's, "
        "a pair within 12 h; decision.pair_other_night lets it stand in)"
    ) in c.reason, c.reason
    # the rule before pairs, when asked for: the other night's run decides, and the reason says so
    c = judged(runs, pair_other_night=True)[criterion]
    assert c.evidence_run_ids == ["cand", "llama-last-night"] and c.status == "pass", c.reason
    assert "run llama-last-night of another night stands in (24.0 h apart" in c.reason, c.reason
    # a wider night takes it as a pair
    assert judged(runs, pair_within_hours=30)[criterion].evidence_run_ids == ["cand", "llama-last-night"]


@pytest.mark.parametrize("criterion", CRITERIA)
def test_another_host_state_is_no_pair_even_on_another_night(criterion):
    # the same night's baseline ran before the kernel's command line changed (a new TTM limit)
    cand = candidate()
    cand.run.kernel, cand.run.kernel_cmdline = "6.17.0", "ttm.pages_limit=27648000"
    other = baseline("llama-old-ttm", SEPT - timedelta(hours=1))
    other.run.kernel, other.run.kernel_cmdline = "6.17.0", "ttm.pages_limit=9437184"
    c = judged([cand, other], pair_other_night=True)[criterion]
    assert c.status == "unknown", c.reason
    assert (
        "1 of another kernel_cmdline (ttm.pages_limit=9437184; the candidate's ttm.pages_limit=27648000)"
        in c.reason
    ), c.reason
    assert set(pair_differences(cand.run, other.run)) == {"kernel_cmdline"}


def test_the_warehouse_gives_the_facts_the_pairs_are_made_of(tmp_path):
    cand = candidate()
    same = baseline("llama-rocm", SEPT - timedelta(hours=1))
    for r in (cand, same):
        r.run.kernel, r.run.kernel_cmdline, r.run.ttm_pages_limit = "6.17.0", "ttm.pages_limit=1", 1
    runs = [cand, same, baseline("llama-vulkan", SEPT, repo=TOOLBOX, tag="vulkan-radv")]
    wh = seeded(tmp_path / "w.duckdb", runs)
    config = make_config()
    got, want = gather_evidence(wh, config, NOW), evidence_of(runs, config, NOW)
    blank = {"ttfts": {}, "slo_requests": {}}
    assert dataclasses.replace(got, **blank) == dataclasses.replace(want, **blank)
    assert {r.run_id: r.ttm_pages_limit for r in got.runs} == {
        "cand": 1,
        "llama-rocm": 1,
        "llama-vulkan": None,
    }
