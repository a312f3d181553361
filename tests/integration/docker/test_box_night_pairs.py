"""A Box night with pairs, on the Box simulator over the real ``ssh://`` path: production as deployed and
the candidate run as balanced, interleaved AB/BA pairs of fresh runs, and C3 decides on them; the same
night without pairs gives at most a provisional `switch`.

Production is a real llama-server container with its own flags and model mount (a Vulkan-tagged image
in the loopback registry); the candidate is the same build pushed as a community toolbox image (a
Vulkan tag too, so the two pair on one backend), configured as an engine of its own. The night's single
runs come first -- production as deployed, then the candidate, each once -- then
``[decision] box_pairs`` = 3 pairs
(runner/box_pairs.py): each run stops production, starts a fresh container of its side, sends the
decision's level and is stopped, production restored. C3's threshold is set to a ratio of 3 so that
identical engines pass with confidence once an interval exists: what is under test is what C3
decides on, not which engine is faster. The simulated Box holds 1 GiB while production's engine runs
and 1.25 GiB while the candidate's does (support/box_sim.HeldWhileRunning), so every run reads a held
figure and C5 decides on the pairs' ratio of them (not required here, so the switch does not hang on it).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.bench_docker import BUSYBOX, HOST, managed
from support.box_images import ProductionWatch, PushedImage, push_image
from support.box_sim import BoxSim, HeldWhileRunning, box_config, need, wait_healthy
from support.infra import build_image, free_port, remove_image
from support.llama_image import llama_rootfs

from strix_pipeline.analysis.decision import evaluate
from strix_pipeline.config import StrixConfig
from strix_pipeline.runner import BenchmarkTarget, run_benchmark
from strix_pipeline.runner.box_pairs import compare_on_box, night_sides
from strix_pipeline.runner.engine_comparison import engine_records
from strix_pipeline.units import GIB
from strix_pipeline.warehouse import Warehouse

pytestmark = [
    pytest.mark.docker,
    pytest.mark.registry,
    pytest.mark.llama,
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(1500),
]

RUN_PREFIX = "bxpn1-"  # in no other test's run ids: teardowns on this shared daemon match by substring
NAME = "strix-test-boxpairs-production"
PROD_REPO, PROD_TAG = "ggml-org/llama.cpp", "server-vulkan-boxpairs"
CAND_REPO, CAND_TAG = "kyuz0/amd-strix-halo-toolboxes", "vulkan-radv-boxpairs"
LEVEL = 5
REQUESTS = 10  # at the decision's level: a "p95" of 10 estimates the p86.8, and C3 says so
PAIRS = 3
PROBE = "strix-test/box-sim-probe-bxpn1:1"


@pytest.fixture(scope="module")
def own_probe_image(docker_engine: None) -> Iterator[str]:
    """The simulator's probe image under a tag of this test's own: another test's teardown removes the
    shared tag from the shared daemon, mid-run here."""
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    applets = ("sh", "cat", "sleep", "find", "stat", "ls", "echo")
    build_image(PROBE, {"/bin/busybox": BUSYBOX, **{f"/bin/{a}": BUSYBOX for a in applets}})
    yield PROBE
    remove_image(PROBE)


@pytest.fixture(autouse=True)
def nothing_left_behind(docker_engine: None) -> Iterator[None]:
    yield
    # this test's engine containers only: other tests' probes on the same daemon are theirs
    left = [c for c in managed() if RUN_PREFIX in c]
    for name in left:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)
    assert not left, f"containers left behind: {left}"


def start_production(client, image: str, binary: Path, model_path: Path, port: int):
    """Production with its own flags (none of them the pipeline's profile's) and model mount."""
    in_container = f"/models/{model_path.name}"
    flags = ["-m", in_container, "--alias", "prod-gemma", "-c", "2048", "-np", "2", "-t", "2", "-b", "256",
             "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    return client.containers.run(
        image,
        flags,
        entrypoint=[str(binary)],
        volumes={str(model_path): {"bind": in_container, "mode": "ro"}},
        network_mode="host",
        detach=True,
        name=NAME,
    )


def night_config(base: StrixConfig, pairs: int) -> StrixConfig:
    """The Box benchmarks production's engine and the candidate (a llama-server engine of its own) on
    Gemma; the decision's level measures what C3 needs; C3 alone is required."""
    data = base.model_dump()
    data["engines"]["toolbox"] = {**data["engines"]["llamacpp"], "port": free_port()}
    data["runs"] = {
        HOST: [
            {"engine": "llamacpp", "model": "gemma", "profile": "tiny"},
            {"engine": "toolbox", "model": "gemma", "profile": "tiny"},
        ]
    }
    data["profiles"]["tiny"]["concurrency_sweep"].update(
        {"levels": [LEVEL], "requests_per_level": REQUESTS, "max_duration_s": 300}
    )
    data["decision"].update(
        {
            "candidate_engine": "toolbox",
            "baseline_engine": "llamacpp",
            "required": ["C3"],
            "ttft_margin_pct": -200.0,  # C3 passes when the ratio's interval is wholly below 3
            "box_pairs": pairs,
        }
    )
    return StrixConfig.model_validate(data)


def single_run(config: StrixConfig, target: BenchmarkTarget, run_id: str):
    with ProductionWatch(NAME) as watch:
        result = run_benchmark(config, target, run_id=run_id, log=lambda line: None, force=True)
    assert managed(run_id) == [], f"{run_id} left its engine container"
    assert result.run.status == "ok", (result.run.status, result.run.failure_reason, result.run.log_tail)
    assert watch.states == ["running", "exited", "running"]  # production stopped for it, restored
    return result


def test_a_night_of_pairs_decides_c3_and_without_them_a_switch_is_provisional(
    llama, model_path, box_sshd, box_key, own_probe_image, client, tmp_path, monkeypatch
):
    labels = {"org.opencontainers.image.version": PROD_TAG}
    prod = push_image(llama.registry, PROD_REPO, PROD_TAG, llama_rootfs(llama.binary), labels=labels)
    labels = {"org.opencontainers.image.version": CAND_TAG}
    cand: PushedImage = push_image(
        llama.registry, CAND_REPO, CAND_TAG, llama_rootfs(llama.binary), labels=labels
    )
    client.images.pull(f"{llama.registry.host}/{PROD_REPO}", tag=PROD_TAG)
    port = free_port()
    url = f"http://127.0.0.1:{port}/health"
    production = start_production(
        client, f"{llama.registry.host}/{PROD_REPO}:{PROD_TAG}", llama.binary, model_path, port
    )
    box_memory = ExitStack()
    try:
        wait_healthy(url, 120)
        sim = BoxSim.build(tmp_path / "box")
        sim.install(monkeypatch, own_probe_image)
        # loading production's engine takes 1 GiB of the Box's memory, the candidate's 1.25 GiB
        box_memory.enter_context(HeldWhileRunning(sim, client, {PROD_REPO: GIB, CAND_REPO: GIB + GIB // 4}))
        base = box_config(
            tmp_path,
            llama,
            model_path,
            box_sshd,
            production={"container": NAME, "health_url": url, "health_timeout_s": 120},
            probe_image=own_probe_image,
        )
        config = night_config(base, PAIRS)
        assert night_config(base, 0).decision.box_pairs == 0
        with pytest.raises(ValueError, match="at least 3 pairs"):
            night_config(base, 2)

        # the night's single runs: production's image runs as deployed, then the candidate
        baseline = single_run(
            config, BenchmarkTarget(HOST, "llamacpp", "gemma", "tiny", prod.record()), RUN_PREFIX + "b0"
        )
        assert baseline.run.baseline_source and baseline.run.baseline_source.startswith(
            "production as deployed"
        )
        candidate = BenchmarkTarget(HOST, "toolbox", "gemma", "tiny", cand.record("toolbox"))
        singles = [baseline, single_run(config, candidate, f"{RUN_PREFIX}c1")]
        assert [r.run.held_bytes for r in singles] == [GIB, GIB + GIB // 4]
        with Warehouse.open(config.project.warehouse) as wh:
            wh.load_runs(singles)

        # without pairs: C3 on two single runs, and a switch no better than provisional
        with Warehouse.open(config.project.warehouse) as wh:
            alone = evaluate(wh, config, now=datetime.now(UTC))
        c3 = {c.criterion: c for c in alone.criteria}["C3"]
        assert "two single runs" in c3.reason, c3.reason
        # (10 requests a run give two single runs no interval: C3 is inconclusive on them)
        assert c3.status == "unknown" and (alone.verdict != "switch" or alone.provisional), alone.reason

        # the night's pairs: production as deployed (read now) against the candidate, AB/BA, fresh runs
        sides = night_sides(config, cand.record("toolbox"))
        assert sides.baseline.production is not None and sides.baseline.image.digest == prod.digest
        lines: list[str] = []
        with ProductionWatch(NAME) as watch:
            result = compare_on_box(config, sides, run_prefix=RUN_PREFIX + "p", seed=7, progress=lines.append)
        kept = [r for r in result.runs if r.kept]
        assert len(kept) == 2 * PAIRS and result.dropped_pairs == 0, lines[-20:]
        # interleaved: each pair's two runs back to back, as many AB as BA within one
        assert [r.pair for r in kept] == [p for p in range(1, PAIRS + 1) for _ in range(2)]
        assert all({a.side, b.side} == {"A", "B"} for a, b in zip(kept[::2], kept[1::2], strict=True))
        assert abs(sum(o == "AB" for o in result.orders) - sum(o == "BA" for o in result.orders)) <= 1
        # a fresh server per run, production stopped for each and restored after it
        assert watch.states.count("exited") == 2 * PAIRS and watch.states[-1] == "running", watch.states
        assert sum(" ready at " in line for line in lines) == 2 * PAIRS, lines  # one start per run
        assert all(r.figures.ttft_requests == REQUESTS for r in kept if r.figures)
        p95 = next(m for m in result.metrics if m.metric == "ttft_p95_ms")
        assert p95.pairs == PAIRS and p95.look_alpha == pytest.approx(0.05)  # one look: the whole 5 %
        # each pair run read the memory its engine held after load: C5's paired ratio
        memory = next(m for m in result.metrics if m.metric == "held_bytes")
        assert memory.pairs == PAIRS and memory.ratio == pytest.approx(1.25), [vars(v) for v in memory.values]

        with Warehouse.open(config.project.warehouse) as wh:
            wh.save_comparison(*engine_records(result, "production"))
            paired = evaluate(wh, config, now=datetime.now(UTC))
        c3 = {c.criterion: c for c in paired.criteria}["C3"]
        assert c3.reason.startswith(f"by {PAIRS} interleaved pairs of fresh runs ({result.comparison_id})"), (
            c3.reason
        )
        # the interval's real level, and the runs' percentile named for what 86 requests estimate
        assert "at 95.00 % (Student t across the pairs' log-ratios of the runs' p86.8 of 10 TTFT" in c3.reason
        assert (c3.value, c3.ci_low, c3.ci_high) == (p95.ratio, p95.low, p95.high)
        assert c3.status == "pass" and paired.verdict == "switch", paired.reason
        # provisional only for resting on one candidate run (a repeat has to agree), not on single runs
        assert "rests on single runs" not in paired.reason
        # C5 on the same pairs (not required here): 1.25x held, the whole interval above 1
        c5 = {c.criterion: c for c in paired.criteria}["C5"]
        assert c5.reason.startswith(f"by {PAIRS} interleaved pairs of fresh runs ({result.comparison_id})")
        assert c5.status == "fail" and c5.value == pytest.approx(1.25), c5.reason
    finally:
        box_memory.close()
        production.remove(force=True)
        prod.remove()
        cand.remove()
