"""One quick suite: `strix bench --profile quick` plans the suite `make run` measures.

There used to be two: `loadgen.QUICK_PROFILE` (levels 1/2/4, 60 s) was not default.toml's `[profiles.quick]`
(levels 1/2/4/5, 90 requests at 5): `strix bench` used it whenever the configuration in use named no
quick profile, so the two "quick" suites measured different levels.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from strix_pipeline import loadgen
from strix_pipeline.cli import bench as cli_bench
from strix_pipeline.config import DEFAULT_CONFIG, ScenarioProfile
from strix_pipeline.config_load import load_config


def make_run_profiles() -> list[tuple[str, ScenarioProfile]]:
    """What `make run` hands the suite (`strix run` on the embedded default: the runner's
    ``config.profiles[target.profile]`` for every run of a local host), by name."""
    config = load_config(DEFAULT_CONFIG)
    return [
        (r.profile, config.profiles[r.profile])
        for host, runs in config.runs.items()
        if config.hosts[host].kind == "local"
        for r in runs
    ]


def bench_quick(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What `strix bench --profile quick --scenario all` hands the suite (its handler, the suite
    replaced by one that records its arguments)."""
    seen: dict[str, Any] = {}

    async def suite(url: str, model: str, profile: ScenarioProfile, *_: object, **kw: Any) -> Any:
        seen.update(profile=profile, scenarios=kw.get("scenarios"))
        return loadgen.SuiteResult()

    monkeypatch.setattr(cli_bench, "run_suite", suite)  # where the handler looks it up
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    cli_bench.register(parser.add_subparsers())
    args = parser.parse_args(
        ["bench", "--url", "http://127.0.0.1:9", "--profile", "quick", "--scenario", "all", "--disable-tqdm"]
    )
    args.func(args)  # 1: the recording suite measured nothing
    return seen


def levels(profile: ScenarioProfile) -> list[tuple[int, int, float]]:
    sw = profile.concurrency_sweep
    return [(c, sw.requests_for(c), sw.max_duration_for(c)) for c in sw.levels]


@pytest.mark.parametrize("config", ["embedded default", "missing file", "no quick profile"])
def test_strix_bench_quick_plans_the_suite_make_run_measures(
    config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./strix.toml
    if config == "embedded default":
        monkeypatch.delenv("STRIX_CONFIG", raising=False)
    elif config == "missing file":
        monkeypatch.setenv("STRIX_CONFIG", str(tmp_path / "none.toml"))
    else:  # a configuration of its own whose runs use only the standard profile
        text = DEFAULT_CONFIG.read_text(encoding="utf-8").replace('profile = "quick"', 'profile = "standard"')
        text = text.replace("[profiles.quick", "[profiles.unused_quick")
        (tmp_path / "strix.toml").write_text(text, encoding="utf-8")
        assert "quick" not in load_config(tmp_path / "strix.toml").profiles
        monkeypatch.delenv("STRIX_CONFIG", raising=False)
    ran = make_run_profiles()
    quick = [p for name, p in ran if name == "quick"]
    assert quick and all(p == quick[0] for p in quick)
    assert levels(quick[0]) == [(1, 4, 90.0), (2, 4, 90.0), (4, 4, 90.0), (5, 90, 2025.0)]
    # the equal-weights run's `decision` profile measures quick's decision level alike: the same
    # 90 requests at 5 clients, nothing else of the suite
    decision = [p for name, p in ran if name == "decision"]
    assert {name for name, _ in ran} == {"quick", "decision"}
    assert all(
        levels(p) == levels(quick[0])[-1:] and p.scenarios == ["smoke", "concurrency_sweep", "quality"]
        for p in decision
    )
    seen = bench_quick(monkeypatch)
    assert seen["scenarios"] is None  # --scenario all: the profile's own list, as make run
    assert levels(seen["profile"]) == levels(quick[0])
    assert seen["profile"] == quick[0]
