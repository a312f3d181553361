"""`strix history --dry-run`: the releases chosen from the package index (the session's, on disk)."""

from __future__ import annotations

import argparse

from support.package_index import installed_llama_version

from strix_pipeline.cli import history as cli_history
from strix_pipeline.config import config_path

BUILD = int(installed_llama_version().split(".")[0])


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="strix")
    parser.add_argument("--config")
    cli_history.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["--config", str(config_path()), *argv])
    return args.func(args)


def test_dry_run_lists_the_releases_and_their_partitions(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert run_cli(["history", "--dry-run", "--versions", "2"]) == 0
    out = capsys.readouterr().out
    for tag in (f"b{BUILD - 33}", f"b{BUILD}", "v0.31.0", "v0.32.0"):
        assert tag in out, out
    assert f"llamacpp:b{BUILD}@" in out and "vllm:v0.31.0@" in out


def test_per_engine_choices_and_named_releases(capsys) -> None:
    assert run_cli(["history", "--dry-run", "--engine", "vllm", "--versions-vllm", "v0.32.0"]) == 0
    out = capsys.readouterr().out
    assert "v0.32.0" in out and "v0.31.0" not in out and "llamacpp" not in out


def test_an_unknown_release_or_engine_is_refused_with_its_name(capsys) -> None:
    assert run_cli(["history", "--dry-run", "--engine", "vllm", "--versions", "v9.9.9"]) == 2
    assert "vllm: no release 'v9.9.9' on the package index" in capsys.readouterr().out
    assert run_cli(["history", "--dry-run", "--engine", "sglang"]) == 2
    assert "engine(s) sglang not configured on a local host" in capsys.readouterr().out


def test_a_history_with_a_release_that_cannot_run_here_is_complete() -> None:
    ok = {"digest": "a", "status": "ok", "failure_reason": None}
    broken = {"digest": "b", "status": "failed_start", "failure_reason": "its sdist lacks loading.html"}
    assert cli_history.history_complete([ok, broken], ["a", "b"])
    # a failure without its reason, a harness error, a release without a run, nothing measured: not complete
    assert not cli_history.history_complete([ok, {**broken, "failure_reason": None}], ["a", "b"])
    assert not cli_history.history_complete([ok, {**broken, "status": "error"}], ["a", "b"])
    assert not cli_history.history_complete([ok], ["a", "b"])
    assert not cli_history.history_complete([broken], ["b"])
