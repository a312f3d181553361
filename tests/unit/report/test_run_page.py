"""A run's page leads with what it measured: figures, then memory; the plumbing (the run's facts, the
host, the command line, the log) is folded away, the log's known harmless noise folded into a line;
an ok run's reason reads as a note, a failed run's as why it failed."""

from __future__ import annotations

from pathlib import Path

from support.report_seed import REPORT_AT, report_warehouse

from strix_pipeline.report import run_page, write_report
from strix_pipeline.report.log_noise import fold_noise

VLLM_EXIT = """INFO:     Application shutdown complete.
nanobind: leaked 4 instances!
 - leaked instance 0x7fa0eb18cb48 of type "triton._C.libtriton.ir.attribute"
nanobind: leaked 64 types!
 - leaked type "ATOMIC_OP"
 - ... skipped remainder
nanobind: this is likely caused by a reference counting issue in the binding code.
real error: the KV cache could not be allocated"""


def test_known_noise_is_folded_and_everything_else_kept() -> None:
    folded = fold_noise(VLLM_EXIT).splitlines()
    assert folded[0] == "INFO:     Application shutdown complete."
    assert folded[1].startswith("[6 line(s) folded: nanobind's leak report")
    assert folded[2] == "real error: the KV cache could not be allocated"
    assert fold_noise("plain\nlines") == "plain\nlines"


def test_figures_come_first_and_the_plumbing_is_folded(tmp_path: Path) -> None:
    wh, cfg = report_warehouse(tmp_path / "w.duckdb")
    with wh:
        write_report(wh, cfg, tmp_path / "site", now=REPORT_AT)
    page = (tmp_path / "site" / run_page("llama-qwen")).read_text()
    order = [
        page.index(h) for h in ("<h2>Figures</h2>", "<h2>Memory</h2>", "<h2>Run</h2>", "<h2>Log tail</h2>")
    ]
    assert order == sorted(order)
    for folded in ("Run", "Host", "Command line", "Log tail"):
        assert f"<details><summary><h2>{folded}</h2></summary>" in page


def test_an_ok_runs_reason_is_a_note(tmp_path: Path) -> None:
    from strix_pipeline.report.run_detail import _reason

    assert _reason({"status": "ok", "failure_reason": "client: keep-alive retried"}).startswith("<p>Note: ")
    failed = _reason({"status": "failed_start", "failure_reason": "no image"})
    assert failed == "<p>Why it is failed_start: no image</p>"
    assert _reason({"status": "ok", "failure_reason": None}) == ""
