"""A decision level measured with fewer requests than C3's interval needs is refused at load, naming
`[decision] concurrency`, the level's request count field and the number needed -- not left to say
"inconclusive" every week. And the owner's SLOs: optional, and C6 required only with them."""

from __future__ import annotations

from pathlib import Path

import pytest

from strix_pipeline.analysis.decision.criteria.ttft import C3_MIN_REQUESTS
from strix_pipeline.config import DEFAULT_CONFIG, ConfigError, DecisionConfig
from strix_pipeline.config_load import load_config

EXAMPLE = Path(DEFAULT_CONFIG).parents[1] / "config" / "strix-halo.example.toml"


def _mutated(tmp_path: Path, source: Path, old: str, new: str) -> Path:
    text = source.read_text()
    assert old in text, f"fixture drift: {old!r} not in {source.name}"
    p = tmp_path / "strix.toml"
    p.write_text(text.replace(old, new, 1))
    return p


def test_c3_needs_86_requests_per_run():
    assert C3_MIN_REQUESTS == 86


def test_raising_the_decision_concurrency_without_its_request_count_is_refused(tmp_path):
    # the Box's standard profile measures 200 requests at 5 clients and 40 at every other level
    bad = _mutated(tmp_path, EXAMPLE, "concurrency = 5", "concurrency = 8")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    msg = str(info.value)
    assert "[decision] concurrency = 8" in msg
    assert "profiles.standard.concurrency_sweep.requests_per_level gives 40" in msg
    assert f"needs at least {C3_MIN_REQUESTS} per run" in msg
    assert "requests_at = { 8 = 86 }" in msg


def test_a_decision_level_sized_below_the_need_names_its_requests_at(tmp_path):
    bad = _mutated(tmp_path, DEFAULT_CONFIG, "requests_at = { 5 = 90 }", "requests_at = { 5 = 85 }")
    with pytest.raises(ConfigError, match=r"profiles\.quick\.concurrency_sweep\.requests_at gives 85"):
        load_config(bad)


def test_enough_requests_at_the_raised_level_load(tmp_path):
    text = EXAMPLE.read_text().replace("concurrency = 5", "concurrency = 8", 1)
    text = text.replace(
        "[profiles.standard]\n", "[profiles.standard.concurrency_sweep]\nrequests_at = { 8 = 86 }\n", 1
    )
    p = tmp_path / "strix.toml"
    p.write_text(text)
    assert load_config(p).decision.concurrency == 8


def test_a_level_no_decision_run_measures_is_not_this_rule(tmp_path):
    # the embedded quick profile sweeps 1, 2, 4 and 5 clients: 8 is never measured there
    ok = _mutated(tmp_path, DEFAULT_CONFIG, 'host = "local"\n', 'host = "local"\nconcurrency = 8\n')
    assert load_config(ok).decision.concurrency == 8


def test_slos_are_optional_and_c6_is_required_only_with_them():
    assert DecisionConfig().slo is None and "C6" not in DecisionConfig().required
    with_slo = DecisionConfig(slo={"ttft_ms": 5000})
    assert with_slo.required == ["C1", "C2", "C3", "C4", "C5", "C6"] and with_slo.slo_concurrency == 5
    assert DecisionConfig(required=["C3"], slo={"e2e_ms": 1, "concurrency": 2}).required == ["C3", "C6"]
    assert DecisionConfig(slo={"e2e_ms": 1, "concurrency": 2}).slo_concurrency == 2
    with pytest.raises(ValueError, match="set \\[decision.slo\\] to require it"):
        DecisionConfig(required=["C6"])
    with pytest.raises(ValueError, match="at least one of ttft_ms, tpot_ms, e2e_ms"):
        DecisionConfig(slo={"concurrency": 5})
