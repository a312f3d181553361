"""What `strix run` shows of the Dagster process (one line per step, each engine's progress, warnings)
and what it keeps in the log file it names; the decision, plainly."""

from __future__ import annotations

import sys
from pathlib import Path

from strix_pipeline.cli.run import decision_line, run_dagster, terminal_line

RUN_ID = "3319c6c2-4bef-4bab-9887-27df1a455f3a"
PREFIX = f"2026-12-06 22:17:40 +0000 - dagster - {{level}} - main_job - {RUN_ID} - "


def test_the_step_lines_and_what_the_steps_said_are_shown_dagster_events_are_not() -> None:
    assert terminal_line("strix run: benchmarking llamacpp:b11434@304ccd8af74d (1 of 2)\n") == (
        "strix run: benchmarking llamacpp:b11434@304ccd8af74d (1 of 2)"
    )
    info = (
        PREFIX.format(level="INFO") + "benchmark_run - [local-llamacpp-x] suite done: 111 ok, 0 failed -> ok"
    )
    assert terminal_line(info) == "  benchmark_run: [local-llamacpp-x] suite done: 111 ok, 0 failed -> ok"
    warning = PREFIX.format(level="WARNING") + "engine_images - registry error: ghcr.io unavailable"
    assert terminal_line(warning) == "  WARNING: engine_images: registry error: ghcr.io unavailable"
    error = PREFIX.format(level="ERROR") + "benchmark_run - STEP_FAILURE - Execution of step failed."
    assert terminal_line(error) == "  ERROR: benchmark_run: STEP_FAILURE - Execution of step failed."
    debug = PREFIX.format(level="DEBUG") + "benchmark_run - STEP_START - Started execution of step."
    assert terminal_line(debug) is None
    # a level's start: its result line follows
    start = PREFIX.format(level="INFO") + "benchmark_run - [local-x] concurrency_sweep level 5: 90 request(s)"
    assert terminal_line(start) is None
    assert terminal_line("Traceback (most recent call last):") is None
    assert terminal_line("\x1b[32m" + info + "\x1b[0m") is not None


def test_run_dagster_keeps_every_line_in_its_log_and_shows_the_story(tmp_path: Path, capsys) -> None:
    debug = PREFIX.format(level="DEBUG") + "benchmark_run - STEP_START - Started execution of step."
    info = PREFIX.format(level="INFO") + "benchmark_run - ready at http://127.0.0.1:1"
    script = (
        f"print('strix run: benchmarking x (1 of 1)'); print({debug!r}); print({info!r}); raise SystemExit(3)"
    )
    log = tmp_path / "logs" / "strix-run.log"
    assert run_dagster([sys.executable, "-c", script], log) == 3
    shown = capsys.readouterr().out.splitlines()
    assert shown == [
        f"strix run: the whole Dagster log: {log}",
        "strix run: benchmarking x (1 of 1)",
        "  benchmark_run: ready at http://127.0.0.1:1",
        f"strix run: the Dagster process exited 3; its whole log: {log}",
    ]
    assert log.read_text().splitlines() == ["strix run: benchmarking x (1 of 1)", debug, info]


def test_the_decision_plainly() -> None:
    d = {"verdict": "evaluate", "host": "local", "reason": "C1-C3 pass; C5 failed", "criteria": []}
    assert decision_line(d) == "decision on local: Not yet (evaluate) — C1-C3 pass; C5 failed"
    d = {"verdict": "switch", "provisional": True, "criteria": [{"criterion": "C1", "status": "pass"}]}
    assert decision_line(d) == "decision: Switch (switch, provisional) — C1 pass"
    assert decision_line(None) == "decision: none (the analysis wrote no decision.json)"
