"""The provisioning chains run side by side, each step with its log and time; a failure stops the rest
and names its log."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from strix_pipeline.provision import side_by_side
from strix_pipeline.provision.side_by_side import Step

FAKE_STEP = """
import pathlib, sys, time
name, seconds, code = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
print(f"{name} working", flush=True)
pathlib.Path(sys.argv[4], name + ".started").write_text(str(time.time()))
time.sleep(seconds)
print(f"{name} says goodbye")
sys.exit(code)
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "fake_step.py").write_text(FAKE_STEP)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return tmp_path


def _chains(monkeypatch, marks: Path, **chains: list[tuple[str, float, int]]) -> None:
    monkeypatch.setattr(
        side_by_side,
        "CHAINS",
        {
            target: tuple(
                Step(name, "fake_step", f"{name}.log", (name, str(s), str(code), str(marks)))
                for name, s, code in steps
            )
            for target, steps in chains.items()
        },
    )


def test_independent_chains_run_at_once_and_each_step_says_its_time(fake: Path, monkeypatch) -> None:
    chains = {"vllm-cpu": [("env", 2.0, 0), ("ckpt", 0.1, 0)], "llama-server": [("build", 2.0, 0)]}
    _chains(monkeypatch, fake, **chains)
    lines: list[str] = []
    started = time.monotonic()
    outcomes = side_by_side.provision(["llama-server", "vllm-cpu"], fake / "logs", say=lines.append)
    assert time.monotonic() - started < 3.9  # side by side, not 4+ s one after the other
    assert [o.step.name for o in outcomes] == ["env", "ckpt", "build"]
    # the chain's second step waited for its first
    assert float((fake / "ckpt.started").read_text()) >= float((fake / "env.started").read_text()) + 1.9
    assert side_by_side.report(outcomes, 2.0, say=lines.append) == 0
    assert lines[0].startswith("provision: env … (log ")  # the download-heavy chain first
    assert any(line.startswith("provision: build ready in ") for line in lines)
    assert re.fullmatch(r"provision: done in 2 s \(env \d s, ckpt \d s, build \d s\)", lines[-1])
    assert "env says goodbye" in (fake / "logs" / "env.log").read_text()
    assert not any("goodbye" in line for line in lines)  # the output stays in the logs


def test_a_failed_step_stops_the_others_and_names_its_log(fake: Path, monkeypatch) -> None:
    chains = {"vllm-cpu": [("env", 0.2, 4), ("ckpt", 0.1, 0)], "llama-server": [("build", 30, 0)]}
    _chains(monkeypatch, fake, **chains)
    lines: list[str] = []
    started = time.monotonic()
    outcomes = side_by_side.provision(["vllm-cpu", "llama-server"], fake / "logs", say=lines.append)
    assert time.monotonic() - started < 10  # the 30 s build was stopped
    assert not (fake / "ckpt.started").exists()
    assert side_by_side.report(outcomes, 1.0, say=lines.append) == 1
    log = fake / "logs" / "env.log"
    assert f"provision: env FAILED (exit 4); its log: {log}" in lines
    assert "  | env says goodbye" in lines
    assert any(line.startswith("provision: build stopped; its log: ") for line in lines)


def test_verbose_shows_each_line_and_keeps_the_log(fake: Path, monkeypatch) -> None:
    _chains(monkeypatch, fake, **{"llama-server": [("build", 0.1, 0)]})
    lines: list[str] = []
    outcomes = side_by_side.provision(["llama-server"], fake / "logs", verbose=True, say=lines.append)
    assert outcomes[0].returncode == 0
    assert "[build] build says goodbye" in lines
    assert "build says goodbye" in (fake / "logs" / "build.log").read_text()


def test_an_optional_step_that_fails_is_reported_and_stops_nothing(fake: Path, monkeypatch) -> None:
    _chains(monkeypatch, fake, **{"vllm-cpu": [("env", 0.1, 0)], "llama-server": [("build", 0.1, 0)]})
    env, build = side_by_side.CHAINS["vllm-cpu"][0], side_by_side.CHAINS["llama-server"][0]
    gguf = Step("gguf", "fake_step", "gguf.log", ("gguf", "0.1", "2", str(fake)), optional=True)
    monkeypatch.setitem(side_by_side.CHAINS, "vllm-cpu", (env, gguf))
    lines: list[str] = []
    outcomes = side_by_side.provision(["vllm-cpu", "llama-server"], fake / "logs", say=lines.append)
    assert side_by_side.report(outcomes, 1.0, say=lines.append) == 0
    assert f"provision: gguf failed (exit 2), not needed now; its log: {fake / 'logs' / 'gguf.log'}" in lines
    assert build.name in lines[-1] and "gguf" not in lines[-1]


def test_a_line_every_so_often_says_what_is_still_running(fake: Path, monkeypatch) -> None:
    _chains(monkeypatch, fake, **{"llama-server": [("build", 1.5, 0)]})
    lines: list[str] = []
    side_by_side.provision(["llama-server"], fake / "logs", say=lines.append, heartbeat_s=0.5)
    beats = [line for line in lines if line.startswith("provision: … build ")]
    assert beats and beats[0].endswith("(build working)"), lines
