"""The decision's match-ups by interleaved runs: baseline against candidate engine.

C3 compares two runs that each ran once, minutes or days apart; a slower hour on the host lands on
one side only. Here the two engines run as the weekly runs configure them on a local host, in
balanced random AB/BA pairs, a fresh server per run (runner/pairs.compare_releases, as the week's
release comparison), each run measuring TTFT at the decision's concurrency; the paired ratio
candidate / baseline with its interval is what C3 then decides on (analysis/decision).

The sides are configured runs, never new configurations: on the production match-up the baseline runs
``decision.baseline_model``, on the equal-weights match-up the baseline runs the candidate's own
quantization of the same model family (the two match-ups of analysis/decision/criteria/). Here a local
host's pairs; a Box's, production as deployed against the candidate, are runner/box_pairs.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from strix_pipeline.analysis.decision.evidence import side_tag
from strix_pipeline.config import StrixConfig
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.planning.targets import BenchmarkTarget, local_tag
from strix_pipeline.runner.local import local_server
from strix_pipeline.runner.pair_model import (
    ComparedRelease,
    PairsResult,
    Progress,
    RunFailed,
    RunFigures,
    RunOne,
)
from strix_pipeline.runner.pair_records import records
from strix_pipeline.runner.pair_runs import MIN_TTFT_REQUESTS, HostWatch, PairSpec, measure_run
from strix_pipeline.runner.pairs import compare_releases
from strix_pipeline.warehouse.comparisons import ComparisonRecord, ComparisonRun

# What C3 reads of a pair of runs: the p95 decides (at a >= 10 % target, runner/pair_model.METRICS), the
# median and the mean are shown beside it
METRICS = ("ttft_p95_ms", "ttft_p50_ms", "ttft_mean_ms")
TARGET = 0.10


@dataclass(frozen=True)
class EngineSides:
    """One of the decision's match-ups as two configured runs on one local host."""

    matchup: str  # "production" | "equal_weights" (analysis/decision/criteria.MATCHUPS)
    baseline: BenchmarkTarget
    candidate: BenchmarkTarget

    @property
    def engines(self) -> str:
        """The comparison's ``engine`` column: both engines, baseline first."""
        return f"{self.baseline.engine} vs {self.candidate.engine}"

    def release(self, target: BenchmarkTarget, config: StrixConfig) -> ComparedRelease:
        """A side as the comparison names it: engine, release, model profile -- the release the local host
        installs, or a Box image's version (else its tag, else its digest: how a run's version is read)."""
        image = target.image
        version = (image.version or image.tag or image.digest) if image else local_tag(target.engine, config)
        return ComparedRelease(side_tag(target.engine, version, target.model))

    def target(self, release: ComparedRelease, config: StrixConfig) -> BenchmarkTarget:
        """The configured run behind a side the comparison names (what ``run_one`` is asked for)."""
        by_tag = {self.release(t, config).tag: t for t in (self.baseline, self.candidate)}
        return by_tag[release.tag]


def engine_sides(config: StrixConfig, matchup: str) -> EngineSides | str:
    """The decision host's configured baseline and candidate runs of ``matchup``, or why there are none."""
    d = config.decision
    host = config.hosts.get(d.host)
    if host is None or host.kind != "local":
        return f"host {d.host} is not a local host: engines are compared by pairs on a local host only"
    runs = config.runs.get(d.host, [])
    cand = next(
        (r for r in runs if r.engine == d.candidate_engine and d.candidate_model in (None, r.model)), None
    )
    if cand is None:
        return (
            f"host {d.host} runs no "
            f"{d.candidate_engine}{f' with model {d.candidate_model}' if d.candidate_model else ''}"
        )
    family = config.models[cand.model].family
    base_runs = [r for r in runs if r.engine == d.baseline_engine and config.models[r.model].family == family]
    if matchup == "production":
        base = next((r for r in base_runs if d.baseline_model in (None, r.model)), None)
        wanted = f"model {d.baseline_model}" if d.baseline_model else f"model family {family}"
    else:
        quant = config.models[cand.model].quantization
        base = next((r for r in base_runs if config.models[r.model].quantization == quant), None)
        wanted = f"the candidate's weights ({family}, {quant})"
    if base is None:
        return f"host {d.host} runs no {d.baseline_engine} with {wanted}"

    def target(r) -> BenchmarkTarget:
        return BenchmarkTarget(d.host, r.engine, r.model, r.profile, None)

    return EngineSides(matchup, target(base), target(cand))


def pair_spec(config: StrixConfig, sides: EngineSides) -> PairSpec:
    """What each run sends after its warm-up: the decision's level of the baseline run's profile --
    its clients, prompt and output sizes -- over MIN_TTFT_REQUESTS requests; no prefill, no decode, no
    evaluation set (the decision judges the engines' answers on the weekly runs, C7)."""
    profile = config.profiles[sides.baseline.profile]
    sweep = profile.concurrency_sweep
    return PairSpec(
        decode_requests=0,
        prefill_requests=0,
        ttft_clients=config.decision.concurrency,
        ttft_requests=MIN_TTFT_REQUESTS,
        ttft_input_tokens=sweep.input_tokens,
        ttft_output_tokens=sweep.output_tokens,
        request_timeout_s=profile.request_timeout_s,
        seed=profile.seed,
        quality=False,
    )


@dataclass
class LocalEngineRuns:
    """``run_one`` for runner/pairs.py: each call starts a fresh server of one side's configured run."""

    config: StrixConfig
    sides: EngineSides
    spec: PairSpec
    log_dir: Path
    progress: Progress = print
    watch: HostWatch = field(default_factory=HostWatch)
    count: int = 0

    def __call__(self, release: ComparedRelease, label: str) -> RunFigures:
        self.count += 1
        target = self.sides.target(release, self.config)
        log_dir = self.log_dir / f"run-{self.count:03d}-{target.engine}-{target.model}"
        try:
            server = local_server(self.config, target, log_dir, self.progress)
        except EngineStartError as e:
            raise RunFailed(e.reason) from e
        return measure_run(server, self.spec, self.config.slo, f"engine-pair-run-{self.count}", self.watch)


def compare_engines(
    config: StrixConfig, sides: EngineSides, run_one: RunOne, *, seed: int, progress: Progress = print
) -> PairsResult:
    """Baseline (A) against candidate (B) by pairs, the ladder as every comparison's, cap
    ``[analysis] compare_max_pairs``."""
    return compare_releases(
        run_one,
        sides.release(sides.baseline, config),
        sides.release(sides.candidate, config),
        metrics=METRICS,
        host=sides.baseline.host,
        engine=sides.engines,
        cap=config.analysis.compare_max_pairs,
        target=TARGET,
        seed=seed,
        progress=progress,
    )


def engine_records(result: PairsResult, matchup: str) -> tuple[list[ComparisonRecord], list[ComparisonRun]]:
    """The warehouse's rows of an engine comparison: every comparison's, its match-up named."""
    rows, runs = records(result)
    return [replace(r, matchup=matchup) for r in rows], runs
