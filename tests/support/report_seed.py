"""A warehouse for the weekly report's tests (helpers only): the September 2026 runs with their command
lines and log tails, two evaluations whose verdict moved, a confirmed regression, and optionally runs
whose every shown field carries a payload that would mark <html> if it ever ran as script; with a
bisection and host drift (``history_warehouse``); and a `make run`-like stay (``make_run_warehouse``)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from strix_pipeline.analysis.decision import evaluate
from strix_pipeline.config import StrixConfig
from strix_pipeline.records import RunResult
from strix_pipeline.warehouse import Warehouse
from strix_pipeline.warehouse.changes import ChangeRecord
from support.decision_seed import SEPT, make_config, run_record, run_result, september_runs

ZONE = "Europe/Berlin"
FIRST_EVAL = SEPT - timedelta(hours=1)  # only llama-server has run: no candidate evidence yet
SECOND_EVAL = SEPT + timedelta(hours=3)
REPORT_AT = SEPT + timedelta(hours=4)
LLAMA_COMMAND = "llama-server --model /models/qwen3-30b-a3b-q4.gguf --port 18080 --ctx-size 8192 --metrics"


def _mark(how: str) -> str:
    return f"document.documentElement.setAttribute('data-pwned','{how}')"


SCRIPT = f"v1</script><script>{_mark('script')}</script>"
IMG = f'<img src=x onerror="{_mark("img")}">'
SVG = f"<svg onload={_mark('svg')}>"
COMMENT = f"<!--<script>{_mark('comment')}</script>-->"
HOSTILE = (SCRIPT, IMG, SVG, COMMENT)


def report_config() -> StrixConfig:
    cfg = make_config()
    return cfg.model_copy(update={"project": cfg.project.model_copy(update={"timezone": ZONE})})


def seeded_runs() -> list[RunResult]:
    runs = september_runs()
    for r in runs:
        r.run.launch_command = (
            LLAMA_COMMAND
            if r.run.engine == "llamacpp"
            else f"vllm serve /m/{r.run.model_profile} --port 18000"
        )
        r.run.log_tail = f"{r.run.run_id}: listening on 127.0.0.1\nready"
    return runs


def hostile_runs() -> list[RunResult]:
    """Two runs of an engine "sglang": each string a page shows carries a payload."""
    ok = run_record(
        f"h0-{SVG}",
        "sglang",
        tag="v0.5.0",
        version=SCRIPT,
        sort_key="00001",
        quant="BF16",
        started_at=SEPT + timedelta(minutes=30),
        held_gib=20.0,
    )
    ok.launch_command = f"sglang serve {IMG}"
    ok.log_tail = f"{COMMENT}\n{SCRIPT}"
    failed = run_record(
        "h1",
        "sglang",
        tag="v0.6.0",
        version=IMG,
        sort_key="00002",
        status="failed_start",
        failure_reason=f"{IMG} {SCRIPT}",
        started_at=SEPT + timedelta(minutes=40),
    )
    return [run_result(ok, ttft5=(900.0, 850.0, 950.0)), run_result(failed, smoke_ok=None)]


def regression(version_after: str = "server-rocm-b6500") -> ChangeRecord:
    return ChangeRecord(
        change_id="",
        fingerprint="strix-halo/llamacpp/qwen3-30b-a3b-q4/Q4_K_M/concurrency_sweep",
        engine="llamacpp",
        host="strix-halo",
        metric="ttft_p95_ms",
        scenario="concurrency_sweep",
        level=5,
        version_before="server-rocm-b6400",
        version_after=version_after,
        sort_key_after=version_after,
        magnitude_pct=12.5,
        pvalue=0.0001,
        status="confirmed",
        ack_status="active",
        ack_reason=None,
        detected_at=SEPT + timedelta(hours=2),
        confirmed_at=SEPT + timedelta(hours=2),
    )


def report_warehouse(path: Path, *, hostile: bool = False) -> tuple[Warehouse, StrixConfig]:
    """A writable warehouse (the caller closes it) and the config its report is written with: the
    verdict moved from the first evaluation (llama-server alone) to `evaluate`."""
    cfg = report_config()
    runs = seeded_runs()
    wh = Warehouse.open(path)
    wh.load_runs([r for r in runs if r.run.engine == "llamacpp"])
    wh.save_decision(evaluate(wh, cfg, now=FIRST_EVAL).criteria)
    wh.load_runs([r for r in runs if r.run.engine != "llamacpp"] + (hostile_runs() if hostile else []))
    wh.save_decision(evaluate(wh, cfg, now=SECOND_EVAL).criteria)
    wh.save_changes([regression(SCRIPT if hostile else "server-rocm-b6500")])
    return wh, cfg


# a change's own facts: its bisection found the first release, and a second regression the
# canary blames on the host (tests/unit/report/test_report_extras.py, the layout test)
BISECTION = """
INSERT INTO bisections VALUES (?, ?, 'strix-halo', 'llamacpp', 'fp', 'ttft_p95_ms', 'concurrency_sweep', 5,
  'server-rocm-b6400', 'server-rocm-b6500', '[]', 'found', 'server-rocm-b6450', 'server-rocm-b6425', NULL,
  3, 6, 'first release showing the step', ?, ?)
"""
DRIFT = "canary b6000 moved +11.0 % in the same window"


def history_warehouse(path: Path) -> tuple[Warehouse, StrixConfig]:
    """``report_warehouse`` with a bisected regression and a second one labelled host drift."""
    wh, cfg = report_warehouse(path)
    wh.save_changes([regression("server-rocm-b6600")])
    ids = {c.version_after: c.change_id for c in wh.list_changes()}
    wh.con.execute(BISECTION, ["b1", ids["server-rocm-b6500"], SEPT, SEPT + timedelta(hours=1)])
    wh.con.execute("UPDATE changes SET host_drift = ? WHERE change_id = ?", [DRIFT, ids["server-rocm-b6600"]])
    return wh, cfg


# `make run`'s shape on the embedded host: vLLM 0.32.0 (CPU) against llama-server b11434 on Gemma 3
# 270M, C2 and C4 not required there; vLLM is slower (C3 fails) and holds more (C5 fails): stay
MAKE_RUN_AT = SEPT + timedelta(hours=1)
MAKE_RUN_IDS = ("local-vllm-gemma3-270m-bf16-f7f83613", "local-llamacpp-gemma3-270m-q4_k_m-2b9d0c11")
NOT_ON_CPU = "a CPU host does not serve the medium MoE or gpt-oss-120b models"


def make_run_config() -> StrixConfig:
    cfg = make_config("local", required=["C1", "C3", "C5"], not_required_because=NOT_ON_CPU)
    return cfg.model_copy(update={"project": cfg.project.model_copy(update={"timezone": ZONE})})


def make_run_warehouse(path: Path) -> tuple[Warehouse, StrixConfig]:
    """A writable warehouse holding a `make run`-like evaluation: stay, C3's ratio near 2.9x."""
    cfg = make_run_config()
    vllm = run_record(
        MAKE_RUN_IDS[0],
        "vllm",
        host="local",
        repo="vllm/vllm-openai-rocm",
        tag="v0.32.0",
        version="0.32.0",
        profile="gemma3-270m",
        quant="BF16",
        held_gib=6.6,
        digest="sha256:cfa440166137" + "0" * 52,
        started_at=SEPT,
    )
    llama = run_record(
        MAKE_RUN_IDS[1],
        "llamacpp",
        host="local",
        repo=None,
        # the candidate's run names a ROCm image, so its baseline must be a ROCm build too (C3 and C5
        # pair runs of one backend family: fingerprint.backend_family)
        tag="server-rocm-b11434",
        version="b11434",
        sort_key="b11434",
        profile="gemma3-270m",
        quant="Q4_K_M",
        held_gib=0.5,
        digest="sha256:a4b7c94c123c" + "0" * 52,
        started_at=SEPT - timedelta(minutes=10),
    )
    vllm.launch_command = "vllm serve /m/gemma3-270m --port 18000"
    llama.launch_command = "llama-server --model /m/gemma3-270m.gguf --port 18080"
    wh = Warehouse.open(path)
    wh.load_runs(
        [
            run_result(vllm, ttft5=(864.0, 830.0, 900.0), n5=90, sigma5=0.12),
            run_result(llama, ttft5=(300.0, 296.0, 305.0), n5=90, sigma5=0.05),
        ]
    )
    wh.save_decision(evaluate(wh, cfg, now=MAKE_RUN_AT).criteria)
    return wh, cfg
