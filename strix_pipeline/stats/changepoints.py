"""Change points of one ordered list of numbers: E-divisive means with a Student t-test (Apache Otava's
algorithm).

Otava's ``compute_change_points`` is used when it imports (``pip install --no-deps apache-otava``: its
analysis module needs only numpy and scipy). Otherwise a small port of the same split/merge algorithm
runs; ``tests/unit/analysis/test_changepoints_otava.py`` checks the two agree. Pure numbers in, change
points out: what a series is and which steps count is the analysis's (analysis/changepoints.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as t_dist
from scipy.stats import ttest_ind_from_stats

try:  # the heavy extras of apache-otava (BigQuery, Postgres, Slack) are not needed for this module
    from otava.analysis import compute_change_points as _otava_compute

    OTAVA_AVAILABLE = True
except ImportError:  # pragma: no cover - exercised when otava is absent
    _otava_compute = None
    OTAVA_AVAILABLE = False

MIN_POINTS = 3  # a change needs something on both sides and one more point to be tested at all


@dataclass
class ChangePoint:
    """A change found in a plain list of values: index is the first point after the step."""

    index: int
    pvalue: float
    mean_before: float
    mean_after: float

    @property
    def magnitude_pct(self) -> float:
        """Signed relative step, before -> after, in percent."""
        if self.mean_before == 0:
            return 0.0
        return (self.mean_after / self.mean_before - 1.0) * 100.0


def find_change_points(
    values: Sequence[float],
    *,
    max_pvalue: float = 0.001,
    min_magnitude_pct: float = 2.0,
    use_otava: bool | None = None,
) -> list[ChangePoint]:
    """Change points of one ordered series (E-divisive + t-test), significant and above the floor."""
    x = [float(v) for v in values]
    if len(x) < MIN_POINTS:
        return []
    use = OTAVA_AVAILABLE if use_otava is None else use_otava
    if use:
        if not OTAVA_AVAILABLE:
            raise RuntimeError("apache-otava is not importable: pip install --no-deps apache-otava")
        cps, _ = _otava_compute(
            x, window_len=50, max_pvalue=max_pvalue, min_magnitude=min_magnitude_pct / 100
        )
        return [
            ChangePoint(int(c.index), float(c.stats.pvalue), float(c.stats.mean_1), float(c.stats.mean_2))
            for c in cps
        ]
    return _own_change_points(x, max_pvalue, min_magnitude_pct / 100)


# A port of Otava's split/merge ("Hunter", Fleming et al. 2023) for when otava is not installed. It
# treats the whole series as one window; weekly series are far shorter than Otava's 50-point window.


def ttest(left: np.ndarray, right: np.ndarray) -> tuple[float, float, float]:
    mean_l, mean_r = float(np.mean(left)), float(np.mean(right))
    std_l = float(np.std(left)) if len(left) >= 2 else 0.0
    std_r = float(np.std(right)) if len(right) >= 2 else 0.0
    if len(left) + len(right) <= 2:
        return 1.0, mean_l, mean_r
    _, p = ttest_ind_from_stats(mean_l, std_l, len(left), mean_r, std_r, len(right))
    p = float(p)
    return (1.0 if math.isnan(p) else p), mean_l, mean_r


def _best_split(z: np.ndarray) -> tuple[int, float]:
    """E-divisive: the tau (and kappa) maximising Q-hat over z[0:tau] vs z[tau:kappa]."""
    n = len(z)
    d = np.abs(z[:, None] - z[None, :])
    s = np.zeros((n + 1, n + 1))
    s[1:, 1:] = d.cumsum(0).cumsum(1)

    def block(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
        return s[a1, b1] - s[a0, b1] - s[a1, b0] + s[a0, b0]

    tau, kappa = np.meshgrid(np.arange(1, n), np.arange(2, n + 1), indexing="ij")
    valid = kappa > tau
    tau_v, kappa_v = tau[valid], kappa[valid]
    zero = np.zeros_like(tau_v)
    cross = block(zero, tau_v, tau_v, kappa_v)
    within_x = block(zero, tau_v, zero, tau_v) / 2
    within_y = block(tau_v, kappa_v, tau_v, kappa_v) / 2
    nx, my, tot = tau_v.astype(float), (kappa_v - tau_v).astype(float), kappa_v.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = (
            2 / tot * cross
            - np.where(nx > 1, 2 * my / tot / (nx - 1), 0.0) * within_x
            - np.where(my > 1, 2 * nx / tot / (my - 1), 0.0) * within_y
        )
    i = int(np.argmax(q))
    return int(tau_v[i]), float(q[i])


def _intervals(idx: list[int], n: int) -> list[tuple[int, int]]:
    bounds = [0, *idx, n]
    return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if a != b]


def _own_change_points(x: list[float], max_pvalue: float, min_magnitude: float) -> list[ChangePoint]:
    arr = np.asarray(x, dtype=float)
    n = len(arr)
    first_pass = (
        max_pvalue * 10 if max_pvalue < 0.05 else (max_pvalue * 2 if max_pvalue < 0.5 else max_pvalue)
    )
    # split: keep dividing the interval holding the strongest candidate while the t-test says so
    idx: list[int] = []
    for _ in range(n):
        best: tuple[float, int, int, int] | None = None
        for a, b in _intervals(idx, n):
            if b - a > 1:
                tau, q = _best_split(arr[a:b])
                if best is None or q > best[0]:
                    best = (q, a + tau, a, b)
        if best is None:
            break
        _, cut, a, b = best
        p, _, _ = ttest(arr[a:cut], arr[cut:b])
        if p > first_pass:
            break
        idx = sorted([*idx, cut])

    def stats(points: list[int]) -> list[ChangePoint]:
        bounds = [0, *points, n]
        out = []
        for k, cut in enumerate(points):
            p, m1, m2 = ttest(arr[bounds[k] : cut], arr[cut : bounds[k + 2]])
            out.append(ChangePoint(cut, p, m1, m2))
        return out

    def magnitude(c: ChangePoint) -> float:
        fwd = c.mean_after / c.mean_before - 1 if c.mean_before else 0.0
        bwd = c.mean_before / c.mean_after - 1 if c.mean_after else 0.0
        return max(abs(fwd), abs(bwd))

    # merge: drop the weakest point (worst p-value, else smallest step) until all are strong
    cps = stats(idx)
    while cps:
        weakest = max(cps, key=lambda c: c.pvalue)
        if weakest.pvalue < max_pvalue:
            weakest = min(cps, key=magnitude)
            if magnitude(weakest) > min_magnitude:
                break
        cps = stats([c.index for c in cps if c is not weakest])
    return cps


# Dependence between successive points. Weekly figures of one host drift together (a kernel, the
# room's temperature, a neighbour on the hypervisor): an AR(1) with phi 0.6 made E-divisive's t-test,
# which takes the points as independent, confirm a false step in 10-13 % of 13-week quarters, against
# 1 % for independent points. The test below takes the dependence into account.

MAX_PHI = 0.95


def lag1_dependence(values: Sequence[float], cuts: Sequence[int] = ()) -> float:
    """The lag-1 autocorrelation of ``values`` around the means of the segments ``cuts`` delimit, with
    Kendall's small-sample bias correction ((1 + 3 phi) / n: short series understate it), clipped to
    [0, MAX_PHI]: negative dependence is not counted in a test's favour."""
    x = np.asarray(values, dtype=float)
    bounds = [0, *cuts, len(x)]
    parts = [x[a:b] - x[a:b].mean() for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    r = np.concatenate(parts) if parts else x
    n = len(r)
    denominator = float(np.dot(r, r))
    if n < 4 or denominator == 0:
        return 0.0
    phi = float(np.dot(r[1:], r[:-1])) / denominator
    phi += (1 + 3 * phi) / n
    return min(max(phi, 0.0), MAX_PHI)


def dependent_ttest(before: Sequence[float], after: Sequence[float], phi: float) -> float:
    """The two-sided p-value of a step between two runs of AR(1)-dependent points: the pooled variance
    inflated by (1 + phi) / (1 - phi) (the variance of a mean of AR(1) points), on n / sqrt(that) - 2
    degrees of freedom. ``phi`` = 0 is Student's pooled t-test.

    The degrees of freedom sit between n - 2 and those of the effective sample size: phi is estimated
    from a dozen points, and with the full reduction a chance phi of 0.4 on independent points hid a
    10-sigma step. Calibrated by simulation (analysis/changepoints.py says the figures)."""
    a, b = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if len(a) < 1 or len(b) < 1 or len(a) + len(b) < 3:
        return 1.0
    resid = np.concatenate([a - a.mean(), b - b.mean()])
    var = float(np.dot(resid, resid)) / max(len(resid) - 2, 1)
    inflation = (1 + phi) / (1 - phi)
    se = math.sqrt(var * inflation * (1 / len(a) + 1 / len(b)))
    step = abs(float(b.mean() - a.mean()))
    if se == 0:
        return 0.0 if step > 0 else 1.0
    dof = max((len(a) + len(b)) / math.sqrt(inflation) - 2, 1.0)
    return float(2 * t_dist.sf(step / se, dof))
