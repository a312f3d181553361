"""The decision's pair on the Box simulator over the real ``ssh://`` path: C3 and C5 compare the candidate
against what production serves, not whichever llama-server ran last.

Two real llama-server runs of production's model profile on the simulated Box (this machine's dockerd
behind a real sshd, the probe reading the simulated Strix Halo, production's container stopped and
restored around each run, watched throughout): first production's image (``ggml-org/llama.cpp``
in the loopback registry, the repository ``decision.baseline_image`` names), then, later and so "the
latest", the same binary pushed as a community toolbox image (``kyuz0/amd-strix-halo-toolboxes``,
a Vulkan tag) run with one slot instead of two. The simulated Box gives each engine's container
its own GTT while it runs (production's 1 GiB, the toolbox's 2.5 GiB), freed when the container goes.

The candidate (vLLM) is not run here: a vLLM ROCm image cannot start in this machine's Docker, so its
rows are seeded (tests/support/decision_seed.py) into the same warehouse: a run of
``decision.candidate_model`` and a later one of another profile of the same family, which must not
be chosen.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.bench_docker import HOST, managed, remove_left_behind
from support.box_images import ProductionWatch, PushedImage, production_httpd, push_image
from support.box_sim import KEY_ENV, BoxSim, box_config
from support.decision_seed import run_record, run_result
from support.infra import free_port
from support.llama_image import LlamaImage, llama_rootfs

from strix_pipeline.analysis.decision import evaluate
from strix_pipeline.config import StrixConfig
from strix_pipeline.fingerprint import HOST_FIELDS
from strix_pipeline.hosts.docker.launcher import DockerLauncher
from strix_pipeline.records import CriterionResult, RunResult
from strix_pipeline.runner import BenchmarkTarget, run_benchmark
from strix_pipeline.units import GIB
from strix_pipeline.warehouse import Warehouse

pytestmark = [
    pytest.mark.docker,
    pytest.mark.registry,
    pytest.mark.llama,
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(600),
]

RUN_PREFIX = "boxpair-"
PRODUCTION_REPO, PRODUCTION_TAG = "ggml-org/llama.cpp", "server-rocm"
TOOLBOX_REPO, TOOLBOX_TAG = "kyuz0/amd-strix-halo-toolboxes", "vulkan-radv"
# production's image as the example Box config names it: the run stores the repository without its
# registry (here the loopback one), and the pair matches either spelling
PRODUCTION_IMAGE = "ghcr.io/ggml-org/llama.cpp"
NEVER_RUN_IMAGE = "docker.io/rocm/llama.cpp"
LEVEL = 5  # decision.concurrency: C3 reads TTFT p95 at 5 clients
REQUESTS_AT_5 = 10
PRODUCTION_HELD, TOOLBOX_HELD = 1 * GIB, int(2.5 * GIB)
# between the two llama-server figures, so C5's verdict depends on which of them it is compared with
CANDIDATE_HELD_GIB = 1.5
CANDIDATE_P95_MS = 40.0
CANDIDATE, OTHER_PROFILE = "vllm-gemma-bf16", "vllm-gemma-gguf"
PAIR = {"baseline_image": PRODUCTION_IMAGE, "baseline_model": "gemma", "candidate_model": "gemma-bf16"}


@pytest.fixture(autouse=True)
def nothing_left_behind(docker_engine: None) -> Iterator[None]:
    yield
    left = remove_left_behind(RUN_PREFIX)
    assert not left, f"containers left behind: {left}"


# ------------------------------------------------------------------------------------- the runs


def push_copy(llama: LlamaImage, repository: str, tag: str) -> PushedImage:
    """The test's llama-server pushed to its registry as ``repository:tag``; the version label differs
    per copy, so each has its own digest."""
    labels = {"org.opencontainers.image.version": tag}
    pushed = push_image(llama.registry, repository, tag, llama_rootfs(llama.binary), labels=labels)
    return replace(pushed, binary=llama.binary)


def with_pair(config: StrixConfig, **decision: object) -> StrixConfig:
    data = config.model_dump()
    data["decision"].update(decision)
    return StrixConfig.model_validate(data)


def decision_config(
    tmp_path: Path, llama: LlamaImage, model_path: Path, box_sshd, production: tuple[str, str]
) -> StrixConfig:
    """The Box config with the decision's two engines (vLLM never started here: its runs are seeded),
    the candidate's own model profile of Gemma's family, and a sweep that has the 5-client level."""
    name, url = production
    base = box_config(
        tmp_path,
        llama,
        model_path,
        box_sshd,
        production={"container": name, "health_url": url, "health_timeout_s": 30},
    )
    data = base.model_dump()
    data["engines"]["vllm"] = {
        "kind": "vllm",
        "port": free_port(),
        "images": [{"registry": "docker.io", "repository": "vllm/vllm-openai-rocm", "official": True}],
    }
    data["models"]["gemma-bf16"] = {
        **data["models"]["gemma"],
        "quantization": "BF16",
        "path": str(tmp_path / "gemma-3-270m-bf16"),
    }
    data["profiles"]["tiny"]["concurrency_sweep"].update(
        {"levels": [1, LEVEL], "requests_per_level": 2, "requests_at": {LEVEL: REQUESTS_AT_5}}
    )
    data["decision"].update({"candidate_engine": "vllm", "baseline_engine": "llamacpp"})
    return StrixConfig.model_validate(data)


@dataclass
class PairRuns:
    warehouse: Path
    config: StrixConfig  # no pair configured: the old rule
    production: RunResult
    toolbox: RunResult
    production_image: PushedImage
    toolbox_image: PushedImage
    watched: dict[str, list[str]]  # run id -> production's states during it


def bench(
    config: StrixConfig, image: PushedImage, run_id: str, sim: BoxSim, held: int, production: str
) -> tuple[RunResult, list[str]]:
    idle_gtt = sim.scenario.gtt_used
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        if " ready at " in line:  # the model is loaded: the Box's GTT holds it
            sim.update(gtt_used=idle_gtt + held)

    target = BenchmarkTarget(HOST, "llamacpp", "gemma", "tiny", image.record())
    with ProductionWatch(production) as watch:
        result = run_benchmark(
            config,
            target,
            run_id=run_id,
            log=log,
            force=True,
            scenarios=["smoke", "concurrency_sweep"],
        )
    assert managed(run_id) == [], f"{run_id} left its engine container"
    r = result.run
    assert r.status == "ok", (r.status, r.failure_reason, r.log_tail, lines[-10:])
    assert r.image_repository == image.repository and r.image_digest == image.digest
    return result, watch.states


@pytest.fixture(scope="module")
def pair_runs(
    llama, model_path, box_sshd, box_probe_image, busybox, client, tmp_path_factory
) -> Iterator[PairRuns]:
    tmp_path = tmp_path_factory.mktemp("box-decision-pair")
    pushed = [push_copy(llama, PRODUCTION_REPO, PRODUCTION_TAG), push_copy(llama, TOOLBOX_REPO, TOOLBOX_TAG)]
    prod_image, toolbox_image = pushed
    try:
        with (
            pytest.MonkeyPatch.context() as mp,
            production_httpd(client, busybox, "strix-test-pair-production") as production,
        ):
            mp.setenv(KEY_ENV, str(box_sshd.key))
            sim = BoxSim.build(tmp_path / "box")
            sim.install(mp, box_probe_image)
            idle_gtt = sim.scenario.gtt_used
            leave = DockerLauncher.__exit__

            def leave_and_free(self: DockerLauncher, *exc: object) -> None:
                leave(self, *exc)
                sim.update(gtt_used=idle_gtt)  # the engine's container is gone: so is its GTT

            mp.setattr(DockerLauncher, "__exit__", leave_and_free)
            config = decision_config(tmp_path, llama, model_path, box_sshd, production)
            prod, prod_states = bench(
                config, prod_image, RUN_PREFIX + "production", sim, PRODUCTION_HELD, production[0]
            )
            # the community toolbox ran later, with one slot where production has two
            one_slot = config.model_dump()
            one_slot["models"]["gemma"]["parallel"] = 1
            toolbox, toolbox_states = bench(
                StrixConfig.model_validate(one_slot),
                toolbox_image,
                RUN_PREFIX + "toolbox",
                sim,
                TOOLBOX_HELD,
                production[0],
            )
        assert toolbox.run.started_at > prod.run.ended_at  # the toolbox's is "the latest" run
        # the candidate's rows: its profile's run, then one of the GGUF profile (same family) later;
        # both ended before the llama-server runs started, all within the freshness window
        at = prod.run.started_at
        candidate = [
            run_result(
                run_record(
                    CANDIDATE,
                    "vllm",
                    started_at=at - timedelta(hours=2),
                    host=HOST,
                    profile="gemma-bf16",
                    quant="BF16",
                    family="gemma3-270m",
                    held_gib=CANDIDATE_HELD_GIB,
                ),
                ttft5=(CANDIDATE_P95_MS, CANDIDATE_P95_MS * 0.9, CANDIDATE_P95_MS * 1.1),
            ),
            run_result(
                run_record(
                    OTHER_PROFILE,
                    "vllm",
                    started_at=at - timedelta(hours=1),
                    host=HOST,
                    profile="gemma",
                    quant="Q4_K_M",
                    family="gemma3-270m",
                    held_gib=5.0,
                ),
                ttft5=(4 * CANDIDATE_P95_MS, 3.6 * CANDIDATE_P95_MS, 4.4 * CANDIDATE_P95_MS),
            ),
        ]
        # the candidate ran on the same Box in the same state (kernel, command line, TTM limit,
        # harness): the pairing rule (fingerprint.pair_differences) compares those facts
        same_host = {f: getattr(prod.run, f) for f in HOST_FIELDS}
        candidate = [replace(c, run=replace(c.run, **same_host)) for c in candidate]
        with Warehouse.open(config.project.warehouse) as wh:
            wh.load_runs([prod, toolbox, *candidate])
        yield PairRuns(
            Path(config.project.warehouse),
            config,
            prod,
            toolbox,
            prod_image,
            toolbox_image,
            {prod.run.run_id: prod_states, toolbox.run.run_id: toolbox_states},
        )
    finally:
        for image in pushed:
            image.remove()


def criteria(runs: PairRuns, config: StrixConfig) -> dict[str, CriterionResult]:
    with Warehouse.open(runs.warehouse, read_only=True) as wh:
        decision = evaluate(wh, config, now=datetime.now(UTC))
    return {c.criterion: c for c in decision.criteria}


def p95_at_5(result: RunResult) -> float:
    (agg,) = [a for a in result.aggregates if a.scenario == "concurrency_sweep" and a.level == LEVEL]
    assert agg.ttft_p95_ms is not None and agg.requests_ok == REQUESTS_AT_5, agg
    return agg.ttft_p95_ms


# ------------------------------------------------------------------------------------- the tests


def test_the_real_runs_are_two_images_of_productions_profile_with_their_own_figures(pair_runs):
    """Both llama-server runs served over ssh:// with production stopped and restored around each,
    distinct by image and digest, each with its own held memory as the simulated Box gave it."""
    prod, toolbox = pair_runs.production.run, pair_runs.toolbox.run
    for run_id, states in pair_runs.watched.items():
        assert states == ["running", "exited", "running"], (run_id, states)
    assert prod.model_profile == toolbox.model_profile == "gemma"
    assert (prod.image_repository, toolbox.image_repository) == (PRODUCTION_REPO, TOOLBOX_REPO)
    assert prod.image_digest != toolbox.image_digest
    assert prod.held_bytes == pytest.approx(PRODUCTION_HELD, abs=0.05 * GIB), prod.failure_reason
    assert toolbox.held_bytes == pytest.approx(TOOLBOX_HELD, abs=0.05 * GIB), toolbox.failure_reason
    assert prod.memory_returned is True and toolbox.memory_returned is True
    assert " -np 2 " in f" {prod.launch_command} " and " -np 1 " in f" {toolbox.launch_command} "
    assert p95_at_5(pair_runs.production) > 0 and p95_at_5(pair_runs.toolbox) > 0


def test_each_box_run_records_what_its_engine_allocated_at_load(pair_runs):
    """C5's breakdown on the Box as on host `local`: llama-server runs there at log
    verbosity 4 and the run reads its weights and KV cache from the container's log; its KV capacity
    is its -c (the profile's context x slots)."""
    for result in (pair_runs.production, pair_runs.toolbox):
        run = result.run
        assert " -lv 4" in (run.launch_command or ""), run.launch_command
        # Gemma 3 270M Q4_K_M: a little under the 253 MB GGUF; a KV cache of a few MiB
        assert run.weights_bytes is not None and 150 * 2**20 < run.weights_bytes < 300 * 2**20, (
            run.weights_bytes
        )
        assert run.kv_cache_bytes is not None and run.kv_cache_bytes > 0, run.kv_cache_bytes
        slots = int(run.launch_command.split(" -np ")[1].split()[0])
        ctx = int(run.launch_command.split(" -c ")[1].split()[0])
        assert run.kv_capacity_tokens == ctx and ctx % slots == 0, (run.kv_capacity_tokens, ctx)


def test_without_the_pair_configured_the_later_vulkan_toolbox_run_is_not_taken(pair_runs):
    """With no pair configured, the baseline is still a run of the candidate's backend family: the
    later toolbox run is a Vulkan build (its tag says so) and is never compared with a ROCm vLLM;
    production's ROCm run of the same night is, against the newest candidate run of the family.
    The loose rule (any later llama-server run) took the later toolbox run."""
    got = criteria(pair_runs, pair_runs.config)
    prod = pair_runs.production.run.run_id
    for cid in ("C3", "C5"):
        assert got[cid].evidence_run_ids == [OTHER_PROFILE, prod], (cid, got[cid].reason)
        assert TOOLBOX_TAG not in got[cid].reason, got[cid].reason


def test_the_pair_is_the_candidates_profile_against_productions_image_and_its_real_figures(pair_runs):
    """With ``decision.baseline_image`` / ``baseline_model`` / ``candidate_model``: C3 and C5 compare
    the candidate's profile run with the real run of production's image, not the later toolbox run,
    on that run's own TTFT p95 at 5 clients and held memory."""
    got = criteria(pair_runs, with_pair(pair_runs.config, **PAIR))
    prod = pair_runs.production
    digest = prod.run.image_digest or ""
    toolbox_digest = pair_runs.toolbox.run.image_digest or ""
    for cid in ("C3", "C5"):
        c = got[cid]
        assert c.evidence_run_ids == [CANDIDATE, prod.run.run_id], (cid, c.reason)
        assert f"{PRODUCTION_TAG} ({digest[:19]})" in c.reason, c.reason
        assert toolbox_digest[:19] not in c.reason and TOOLBOX_TAG not in c.reason, c.reason

    c3, b_p95 = got["C3"], p95_at_5(prod)
    assert c3.value == pytest.approx(CANDIDATE_P95_MS / b_p95), (c3.reason, b_p95)
    assert f"vs llamacpp {b_p95:.0f} ms" in c3.reason and f"n={REQUESTS_AT_5}]" in c3.reason, c3.reason
    # 10 requests at 5 clients per llama-server run: too few for the ratio's interval
    assert c3.status == "unknown" and c3.reason.startswith("inconclusive: too few requests"), c3.reason

    c5 = got["C5"]
    assert c5.threshold == prod.run.held_bytes, c5.reason  # tolerance 0: production's own figure
    assert c5.value == int(CANDIDATE_HELD_GIB * GIB)
    # the candidate holds more than production's llama-server (it held less than the toolbox's)
    assert c5.status == "fail", c5.reason


@pytest.mark.parametrize("cid, what", [("C3", f"a {LEVEL}-client sweep"), ("C5", "held memory")])
def test_no_run_of_productions_image_is_unknown_naming_the_missing_side(pair_runs, cid, what):
    """Production's image never ran on the Box: C3 and C5 are unknown, saying which side has no run,
    and take neither llama-server run that did (both of other images)."""
    config = with_pair(pair_runs.config, **{**PAIR, "baseline_image": NEVER_RUN_IMAGE})
    c = criteria(pair_runs, config)[cid]
    assert c.status == "unknown", c.reason
    decided, _, beside = c.reason.partition("; beside it, the equal-weights match-up: ")
    assert decided == f"llamacpp (production's image {NEVER_RUN_IMAGE}, model gemma) runs with {what}: none"
    assert beside.startswith("unknown") and c.other_status == "unknown", (
        c.reason
    )  # that image never ran either
    assert c.evidence_run_ids == []
