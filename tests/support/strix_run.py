"""`strix run` in-process under a throwaway DAGSTER_HOME, and the asset checks it left there."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from strix_pipeline import cli


def strix_run(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> tuple[int, str]:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster-home"))
    rc = cli.main(["--config", str(config), "run"])
    return rc, capsys.readouterr().out


def run_checks_in(home: Path) -> dict[str, dg.AssetCheckEvaluation]:
    """The latest evaluation of benchmark_run's engine_served and benchmark_complete checks, by name."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [
                dg.AssetCheckKey(dg.AssetKey("benchmark_run"), n)
                for n in ("engine_served", "benchmark_complete")
            ]
        )
        return {k.name: r.event.dagster_event.event_specific_data for k, r in records.items()}
