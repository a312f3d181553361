"""Comparisons by pairs: two releases A and B run back to back, in a balanced random order, and
judged on the paired ratios B/A (Chromium Pinpoint's method).

Pure: lists of numbers in, typed results out; the runner, the bisection, the CLI and the warehouse
call it (docs/precision.md says what it decides and why).

- :func:`pair_order` plans which release of each pair runs first, in shuffled AB/BA blocks;
  :func:`rebalance` re-plans the rest when a failed run drops its pair.
- :func:`compare` judges one set of pairs: the ratio of B to A with its interval and a three-way
  verdict, *different*, *same* (equivalence within the target, written "within ±target": two
  one-sided tests at the look's alpha) or *unknown* (run more).
- :func:`sequential` walks the ladder of looks (3 -> 5 -> 10 pairs, up to a cap), spending the
  significance level across them, and ends *inconclusive* when the cap is reached while unknown.
- :func:`detectable_step` and :func:`cv` say what a given noise lets the pairs see.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats
from scipy.optimize import brentq

Order = tuple[str, str]
AB: Order = ("A", "B")
BA: Order = ("B", "A")

Verdict = Literal["different", "same", "unknown"]
LadderVerdict = Literal["different", "same", "unknown", "inconclusive"]
Direction = Literal["improvement", "regression"]

LADDER = (3, 5, 10)  # pair counts at which sequential() looks; the cap defaults to the last
ALPHA = 0.05
# The exponent of the alpha-spending function alpha * (n / cap) ** rho (Kim & DeMets' power family):
# 1 spends evenly per pair (Pocock-like), 3 keeps nearly all alpha for the last look (O'Brien-Fleming
# -like). 2 keeps the last look's power for a 5 % step at 3 % CV above 80 % (1 falls to ~81 %, an
# even split per look to ~76 %) while a 20 % step still stops at 3 or 5 pairs.
SPENDING_RHO = 2.0


# --------------------------------------------------------------------------------------------------
# The order of the runs


def _fill(kept: Sequence[Order], n_pairs: int, rng: random.Random) -> list[Order]:
    """``n_pairs`` orders that bring ``kept`` back to balance first, then stay balanced.

    Blocks of two (AB, BA in random order) rather than one shuffle of the whole plan: the ladder
    looks at prefixes, and a plain shuffle can open with three ABs, where an order effect (the
    second run of a pair on a warmer host) would pass for the difference. Within a block the order
    ABBA also cancels a drift that is linear in time.
    """
    lead = sum(o == AB for o in kept) - sum(o == BA for o in kept)
    fix = [BA if lead > 0 else AB] * min(abs(lead), n_pairs)
    out = list(fix)
    for _ in range((n_pairs - len(fix)) // 2):
        block = [AB, BA]
        rng.shuffle(block)
        out += block
    if len(out) < n_pairs:
        out.append(rng.choice((AB, BA)))
    return out


def pair_order(n_pairs: int, seed: int) -> list[Order]:
    """The order of ``n_pairs`` pairs: as many AB as BA (one extra, chosen by ``seed``, when
    ``n_pairs`` is odd), every prefix within one of balance, the same for the same seed."""
    if n_pairs < 0:
        raise ValueError(f"n_pairs must be >= 0, not {n_pairs}")
    return _fill([], n_pairs, random.Random(seed))


def rebalance(order: Sequence[Order], done: int, failed: Collection[int], *, seed: int = 0) -> list[Order]:
    """The orders of the pairs still to run once pairs ``failed`` (indices into ``order``, all below
    ``done``) were dropped: enough to end with ``len(order)`` kept pairs, the first of them evening
    out what the drop left unequal, so AB and BA stay as equal as the remaining pairs allow. With
    nothing failed the plan stands as it was."""
    if not 0 <= done <= len(order):
        raise ValueError(f"done={done} outside the plan of {len(order)} pairs")
    bad = sorted(set(failed))
    if any(not 0 <= i < done for i in bad):
        raise ValueError(f"failed pairs {bad} must be among the {done} run")
    if not bad:
        return list(order[done:])
    kept = [o for i, o in enumerate(order[:done]) if i not in set(bad)]
    # a fresh stream per failure pattern: the same failures re-plan the same way
    rng = random.Random(f"{seed}/{done}/{','.join(map(str, bad))}")
    return _fill(kept, len(order) - len(kept), rng)


# --------------------------------------------------------------------------------------------------
# One comparison


@dataclass(frozen=True)
class Comparison:
    """B against A over ``n_pairs`` pairs: ``ratio`` = B/A, within ``[low, high]`` at 1 - ``alpha``
    (two-sided: what *different* is judged on); ``[eq_low, eq_high]`` is the 1 - 2 ``alpha`` interval
    the equivalence test (TOST at ``alpha``) judges *same* on."""

    n_pairs: int
    ratio: float
    low: float
    high: float
    verdict: Verdict
    target: float  # the relative step chased (0.05: 5 %)
    alpha: float
    p_value: float  # of "the ratio is 1", two-sided; below alpha exactly when the interval excludes 1
    higher_is_better: bool
    log_sd: float  # the spread of the pairs' log ratios: the noise this comparison saw
    eq_low: float = 0.0
    eq_high: float = math.inf

    @property
    def change_pct(self) -> float:
        return (self.ratio - 1.0) * 100.0

    @property
    def direction(self) -> Direction | None:
        """What B is to A when they differ; None unless the verdict is *different*."""
        if self.verdict != "different":
            return None
        return "improvement" if (self.ratio > 1) == self.higher_is_better else "regression"

    def describe(self) -> str:
        """The interval first, then what it lets be said."""
        return (
            f"B/A {self.ratio:.4f} [{self.low:.4f}, {self.high:.4f}] at {1 - self.alpha:.1%} "
            f"over {self.n_pairs} pairs: {verdict_words(self.verdict, self.direction, self.target)}"
        )


def verdict_words(verdict: str, direction: str | None, target: float) -> str:
    """A verdict as the user reads it: *same* says what it knows, "within ±5 %" of A, no more."""
    if verdict == "same":
        return f"within ±{target:.0%}"
    if verdict == "different" and direction:
        return f"different ({direction})"
    return "inconclusive at budget" if verdict == "inconclusive" else verdict


def judge(
    ratio: float,
    low: float,
    high: float,
    target: float,
    eq_low: float | None = None,
    eq_high: float | None = None,
    margin: float | None = None,
) -> Verdict:
    """The three-way verdict on a ratio, its two-sided interval ``[low, high]`` and the interval the
    equivalence test reads, ``[eq_low, eq_high]`` (default: the same one).

    *different* comes first: a step the interval shows to be real and at least half the target is
    worth naming even when it is also inside the target (a sure 3 % at a 5 % target). *same* is
    equivalence, the whole equivalence interval within the target; an interval merely containing 1
    is no evidence of sameness and stays *unknown*. ``margin``: the equivalence margin when it is not
    the target (a bisection asks whether a midpoint is nearer one bracket than half their step).
    """
    if (low > 1.0 or high < 1.0) and abs(ratio - 1.0) >= target / 2:
        return "different"
    lo, hi = (low, high) if eq_low is None or eq_high is None else (eq_low, eq_high)
    m = target if margin is None else margin
    if 1.0 - m <= lo and hi <= 1.0 + m:
        return "same"
    return "unknown"


@functools.lru_cache(maxsize=512)
def _t_crit(alpha: float, df: int) -> float:
    # the ladder asks for the same few (alpha, df) over and over; the quantile is the slow part
    return float(stats.t.ppf(1 - alpha / 2, df))


def _log_ratios(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    if len(a) != len(b):
        raise ValueError(f"pairs need as many A values as B values ({len(a)} != {len(b)})")
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y)) and np.all(x > 0) and np.all(y > 0)):
        raise ValueError("paired values must be finite and positive (ratios are taken)")
    return np.log(y) - np.log(x)


def compare(
    a: Sequence[float],
    b: Sequence[float],
    *,
    target: float,
    alpha: float = ALPHA,
    higher_is_better: bool,
    margin: float | None = None,
) -> Comparison:
    """B against A, where ``a[i]`` and ``b[i]`` were measured in pair ``i``.

    The interval is Student's t on the mean of the log ratios, exponentiated: ratio = exp(mean).
    *Same* is Schuirmann's two one-sided tests at ``alpha`` (TOST): the ratio is shown above
    1 - target and below 1 + target, each at ``alpha``, which is the 1 - 2 ``alpha`` interval within
    the target. Each one-sided test errs with probability <= alpha and a false *same* needs one of
    them to err on the side the truth is on, so *same* is wrong with probability <= alpha, as
    *different* is. Judging *same* on the two-sided 1 - alpha interval instead is TOST at alpha / 2:
    twice as strict as it needs to be, and on A/A pairs it ends inconclusive that much more often.
    Not Pinpoint's Wilcoxon signed-rank interval: its exact p-value cannot go below 2 / 2**n, so
    with 3 or 5 pairs (0.25, 0.0625) it could never say *different* at the ladder's first looks,
    and its interval does not exist there. Run-to-run noise of throughput is close to log-normal,
    which makes the log ratios close to normal and the t interval close to exact; an outlier
    widens it (fewer verdicts, not false ones), and a pass on a busy host is excluded before it
    gets here (hosts/probes/host_noise.py).
    """
    if not 0 < target < 1:
        raise ValueError(f"target is a relative step in (0, 1), not {target}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), not {alpha}")
    d = _log_ratios(a, b)
    n = len(d)

    def result(
        ratio: float, low: float, high: float, p: float, sd: float, eq: tuple[float, float]
    ) -> Comparison:
        verdict = judge(ratio, low, high, target, *eq, margin=margin) if n >= 2 else "unknown"
        return Comparison(n, ratio, low, high, verdict, target, alpha, p, higher_is_better, sd, *eq)

    if n < 2:  # one pair says nothing of the noise, so nothing of the interval
        return result(math.exp(d[0]) if n else math.nan, 0.0, math.inf, 1.0, math.nan, (0.0, math.inf))
    mean, sd = float(np.mean(d)), float(np.std(d, ddof=1))
    if sd == 0.0:  # identical ratios (a deterministic stand-in): no noise, the interval is a point
        r = math.exp(mean)
        return result(r, r, r, 0.0 if mean != 0.0 else 1.0, 0.0, (r, r))
    se = sd / math.sqrt(n)
    half = _t_crit(alpha, n - 1) * se
    eq_half = _t_crit(2 * alpha, n - 1) * se  # the one-sided 1 - alpha bound on each side
    p = float(2 * stats.t.sf(abs(mean) / se, n - 1))
    eq = (math.exp(mean - eq_half), math.exp(mean + eq_half))
    return result(math.exp(mean), math.exp(mean - half), math.exp(mean + half), p, sd, eq)


# --------------------------------------------------------------------------------------------------
# The ladder of looks


def looks_of(ladder: Sequence[int] = LADDER, cap: int | None = None) -> tuple[int, ...]:
    """The pair counts at which :func:`sequential` looks: the ladder's steps below the cap, then the
    cap; a cap beyond the ladder doubles its last step on the way (Pinpoint's 10 -> 20 -> 40)."""
    steps = sorted(set(ladder))
    if not steps or steps[0] < 2:
        raise ValueError(f"a ladder needs steps of at least 2 pairs, not {tuple(ladder)}")
    cap = steps[-1] if cap is None else cap
    if cap < 2:
        raise ValueError(f"the cap must be at least 2 pairs, not {cap}")
    out = [s for s in steps if s < cap]
    if cap > steps[-1]:
        nxt = steps[-1] * 2
        while nxt < cap:
            out.append(nxt)
            nxt *= 2
    return (*out, cap)


def look_alphas(looks: Sequence[int], alpha: float = ALPHA, rho: float = SPENDING_RHO) -> tuple[float, ...]:
    """The significance level each look spends: alpha * ((n_k / cap)**rho - (n_k-1 / cap)**rho).

    They sum to ``alpha``, so by Bonferroni's inequality every look's interval covers the true
    ratio at once with probability >= 1 - alpha, whenever the procedure stops: a *different* or
    *same* is wrong with probability <= alpha in all. The looks share their early pairs, which
    makes this conservative; the union bound is kept for being exact without any model of that.
    """
    cap = looks[-1]
    spent = [alpha * (n / cap) ** rho for n in looks]
    return tuple(s - p for s, p in zip(spent, [0.0, *spent[:-1]], strict=True))


@dataclass(frozen=True)
class LadderResult:
    """Where the ladder stands on the pairs run so far.

    ``verdict`` is *different* or *same* when a look decided, *inconclusive* when the cap (or the
    last pairs there are) was reached while unknown, and *unknown* while ``next_pairs`` more are
    wanted. ``comparison`` is the last look's, at its own spent alpha: the interval reached.
    """

    verdict: LadderVerdict
    comparison: Comparison | None  # None before the first look
    looks: int  # looks taken
    history: tuple[Comparison, ...]
    next_pairs: int | None  # the pair count of the next look; None when done
    plan: tuple[int, ...]  # the pair counts looked at
    alphas: tuple[float, ...]  # the alpha each of them spends

    @property
    def done(self) -> bool:
        return self.next_pairs is None

    def describe(self) -> str:
        if self.comparison is None:
            return f"unknown: no look yet, {self.next_pairs} pairs wanted"
        tail = f", {self.next_pairs} pairs wanted" if self.next_pairs else ""
        head = verdict_words(self.verdict, self.comparison.direction, self.comparison.target)
        return f"{head} after {self.looks} look(s): {self.comparison.describe()}{tail}"


def sequential(
    a: Sequence[float],
    b: Sequence[float],
    *,
    target: float,
    alpha: float = ALPHA,
    higher_is_better: bool,
    ladder: Sequence[int] = LADDER,
    cap: int | None = None,
    exhausted: bool = False,
    margin: float | None = None,
) -> LadderResult:
    """The ladder on the pairs run so far, in the order they ran (``a[i]``, ``b[i]``: pair ``i``).

    Each look ``k`` compares the first ``n_k`` pairs at its spent alpha and stops at the first
    *different* or *same*. A pure function of the data: calling it again with more pairs replays
    the earlier looks and reaches the same decisions. ``exhausted``: no more pairs can be had (the
    runs failed beyond the runner's budget), so the pairs there are take the next look in its place.
    """
    plan = looks_of(ladder, cap)
    alphas = look_alphas(plan, alpha)
    n = len(a)
    if len(b) != n:
        raise ValueError(f"pairs need as many A values as B values ({n} != {len(b)})")
    history: list[Comparison] = []
    for want, level in zip(plan, alphas, strict=True):
        short = n < want
        if short and not exhausted:
            last = history[-1] if history else None
            return LadderResult("unknown", last, len(history), tuple(history), want, plan, alphas)
        if short and (n < 2 or (history and history[-1].n_pairs == n)):
            break  # nothing new to look at
        # a short look spends the alpha of the look it replaces
        c = compare(
            a[: min(n, want)],
            b[: min(n, want)],
            target=target,
            alpha=level,
            higher_is_better=higher_is_better,
            margin=margin,
        )
        history.append(c)
        if c.verdict != "unknown":
            return LadderResult(c.verdict, c, len(history), tuple(history), None, plan, alphas)
        if short:
            break
    last = history[-1] if history else None
    return LadderResult("inconclusive", last, len(history), tuple(history), None, plan, alphas)


# --------------------------------------------------------------------------------------------------
# What a noise lets the pairs see


def cv(values: Sequence[float]) -> float:
    """The coefficient of variation (sample standard deviation / mean); nan below two values."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return math.nan
    mean = float(np.mean(x))
    if mean == 0.0:
        raise ValueError("the coefficient of variation of values averaging 0 is undefined")
    return float(np.std(x, ddof=1)) / abs(mean)


def detectable_step(cv: float, n_pairs: int, alpha: float = ALPHA, power: float = 0.8) -> float:
    """The smallest relative step (0.05: 5 %) that ``n_pairs`` pairs detect with probability
    ``power`` in a two-sided paired t-test at ``alpha``, each run's noise having coefficient of
    variation ``cv``.

    The runs' noise is taken as log-normal and independent, so a pair's log ratio has standard
    deviation sqrt(2) * sqrt(log(1 + cv**2)) (about sqrt(2) * cv); pairs that share the host's
    slow drift do better. Power comes from the noncentral t distribution, not the normal
    approximation, which is optimistic at 3 or 5 pairs. For the ladder's figure pass the alpha
    of a look (:func:`look_alphas`), not the whole alpha.
    """
    if n_pairs < 2:
        return math.inf
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must be in (0, 1), not {alpha}, {power}")
    if cv <= 0:
        return 0.0
    df = n_pairs - 1
    crit = _t_crit(alpha, df)

    def shortfall(nc: float) -> float:
        # the far side's share; scipy's nct returns nan deep in that tail, where it is below 1e-15
        far = float(np.nan_to_num(stats.nct.cdf(-crit, df, nc), nan=0.0))
        return float(stats.nct.sf(crit, df, nc)) + far - power

    hi = 1.0
    while shortfall(hi) < 0:
        hi *= 2
    nc = brentq(shortfall, 0.0, hi, xtol=1e-10)
    sd_pair = math.sqrt(2.0) * math.sqrt(math.log1p(cv**2))
    return math.expm1(nc * sd_pair / math.sqrt(n_pairs))
