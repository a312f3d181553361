"""The decision's match-up by interleaved runs on a Box: production as deployed against the candidate.

On a local host the two engines start as local processes (runner/engine_comparison.py). On a Box each run
of a pair is a whole Box run (runner/run.run_benchmark): a fresh container of that side's image,
production stopped before it and restored after it, the night's window kept (a run that would not end
before the restore is not started). The baseline side is production as deployed -- its image, flags,
environment and model file, read read-only from the Box (planning/production_baseline.py) -- the
candidate side its configured run of the candidate's image. Each run sends the smoke warm-up and the
decision's level of the baseline run's profile only, as many requests as the weekly run sends there (the
count C3's interval needs), and its figures are taken over every measured request, a failed or timed-out
one counted as the request timeout (stats.quantiles.censored). With the owner's SLOs, the run sends their
load too -- a number of clients, an open-loop rate, or the profile's trace replay -- and its goodput
there is a figure (C6 decides on its paired ratio). Every Box run reads the memory its engine holds after
load: C5 decides on that figure's paired ratio.

The pairs are planned, not chased: ``[decision] box_pairs`` balanced AB/BA pairs, one look at the
whole 5 % (the planner counts their runs in the night, planning/week.py), so the interval's level
is 95 % as labelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from strix_pipeline.analysis.decision.criteria.slo import goodput_sums
from strix_pipeline.config import DecisionSLO, SloLoad, StrixConfig
from strix_pipeline.hosts.box.production_read import read_production
from strix_pipeline.hosts.docker.host import make_client
from strix_pipeline.hosts.docker.ssh import client_transport
from strix_pipeline.planning.production_baseline import ProductionReadError, derive_baseline
from strix_pipeline.planning.production_target import production_target
from strix_pipeline.records import ImageRecord, RequestRecord, RunResult
from strix_pipeline.runner.engine_comparison import METRICS, TARGET, EngineSides
from strix_pipeline.runner.pair_model import ComparedRelease, PairsResult, Progress, RunFailed, RunFigures
from strix_pipeline.runner.pairs import compare_releases
from strix_pipeline.runner.run import run_benchmark
from strix_pipeline.runner.target import BenchmarkTarget
from strix_pipeline.stats.quantiles import censored

SCENARIOS = ["smoke", "concurrency_sweep"]  # the warm-up, then the decision's level


def paired_slo_load(config: StrixConfig) -> SloLoad | None:
    """The owner's SLO load when the SLOs are set (each pair run then sends it too: a number of
    clients, an open-loop rate, or the profile's trace replay); None without SLOs."""
    d = config.decision
    return d.slo_load if d.slo is not None else None


def pair_scenarios(config: StrixConfig) -> list[str]:
    """What a pair run sends: the warm-up and the sweep, and the trace when the SLOs' load is its."""
    load = paired_slo_load(config)
    return [*SCENARIOS, "trace"] if load is not None and load.kind == "trace" else SCENARIOS


def pair_config(config: StrixConfig, sides: EngineSides) -> StrixConfig:
    """``config`` with each side's scenario profile cut to what the pairs judge: the decision's level of
    its sweep, and the SLOs' level (clients, or an open-loop rate), each at the weekly run's request
    count: a pair run measures what C3 and C6 read, nothing else."""
    load = paired_slo_load(config)
    levels = sorted({config.decision.concurrency, *([load.clients] if load and load.clients else [])})
    rates = [load.rate] if load and load.rate else []
    profiles = dict(config.profiles)
    for target in (sides.baseline, sides.candidate):
        profile = config.profiles[target.profile]
        sweep = profile.concurrency_sweep
        profiles[target.profile] = profile.model_copy(
            update={"concurrency_sweep": sweep.model_copy(update={"levels": levels, "rates": rates})}
        )
    return config.model_copy(update={"profiles": profiles})


def goodput(result: RunResult, rows: list[RequestRecord], slo: DecisionSLO, timeout_s: float) -> float:
    """Requests per second within every SLO over one level's ``rows`` of ``result``, as C6 computes it
    (criteria/slo.goodput_sums): closed loop (a level of N clients), N x the requests meeting them / the
    client time all of them held; open loop (a rate, a trace's recorded arrivals), the requests meeting
    them / the level's wall time, its aggregate's first send to last completion."""
    q = rows[0]
    level = (q.scenario, q.level, q.level_kind)
    agg = next((a for a in result.aggregates if (a.scenario, a.level, a.level_kind) == level), None)
    good, held = goodput_sums(
        rows,
        slo,
        timeout_s,
        open_loop=q.level_kind == "rate",
        clients=q.level,
        wall_s=agg.duration_s if agg else None,
    )
    return sum(good) / sum(held) if sum(held) > 0 else 0.0


def box_metrics(config: StrixConfig) -> tuple[str, ...]:
    """What a Box's pairs judge: C3's TTFT figures, C5's held memory, and C6's goodput when the owner
    set SLOs."""
    return (*METRICS, "held_bytes", *(("goodput_rps",) if paired_slo_load(config) else ()))


def _measured(result: RunResult, load: SloLoad) -> list[RequestRecord]:
    """The run's measured requests at ``load`` (the warm-up left out); raises :class:`RunFailed` when it
    has none, or none that succeeded."""
    run = result.run
    rows = [q for q in result.requests if load.matches(q.scenario, q.level, q.level_kind) and not q.warmup]
    if not rows:
        raise RunFailed(f"run {run.run_id} measured no request at {load.text()}")
    if not any(q.ok for q in rows):
        raise RunFailed(f"every request of run {run.run_id} at {load.text()} failed")
    return rows


def box_figures(
    result: RunResult,
    level: int,
    timeout_s: float,
    slo: DecisionSLO | None = None,
    load: SloLoad | None = None,
) -> RunFigures:
    """A Box run's pair figures at the decision's ``level``: TTFT p95, p50 and mean over every measured
    request there, a failed or timed-out one counted as the request timeout ``timeout_s``; the memory
    its engine held after load (when the run read it); with ``slo``, its goodput at ``load`` (default
    ``level`` clients). Raises :class:`RunFailed` saying why there are none."""
    run = result.run
    if run.status not in ("ok", "partial"):
        raise RunFailed(f"run {run.run_id} {run.status}: {run.failure_reason or 'no reason recorded'}")
    rows = _measured(result, SloLoad("concurrency", clients=level))
    warm = [q for q in result.requests if q.scenario == "smoke"]
    ttft = censored([q.ttft_ms if q.ok else None for q in rows], 1000 * timeout_s)
    values = {
        "ttft_p95_ms": float(np.percentile(ttft, 95)),
        "ttft_p50_ms": float(np.percentile(ttft, 50)),
        "ttft_mean_ms": float(np.mean(ttft)),
    }
    # a ratio needs a positive figure: an engine that held nothing measurable (or gave memory back)
    # leaves its pair out of C5's ratio, not out of C3's
    if run.held_bytes is not None and run.held_bytes > 0:
        values["held_bytes"] = float(run.held_bytes)
    if slo is not None:
        at = _measured(result, load or SloLoad("concurrency", clients=level))
        values["goodput_rps"] = goodput(result, at, slo, timeout_s)
    return RunFigures(
        values,
        warmup_ms=warm[0].e2e_ms if warm else None,
        engine_build=run.engine_build,
        measured_requests=len(rows),
        failed_requests=sum(not q.ok for q in rows),
        ttft_requests=len(rows),
    )


@dataclass
class BoxEngineRuns:
    """``run_one`` for runner/pairs.py on a Box: each call is one fresh Box run of a side."""

    config: StrixConfig  # pair_config's: each side's profile cut to the decision's level
    sides: EngineSides
    run_prefix: str
    progress: Progress = print
    count: int = 0

    def __call__(self, release: ComparedRelease, label: str) -> RunFigures:
        self.count += 1
        target = self.sides.target(release, self.config)
        result = run_benchmark(
            self.config,
            target,
            run_id=f"{self.run_prefix}-{self.count:03d}",
            log=self.progress,
            scenarios=pair_scenarios(self.config),
            force=True,  # a pair's run repeats a run the week already has: that is the point
        )
        timeout_s = self.config.profiles[target.profile].request_timeout_s
        d = self.config.decision
        load = paired_slo_load(self.config)
        return box_figures(result, d.concurrency, timeout_s, d.slo if load else None, load)


def box_sides(
    baseline: BenchmarkTarget, candidate: BenchmarkTarget, matchup: str = "production"
) -> EngineSides:
    """The Box's match-up: ``baseline`` (production as deployed: its ``production`` set) and the candidate's
    run, both on the decision's host."""
    if baseline.host != candidate.host:
        raise ValueError(f"a pair runs on one host, not {baseline.host} and {candidate.host}")
    if baseline.production is None:
        raise ValueError("the Box's baseline side is production as deployed: its target carries it")
    return EngineSides(matchup, baseline, candidate)


def compare_on_box(
    config: StrixConfig, sides: EngineSides, *, run_prefix: str, seed: int, progress: Progress = print
) -> PairsResult:
    """``[decision] box_pairs`` balanced AB/BA pairs of fresh Box runs, judged in one look at 5 %."""
    pairs = config.decision.box_pairs
    if pairs < 3:
        raise ValueError(f"[decision] box_pairs is {pairs}: a Box night runs at least 3 pairs, or none")
    cut = pair_config(config, sides)
    return compare_releases(
        BoxEngineRuns(cut, sides, run_prefix, progress),
        sides.release(sides.baseline, cut),
        sides.release(sides.candidate, cut),
        metrics=box_metrics(config),
        host=sides.baseline.host,
        engine=sides.engines,
        pairs=pairs,
        cap=pairs,
        target=TARGET,
        seed=seed,
        max_dropped=max(1, pairs // 2),
        progress=progress,
    )


def night_sides(
    config: StrixConfig, candidate: ImageRecord, known: Sequence[ImageRecord] = ()
) -> EngineSides:
    """The Box's match-up tonight: production as deployed, read now over the host's own access
    (read-only), against ``candidate`` in the candidate engine's configured run of
    ``decision.candidate_model`` (else its first run there). Production's image is named as the registry
    knows it when ``known`` has its digest (so the pairs name the release the week's baseline run names);
    a production that runs a binary pairs as its matching engine build among ``known``. Raises
    ProductionReadError when there is no production to read, no such build or no such run."""
    d = config.decision
    box = config.docker_config(d.host)
    if box.production is None or not (box.production.container or box.production.unit):
        raise ProductionReadError(f"host {d.host} names no production to pair the candidate with")
    client = make_client(box, timeout_s=30)
    try:
        transport = client_transport(client)
        read = read_production(box.production, client, transport.target if transport else None)
    finally:
        client.close()
    baseline = production_target(config, d.host, derive_baseline(read), images=known)
    same = next((i for i in known if baseline.image and i.digest == baseline.image.digest), None)
    if same is not None:
        baseline = replace(baseline, image=same)
    runs = [r for r in config.runs.get(d.host, []) if r.engine == d.candidate_engine]
    run = next((r for r in runs if d.candidate_model in (None, r.model)), None)
    if run is None:
        raise ProductionReadError(f"host {d.host} runs no {d.candidate_engine} to pair with production")
    return box_sides(baseline, BenchmarkTarget(d.host, d.candidate_engine, run.model, run.profile, candidate))
