"""The power test on real noise: the comparison by pairs on A/A passes measured on a 2-core VM.

``benchmarks/precision.py`` ran one llama-server release pass after pass, a fresh server each; its
kept passes, taken two by two, are real A/A pairs (benchmarks/data/precision_aa*.json, one file per
machine it ran on). Each seeded trial draws 10 of those pairs with replacement, in a random AB/BA
order, and runs the ladder (3 -> 5 -> 10 pairs, alpha spent across the looks) at a 5 % target:

- with the B side scaled by 1.05 (a real 5 % step) it must say *different* in >= 80 % of trials
  for decode and prefill tok/s;
- unscaled (no step) it must say *different* in <= 5 %.

Real noise is not the log-normal of tests/unit/analysis/test_paired.py: heavier tails, a drifting
host, the busy passes left out by host_noise. A file whose noise the ladder cannot see through at
this budget fails here by name, unless it is listed in SHORT_OF_GOAL with what was measured (an
expected failure, strict: it must keep failing until the noise is brought down).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.paths import REPO

from strix_pipeline.stats.paired import sequential

DATA = sorted((REPO / "benchmarks" / "data").glob("precision_aa*.json"))
METRICS = {"decode_tokens_per_s": True, "prefill_tokens_per_s": True}  # higher is better
PAIRS_PER_TRIAL = 10
# the shares' standard errors: ~1.5 % at 500 trials near 88 %, ~0.4 % at 2,000 near 3 %
STEP_TRIALS, AA_TRIALS = 500, 2000
# Measured short of the goal (a 5 % step seen in >= 80 % of trials), kept as a record (strict: it must keep
# failing): the old decode figure (one 128-token request) on a 2-core AVX-512 EPYC (2026-12-06) had a 5.8 % CV
# with one pass 18 % low while the host's own counters saw nothing (steal 0.0 %, CPU outside the engine and
# client 0.3 %): different at +5 % in 49 % of trials, at 0 in 4.0 %. precision_aa_fastest5.json (the same
# machine: 99 %) holds the fastest of five 64-token requests, the pairs' figure until the weekly series' sum
# over the five replaced it (runner/pair_runs.py); its passes are to be measured again with that figure.
# precision_aa_xeon.json (2-core AVX-512/AMX Xeon, 2026-12-07, the series' sums): the host's speed drifted
# ~10 % within the run and only 7 pairs were kept; drawn with replacement, a pair counted twice narrows the
# interval, so the A/A side fails too (decode at 0 in 11.3 %, at +5 % in 77.0 %; prefill 6.2 %, 86.6 %).
SHORT_OF_GOAL = {
    ("precision_aa_avx512", "decode_tokens_per_s"): "decode CV 5.8 % on a 2-core AVX-512 EPYC (goal 2 %)",
    ("precision_aa_xeon", "decode_tokens_per_s"): "decode CV 4.1 %, a drifting 2-core Xeon (goal 2 %)",
    ("precision_aa_xeon", "prefill_tokens_per_s"): "prefill CV 4.9 %, a drifting 2-core Xeon (goal 3 %)",
}


def real_pairs(path: Path, metric: str) -> list[tuple[float, float]]:
    passes = [p for p in json.loads(path.read_text())["passes"] if p["kept"]]
    values = [p["values"][metric] for p in passes if metric in p["values"]]
    return [(values[i], values[i + 1]) for i in range(0, len(values) - 1, 2)]


def share_different(
    pairs: list[tuple[float, float]], scale: float, higher: bool, seed: int, trials: int
) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(trials):
        picks = rng.integers(0, len(pairs), PAIRS_PER_TRIAL)
        first = rng.integers(0, 2, PAIRS_PER_TRIAL)  # which pass of the pair is A
        a = [pairs[i][f] for i, f in zip(picks, first, strict=True)]
        b = [pairs[i][1 - f] * scale for i, f in zip(picks, first, strict=True)]
        hits += sequential(a, b, target=0.05, higher_is_better=higher).verdict == "different"
    return hits / trials


def test_there_are_measured_a_a_passes() -> None:
    assert DATA, "no benchmarks/data/precision_aa*.json: run benchmarks/precision.py"
    for path in DATA:
        for metric in METRICS:
            assert len(real_pairs(path, metric)) >= 6, (path.name, metric)


def cases() -> list:
    return [
        pytest.param(
            path,
            metric,
            id=f"{path.stem}-{metric}",
            marks=[pytest.mark.xfail(strict=True, reason=SHORT_OF_GOAL[(path.stem, metric)])]
            if (path.stem, metric) in SHORT_OF_GOAL
            else [],
        )
        for path in DATA
        for metric in METRICS
    ]


@pytest.mark.parametrize(("path", "metric"), cases())
def test_a_5_percent_step_is_called_different_and_no_step_rarely(path: Path, metric: str) -> None:
    pairs = real_pairs(path, metric)
    higher = METRICS[metric]
    step = share_different(pairs, 1.05, higher, seed=33, trials=STEP_TRIALS)
    same = share_different(pairs, 1.00, higher, seed=34, trials=AA_TRIALS)
    print(f"{path.name} {metric}: {len(pairs)} real pairs, different at +5 %: {step:.1%}, at 0: {same:.1%}")
    assert step >= 0.80, (path.name, metric, step)
    assert same <= 0.05, (path.name, metric, same)
