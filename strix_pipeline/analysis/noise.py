"""What a series' run-to-run noise lets a comparison by pairs see.

Pure: per metric, the values of repeated passes of one and the same release in, the coefficient of
variation and the smallest step detectable at alpha 0.05 with 80 % power over 3, 5 and 10 pairs out
(stats/paired.detectable_step). benchmarks/precision.py prints them for an A/A experiment; the
weekly analysis computes the same figures per series from the canary's latest runs of its release
(canary.canary_noise, warehouse table ``noise_figures``) and `strix changes` shows them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from strix_pipeline.stats import paired

PAIRS = (3, 5, 10)
# The precision goals on a 2-core VM: the per-run CV each figure should reach
GOALS = {"decode_tokens_per_s": 0.02, "prefill_tokens_per_s": 0.03, "ttft_p50_ms": 0.05}


@dataclass(frozen=True)
class NoiseFigure:
    metric: str
    n: int  # passes
    mean: float
    cv: float
    steps: tuple[float, ...]  # detectable step over PAIRS pairs (0.05: 5 %)

    def as_dict(self) -> dict:
        return {
            "metric": self.metric,
            "n": self.n,
            "mean": self.mean,
            "cv": self.cv,
            "steps": dict(zip(map(str, PAIRS), self.steps, strict=True)),
        }


def noise_figure(metric: str, values: Sequence[float]) -> NoiseFigure | None:
    """The figure of one metric's passes; None below two passes (no spread to speak of)."""
    if len(values) < 2:
        return None
    c = paired.cv(values)
    return NoiseFigure(
        metric, len(values), sum(values) / len(values), c, tuple(paired.detectable_step(c, n) for n in PAIRS)
    )


def noise_figures(samples: Mapping[str, Sequence[float]]) -> list[NoiseFigure]:
    return [f for m, v in samples.items() if (f := noise_figure(m, v)) is not None]
