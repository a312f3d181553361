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
