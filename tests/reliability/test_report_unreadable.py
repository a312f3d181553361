"""A report that could not read the warehouse fails: rc 1, one line, and the last good site stays as it
was -- never an emptied site published over it with rc 0. Here the sandbox refuses what a view reads
(a local file), as it would should a view ever get past the view check; on a real DuckDB file, through
`strix report` and through the Dagster resource's reader the `weekly_report` asset uses. The trend
charts likewise: the `trend_charts` asset fails and the last good charts stay as they were."""

from __future__ import annotations

import hashlib
from pathlib import Path

import dagster as dg
import pytest
from support.ducklake import planting_connection
from support.report_seed import report_config, report_warehouse

from assets.analysis import trend_charts
from assets.resources import StrixConfigResource, WarehouseResource
from strix_pipeline.analysis.charts import write_charts
from strix_pipeline.cli import common, main
from strix_pipeline.report import write_report
from strix_pipeline.warehouse import Warehouse, WarehouseError, facade
from strix_pipeline.warehouse.schema import views_sql

SECRET = "strix-local-secret-52b8"


def _site(site: Path) -> dict[str, str]:
    return {
        str(p.relative_to(site)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(site.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(common, "load_config", lambda path=None: report_config())
    path = tmp_path / "wh" / "w.duckdb"
    wh, _ = report_warehouse(path)
    wh.close()
    site = tmp_path / "site"
    assert main(["report", "--warehouse", str(path), "--out", str(site)]) == 0  # the last good site
    with Warehouse.open(path, read_only=True) as r:
        write_charts(r, tmp_path / "artifacts" / "charts")  # and the last good charts
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    base = views_sql().split("CREATE OR REPLACE VIEW v_run_base AS", 1)[1].split(";", 1)[0]
    evil = base.replace("r.run_id,", f"r.run_id || (SELECT content FROM read_text('{secret}')) AS run_id,", 1)
    con = planting_connection(path)  # this code's writers reach no file, so plain DuckDB plants it
    con.execute(f"CREATE OR REPLACE VIEW v_run_base AS {evil}").fetchall()
    con.close()
    # a view the check did not catch: only the sandbox stands between it and the file
    monkeypatch.setattr(facade, "check_views", lambda *a, **k: None)
    return path


def test_a_report_that_cannot_read_the_warehouse_fails_and_keeps_the_last_site(
    planted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "site"
    before = _site(site)
    assert before and any(k.startswith("runs/") for k in before)
    assert main(["report", "--warehouse", str(planted), "--out", str(site)]) == 1
    err = capsys.readouterr().err
    assert "could not read the warehouse" in err and SECRET not in err
    assert _site(site) == before


def test_the_dagster_reader_is_sandboxed_and_its_report_fails(planted: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    before = _site(site)
    with pytest.raises(WarehouseError, match="could not read the warehouse"):
        with WarehouseResource(path=str(planted), lock_retry_s=1).reader() as wh:
            write_report(wh, report_config(), site)
    assert _site(site) == before


def test_charts_that_cannot_read_the_warehouse_fail_and_keep_the_last_charts(
    planted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    charts = tmp_path / "artifacts" / "charts"
    before = _site(charts)
    assert "index.html" in before and "support_matrix.png" in before
    with pytest.raises(WarehouseError, match="could not read the warehouse"):
        with WarehouseResource(path=str(planted), lock_retry_s=1).reader() as wh:
            write_charts(wh, charts)
    assert _site(charts) == before
    # the asset: it fails, publishing nothing
    cfg = report_config()
    config = cfg.model_copy(
        update={"project": cfg.project.model_copy(update={"artifacts": str(tmp_path / "artifacts")})}
    )
    monkeypatch.setattr(StrixConfigResource, "get", lambda self: config)
    resources = {
        "strix": StrixConfigResource(config_path="in-code"),
        "warehouse": WarehouseResource(path=str(planted), lock_retry_s=1),
    }
    with dg.instance_for_test() as instance:
        result = dg.materialize([trend_charts], resources=resources, instance=instance, raise_on_error=False)
        assert not result.success
        assert instance.fetch_materializations(dg.AssetKey("trend_charts"), limit=1).records == []
    assert _site(charts) == before
