"""Coverage of the TTFT p95 confidence intervals, by simulation: how often each method's nominal 95 %
interval holds the true value, at the sample sizes benchmarks use.

    .venv/bin/python benchmarks/ci_coverage.py [--trials 400] [--n 10,40,72,86,100,200,400] [--seed 7]

Methods (strix_pipeline.loadgen.metrics):
- ``bootstrap``: the percentile bootstrap of p95 (1000 resamples) the aggregates used before;
- ``order-stat``: the distribution-free, binomial-exact order-statistic interval of p95
  (``quantile_ci``; what the aggregates store now);
- ``ratio order-stat``: the interval of candidate p95 / baseline p95 that C3 uses
  (``quantile_ratio_ci``: each run's order-statistic interval at sqrt(95 %), divided);
- ``ratio bootstrap``: resampling both runs' raw TTFTs and taking the percentile interval of the ratio.

Latencies: lognormal (sigma 0.5, the issue's case, and 0.2, closer to a steady closed loop) and a
two-mode mixture (90 % fast, 10 % three times slower: requests that queued behind a batch; the p95
sits in the slow mode). The candidate of a ratio is the baseline's distribution scaled by 0.8 (true
ratio 0.8). A trial whose interval has no finite bound (too few samples) is counted as "n/a", never
as a cover; ``n/a`` is the share of such trials. ``width`` is the median of high / low (how wide the
interval is, as a factor). Bounded in time: about a minute with the defaults on one core.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import lognorm, norm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from strix_pipeline.stats.quantiles import quantile_ci, quantile_ratio_ci

Q = 95
LEVEL = 0.95
RESAMPLES = 1000
RATIO = 0.8


@dataclass(frozen=True)
class Dist:
    name: str
    sample: Callable[[np.random.Generator, int], np.ndarray]
    p95: float


def _mixture_p95(slow_share: float = 0.1, slow: float = 3.0, sigma: float = 0.2) -> float:
    # P(X <= x) = (1 - s) F(x) + s F(x / slow), F lognormal(0, sigma); solved by bisection
    def cdf(x: float) -> float:
        return (1 - slow_share) * norm.cdf(math.log(x) / sigma) + slow_share * norm.cdf(
            math.log(x / slow) / sigma
        )

    lo, hi = 0.01, 100.0
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if cdf(mid) < Q / 100 else (lo, mid)
    return math.sqrt(lo * hi)


def _mixture(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.lognormal(0.0, 0.2, n)
    return np.where(rng.random(n) < 0.1, x * 3.0, x)


DISTS = (
    Dist(
        "lognormal s=0.5",
        lambda rng, n: rng.lognormal(0.0, 0.5, n),
        float(lognorm.ppf(Q / 100, 0.5)),
    ),
    Dist(
        "lognormal s=0.2",
        lambda rng, n: rng.lognormal(0.0, 0.2, n),
        float(lognorm.ppf(Q / 100, 0.2)),
    ),
    Dist("mixture 90/10 x3", _mixture, _mixture_p95()),
)


def _bootstrap(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.percentile(rng.choice(a, size=(RESAMPLES, a.size), replace=True), Q, axis=1)


def interval(method: str, rng: np.random.Generator, dist: Dist, n: int) -> tuple[float | None, float | None]:
    """One trial's interval; the true value is dist.p95 (per run) or RATIO (ratios)."""
    if method == "bootstrap":
        stat = _bootstrap(dist.sample(rng, n), rng)
        lo, hi = np.percentile(stat, [(1 - LEVEL) / 2 * 100, (1 + LEVEL) / 2 * 100])
        return float(lo), float(hi)
    if method == "order-stat":
        return quantile_ci(dist.sample(rng, n), Q, LEVEL)
    cand, base = dist.sample(rng, n) * RATIO, dist.sample(rng, n)
    if method == "ratio order-stat":
        return quantile_ratio_ci(cand, base, Q, LEVEL)
    if method == "ratio bootstrap":
        r = _bootstrap(cand, rng) / _bootstrap(base, rng)
        lo, hi = np.percentile(r, [(1 - LEVEL) / 2 * 100, (1 + LEVEL) / 2 * 100])
        return float(lo), float(hi)
    raise ValueError(method)


METHODS = ("bootstrap", "order-stat", "ratio order-stat", "ratio bootstrap")


@dataclass
class Cell:
    method: str
    dist: str
    n: int
    trials: int
    covered: int
    undefined: int
    width: float | None

    @property
    def coverage(self) -> float:
        return self.covered / self.trials


def coverage(method: str, dist: Dist, n: int, trials: int, seed: int) -> Cell:
    rng = np.random.default_rng([seed, n, METHODS.index(method), DISTS.index(dist)])
    truth = RATIO if method.startswith("ratio") else dist.p95
    covered = undefined = 0
    widths = []
    for _ in range(trials):
        lo, hi = interval(method, rng, dist, n)
        if lo is None or hi is None:
            undefined += 1
            continue
        covered += lo <= truth <= hi
        widths.append(hi / lo)
    return Cell(
        method, dist.name, n, trials, covered, undefined, float(np.median(widths)) if widths else None
    )


def table(
    ns: list[int],
    trials: int,
    seed: int,
    methods: tuple[str, ...] = METHODS,
    dists: tuple[Dist, ...] = DISTS,
) -> list[Cell]:
    return [coverage(m, d, n, trials, seed) for d in dists for m in methods for n in ns]


def render(cells: list[Cell]) -> str:
    lines = [
        f"{'distribution':<18} {'method':<17} {'n':>5} {'coverage':>9} {'n/a':>6} {'width':>7}",
        "-" * 68,
    ]
    for c in cells:
        width = f"{c.width:.2f}x" if c.width is not None else "n/a"
        lines.append(
            f"{c.dist:<18} {c.method:<17} {c.n:>5} {c.coverage:>8.1%} {c.undefined / c.trials:>6.0%} "
            f"{width:>7}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=400, help="simulated runs per cell (SE ~1.1 %% at 95 %%)")
    ap.add_argument("--n", default="10,40,72,86,100,200,400", help="sample sizes, comma-separated")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--methods", default=",".join(METHODS))
    args = ap.parse_args(argv)
    ns = [int(x) for x in args.n.split(",")]
    methods = tuple(m.strip() for m in args.methods.split(","))
    t0 = time.perf_counter()
    cells = table(ns, args.trials, args.seed, methods)
    print(f"nominal {LEVEL:.0%} intervals of TTFT p{Q}; {args.trials} trials per cell; true ratio {RATIO}")
    print(render(cells))
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
