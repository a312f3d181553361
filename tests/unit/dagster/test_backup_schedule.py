"""The weekly warehouse backup as Dagster has it: in the Definitions, STOPPED until turned on, and its
job, run in process on a real DuckDB warehouse, makes the copy `strix backup` makes."""

from __future__ import annotations

import dagster as dg
import duckdb
from support.pipeline_helpers import write_config
from support.warehouse import make_run

from assets.resources import StrixConfigResource
from schedules.backup import warehouse_backup_job
from strix_dagster.definitions import build_definitions
from strix_pipeline.config_load import load_config
from strix_pipeline.warehouse import Warehouse
from strix_pipeline.warehouse.backup import backups_of


def test_the_weekly_backup_is_defined_stopped_and_its_job_copies_the_warehouse(tmp_path):
    path = write_config(tmp_path)
    config = load_config(path)
    defs = build_definitions(config, str(path))
    schedule = defs.resolve_schedule_def("warehouse_backup")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert schedule.cron_schedule == "0 12 * * 0" and schedule.job_name == "warehouse_backup_job"
    db = config.warehouse_path()
    db.parent.mkdir(parents=True, exist_ok=True)
    with Warehouse.open(db) as wh:
        wh.load_run(make_run("weekly-backup-0"))
    result = warehouse_backup_job.execute_in_process(
        resources={"strix": StrixConfigResource(config_path=str(path))}
    )
    assert result.success
    (copy,) = backups_of(db.parent / "backups", db.stem, db.suffix)
    assert str(copy) == result.output_for_node("warehouse_backup_op")
    con = duckdb.connect(str(copy), read_only=True)
    assert con.execute("SELECT run_id FROM runs").fetchall() == [("weekly-backup-0",)]
    con.close()
