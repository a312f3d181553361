"""A stand-in engine for comparisons by pairs: each call is one "engine start" of a release, giving
figures drawn at a known noise, without a server.

Release ``b_tag`` runs ``factor`` times as fast as ``a_tag`` (0.95: 5 % slower); each run's figure
is the release's true value times a log-normal draw with coefficient of variation ``cv``, from a
seeded stream, so a test knows both the step and the noise the comparison faces. Runs whose number
is in ``fail_runs`` (1-based, in the order they are started) raise RunFailed, as an engine that
died would.

A family of releases: ``factors`` gives each release its own speed against ``a_tag``'s (a gradual drift,
two steps), overriding ``changed``/``factor``; ``host_factor`` scales every run whatever the release (the
host as it is now, slower or faster than when stored runs were taken). Every run answers the evaluation
set; a release in ``corrupt`` answers every item wrongly (an engine that corrupts its output).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from strix_pipeline.quality.items import ITEMS
from strix_pipeline.runner.pair_model import ComparedRelease, RunFailed, RunFigures

TRUE = {"decode_tokens_per_s": 50.0, "prefill_tokens_per_s": 1200.0}
# latencies: a release `factor` times as fast takes 1 / factor as long
TRUE_LATENCY = {"ttft_p50_ms": 400.0, "ttft_mean_ms": 450.0, "ttft_p95_ms": 900.0}
TRUE_ENGINE = {"engine_prefill_tokens_per_s": 1500.0}  # llama-server's own prefill clock


@dataclass
class PairStandIn:
    a_tag: str = "b11401"
    b_tag: str = "b11434"
    factor: float = 1.0
    cv: float = 0.02
    seed: int = 0
    fail_runs: set[int] = field(default_factory=set)
    # the releases that carry the step (a series of releases: every one from the first that made it);
    # None: b_tag alone
    changed: frozenset[str] | None = None
    broken: frozenset[str] = frozenset()  # releases that never start: every run of them fails
    factors: dict[str, float] = field(default_factory=dict)  # per release; overrides changed/factor
    host_factor: float = 1.0  # every run, whatever the release
    # the evaluation set: every run answers it (all items right), a release in ``corrupt`` wrongly
    answers: bool = True
    corrupt: frozenset[str] = frozenset()
    calls: list[str] = field(default_factory=list)  # "<tag> <label>", in order
    rng: random.Random = field(init=False)
    latency_rng: random.Random = field(init=False)  # its own stream: the throughput draws stay as they were
    engine_rng: random.Random = field(init=False)  # and the engine's prefill clock its own

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.latency_rng = random.Random(f"latency/{self.seed}")
        self.engine_rng = random.Random(f"engine/{self.seed}")

    def __call__(self, release: ComparedRelease, label: str) -> RunFigures:
        self.calls.append(f"{release.tag} {label}")
        if len(self.calls) in self.fail_runs or release.tag in self.broken:
            raise RunFailed(
                f"llama-server exited with code -9 during decode (stand-in run {len(self.calls)})"
            )
        stepped = release.tag in self.changed if self.changed is not None else release.tag == self.b_tag
        scale = self.factors.get(release.tag, self.factor if stepped else 1.0) * self.host_factor
        sigma = math.sqrt(math.log1p(self.cv**2))  # log-normal with this coefficient of variation
        values = {m: v * scale * math.exp(self.rng.gauss(-(sigma**2) / 2, sigma)) for m, v in TRUE.items()}
        values |= {
            m: v / scale * math.exp(self.latency_rng.gauss(-(sigma**2) / 2, sigma))
            for m, v in TRUE_LATENCY.items()
        }
        values |= {
            m: v * scale * math.exp(self.engine_rng.gauss(-(sigma**2) / 2, sigma))
            for m, v in TRUE_ENGINE.items()
        }
        quality = {i.item_id: release.tag not in self.corrupt for i in ITEMS} if self.answers else None
        return RunFigures(values, warmup_ms=900.0, engine_build=f"{release.tag}-standin", quality=quality)


def materialized_metadata(asset, config_path, runner) -> dict:
    """Materialise one comparison asset with ``runner`` as its pair runner; its metadata's values."""
    import dagster as dg

    from assets.resources import StrixConfigResource, WarehouseResource

    result = dg.materialize(
        [asset],
        resources={
            "strix": StrixConfigResource(config_path=str(config_path)),
            "warehouse": WarehouseResource(config_path=str(config_path)),
            "pair_runner": runner,
        },
    )
    (m,) = result.asset_materializations_for_node(asset.key.path[-1])
    return {k: v.value for k, v in m.metadata.items()}
