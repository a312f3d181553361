"""`strix plan --week` on the example configuration: a standard week fits a 6-hour nightly window over
the nights it needs, production stopped once per night, what is deferred named."""

from __future__ import annotations

import re

import pytest
from support.paths import REPO

from strix_pipeline.cli import main

EXAMPLE = REPO / "config" / "strix-halo.example.toml"


def test_the_example_week_fits_over_four_nights_with_one_production_cycle_each(
    tmp_path, capsys: pytest.CaptureFixture[str]
):
    code = main(
        [
            "--config",
            str(EXAMPLE),
            "plan",
            "--week",
            "--from",
            "2026-12-07",
            "--warehouse",
            str(tmp_path / "none.duckdb"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "week of Mon 2026-12-07 03:00 (Europe/Berlin): the configuration's standard week" in out
    nights = re.findall(r"night (\d): \w+ 2026-12-\d\d 03:00-09:00", out)
    # the Box's night of pairs (3 pairs of production as deployed and the candidate) is planned too
    assert nights == ["1", "2", "3", "4", "5"]
    assert re.search(r"\d\d:\d\d-\d\d:\d\d  pairs for C3/C5  \(270 min, 6 paired run\(s\) of ~45 min\)", out)
    assert "6 extra run(s) per comparison" in out
    assert out.count("stop llama-prod (once for the night)") == 5
    assert out.count("start llama-prod again") == 5
    assert "week: 24 of 24 runs over 5 night(s), production stopped 5 time(s)" in out
    assert "left for next week: none" in out
    # night 1 opens with the newest official vLLM, then the canary; what did not fit is named
    first = out.split("night 1:")[1].split("night 2:")[0]
    runs = re.findall(r"\d\d:\d\d-\d\d:\d\d  (.+?)  \(", first)
    assert runs[0].startswith("vllm qwen3-30b-a3b @ docker.io/vllm/vllm-openai-rocm:(newest release)")
    assert runs[2].endswith("server-rocm-b6500 [canary]")
    assert (
        "deferred to the next night (17): llamacpp gpt-oss-120b-gguf @ ghcr.io/ggml-org/llama.cpp:server-rocm"
        in first
    )
    # every run of the night ends inside the window, production back by 09:00
    ends = re.findall(r"healthy by (\d\d:\d\d)", out)
    assert all(e <= "09:00" for e in ends)


def test_a_weekly_window_cannot_hold_the_week_and_says_what_is_left(
    tmp_path, capsys: pytest.CaptureFixture[str]
):
    weekly = tmp_path / "weekly.toml"
    weekly.write_text(
        EXAMPLE.read_text().replace('maintenance_window = "0 3 * * *"', 'maintenance_window = "0 3 * * 1"')
    )
    main(
        [
            "--config",
            str(weekly),
            "plan",
            "--week",
            "--from",
            "2026-12-07",
            "--warehouse",
            str(tmp_path / "none.duckdb"),
        ]
    )
    out = capsys.readouterr().out
    assert "week: 7 of 24 runs over 1 night(s)" in out  # the 23 runs and the night of pairs
    assert "deferred to next week (17)" in out
